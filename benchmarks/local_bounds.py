"""Local certified bounds on R-balls: ours (branch and bound, `certify.bounds.local_bound`) vs Castin et al. (DP),
the paper's global bound (L2) and the best lower bound found, for single-head layers with N, D <= 8.

    python benchmarks/local_bounds.py [--budget 10] [--repeat 1] [--json out.json]

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
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from problems import random_weights  # noqa: E402

from certify._domain import Ball  # noqa: E402
from certify.adversarial import lower_bound  # noqa: E402
from certify.bounds import castin_bound, paper_bound  # noqa: E402
from certify.bounds._local import local_bound  # noqa: E402

CASES = [(2, 1), (3, 2), (4, 4), (8, 8)]
RADII = [0.5, 1.0, 2.0]


def run_case(kind: str, N: int, D: int, R: float, budget: float, repeat: int, norm: str) -> dict:
    weights = random_weights(kind, 1, D, seed=0)
    domain = Ball(R)
    adversarial = lower_bound(weights, N, norm, domain, restarts=16, steps=300, seed=0)
    runs = [local_bound(weights, N, norm, domain, time_budget=budget, lower=adversarial) for _ in range(repeat)]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per branch and bound run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (seconds are medians)")
    parser.add_argument("--norm", default="2", choices=["2", "inf"])
    parser.add_argument("--kinds", default="dp,l2")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    print("| kind | N | D | R | ours | Castin (DP) / paper (L2) | lower | ours/lower | published/lower | s | boxes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for N, D in CASES:
            for R in RADII:
                start = time.perf_counter()
                row = run_case(kind, N, D, R, args.budget, args.repeat, args.norm)
                rows.append(row)
                print(
                    f"| {kind} | {N} | {D} | {R:g} | {row['ours']:.4g} | {row['published']:.4g} | {row['lower']:.4g} "
                    f"| {row['ratio_ours']:.3f} | {row['ratio_published']:.2f} | {row['seconds']:.1f} "
                    f"| {row['boxes']} ({row['stopped']}) |",
                    flush=True,
                )
                del start
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
