"""Compiled (numba) kernels of the interval arithmetic: each operation and its outward rounding in one pass.

The formulas are those of ``_interval`` (and proved there), evaluated element by element in IEEE float64 without
fast-math (no reassociation, no fused multiply-add contraction), so every operation rounds exactly as numpy's
does. Fusing them removes the temporaries numpy needs for each step (four products, their minimum and maximum,
|x|, the step, the subtraction, the NaN test): an interval product is about 3x faster, a sum along an axis about
15x (``benchmarks/interval_arithmetic.py``).

- ``step(x) = fl(fl(|x| 2^-52) + 2^-1074)`` is at least the spacing of the floats next to x (``_interval._step``);
  ``down(x) = fl(x - step(x))`` and ``up(x) = fl(x + step(x))`` are at least one ulp below / above x, and NaN
  (from inf - inf) becomes -inf / +inf.
- product: the four corner products, their minimum and maximum, rounded outward; if any corner is NaN
  (0 * inf), the whole line (-inf, inf).
- sum of n terms along the last axis: the sum of the lower ends minus 4 n u sum_k |lo_k|, and of the upper ends
  plus 4 n u sum_k |hi_k| (each >= gamma_(n-1) times the sum of the magnitudes it adds up, for any summation
  order; the factor 4 covers the rounding of the margin itself, u = 2^-53), then rounded outward. Each end gets the
  margin of its own terms, so a sum of positive lower ends stays positive.

The kernels are compiled when this module is imported and cached on disk (``cache=True``, beside the source or in
numba's cache folder). numba's cache is not safe across processes: several fresh processes compiling at once (the
pytest-xdist workers of a fresh clone) corrupted it and crashed the processes that loaded it (segmentation
faults: 14 of 36 processes, three at a time on a fresh cache). So every process loads or writes the cache under one
exclusive file lock (`_cache_lock`); a later process waits for the first one's compilation, then loads its cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np

try:
    import fcntl
except ImportError:  # not POSIX: no lock (one process at a time is then up to the caller)
    fcntl = None  # type: ignore[assignment]

ULP_SCALE = 2.0**-52
TINY = 2.0**-1074  # the smallest subnormal
U = 2.0**-53


@numba.njit(inline="always")
def step(x: float) -> float:
    """fl(fl(|x| 2^-52) + 2^-1074): at least the spacing of the floats next to x, on either side.

    Proof. Let x be finite, e = floor(log2 |x|). The floats next to x are at most 2^(e - 52) away but at least
    max(2^(e - 53), 2^-1074) (half-spacing only just below a power of two). If |x| 2^-52 >= 2^-1022 it is exact (a
    power-of-two scaling); otherwise rounding to nearest, which is monotone, keeps it >= 2^(e - 52) whenever that
    power of two is representable (e - 52 >= -1074), and the added 2^-1074 keeps the step >= 2^-1074 (also for
    x = 0). In every case the step is >= 2^(max(e - 52, -1074)) >= the spacing next to x.
    """
    return abs(x) * ULP_SCALE + TINY


@numba.njit(inline="always")
def _down(x: float) -> float:
    """fl(x - step(x)) <= x - step(x) rounded to nearest, and x - step(x) is at or below the float before x,
    which is representable, so rounding to nearest cannot come back above it: at least one ulp below x. NaN (from
    inf - inf, or a NaN x) becomes -inf."""
    y = x - step(x)
    return -math.inf if y != y else y


@numba.njit(inline="always")
def _up(x: float) -> float:
    """The mirror image of ``_down``: at least one ulp above x; NaN becomes +inf."""
    y = x + step(x)
    return math.inf if y != y else y


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """An exclusive lock (fcntl.flock; released when the file closes, also when the process dies) held while numba
    compiles the kernels and loads or writes their on-disk cache (module docstring). The lock file is in the
    temporary folder, named after this file's path, so it works when the package folder is read-only; if it
    cannot be opened (another user's file), or without fcntl, the kernels compile without it."""
    handle = None
    if fcntl is not None:
        name = hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:16]
        try:
            handle = open(Path(tempfile.gettempdir()) / f"certify-numba-{name}.lock", "a")
        except OSError:
            pass
    if handle is None:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


