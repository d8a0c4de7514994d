"""Mean-value form with vertex enumeration: a certified bound on max ||M(theta)||_p over a box (MATH.md section 7).

For a box theta in [c - h, c + h] (B boxes, L parameters), the mean-value theorem applied entry by entry gives

    M(theta) in M(c) + sum_l t_l [dM/dtheta_l](box),        |t_l| <= h_l,

with [dM/dtheta_l](box) the interval enclosure of ``_enclosure``. Write [M(c)] = Mmid +- Rm and
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

from ... import interval as iv
from ...interval import Interval
from ._enclosure import Dual, Parametrisation, enclose_core_jacobian

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
    """Rounded-up bound on ||X||_p for every X with |X| <= E entrywise (E >= 0, shape (..., n, n)).

    inf-norm: the row sums of E. 2-norm: ||X||_2 <= || |X| ||_2 <= ||E||_2 (for nonnegative matrices the spectral
    norm is monotone entrywise: ||A||_2 = max u^T A v over nonnegative unit u, v), bounded by the largest singular
    value of E with the margin of ``norm_upper_point``, and also by sqrt(||E||_1 ||E||_inf) and ||E||_F (the
    smallest of the three)."""
    rows = _row_sum_upper(E)
    if norm == "inf":
        return rows
    cols = _row_sum_upper(np.swapaxes(E, -1, -2))
    geo = iv.round_up(np.sqrt(iv.round_up(rows * cols)))
    frob = iv.sqrt(iv.isum(iv.square(Interval.point(E)), axis=(-2, -1))).hi
    return np.minimum(np.minimum(geo, frob), norm_upper_point(E, "2"))


def interval_norm_upper(m: Interval, norm: str) -> np.ndarray:
    """Rounded-up max of ||A||_p over the interval matrices m (B, n, n): exact row sums for inf, and
    ||mid||_2 + ||rad||_2 for the 2-norm."""
    if norm == "inf":
        return iv.inf_norm_upper(m)
    return iv.round_up(norm_upper_point(m.mid, "2") + nonneg_norm_upper(m.rad, "2"))


def _vertex_bound(Mmid: np.ndarray, Jmid: np.ndarray, h: np.ndarray, Ebound: np.ndarray, norm: str) -> np.ndarray:
    """max over the vertices s of ||Mmid + sum_l s_l h_l Jmid_l||_p + ||Ebound||_p, rounded up; Ebound >= 0 must
    already dominate every error, the float error of the vertex matrices included (``_vertex_float_margin``)."""
    signs = _vertex_signs(h.shape[1])  # (2^L, L)
    V = Mmid[:, None] + np.einsum("vl,bl,bijl->bvij", signs, h, Jmid)
    affine = norm_upper_point(V, norm).max(axis=1)
    return iv.round_up(affine + nonneg_norm_upper(Ebound, norm))


def _vertex_float_margin(Mmid: np.ndarray, Jmid: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Entrywise bound on the float error of the vertex matrices: 4 (L + 2) u (|Mmid| + sum_l h_l |Jmid_l|)."""
    L = h.shape[1]
    scale = iv.isum(Interval.point(h[:, None, None, :]) * Interval.point(np.abs(Jmid)), axis=-1).hi + np.abs(Mmid)
    return (Interval.point(scale) * (4.0 * (L + 2) * U)).hi


def _box_and_half_widths(lo: np.ndarray, hi: np.ndarray, par: Parametrisation,
                         second_order: bool) -> tuple[Dual, np.ndarray]:
    """The enclosure of M (and derivatives) over the boxes, with its centre c, and half-widths h >= |theta - c|."""
    c = np.clip(0.5 * lo + 0.5 * hi, lo, hi)
    h = iv.round_up(np.maximum(hi - c, c - lo))
    return enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=c, with_hessian=second_order), h


