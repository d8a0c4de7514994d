"""Mean-value form with vertex enumeration: a certified bound on max ||M(theta)||_p over a box (MATH.md section 7).

For a box theta in [c - h, c + h] (B boxes, L parameters), the mean-value theorem applied entry by entry gives

    M(theta) in M(c) + sum_l t_l [dM/dtheta_l](box),        |t_l| <= h_l,

with [dM/dtheta_l](box) the interval enclosure of ``_global_l2_enclosure``. Write [M(c)] = Mmid +- Rm and
[dM/dtheta_l](box) = Jmid_l +- Jrad_l (midpoint and radius). Then, entrywise,

    M(theta) = Mmid + sum_l t_l Jmid_l + Err,   |Err| <= Ebound := Rm + sum_l h_l Jrad_l + (float margin).

The p-norm of the affine part is convex in t, so its maximum over the box of t is attained at one of the 2^L
vertices t = s * h, s in {-1, 1}^L, where it is evaluated exactly up to rounding. Hence

    max_box ||M||_p <= max_s ||Mmid + sum_l s_l h_l Jmid_l||_p + ||Ebound||_p .

Floating-point margins (stated):

- the vertex matrices are computed in float64; their entrywise error is at most gamma_{L+2} (|Mmid| + sum_l h_l
  |Jmid_l|), which is added to Ebound as 4 (L + 2) u (...) (u = 2^-53), rounded up;
- inf-norm: exact row sums with the summation margin of ``certify.interval.isum``, rounded up;
- 2-norm of a vertex matrix: the largest singular value from LAPACK (backward stable: exact for a matrix within
  p(n) u ||V||_2 of V, p(n) a modest polynomial), multiplied by 1 + SVD_REL_MARGIN = 1 + 1e-10 (> 4e5 u, far above
  p(n) u for the n <= 16 used here), then rounded up one ulp;
- 2-norm of Ebound (a nonnegative matrix dominating |Err|): ||Err||_2 <= || Ebound ||_2 <= sqrt(||Ebound||_1
  ||Ebound||_inf) (and <= ||Ebound||_F), rounded up.

On wide boxes the derivative enclosure can be poor; the bound returned is the smaller of the mean-value bound and
the plain interval bound max ||[M](box)||_p (exact row sums for inf; ||mid||_2 + ||rad||_2 for the 2-norm).
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import interval as iv
from ..interval import Interval
from ._global_l2_enclosure import Parametrisation, enclose_core_jacobian

SVD_REL_MARGIN = 1e-10
U = 2.0**-53


def _vertex_signs(L: int) -> np.ndarray:
    return np.array(list(itertools.product((-1.0, 1.0), repeat=L)))


def _row_sum_upper(a: np.ndarray) -> np.ndarray:
    """Rounded-up max row sum of a nonnegative (..., n, n) array."""
    return iv.inf_norm_upper(Interval.point(a))


def norm_upper_point(V: np.ndarray, norm: str) -> np.ndarray:
    """Rounded-up ||V||_p of float matrices V (..., n, n) (margins in the module docstring); inf where V is not
    finite."""
    finite = np.isfinite(V).all(axis=(-2, -1))
    if norm == "inf":
        return np.where(finite, _row_sum_upper(np.abs(np.where(finite[..., None, None], V, 0.0))), np.inf)
    s = np.linalg.svd(np.where(finite[..., None, None], V, 0.0), compute_uv=False)[..., 0]
    return np.where(finite, iv.round_up(s * (1.0 + SVD_REL_MARGIN)), np.inf)


def nonneg_norm_upper(E: np.ndarray, norm: str) -> np.ndarray:
    """Rounded-up bound on ||X||_p for every X with |X| <= E entrywise (E >= 0, shape (..., n, n))."""
    rows = _row_sum_upper(E)
    if norm == "inf":
        return rows
    cols = _row_sum_upper(np.swapaxes(E, -1, -2))
    geo = iv.round_up(np.sqrt(iv.round_up(rows * cols)))
    frob = iv.sqrt(iv.isum(iv.square(Interval.point(E)), axis=(-2, -1))).hi
    return np.minimum(geo, frob)


def interval_norm_upper(m: Interval, norm: str) -> np.ndarray:
    """Rounded-up max of ||A||_p over the interval matrices m (B, n, n): exact row sums for inf, and
    ||mid||_2 + ||rad||_2 for the 2-norm."""
    if norm == "inf":
        return iv.inf_norm_upper(m)
    return iv.round_up(norm_upper_point(m.mid, "2") + nonneg_norm_upper(m.rad, "2"))


def box_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str) -> tuple[np.ndarray, ...]:
    """For B boxes [lo, hi] (B, L): (upper bound of max ||M||_p over each box, ||M(c)||_p at the centre (float,
    an estimate used for lower bounds), split scores (B, L))."""
    B, L = lo.shape
    c = np.clip(0.5 * lo + 0.5 * hi, lo, hi)
    h = iv.round_up(np.maximum(hi - c, c - lo))
    box = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=c)
    centre = box.c
    Mmid, Rm = centre.mid, centre.rad
    Jmid, Jrad = box.g.mid, box.g.rad  # (B, n, n, L)
    hb = h[:, None, None, :]
    absJ = np.abs(Jmid)
    first = iv.isum(Interval.point(hb) * Interval.point(Jrad), axis=-1).hi
    scale = iv.isum(Interval.point(hb) * Interval.point(absJ), axis=-1).hi + np.abs(Mmid)
    Ebound = (Interval.point(Rm) + Interval.point(first) + Interval.point(scale) * (4.0 * (L + 2) * U)).hi
    signs = _vertex_signs(L)  # (2^L, L)
    V = Mmid[:, None] + np.einsum("vl,bl,bijl->bvij", signs, h, Jmid)
    affine = norm_upper_point(V, norm).max(axis=1)
    err = nonneg_norm_upper(Ebound, norm)
    upper = iv.round_up(affine + err)
    # where the box is too wide for the mean-value form, the plain enclosure of M may be better: both are valid
    upper = np.minimum(upper, interval_norm_upper(box.v, norm))
    upper = np.where(np.isfinite(upper), upper, np.inf)
    centre_norm = np.linalg.norm(np.where(np.isfinite(Mmid), Mmid, 0.0), ord=np.inf if norm == "inf" else 2,
                                 axis=(-2, -1))
    scores = h * np.max(np.sum(absJ + Jrad, axis=2), axis=1)  # h_l * row-sum norm of |dM/dtheta_l|
    return upper, centre_norm, scores