with _cache_lock():
    @numba.vectorize(["float64(float64)"], cache=True)
    def round_down_kernel(x):
        return _down(x)

    @numba.vectorize(["float64(float64)"], cache=True)
    def round_up_kernel(x):
        return _up(x)

    @numba.vectorize(["float64(float64, float64)"], cache=True)
    def mag_kernel(lo, hi):
        # max(|lo|, |hi|), exact; nan if either end is nan (as np.maximum). A vectorised loop may still compare
        # nan lanes and raise the invalid-operation flag: `Interval.mag` silences that warning
        if math.isnan(lo) or math.isnan(hi):
            return math.nan
        a = abs(lo)
        b = abs(hi)
        return a if a > b else b

    @numba.guvectorize(["void(f8, f8, f8, f8, f8[:], f8[:])"], "(),(),(),()->(),()", cache=True)
    def add_kernel(a_lo, a_hi, b_lo, b_hi, lo, hi):
        lo[0] = _down(a_lo + b_lo)
        hi[0] = _up(a_hi + b_hi)

    @numba.guvectorize(["void(f8, f8, f8, f8, f8[:], f8[:])"], "(),(),(),()->(),()", cache=True)
    def sub_kernel(a_lo, a_hi, b_lo, b_hi, lo, hi):
        lo[0] = _down(a_lo - b_hi)
        hi[0] = _up(a_hi - b_lo)

    @numba.guvectorize(["void(f8, f8, f8, f8, f8[:], f8[:])"], "(),(),(),()->(),()", cache=True)
    def mul_kernel(a_lo, a_hi, b_lo, b_hi, lo, hi):
        p1 = a_lo * b_lo
        p2 = a_lo * b_hi
        p3 = a_hi * b_lo
        p4 = a_hi * b_hi
        if p1 != p1 or p2 != p2 or p3 != p3 or p4 != p4:
            lo[0] = -math.inf
            hi[0] = math.inf
        else:
            lo[0] = _down(min(min(p1, p2), min(p3, p4)))
            hi[0] = _up(max(max(p1, p2), max(p3, p4)))

    @numba.guvectorize(["void(f8[:], f8[:], f8[:], f8[:])"], "(n),(n)->(),()", cache=True)
    def sum_kernel(x_lo, x_hi, lo, hi):
        n = x_lo.shape[0]
        s_lo = 0.0
        s_hi = 0.0
        abs_lo = 0.0
        abs_hi = 0.0
        for k in range(n):
            s_lo += x_lo[k]
            s_hi += x_hi[k]
            abs_lo += abs(x_lo[k])
            abs_hi += abs(x_hi[k])
        # NaN or inf in a margin makes that end NaN or infinite: the whole line on that side
        lo[0] = _down(s_lo - 4.0 * n * U * abs_lo)
        hi[0] = _up(s_hi + 4.0 * n * U * abs_hi)


    @numba.njit(cache=True)
    def mid_radius_kernel(lo, hi, scale, g, mid, z):
        # over flat contiguous arrays: the ends times scale (a power of two: the product is x 2^k correctly
        # rounded, so at most 2^-1075 off when it is subnormal) and moved out by 2^-1074; a midpoint m inside them;
        # z >= rad + g |m| (each step rounded up). A non-finite end gives NaN for both (nothing is known there).
        # (An explicit loop: as a guvectorized kernel of scalars it ran 4x slower.)
        for k in range(lo.size):
            a = lo[k] * scale - TINY
            b = hi[k] * scale + TINY
            m = min(max(0.5 * a + 0.5 * b, a), b)
            rad = _up(max(b - m, m - a))
            finite = math.isfinite(lo[k]) and math.isfinite(hi[k])
            mid[k] = m if finite else math.nan
            z[k] = _up(rad + _up(g * abs(m))) if finite else math.nan

    @numba.njit(cache=True)
    def centre_radius_kernel(c, e, scale, g, absolute, lo, hi):
        # over flat contiguous arrays: [c - r, c + r] times scale (a power of two) and rounded outward,
        # r = e (1 + g) + absolute rounded up; NaN (from a NaN c or e, or inf - inf) gives -inf / +inf (_down / _up)
        for k in range(c.size):
            r = _up(_up(e[k] * (1.0 + g)) + absolute)
            centre = c[k] * scale
            r = _up(r * scale) + TINY
            lo[k] = _down(centre - r)
            hi[k] = _up(centre + r)


def sum_last_axes(x_lo: np.ndarray, x_hi: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``sum_kernel`` over the given (normalised, distinct) axes: they are moved last and flattened (no axes: a sum
    of one term, as numpy's sum of a 0-d array)."""
    if not axes:
        return sum_kernel(x_lo[..., None], x_hi[..., None])
    keep = [a for a in range(x_lo.ndim) if a not in axes]
    order = keep + list(axes)
    shape = tuple(x_lo.shape[a] for a in keep) + (-1,)
    lo = np.transpose(x_lo, order)
    hi = np.transpose(x_hi, order)
    if len(axes) > 1:
        lo, hi = lo.reshape(shape), hi.reshape(shape)
    return sum_kernel(lo, hi)