def _taylor(box: Dual, h: np.ndarray, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """The second-order bound of ``taylor_bounds`` from a second-order enclosure ``box``."""
    at_centre = box.c  # M and dM/dtheta enclosed at the point c
    Mmid, Jmid = at_centre.v.mid, at_centre.g.mid
    magnitude = box.h.mag  # (B, n, n, L, L)
    hh = Interval.point(h[:, None, None, :, None] * 0.5) * Interval.point(h[:, None, None, None, :])
    remainder = iv.isum(iv.isum(hh * Interval.point(magnitude), axis=-1), axis=-1).hi  # (B, n, n)
    hb = Interval.point(h[:, None, None, :])
    centre_error = (Interval.point(at_centre.v.rad) + iv.isum(hb * Interval.point(at_centre.g.rad), axis=-1)).hi
    Ebound = (Interval.point(remainder) + Interval.point(centre_error)
              + Interval.point(_vertex_float_margin(Mmid, Jmid, h))).hi
    upper = _vertex_bound(Mmid, Jmid, h, Ebound, norm)
    upper = np.where(np.isfinite(upper), upper, np.inf)
    # split along the parameter whose share h_l sum_m h_m |H_lm| of the remainder is largest (row-sum norm)
    share = np.einsum("bl,bijlm,bm->bijl", h, np.where(np.isfinite(magnitude), magnitude, 1e300), h)
    return upper, np.max(np.sum(share, axis=2), axis=1)


def taylor_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """Second-order Taylor form: for theta = c + t in the box (|t_l| <= h_l), entry by entry,

        M(c + t) = M(c) + sum_l t_l dM/dtheta_l(c) + 1/2 sum_{l,m} t_l t_m d^2M/dtheta_l dtheta_m(xi),

    xi on the segment [c, c + t] (Taylor's theorem with the Lagrange remainder). M(c) and dM/dtheta(c) are
    enclosed at the point c (radii Rc, Rg: rounding only; ``Dual.c``), the Hessian over the whole box, so

        |M(c + t) - Mmid(c) - sum_l t_l Jmid_l(c)| <= Rc + sum_l h_l Rg_l + 1/2 sum_{l,m} h_l h_m |H_lm|(box),

    and the affine part is maximised at a vertex, as in the mean-value form. Unlike the mean-value form, whose
    error h_l * width([dM/dtheta_l](box)) carries the dependency of the interval gradient, the remainder here
    tends to the true second derivatives as the box shrinks. Returns (upper bounds (B,), split scores (B, L)).
    """
    box, h = _box_and_half_widths(lo, hi, par, True)
    return _taylor(box, h, norm)


def third_order_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str,
                       chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Third-order Taylor form: for theta = c + t in the box (|t_l| <= h_l), entry by entry,

        M(c + t) = M(c) + sum_l t_l J_l(c) + 1/2 sum_{l,m} t_l t_m H_lm(c) + 1/6 sum_{l,m,n} t_l t_m t_n T_lmn(xi),

    xi on the segment [c, c + t] (Taylor's theorem with the Lagrange remainder). M, J = dM/dtheta and H = d^2 M are
    enclosed at the point c (a second-order evaluation on the box [c, c]: their radii Rc, Rg, come from rounding
    only), T = d^3 M over the whole box (``enclose_core_jacobian(..., with_third=True)``), so

        |M(c + t) - Mmid - sum_l t_l Jmid_l| <= Rc + sum_l h_l Rg_l + 1/2 sum_{l,m} h_l h_m |H_lm(c)|
                                                + 1/6 sum_{l,m,n} h_l h_m h_n |T_lmn|(box),

    and the affine part is maximised at a vertex, as in the other forms. The quadratic term uses the Hessian at a
    point, where its enclosure is tight; only the cubic term carries the interval overestimate, at a factor h / 3
    smaller than in ``taylor_bounds``. Returns (upper bounds (B,), split scores (B, L)); boxes are processed
    ``chunk`` at a time (the third derivatives of the N^3 intermediate terms are large).
    """
    uppers, scores = [], []
    for start in range(0, lo.shape[0], chunk):
        lo_c, hi_c = lo[start:start + chunk], hi[start:start + chunk]
        c = np.clip(0.5 * lo_c + 0.5 * hi_c, lo_c, hi_c)
        h = iv.round_up(np.maximum(hi_c - c, c - lo_c))
        point = enclose_core_jacobian(Interval(c, c), par, with_grad=True, with_hessian=True)
        box = enclose_core_jacobian(Interval(lo_c, hi_c), par, with_grad=True, centre=c, with_hessian=True,
                                    with_third=True)
        Mmid, Jmid = point.v.mid, point.g.mid
        hl = Interval.point(h[:, None, None, :])
        hh = Interval.point(h[:, None, None, :, None]) * Interval.point(h[:, None, None, None, :])
        hhh = hh.expand(-1) * Interval.point(h[:, None, None, None, None, :])
        quadratic = iv.isum(hh * Interval.point(point.h.mag), axis=(-2, -1)) * 0.5
        cubic = iv.isum(hhh * Interval.point(box.k.mag), axis=(-3, -2, -1)) / 6.0
        centre_error = Interval.point(point.v.rad) + iv.isum(hl * Interval.point(point.g.rad), axis=-1)
        Ebound = (centre_error + quadratic + cubic + Interval.point(_vertex_float_margin(Mmid, Jmid, h))).hi
        upper = _vertex_bound(Mmid, Jmid, h, Ebound, norm)
        uppers.append(np.where(np.isfinite(upper), upper, np.inf))
        # split along the parameter with the largest share of the quadratic and cubic terms (row-sum norm)
        quad_share = np.einsum("bl,bijlm,bm->bijl", h, point.h.mag, h) * 0.5
        cubic_share = np.einsum("bl,bijlmn,bm,bn->bijl", h, np.where(np.isfinite(box.k.mag), box.k.mag, 1e300),
                                h, h) / 6.0
        scores.append(np.max(np.sum(quad_share + cubic_share, axis=2), axis=1))
    return np.concatenate(uppers), np.concatenate(scores)


TAYLOR_MAX_HALF_WIDTH = 0.2
"""Boxes whose half-widths are all at most this also get the second-order bound (``taylor_bounds``); on wider boxes
the interval Hessian is too loose to help and costs more than the mean-value form."""


def _first_and_second_order(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str,
                            second_order: bool) -> tuple[np.ndarray, ...]:
    box, h = _box_and_half_widths(lo, hi, par, second_order)
    Mmid, Rm = box.c.v.mid, box.c.v.rad
    Jmid, Jrad = box.g.mid, box.g.rad  # (B, n, n, L)
    first = iv.isum(Interval.point(h[:, None, None, :]) * Interval.point(Jrad), axis=-1).hi
    Ebound = (Interval.point(Rm) + Interval.point(first) + Interval.point(_vertex_float_margin(Mmid, Jmid, h))).hi
    upper = _vertex_bound(Mmid, Jmid, h, Ebound, norm)
    # where the box is too wide for the mean-value form, the plain enclosure of M may be better: both are valid
    upper = np.minimum(upper, interval_norm_upper(box.v, norm))
    upper = np.where(np.isfinite(upper), upper, np.inf)
    centre_norm = np.linalg.norm(np.where(np.isfinite(Mmid), Mmid, 0.0), ord=np.inf if norm == "inf" else 2,
                                 axis=(-2, -1))
    scores = h * np.max(np.sum(np.abs(Jmid) + Jrad, axis=2), axis=1)  # h_l * row-sum norm of |dM/dtheta_l|
    if second_order:
        t_upper, t_scores = _taylor(box, h, norm)
        better = t_upper < upper
        upper = np.where(better, t_upper, upper)
        scores = np.where(better[:, None], t_scores, scores)
    return upper, centre_norm, scores


TAYLOR_GATE = 1.25
"""With a closing threshold, the second-order bound is computed only for boxes whose first-order bound is above the
threshold but at most TAYLOR_GATE times it: measured at N = 6, it closes almost no box beyond 1.2 times, and it
costs about three first-order evaluations."""
THIRD_ORDER_GATE = 1.4
"""The same for the third-order bound (``third_order=True``). Measured on 512 boxes of half-width 0.1 captured from
the N = 6 2-norm search: it closes 84% of those with a first-order bound in (1, 1.25] times the threshold, 34% in
(1.25, 1.4] and none above, against 36%, 0% and 0% for the second-order bound. It costs 3-4 times as much
(about 10 ms against 2.7-4.3 ms per box), so the branch and bound uses it only on request."""


def box_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str,
               second_order: bool = True, threshold: float | None = None,
               third_order: bool = False) -> tuple[np.ndarray, ...]:
    """For B boxes [lo, hi] (B, L): (upper bound of max ||M||_p over each box, ||M(c)||_p at the centre (float,
    an estimate used for lower bounds), split scores (B, L)).

    The bound is the smallest of the mean-value / vertex bound, the plain interval bound and, on boxes with
    half-widths <= TAYLOR_MAX_HALF_WIDTH (when ``second_order``), the Taylor bound of ``taylor_bounds``; those
    boxes are enclosed once to second order, which also tightens the gradients the mean-value form uses. With a
    ``threshold`` (the branch and bound's closing value), the second-order enclosure is computed only for the small
    boxes whose first-order bound is in (threshold, TAYLOR_GATE * threshold]: the others close without it or are
    split anyway. With ``third_order`` (and a threshold), those boxes get the third-order bound of
    ``third_order_bounds`` instead, for first-order bounds up to THIRD_ORDER_GATE * threshold.
    """
    h = np.maximum(hi - lo, 0.0) * 0.5
    small = (h.max(axis=1) <= TAYLOR_MAX_HALF_WIDTH) & second_order
    if threshold is not None:
        upper, centre_norm, scores = _first_and_second_order(lo, hi, par, norm, False)
        gate = THIRD_ORDER_GATE if third_order else TAYLOR_GATE
        retry = np.flatnonzero(small & (upper > threshold) & (upper <= gate * threshold))
        if retry.size:
            if third_order:
                taylor, taylor_scores = third_order_bounds(lo[retry], hi[retry], par, norm)
            else:
                taylor, _, taylor_scores = _first_and_second_order(lo[retry], hi[retry], par, norm, True)
            better = taylor < upper[retry]
            upper[retry] = np.where(better, taylor, upper[retry])
            scores[retry] = np.where(better[:, None], taylor_scores, scores[retry])
        return upper, centre_norm, scores
    upper, centre_norm, scores = np.empty(lo.shape[0]), np.empty(lo.shape[0]), np.empty(lo.shape)
    for rows, second in ((np.flatnonzero(~small), False), (np.flatnonzero(small), True)):
        if rows.size:
            upper[rows], centre_norm[rows], scores[rows] = _first_and_second_order(lo[rows], hi[rows], par, norm,
                                                                                   second)
    return upper, centre_norm, scores
