"""Local certified bounds on R-balls: ours (branch and bound, `certify.bounds.local_bound`) vs Castin et al. (DP),
the paper's global bound (L2) and the best lower bound found, for single-head layers with N, D <= 8.

    python benchmarks/local_bounds.py [--budget 10] [--repeat 1] [--json out.json]
    python benchmarks/local_bounds.py --sdp [--repeat 5]     # the SDP vs the baseline on random enclosures

Columns: the certified upper bounds, each divided by the best lower bound (ratio), and seconds (the median over
--repeat runs). The lower bound is the best of the adversarial ascent and every input the branch and bound
evaluated; it is attained, so every certified value must be above it (checked here too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from problems import random_weights  # noqa: E402

from certify._domain import Ball  # noqa: E402
from certify.adversarial import LOCAL_LOWER_SEARCH, lower_bound  # noqa: E402
from certify.bounds import castin_bound, paper_bound  # noqa: E402
from certify.bounds.local._search import local_bound  # noqa: E402

CASES = [(2, 1), (3, 2), (4, 4), (8, 8)]
RADII = [0.5, 1.0, 2.0]


def run_case(kind: str, N: int, D: int, R: float, budget: float, repeat: int, norm: str) -> dict:
    weights = random_weights(kind, 1, D, seed=0)
    domain = Ball(R)
    adversarial = lower_bound(weights, N, norm, domain, restarts=16, steps=300, seed=0)
    runs = [local_bound(weights, N, norm, domain, time_budget=budget, lower=adversarial,
                        lower_search=LOCAL_LOWER_SEARCH)
            for _ in range(repeat)]
    ours = min(runs, key=lambda c: c.value)
    lower = max([adversarial.value] + [c.details["lower"] for c in runs])
    published = castin_bound(weights, N, R, norm) if kind == "dp" else paper_bound(weights, N, norm)
    assert lower <= ours.value and lower <= published.value, "a lower bound exceeds a certified bound"
    return {
        "kind": kind, "N": N, "D": D, "R": R, "norm": norm,
        "ours": ours.value, "published": published.value, "published_method": published.method,
        "lower": lower,
        "ratio_ours": ours.value / lower, "ratio_published": published.value / lower,
        "seconds": statistics.median(c.seconds for c in runs),
        "boxes": ours.details["boxes"], "stopped": ours.details["stopped"],
    }


def sdp_table(repeat: int) -> list[dict]:
    """Certified SDP bound vs the baseline ||J_c|| + ||R|| on random enclosures (Gaussian centre, radius
    0.3 |Gaussian|) and Jacobian-like ones (I - W / sqrt(n), radius 0.1 |Gaussian| / sqrt(n)), against the best of
    2000 sampled vertices (a lower bound). Seconds are medians over `repeat` instances."""
    import numpy as np

    from certify.sdp import MatrixEnclosure, baseline_bound, enclosure_norm

    rows = []
    print("| family | n | solver | SDP/vertex | baseline/vertex | SDP < baseline | s (median) |")
    print("|---|---|---|---|---|---|---|")
    for family in ("random", "jacobian-like"):
        for n in (4, 8, 16, 32, 64):
            ratios_sdp, ratios_base, seconds, strict, solver = [], [], [], 0, ""
            for seed in range(repeat):
                rng = np.random.default_rng(seed)
                if family == "random":
                    enc = MatrixEnclosure(rng.standard_normal((n, n)), 0.3 * np.abs(rng.standard_normal((n, n))))
                else:
                    W = rng.standard_normal((n, n)) / np.sqrt(n)
                    enc = MatrixEnclosure(np.eye(n) - W, 0.1 * np.abs(rng.standard_normal((n, n))) / np.sqrt(n))
                signs = rng.choice([-1.0, 1.0], size=(2000, n, n))
                vertex = np.linalg.norm(enc.center + signs * enc.radius, ord=2, axis=(1, 2)).max()
                cert = enclosure_norm(enc, "2", time_limit=60.0)
                base = baseline_bound(enc)
                assert vertex <= cert.value <= base
                ratios_sdp.append(cert.value / vertex)
                ratios_base.append(base / vertex)
                seconds.append(cert.seconds)
                strict += cert.value < base
                solver = cert.details.get("solver", solver)
            row = {
                "family": family, "n": n, "solver": solver,
                "sdp_over_vertex": statistics.median(ratios_sdp), "baseline_over_vertex": statistics.median(ratios_base),
                "strictly_below": f"{strict}/{repeat}", "seconds": statistics.median(seconds),
            }
            rows.append(row)
            print(
                f"| {family} | {n} | {solver} | {row['sdp_over_vertex']:.4f} | {row['baseline_over_vertex']:.4f} "
                f"| {row['strictly_below']} | {row['seconds']:.2f} |",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per branch and bound run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (seconds are medians)")
    parser.add_argument("--norm", default="2", choices=["2", "inf"])
    parser.add_argument("--kinds", default="dp,l2")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--sdp", action="store_true", help="print the SDP vs baseline table instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.sdp:
        rows = sdp_table(args.repeat)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(rows, handle, indent=1)
        return 0
    rows = []
    print("| kind | N | D | R | ours | Castin (DP) / paper (L2) | lower | ours/lower | published/lower | s | boxes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for N, D in CASES:
            for R in RADII:
                row = run_case(kind, N, D, R, args.budget, args.repeat, args.norm)
                rows.append(row)
                print(
                    f"| {kind} | {N} | {D} | {R:g} | {row['ours']:.4g} | {row['published']:.4g} | {row['lower']:.4g} "
                    f"| {row['ratio_ours']:.3f} | {row['ratio_published']:.2f} | {row['seconds']:.1f} "
                    f"| {row['boxes']} ({row['stopped']}) |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
