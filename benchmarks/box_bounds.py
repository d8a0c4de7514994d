"""Global L2 branch and bound with second-order (Taylor) box bounds vs the first-order forms alone (MATH.md section 7).

For each (N, d, norm) it certifies c_p(N, d) three times with the same tolerance, radius and time budget: with
``second_order=False`` (mean-value and interval forms: the baseline), with the default (plus the second-order
Taylor form with the interval Hessian), and with ``third_order=True`` (the third-order Taylor form instead). It
prints the certified upper bound, upper / lower, boxes, seconds (median over --repeat), the ratios baseline / second
order of boxes and seconds, and the ratios second / third order. A second table shows, on boxes of
half-width h around the known maximiser, the excess (bound - lower) / lower of each form. A third shows, on compact
N = 6 boxes, how much the interval Hessian inflates the Taylor remainder against sampled second differences.

    python benchmarks/box_bounds.py                          # N = 3, 4 (d = 1), both norms; about 2 minutes
    python benchmarks/box_bounds.py --N 3 4 5 --budget 600   # N = 5 takes minutes (first order does not finish)

Single-threaded (OMP_NUM_THREADS=1); the machine is shared, so ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from certify.bounds.global_l2._search import domain, global_l2_constant  # noqa: E402
from certify.bounds.global_l2._mean_value import box_bounds, taylor_bounds  # noqa: E402
from certify.bounds.closed_form._universal import certified_table  # noqa: E402


def certify_both(N: int, d: int, norm: str, tol: float, budget: float, repeat: int) -> dict:
    table = certified_table()
    smaller = {s: table[(s, d, norm)]["upper"] for s in range(2, N) if (s, d, norm) in table}
    row = {"N": N, "d": d, "norm": norm, "tol": tol}
    for label, second, third in (("first", False, False), ("second", True, False), ("third", True, True)):
        runs = [global_l2_constant(N, d, norm, tol=tol, time_budget=budget, smaller=smaller, lower_restarts=8,
                                   second_order=second, third_order=third) for _ in range(repeat)]
        best = min(runs, key=lambda r: r.upper)
        row[label] = {"upper": best.upper, "ratio": best.upper / best.lower, "boxes": best.boxes,
                      "seconds": statistics.median(r.seconds for r in runs), "complete": best.complete,
                      "r": best.r}
    row["boxes_ratio"] = row["first"]["boxes"] / row["second"]["boxes"]
    row["seconds_ratio"] = row["first"]["seconds"] / row["second"]["seconds"]
    row["third_boxes_ratio"] = row["second"]["boxes"] / row["third"]["boxes"]
    row["third_seconds_ratio"] = row["second"]["seconds"] / row["third"]["seconds"]
    return row


def excess_near_maximiser(N: int, norm: str, widths: list[float]) -> list[dict]:
    """(bound - lower) / lower on the box [g - h, g + h] (clipped at 0) around the shipped witness's gaps g."""
    entry = certified_table()[(N, 1, norm)]
    gaps = np.diff(np.sort(np.asarray(entry["witness"]).ravel()))
    par = domain(N, 1, norm, 3.5).par
    rows = []
    for h in widths:
        lo = np.maximum(gaps - h, 0.0)[None]
        hi = lo + 2 * h
        first, _, _ = box_bounds(lo, hi, par, norm, second_order=False)
        second, _ = taylor_bounds(lo, hi, par, norm)
        lower = entry["lower"]
        rows.append({"N": N, "norm": norm, "h": h, "first": float(first[0] / lower - 1),
                     "second": float(second[0] / lower - 1)})
    return rows


