"""Outward-rounded interval arithmetic on numpy float64 arrays.

An :class:`Interval` holds two arrays ``lo <= hi`` of the same (broadcast) shape and stands for the set of real
arrays ``x`` with ``lo <= x <= hi`` entrywise. Every operation returns an interval that contains the exact real
result of the operation applied to every member of its operands (the *inclusion property*).

Floating-point margin (stated and tested in ``tests/test_interval.py``):

- ``+``, ``-``, ``*``, ``/`` and ``sqrt`` are correctly rounded in IEEE 754 float64, so the exact result lies
  within one ulp of the computed one; each computed lower end is moved at least one ulp down and each upper end at
  least one ulp up (``round_down`` / ``round_up``: x -+ (|x| 2^-52 + 2^-1074), whose proof is in ``_kernels.step``;
  one or two ulps, and cheaper than ``np.nextafter``, ``benchmarks/interval_arithmetic.py``; this also covers
  underflow).
- Each operation and its rounding run as one compiled pass (numba, ``_kernels``: the same IEEE operations, without
  fast-math), which avoids numpy's temporaries.
- ``exp`` is not guaranteed correctly rounded by numpy / libm; we widen by a relative margin of ``EXP_REL_MARGIN``
  (1e-14, about 45 ulp, far above the few-ulp error of glibc and numpy's SIMD exp), then one more ulp outward;
  results below 1e-300 (near subnormal, where relative accuracy is lost) are enclosed by [0, 1e-300].
- ``sum`` along an axis of n terms: any summation order has error at most gamma_{n-1} sum |x_k| with
  gamma_k = k u / (1 - k u), u = 2^-53. We subtract / add ``4 n u sum|x_k|`` (computed), then one ulp outward.
- NaN produced by ``0 * inf`` or ``inf - inf`` turns into the whole line (-inf, inf), so overflow never yields a
  silently wrong finite bound.

This is the small arithmetic used by the global L2 branch and bound (``certify/bounds/global_l2/_search*.py``, MATH.md
section 7) and by the local Jacobian enclosures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from ._kernels import (TINY, U, add_kernel, mag_kernel, mul_kernel, round_down_kernel, round_up_kernel, sub_kernel,
                       sum_kernel, sum_last_axes)

EXP_REL_MARGIN = 1e-14

ArrayLike = Union[float, int, np.ndarray]


def round_down(x: np.ndarray) -> np.ndarray:
    """At least one ulp towards -inf: x - step(x) (``_kernels.step`` and ``_kernels._down``, with the proof);
    NaN (also from inf - inf) becomes -inf."""
    with np.errstate(invalid="ignore", over="ignore"):
        return round_down_kernel(np.asarray(x, dtype=np.float64))


def round_up(x: np.ndarray) -> np.ndarray:
    """At least one ulp towards +inf (the mirror image of ``round_down``); NaN becomes +inf."""
    with np.errstate(invalid="ignore", over="ignore"):
        return round_up_kernel(np.asarray(x, dtype=np.float64))


def _raw(lo: np.ndarray, hi: np.ndarray) -> "Interval":
    """Internal constructor without validation (for results of outward-rounded operations)."""
    out = object.__new__(Interval)
    object.__setattr__(out, "lo", lo)
    object.__setattr__(out, "hi", hi)
    return out


@dataclass(frozen=True)
class Interval:
    """An interval array ``[lo, hi]`` (float64, entrywise ``lo <= hi``).

    Build one with ``Interval(lo, hi)``, ``Interval.point(x)`` (a degenerate interval; exact, since x is a float)
    or ``Interval.centred(c, r)`` (outward-rounded ``[c - r, c + r]``). Arithmetic with Python or numpy scalars
    and arrays treats them as exact points.
    """

    lo: np.ndarray
    hi: np.ndarray

    __array_ufunc__ = None  # make ``ndarray <op> Interval`` use our reflected operators

    def __post_init__(self) -> None:
        lo = np.asarray(self.lo, dtype=np.float64)
        hi = np.asarray(self.hi, dtype=np.float64)
        lo, hi = np.broadcast_arrays(lo, hi)
        if np.any(lo > hi):
            raise ValueError(f"Interval needs lo <= hi entrywise; {int(np.sum(lo > hi))} entries violate it")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    # -- construction -------------------------------------------------------------------------------------------
    @staticmethod
    def point(x: ArrayLike) -> "Interval":
        x = np.asarray(x, dtype=np.float64)
        return Interval(x, x)

    @staticmethod
    def centred(c: ArrayLike, r: ArrayLike) -> "Interval":
        c = np.asarray(c, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        if np.any(r < 0):
            raise ValueError("Interval.centred needs a radius r >= 0")
        return Interval(round_down(c - r), round_up(c + r))

    # -- basic properties ---------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.lo.shape

    @property
    def mid(self) -> np.ndarray:
        """A float midpoint (not rounded; any point of the interval is fine as a centre)."""
        m = 0.5 * self.lo + 0.5 * self.hi
        return np.clip(m, self.lo, self.hi)

    @property
    def rad(self) -> np.ndarray:
        """An upper bound on the radius: for every x in the interval, |x - mid| <= rad."""
        m = self.mid
        return round_up(np.maximum(self.hi - m, m - self.lo))

    @property
    def mag(self) -> np.ndarray:
        """max |x| over the interval (exact; nan where an end is nan). One compiled pass (``_kernels.mag_kernel``)."""
        with np.errstate(invalid="ignore"):  # the compiled loop may compare nan lanes (the result is still nan)
            return mag_kernel(self.lo, self.hi)

    def contains(self, x: ArrayLike) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return (self.lo <= x) & (x <= self.hi)

    def __getitem__(self, key) -> "Interval":
        return _raw(self.lo[key], self.hi[key])

    def reshape(self, *shape) -> "Interval":
        return _raw(self.lo.reshape(*shape), self.hi.reshape(*shape))

    def swapaxes(self, a: int, b: int) -> "Interval":
        return Interval(np.swapaxes(self.lo, a, b), np.swapaxes(self.hi, a, b))

    def expand(self, axis: int) -> "Interval":
        return _raw(np.expand_dims(self.lo, axis), np.expand_dims(self.hi, axis))

    # -- arithmetic ---------------------------------------------------------------------------------------------
    def __neg__(self) -> "Interval":
        return _raw(-self.hi, -self.lo)

    def __add__(self, other) -> "Interval":
        o = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            return _raw(*add_kernel(self.lo, self.hi, o.lo, o.hi))

    __radd__ = __add__

    def __sub__(self, other) -> "Interval":
        o = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            return _raw(*sub_kernel(self.lo, self.hi, o.lo, o.hi))

    def __rsub__(self, other) -> "Interval":
        return as_interval(other) - self

    def __mul__(self, other) -> "Interval":
        """The four-corner rule: [min, max] of the corner products, rounded outward; the whole line where a corner
        is NaN (0 * inf). One compiled pass (``_kernels.mul_kernel``)."""
        o = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            return _raw(*mul_kernel(self.lo, self.hi, o.lo, o.hi))

    __rmul__ = __mul__

    def __truediv__(self, other) -> "Interval":
        return self * reciprocal(as_interval(other))

    def __rtruediv__(self, other) -> "Interval":
        return as_interval(other) * reciprocal(self)


def as_interval(x) -> Interval:
    """An Interval as is; a float or array as a degenerate (exact) interval."""
    if isinstance(x, Interval):
        return x
    return Interval.point(x)


def linear_combination(x: Interval, coef: np.ndarray) -> Interval:
    """sum_l coef[..., l] x[b, l] for intervals x (B, L) and exact float coefficients coef (..., L): shape
    (B, ...). Each end is one matrix product with the positive and the negative parts of coef, e.g.
    lo = x.lo @ coef+ + x.hi @ coef-; any float evaluation of such a sum of 2 L products is within
    gamma_(2L) (|x| @ |coef|) of it (gamma_n = n u / (1 - n u)), so the ends are widened by 8 L u (mag x @ |coef|)
    (computed; the factor 4 above gamma covers the rounding of the margin itself) plus 2 L 2^-1074 for products
    that underflow, then one ulp outward."""
    B, L = x.lo.shape
    flat = np.asarray(coef, dtype=np.float64).reshape(-1, L).T  # (L, K)
    positive, negative = np.maximum(flat, 0.0), np.minimum(flat, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        lo = x.lo @ positive + x.hi @ negative
        hi = x.hi @ positive + x.lo @ negative
        margin = (8.0 * L * U) * (x.mag @ np.abs(flat)) + 2 * L * TINY  # TINY: products that underflow
        lo, hi = round_down(lo - margin), round_up(hi + margin)
    shape = (B,) + coef.shape[:-1]
    return _raw(lo.reshape(shape), hi.reshape(shape))


def reciprocal(x: Interval) -> Interval:
    """1 / x for intervals not containing 0 (raises ValueError otherwise)."""
    if np.any((x.lo <= 0) & (x.hi >= 0)):
        raise ValueError("reciprocal of an interval containing 0")
    with np.errstate(divide="ignore"):
        return Interval(round_down(1.0 / x.hi), round_up(1.0 / x.lo))


def square(x: Interval) -> Interval:
    """x^2 without the dependency of x * x: [0, mag^2] when 0 is inside."""
    lo2 = x.lo * x.lo
    hi2 = x.hi * x.hi
    lo = np.where(x.lo >= 0, lo2, np.where(x.hi <= 0, hi2, 0.0))
    hi = np.maximum(lo2, hi2)
    return Interval(np.maximum(round_down(lo), 0.0), round_up(hi))


def sqrt(x: Interval) -> Interval:
    """sqrt(x) for x >= 0 (negative parts of lo are clipped to 0)."""
    if np.any(x.hi < 0):
        raise ValueError("sqrt of an interval below 0")
    return Interval(np.maximum(round_down(np.sqrt(np.maximum(x.lo, 0.0))), 0.0), round_up(np.sqrt(x.hi)))


def exp(x: Interval) -> Interval:
    """exp(x), widened by the relative margin EXP_REL_MARGIN and one ulp each side; lo is clipped at 0."""
    with np.errstate(over="ignore", under="ignore"):
        lo = round_down(np.exp(x.lo) * (1.0 - EXP_REL_MARGIN))
        hi = round_up(np.exp(x.hi) * (1.0 + EXP_REL_MARGIN))
    # Near underflow the relative margin says nothing (subnormal results lose relative accuracy): below 1e-300
    # the lower end becomes 0 and the upper end 1e-300, both far outside any libm error there.
    with np.errstate(over="ignore", under="ignore"):
        e_lo, e_hi = np.exp(x.lo), np.exp(x.hi)
    lo = np.where(e_lo < 1e-300, 0.0, lo)
    hi = np.where(e_hi < 1e-300, 1e-300, hi)
    return Interval(np.maximum(lo, 0.0), hi)


def _normalise_axes(ndim: int, axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(int(a) % ndim for a in np.atleast_1d(axis))
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in {axis}")
    return axes


def isum(x: Interval, axis=None) -> Interval:
    """Sum along ``axis`` (int, tuple or None): the ends summed with the stated margins 4 n u sum |lo| and
    4 n u sum |hi|, then one ulp outward; one compiled pass (``_kernels.sum_kernel``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _raw(*sum_last_axes(x.lo, x.hi, _normalise_axes(x.lo.ndim, axis)))


def stack(parts: "list[Interval]", axis: int = 0) -> Interval:
    """np.stack of intervals (exact)."""
    return Interval(np.stack([x.lo for x in parts], axis), np.stack([x.hi for x in parts], axis))


def hull(a: Interval, b: Interval) -> Interval:
    """Smallest interval containing both."""
    return Interval(np.minimum(a.lo, b.lo), np.maximum(a.hi, b.hi))


def intersect(a: Interval, b: Interval) -> Interval:
    """Intersection (raises ValueError if empty somewhere)."""
    return Interval(np.maximum(a.lo, b.lo), np.minimum(a.hi, b.hi))


def clip_nonnegative(x: Interval) -> Interval:
    """Intersect with [0, inf): valid when the exact quantity is known to be >= 0."""
    return Interval(np.maximum(x.lo, 0.0), np.maximum(x.hi, 0.0))


def inf_norm_upper(m: Interval) -> np.ndarray:
    """Exact max over the interval matrices of ||A||_inf (largest row sum of max(|lo|, |hi|)), rounded up.

    ``m`` has shape (..., n, n); returns shape (...).
    """
    a = m.mag
    with np.errstate(invalid="ignore", over="ignore"):
        return round_up(sum_kernel(a, a)[1].max(axis=-1))


def interval_einsum(subscripts: str, *operands: Interval) -> Interval:
    """einsum(subscripts, *operands) over interval operands (every member of each), rounded outward.

    Mid-radius form: with mid m_k, radius r_k and magnitude |m_k| + r_k of each operand, for any members x_k
    sum prod x_k - sum prod m_k is at most E_mag - E_abs in absolute value, where E_mag = einsum of the magnitudes
    and E_abs = einsum of |m_k| (termwise |prod x - prod m| <= prod (|m| + r) - prod |m|). The float einsums of
    nonnegative terms (K terms of p factors each) are within gamma_{K+p} relative of the exact ones, and so is the
    float einsum c of the mids: the exact result lies within
        rad = (E_mag - E_abs) + gamma (E_mag + 3 E_abs),
    of c, rounded up, plus an absolute (K (p + 1) + 2) 2^-1074 for underflow in the products. No subtraction
    cancels: E_mag >= E_abs termwise, and the difference is clipped at 0.
    """
    inputs, output = subscripts.split("->")
    letters = inputs.split(",")
    if len(letters) != len(operands):
        raise ValueError(f"{subscripts!r} names {len(letters)} operands, got {len(operands)}")
    sizes: dict[str, int] = {}
    for names, x in zip(letters, operands):
        sizes.update(zip(names, x.shape))
    K = int(np.prod([sizes[c] for c in sizes if c not in output])) if sizes else 1
    p = len(operands)
    g = (2 * (K + p) + 4) * U / (1 - (2 * (K + p) + 4) * U)
    mids = [x.mid for x in operands]
    mags = [round_up(np.abs(m) + x.rad) for m, x in zip(mids, operands)]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        c = np.einsum(subscripts, *mids, optimize=True)
        e_abs = np.einsum(subscripts, *[np.abs(m) for m in mids], optimize=True)
        e_mag = np.einsum(subscripts, *mags, optimize=True)
        rad = round_up(round_up(np.maximum(e_mag - e_abs, 0.0) + g * (e_mag + 3.0 * e_abs)) * (1 + 8 * U))
        rad = rad + (K * (p + 1) + 2) * 2.0**-1074
        lo, hi = round_down(c - rad), round_up(c + rad)
    bad = ~(np.isfinite(lo) & np.isfinite(hi))
    if np.any(bad):
        lo, hi = np.where(bad, -np.inf, lo), np.where(bad, np.inf, hi)
    return Interval(lo, hi)
