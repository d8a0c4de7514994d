"""The split bound of the global L2 branch and bound vs the Taylor / mean-value box bounds (MATH.md section 7).

Two tables, each against a baseline measured in the same run:

1. Random boxes of half-width h in the N = 6 (d = 1) search domain: the fraction each bound closes at the N = 6
   closing threshold (1.04 times the shipped lower bound), and milliseconds per box (median of --repeat; the ratio
   is the figure to read). The split bound is the smallest over the partitions the search tries; ``box_bounds`` is
   the Taylor / mean-value bound, with the same closing threshold (gated second order).
2. The whole branch and bound with and without the split bounds (``split=False``): certified ratio, boxes, seconds.

    python benchmarks/split_bound.py                       # table 1, then N = 4 (d = 1) and N = 3 (d = 2); ~2 minutes
    python benchmarks/split_bound.py --search 5 --budget 600   # also N = 5, d = 1 (about 3 minutes per run)

Single-threaded (OMP_NUM_THREADS=1); the machine is shared, so ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from certify.bounds.global_l2._search import domain, global_l2_constant, split_bounds  # noqa: E402
from certify.bounds.global_l2._domain import cluster_partitions  # noqa: E402
from certify.bounds.global_l2._mean_value import box_bounds  # noqa: E402
from certify.bounds.closed_form._universal import certified_table  # noqa: E402


def constants(d: int, norm: str) -> dict[int, float]:
    table = certified_table()
    out = {s: table[(s, d, norm)]["upper"] for s in range(2, 7) if (s, d, norm) in table}
    out[1] = 1.0
    return out


def closing_fractions(norm: str, widths: list[float], boxes: int, repeat: int, seed: int = 0) -> list[dict]:
    N, R = 6, 3.25
    threshold = certified_table()[(N, 1, norm)]["lower"] * 1.04
    par = domain(N, 1, norm, R).par
    smaller = constants(1, norm)
    rng = np.random.default_rng(seed)
    rows = []
    for h in widths:
        centre = rng.uniform(0.0, R, size=(boxes, N - 1))
        lo, hi = np.maximum(centre - h, 0.0), np.minimum(centre + h, R)
        split_times, box_times = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            distances, labels = cluster_partitions(par, lo, hi)
            split = split_bounds(lo, hi, par, norm, distances, labels, smaller)
            split_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            forms, _, _ = box_bounds(lo, hi, par, norm, threshold=threshold)
            box_times.append(time.perf_counter() - start)
        split_ms = 1e3 * statistics.median(split_times) / boxes
        box_ms = 1e3 * statistics.median(box_times) / boxes
        rows.append({"norm": norm, "h": h, "split_closes": float(np.mean(split <= threshold)),
                     "box_closes": float(np.mean(forms <= threshold)),
                     "either_closes": float(np.mean(np.minimum(split, forms) <= threshold)),
                     "split_ms": split_ms, "box_ms": box_ms, "speed_ratio": box_ms / split_ms})
    return rows


def search_both(N: int, d: int, norm: str, tol: float, budget: float) -> dict:
    smaller = {s: c for s, c in constants(d, norm).items() if 2 <= s < N}
    row = {"N": N, "d": d, "norm": norm, "tol": tol}
    for label, split in (("without", False), ("with", True)):
        res = global_l2_constant(N, d, norm, tol=tol, time_budget=budget, smaller=smaller, lower_restarts=8,
                                 split=split)
        row[label] = {"upper": res.upper, "ratio": res.ratio, "boxes": res.boxes, "seconds": res.seconds,
                      "complete": res.complete}
    row["boxes_ratio"] = row["without"]["boxes"] / row["with"]["boxes"]
    row["seconds_ratio"] = row["without"]["seconds"] / row["with"]["seconds"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--norm", choices=("2", "inf", "both"), default="both")
    parser.add_argument("--boxes", type=int, default=512, help="random boxes per width (default 512)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--search", type=int, nargs="*", default=[4], help="N (d = 1) for table 2 (default 4)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per search (default 300)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    norms = ("2", "inf") if args.norm == "both" else (args.norm,)
    print("N = 6, d = 1: fraction of random boxes closed, milliseconds per box (median)")
    print(f"{'norm':>4} {'h':>5} {'split closes':>12} {'forms close':>11} {'either':>7} {'split ms':>9} "
          f"{'forms ms':>9} {'forms / split':>13}", flush=True)
    fractions = []
    for norm in norms:
        for row in closing_fractions(norm, [0.05, 0.1, 0.2, 0.4], args.boxes, args.repeat):
            fractions.append(row)
            print(f"{norm:>4} {row['h']:5.2f} {row['split_closes']:12.3f} {row['box_closes']:11.3f} "
                  f"{row['either_closes']:7.3f} {row['split_ms']:9.3f} {row['box_ms']:9.3f} {row['speed_ratio']:13.1f}",
                  flush=True)
    print(f"\n{'N':>2} {'d':>2} {'norm':>4} {'without: ratio':>15} {'boxes':>8} {'s':>7} {'with: ratio':>12} "
          f"{'boxes':>8} {'s':>7} {'boxes x':>8} {'time x':>7}", flush=True)
    searches = []
    cases = [(N, 1, 0.004 if N <= 4 else 0.03) for N in args.search] + [(3, 2, 0.02)]
    for N, d, tol in cases:
        for norm in norms:
            row = search_both(N, d, norm, tol, args.budget)
            searches.append(row)
            a, b = row["without"], row["with"]
            print(f"{N:>2} {d:>2} {norm:>4} {a['ratio']:15.4f} {a['boxes']:8d} {a['seconds']:7.1f} {b['ratio']:12.4f} "
                  f"{b['boxes']:8d} {b['seconds']:7.1f} {row['boxes_ratio']:8.2f} {row['seconds_ratio']:7.2f}"
                  + ("" if a["complete"] and b["complete"] else "   (a run ran out of time)"), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"fractions": fractions, "search": searches}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
