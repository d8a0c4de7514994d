"""The default Taylor remainder of small layers: dot-product layers with N D <= COORDINATES_MAX = 96 take the slopes
intersected with the unit tangents (now) instead of the unit tangents alone (before, ``seeds="coordinates"``); tied
L2 layers above that size take the unit tangents where their predicted pass fits the budget (now) instead of the one
interval direction (before, ``seeds="directional"``).

    PYTHONPATH=. python benchmarks/small_taylor.py [--eps 1e-3 1e-2 3e-2 1e-1] [--norms 2 inf] [--lower-seconds 3]
                                                   [--json FILE]

Layers, each with a real input X0 of its own task where it has one:
- ``demo``: the trained layer of `certify demo` (`train_toy_layer("dp")`, N = D = 8, H = 2), X0 the first input of
  its toy task (`toy_batch`, seeded);
- ``classifier``: the dot-product attention of the trained toy classifier (`train_classifier("dp")`, N = 6, D = 8,
  H = 2), X0 = the embedding of the first sequence of its task (`classifier_batch`, seeded);
- ``biased-d4``: the biased D = 4, H = 2 ``nn.MultiheadAttention`` of issue 15's table (N = 4), X0 Gaussian;
- ``fresh-d16``: a default-initialised ``nn.MultiheadAttention(16, 2)`` with its biases (N = 6), X0 Gaussian;
- ``l2-d32``: a default-initialised ``certify.L2MultiheadAttention(32, 2)`` (N = 6, N D = 192), X0 Gaussian.

For each l_inf eps-ball about X0 and each norm: the Taylor bound with the seeds of before and with the default
seeds (both with the same 10 s budget; the seeds each used are printed), the lower bound (`lower_bound` inside the ball, --lower-seconds, and
||J(X0)||), the ratios upper / lower and how much of the excess above the lower bound is left (now / before).
Every certified value is checked against the lower bound (exit status 1 on a violation).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from certify._domain import EpsBall
from certify.adversarial import lower_bound
import certify
from certify.attention import as_weights
from certify.bounds.local._taylor import taylor_bound
from certify.experiments import ClassifierTask, ToyTask, classifier_batch, toy_batch, train_classifier, train_toy_layer
from issue15_table import biased_d4_layer  # this folder is first on the path when run as a script


def layers() -> list[tuple[str, object, torch.Tensor]]:
    """(name, weights, X0) for the five layers of the module docstring."""
    found = []
    layer, _ = train_toy_layer("dp", ToyTask(), seed=0)
    X, _ = toy_batch(ToyTask(), 1, torch.Generator().manual_seed(7))
    found.append(("demo (trained, N = D = 8)", as_weights(layer), X[0].double()))
    model, _ = train_classifier("dp")
    X, _ = classifier_batch(ClassifierTask(), 1, torch.Generator().manual_seed(7))
    with torch.no_grad():
        found.append(("classifier (trained, N = 6, D = 8)", as_weights(model.attention), model.embed(X)[0].double()))
    found.append(("biased-d4 (N = 4)", as_weights(biased_d4_layer()),
                  torch.randn(4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)))
    torch.manual_seed(1)
    fresh = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    found.append(("fresh-d16 (N = 6)", as_weights(fresh.eval()),
                  torch.randn(6, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)))
    torch.manual_seed(0)
    found.append(("l2-d32 (N = 6)", as_weights(certify.L2MultiheadAttention(32, 2)),
                  torch.randn(6, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-3, 1e-2, 3e-2, 1e-1])
    parser.add_argument("--norms", nargs="+", default=["2", "inf"], choices=["2", "inf"])
    parser.add_argument("--lower-seconds", type=float, default=3.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows, violations = [], 0
    print(f"| layer | eps | norm | before (seeds) | s | now (seeds) | s | lower | ratio before | ratio now "
          f"| excess now / before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, weights, X0 in layers():
        N = X0.shape[0]
        for eps in args.eps:
            domain = EpsBall(X0, eps, "inf")
            for norm in args.norms:
                t = time.perf_counter()
                seeds = "coordinates" if weights.kind == "dp" else "directional"
                before = taylor_bound(weights, N, norm, domain, seeds=seeds, time_budget=10.0)
                before_s, t = time.perf_counter() - t, time.perf_counter()
                now = taylor_bound(weights, N, norm, domain, time_budget=10.0)
                now_s = time.perf_counter() - t
                searched = lower_bound(weights, N, norm, domain, restarts=8, steps=150, seconds=args.lower_seconds)
                lower = max(searched.value, now.details["lower"])
                violations += sum(value < lower for value in (before.value, now.value))
                excess = (now.value - lower) / (before.value - lower) if before.value > lower else float("nan")
                row = {"layer": name, "eps": eps, "norm": norm, "before": before.value, "before_seconds": before_s,
                       "now": now.value, "now_seconds": now_s, "lower": lower, "ratio_before": before.value / lower,
                       "ratio_now": now.value / lower, "excess_ratio": excess}
                rows.append(row)
                row.update(before_seeds=before.details["seeds"], now_seeds=now.details["seeds"])
                print(f"| {name} | {eps:g} | {norm} | {before.value:.5g} ({before.details['seeds']}) | {before_s:.1f} | "
                      f"{now.value:.5g} ({now.details['seeds']}) | "
                      f"{now_s:.1f} | {lower:.5g} | {row['ratio_before']:.4g} | {row['ratio_now']:.4g} | "
                      f"{excess:.3g} |", flush=True)
    if violations:
        print(f"SOUNDNESS VIOLATION: {violations} certified values below a lower bound")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
