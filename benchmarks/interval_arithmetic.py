"""Speed of the interval arithmetic under the global L2 branch and bound, against the plain forms it replaced.

Table 1, kernels (median milliseconds over --repeat, same arrays for both columns):

- outward rounding of one end: ``np.nextafter`` (baseline) vs ``certify.interval.round_up`` (compiled);
- products shaped as in the enclosure, (B, N, N, N, L) x (B, N, N, N, 1): the numpy forms (baseline: four corner
  products, or two when a factor is >= 0, then ``np.nextafter``-free outward rounding, each step a numpy pass) vs
  ``Interval.__mul__`` (one compiled pass, ``certify/interval/_kernels.py``);
- a sum over the k axis of (B, N, N, N, L), as in sum_k P_ik D_jk: the numpy form (sums of both ends and of their
  absolute values, then rounding) vs ``isum`` (one compiled pass);
- the linear forms S_ijk = y_j + y_k - 2 y_i of the gaps: elementwise products and ``isum`` (baseline) vs
  ``linear_combination`` (matrix products);
- the magnitude max(|lo|, |hi|) (the local slopes take dozens of them per head): two ``np.abs`` and
  ``np.maximum`` (baseline) vs ``Interval.mag`` (one compiled pass);
- ``point_einsum`` (an interval times exact matrices, mid-radius form) on the largest einsum of the digits ViT
  chain's forward-mode passes, a (17, 17, 8) tangent times two weight matrices into 5.3e6 entries: numpy passes and
  three einsums (baseline) vs two compiled passes and two einsums.

Table 2, whole box evaluation (``box_bounds`` on random N = 6 cubes of half-width 0.1 with gaps in [0.1, 1.7], the
region the N = 6 branch and bound spends its time in), each in a fresh process: glibc's default allocator settings
(baseline) vs ``certify._memory.retain_freed_memory``; boxes per second and the ratio.

    python benchmarks/interval_arithmetic.py [--repeat 7] [--json FILE]

Single-threaded (OMP_NUM_THREADS=1); the machine is shared, so ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from certify import interval as iv  # noqa: E402
from certify.interval import Interval  # noqa: E402

B, N, L = 256, 6, 5


def _median_ms(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _numpy_step(x: np.ndarray) -> np.ndarray:
    return np.abs(x) * 2.0**-52 + 2.0**-1074


def _numpy_round(lo: np.ndarray, hi: np.ndarray) -> Interval:
    """Outward rounding as numpy passes (with the NaN tests), as ``certify.interval`` did before its kernels."""
    lo, hi = lo - _numpy_step(lo), hi + _numpy_step(hi)
    if np.isnan(lo).any():
        lo = np.where(np.isnan(lo), -np.inf, lo)
    if np.isnan(hi).any():
        hi = np.where(np.isnan(hi), np.inf, hi)
    return Interval(lo, hi)


def _numpy_four_corners(a: Interval, b: Interval) -> Interval:
    p1, p2, p3, p4 = a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi
    return _numpy_round(np.minimum(np.minimum(p1, p2), np.minimum(p3, p4)),
                        np.maximum(np.maximum(p1, p2), np.maximum(p3, p4)))


def _numpy_product(a: Interval, b: Interval) -> Interval:
    """The product as numpy passes: two products when b >= 0 (checked), four otherwise."""
    if (b.lo >= 0).all():
        return _numpy_round(a.lo * np.where(a.lo < 0, b.hi, b.lo), a.hi * np.where(a.hi > 0, b.hi, b.lo))
    return _numpy_four_corners(a, b)


def _numpy_sum(x: Interval, axis: int) -> Interval:
    n = x.lo.shape[axis]
    lo = x.lo.sum(axis=axis) - 4.0 * n * iv.U * np.abs(x.lo).sum(axis=axis)
    hi = x.hi.sum(axis=axis) + 4.0 * n * iv.U * np.abs(x.hi).sum(axis=axis)
    return _numpy_round(lo, hi)


def _numpy_point_einsum(subscripts: str, x: Interval, *points: np.ndarray) -> Interval:
    """`point_einsum` as numpy passes and three einsums (mid, radius, |mid|), as before its two compiled passes."""
    from certify.bounds.local._enclosure import _scale_down
    from certify.sdp._floating import ETA, gamma

    inputs, output = subscripts.split("->")
    sizes = {c: n for letters, a in zip(inputs.split(","), (x.lo, *points)) for c, n in zip(letters, a.shape)}
    K = int(np.prod([sizes[c] for c in sizes if c not in output]))
    g = gamma(2 * (K + len(points)) + 4)
    exponents = [_scale_down(np.maximum(np.abs(x.lo), np.abs(x.hi)))] + [_scale_down(p) for p in points]
    lo, hi = np.ldexp(x.lo, -exponents[0]) - ETA, np.ldexp(x.hi, -exponents[0]) + ETA
    points = tuple(np.ldexp(p, -k) for p, k in zip(points, exponents[1:]))
    mid = np.clip(0.5 * lo + 0.5 * hi, lo, hi)
    rad = iv.round_up(np.maximum(hi - mid, mid - lo))
    abs_points = [np.abs(p) for p in points]
    c = np.einsum(subscripts, mid, *points, optimize=True)
    r = np.einsum(subscripts, rad, *abs_points, optimize=True)
    m = np.einsum(subscripts, np.abs(mid), *abs_points, optimize=True)
    radius = iv.round_up(iv.round_up(r * (1 + g)) + iv.round_up(g * m * (1 + g)) + K * 1e-300)
    total = sum(exponents)
    c, radius = np.ldexp(c, total), iv.round_up(np.ldexp(radius, total)) + ETA
    out_lo, out_hi = iv.round_down(c - radius), iv.round_up(c + radius)
    unknown = np.isnan(out_lo) | np.isnan(out_hi)
    return Interval(np.where(unknown, -np.inf, out_lo), np.where(unknown, np.inf, out_hi))


def kernels(repeat: int) -> list[dict]:
    from certify._memory import retain_freed_memory

    retain_freed_memory()  # as in the branch and bound; without it both columns pay page faults
    rng = np.random.default_rng(0)
    x = rng.normal(size=1_000_000)
    centre = rng.normal(size=(B, N, N, N, L))
    a = Interval.centred(centre, 0.1 * np.abs(centre))
    p = np.abs(rng.normal(size=(B, N, N, N, 1)))
    nonnegative = Interval(p, 1.1 * p)
    theta = Interval.centred(np.abs(rng.normal(size=(B, L))), 0.1)
    A = np.zeros((N, 1, L))
    for k in range(N):
        A[k, 0, :k] = 1.0
    coef = A[None, :, None] + A[None, None, :] - 2.0 * A[:, None, None]  # (N, N, N, 1, L)
    from certify.bounds.local._enclosure import point_einsum

    tangent = Interval.centred(rng.normal(size=(17, 17, 8)), 0.01)  # the digits ViT chain's largest einsum
    W_first, W_second = rng.normal(size=(16, 48)), rng.normal(size=(48, 16))
    outer = "...ilZ,aF,Ea->...iFlEZ"
    cases = [
        ("outward rounding, 1e6 floats", lambda: np.nextafter(x, np.inf), lambda: iv.round_up(x)),
        ("product with a factor >= 0", lambda: _numpy_product(a, nonnegative), lambda: a * nonnegative),
        ("product, general", lambda: _numpy_four_corners(a, a), lambda: a * a),
        ("sum over the k axis", lambda: _numpy_sum(a, 3), lambda: iv.isum(a, axis=3)),
        ("magnitude max(|lo|, |hi|)", lambda: np.maximum(np.abs(a.lo), np.abs(a.hi)), lambda: a.mag),
        ("linear forms S_ijk (B = 256)",
         lambda: iv.isum(theta.reshape(B, 1, 1, 1, 1, L) * coef[None], axis=-1),
         lambda: iv.linear_combination(theta, coef)),
        ("point_einsum (17,17,8) -> 5.3e6",
         lambda: _numpy_point_einsum(outer, tangent, W_first, W_second),
         lambda: point_einsum(outer, tangent, W_first, W_second)),
    ]
    rows = []
    for name, baseline, ours in cases:
        base_ms, ours_ms = _median_ms(baseline, repeat), _median_ms(ours, repeat)
        rows.append({"kernel": name, "baseline_ms": base_ms, "ours_ms": ours_ms, "speedup": base_ms / ours_ms})
    return rows


def _boxes_per_second(retain: bool, repeat: int) -> float:
    """Run in a child process: box_bounds on 512 random compact N = 6 cubes (2-norm), median boxes per second."""
    if retain:
        from certify._memory import retain_freed_memory

        retain_freed_memory()
    from certify.bounds.global_l2._enclosure import gap_parametrisation
    from certify.bounds.global_l2._mean_value import box_bounds

    rng = np.random.default_rng(1)
    centre = rng.uniform(0.1, 1.7, size=(512, L))
    lo, hi = centre - 0.1, centre + 0.1
    par = gap_parametrisation(N)
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for k in range(0, 512, B):
            box_bounds(lo[k:k + B], hi[k:k + B], par, "2")
        seconds.append(time.perf_counter() - start)
    return 512 / statistics.median(seconds)


def allocator(repeat: int) -> dict:
    rates = {}
    for retain in (False, True):
        out = subprocess.run([sys.executable, __file__, "--child", str(int(retain)), "--repeat", str(repeat)],
                             check=True, capture_output=True, text=True)
        rates[retain] = float(out.stdout.strip().splitlines()[-1])
    return {"default_boxes_per_s": rates[False], "retained_boxes_per_s": rates[True],
            "speedup": rates[True] / rates[False]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", type=int, choices=(0, 1), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(_boxes_per_second(bool(args.child), max(1, args.repeat // 3)))
        return 0
    rows = kernels(args.repeat)
    print(f"{'kernel':32s} {'baseline ms':>12s} {'ours ms':>9s} {'speedup':>8s}")
    for r in rows:
        print(f"{r['kernel']:32s} {r['baseline_ms']:12.3f} {r['ours_ms']:9.3f} {r['speedup']:8.1f}")
    alloc = allocator(args.repeat)
    print(f"\nbox_bounds, N = 6, 2-norm, compact cubes h = 0.1: {alloc['default_boxes_per_s']:.0f} boxes/s with glibc "
          f"defaults, {alloc['retained_boxes_per_s']:.0f} with retain_freed_memory ({alloc['speedup']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({"kernels": rows, "allocator": alloc}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
