"""Speed of the exact diagonal slope S_A (`certify/bounds/local/_diagonal_kernel.py`), compiled, against the
whole-array interval form it replaced (`diagonal_slope_by_arrays`, the baseline), on the same random enclosures.

    python benchmarks/diagonal_slope.py [--sizes 8x16,17x48,16x64,32x48] [--repeat 3] [--json FILE]

For each (N, D): median seconds of each form over --repeat calls (the compiled one after a warm-up call, so its
compilation is not counted), their ratio, and the largest relative difference (the compiled form rounds every
product and sum up, the baseline sums in plain float64: about N D ulps). (17, 48) is the digits vision
transformer's attention (N = 17 tokens, D = 48), where the model chain computes S_A 63 times per eps-ball.
Single-threaded (OMP_NUM_THREADS=1); the machine is shared, so the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from certify.bounds.local._diagonal_kernel import diagonal_slope_by_arrays  # noqa: E402
from certify.bounds.local._enclosure import const  # noqa: E402
from certify.bounds.local._slopes import _diagonal_slope  # noqa: E402
from certify.interval import Interval  # noqa: E402
from certify.report import format_rows, write_json  # noqa: E402
from jacobian import median_seconds  # noqa: E402  (benchmarks/jacobian.py: same timing helper)


def blocks(N: int, D: int, seed: int = 0):
    """Random enclosures of the shapes `_diagonal_slope` takes (widths 5% of the values, P in [0, 1])."""
    rng = np.random.default_rng(seed)

    def interval(*shape):
        centre, radius = rng.normal(size=shape), 0.05 * rng.random(shape)
        return Interval(centre - radius, centre + radius)

    P_hi = rng.random((N, N)) / N
    return (Interval(0.9 * P_hi, P_hi), interval(N, N, D), interval(N, N, D), interval(N, D), interval(N, D, D),
            interval(D, D), interval(D, D), const(0.25), 1e-3 * rng.random((N, D)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x16,17x48,16x64,32x48", help="comma-separated NxD")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for size in args.sizes.split(","):
        N, D = (int(part) for part in size.split("x"))
        P, k, v, b, A, M, W, sigma, h = blocks(N, D)
        compiled = lambda: _diagonal_slope(P, k, v, b, A, M, W, sigma, h, np.zeros((N, N)), exact=True)  # noqa: E731
        compiled()  # compile (or load the cache) first
        t_compiled, S = median_seconds(compiled, args.repeat)
        t_arrays, reference = median_seconds(lambda: diagonal_slope_by_arrays(P, k, v, b, A, M, W, sigma, h),
                                             args.repeat)
        difference = float(np.max(np.abs(S - reference) / reference))
        rows.append(dict(N=N, D=D, arrays_s=t_arrays, compiled_s=t_compiled, ratio=t_arrays / t_compiled,
                         relative_difference=difference))
        print(f"N {N} D {D}: arrays {t_arrays:.3f} s, compiled {t_compiled:.3f} s", file=sys.stderr, flush=True)
    print(format_rows(("N", "D", "arrays s", "compiled s", "arrays / compiled", "max rel. difference"),
                      [(r["N"], r["D"], r["arrays_s"], r["compiled_s"], r["ratio"], r["relative_difference"])
                       for r in rows]))
    if args.json:
        write_json(args.json, dict(repeat=args.repeat, rows=rows))


if __name__ == "__main__":
    main()
