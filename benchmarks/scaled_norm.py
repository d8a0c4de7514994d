"""The solver-free SDP multipliers (`certify.sdp.scaled_bound`) against the baseline ||J_c|| + ||R|| in the same run.

    python benchmarks/scaled_norm.py [--sizes 64,256,816] [--eps 1e-3,1e-2] [--budget 20] [--json out.json]

Table 1: random interval matrices n x n (J_c Gaussian / sqrt(n), R = 0.3 |Gaussian| / sqrt(n)): baseline, scaled
(40 iterations), their ratio, seconds. Table 2: `taylor_bound` (2-norm, `time_budget`) on the digits ViT layer 0
(D = 48, N = 17) around its real input, without (`SCALED_MAX = 0`) and with the scaled step, against the eps-ball
ascent's attained value (20 s). Medians are not needed: each value is deterministic; the seconds are one run.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from certify import EpsBall
from certify._certify import as_weights
from certify.adversarial._search import lower_bound
from certify.bounds.local import _taylor
from certify.sdp import MatrixEnclosure, baseline_bound, scaled_bound


def random_rows(sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        enclosure = MatrixEnclosure(rng.standard_normal((n, n)) / np.sqrt(n),
                                    0.3 * np.abs(rng.standard_normal((n, n))) / np.sqrt(n))
        start = time.perf_counter()
        base = baseline_bound(enclosure)
        base_s = time.perf_counter() - start
        start = time.perf_counter()
        scaled = scaled_bound(enclosure)
        rows.append({"n": n, "baseline": base, "scaled": scaled, "ratio": scaled / base, "baseline_s": base_s,
                     "scaled_s": time.perf_counter() - start})
    return rows


def layer_rows(eps_list: list[float], budget: float) -> list[dict]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from local_realistic import trained_layer

    layer, X0, _, description = trained_layer(48)
    print(description, flush=True)
    weights = as_weights(layer)
    rows = []
    for eps in eps_list:
        domain = EpsBall(X0.double(), eps, "inf")
        lower = lower_bound(weights, X0.shape[0], "2", domain, seconds=20).value
        values = {}
        for name, size in (("baseline", 0), ("scaled", _taylor.SCALED_MAX)):
            saved, _taylor.SCALED_MAX = _taylor.SCALED_MAX, size
            try:
                start = time.perf_counter()
                values[name] = (_taylor.taylor_bound(weights, X0.shape[0], "2", domain, time_budget=budget).value,
                                time.perf_counter() - start)
            finally:
                _taylor.SCALED_MAX = saved
        rows.append({"eps": eps, "lower": lower, "baseline": values["baseline"][0], "scaled": values["scaled"][0],
                     "ratio_baseline": values["baseline"][0] / lower, "ratio_scaled": values["scaled"][0] / lower,
                     "baseline_s": values["baseline"][1], "scaled_s": values["scaled"][1]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,256,816")
    parser.add_argument("--eps", default="1e-3,1e-2")
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    random = random_rows([int(n) for n in args.sizes.split(",") if n])
    print("| n | baseline | scaled | scaled / baseline | s baseline | s scaled |")
    print("|---|---|---|---|---|---|")
    for r in random:
        print(f"| {r['n']} | {r['baseline']:.5g} | {r['scaled']:.5g} | {r['ratio']:.4f} | {r['baseline_s']:.2f} "
              f"| {r['scaled_s']:.2f} |")
    layer = layer_rows([float(e) for e in args.eps.split(",") if e], args.budget)
    print("| eps | taylor without | taylor with scaled | attained | ratio without | ratio with | s without | s with |")
    print("|---|---|---|---|---|---|---|---|")
    for r in layer:
        print(f"| {r['eps']:g} | {r['baseline']:.5g} | {r['scaled']:.5g} | {r['lower']:.5g} | "
              f"{r['ratio_baseline']:.4f} | {r['ratio_scaled']:.4f} | {r['baseline_s']:.1f} | {r['scaled_s']:.1f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"random": random, "layer": layer}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