def remainder_overestimate(N: int, h: float, count: int, samples: int = 48) -> dict:
    """On ``count`` random cubes of half-width h with gaps in [0.2, 1.6] (the compact region where the N = 6 branch
    and bound spends its time), the median 2-norm of the Taylor remainder 1/2 sum_{l,m} h_l h_m |H_lm| with H
    (a) the interval Hessian over the box (what the bound uses) and (b) the largest |central second difference|
    (step 1e-4) at ``samples`` points of the box, its vertices first: an estimate of the exact one, not a bound."""
    from certify.bounds.global_l2._enclosure import core_jacobian_float, enclose_core_jacobian
    from certify.interval import Interval

    rng = np.random.default_rng(0)
    par = domain(N, 1, "2", 3.5).par
    L = par.L
    centre = rng.uniform(0.2, 1.6, size=(count, L))
    lo, hi = centre - h, centre + h
    enclosure = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=centre, with_hessian=True).h.mag

    def hessian(theta: np.ndarray, step: float = 1e-4) -> np.ndarray:
        out = np.zeros(enclosure.shape)
        for a in range(L):
            for b in range(L):
                ea, eb = np.eye(L)[a] * step, np.eye(L)[b] * step
                M = [core_jacobian_float(par.points(theta + sa * ea + sb * eb)) for sa, sb in
                     ((1, 1), (1, -1), (-1, 1), (-1, -1))]
                out[..., a, b] = (M[0] - M[1] - M[2] + M[3]) / (4 * step * step)
        return out

    sampled = np.zeros(enclosure.shape)
    for k in range(samples):
        t = rng.integers(0, 2, size=lo.shape).astype(float) if k < samples // 2 else rng.uniform(size=lo.shape)
        sampled = np.maximum(sampled, np.abs(hessian(lo + t * (hi - lo))))
    half = np.full((count, L), 0.5 * h)
    norms = [np.median(np.linalg.norm(np.einsum("bl,bijlm,bm->bij", half, H, np.full((count, L), h)), 2,
                                      axis=(-2, -1))) for H in (enclosure, sampled)]
    return {"N": N, "h": h, "interval_hessian": float(norms[0]), "sampled_hessian": float(norms[1]),
            "ratio": float(norms[0] / norms[1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--N", type=int, nargs="*", default=[3, 4])
    parser.add_argument("--norm", choices=("2", "inf", "both"), default="both")
    parser.add_argument("--tol", type=float, default=0.01)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per run (default 120)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    norms = ("2", "inf") if args.norm == "both" else (args.norm,)
    rows = []
    print(f"{'N':>2} {'norm':>4} {'first: ratio':>13} {'boxes':>8} {'s':>7} {'second: ratio':>14} {'boxes':>8} "
          f"{'s':>7} {'boxes x':>8} {'time x':>7} {'third: boxes':>13} {'s':>7} {'boxes x':>8} {'time x':>7}",
          flush=True)
    for N in args.N:
        for norm in norms:
            row = certify_both(N, 1, norm, args.tol, args.budget, args.repeat)
            rows.append(row)
            f, s, t = row["first"], row["second"], row["third"]
            print(f"{N:>2} {norm:>4} {f['ratio']:13.4f} {f['boxes']:8d} {f['seconds']:7.1f} {s['ratio']:14.4f} "
                  f"{s['boxes']:8d} {s['seconds']:7.1f} {row['boxes_ratio']:8.1f} {row['seconds_ratio']:7.1f} "
                  f"{t['boxes']:13d} {t['seconds']:7.1f} {row['third_boxes_ratio']:8.2f} "
                  f"{row['third_seconds_ratio']:7.2f}"
                  + ("" if f["complete"] else "   (first order ran out of time: its ratios are lower bounds)"),
                  flush=True)
    print(f"\n{'N':>2} {'norm':>4} {'h':>7} {'first-order excess':>19} {'Taylor excess':>14}")
    excess = []
    for N in [n for n in args.N if 3 <= n <= 6]:
        for norm in norms:
            for row in excess_near_maximiser(N, norm, [0.1, 0.05, 0.025, 0.0125]):
                excess.append(row)
                print(f"{N:>2} {norm:>4} {row['h']:7.4f} {row['first']:19.4f} {row['second']:14.4f}")
    print(f"\n{'N':>2} {'h':>5} {'remainder, interval Hessian':>28} {'sampled Hessian (estimate)':>27} {'ratio':>6}")
    remainder = [remainder_overestimate(6, h, 16) for h in (0.1, 0.05)]
    for row in remainder:
        print(f"{row['N']:>2} {row['h']:5.2f} {row['interval_hessian']:28.4f} {row['sampled_hessian']:27.4f} "
              f"{row['ratio']:6.1f}")
    if args.json:
        args.json.write_text(json.dumps({"certify": rows, "excess": excess, "remainder": remainder}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
