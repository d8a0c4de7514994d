"""Coordinate slopes of the DP Jacobian over a box, from its building blocks (MATH.md section 7; issue 15).

For a box B of inputs X (N x D), a point X0 in B and half-widths h_m >= |X_m - X0_m| (m = (t, r): token t,
feature r), the mean-value theorem along the segment [X0, X] (inside B, a box is convex) gives, entry by entry,

    |J(X) - J(X0)| <= S := sum_m h_m sup_{xi in B} |dJ/dX_m(xi)|        (proofs/taylor_remainder.py).

S is the exact first-order slope as B shrinks to X0, so the Taylor form J(X0) + [-S, S] is asymptotically exact.
Forming dJ/dX_m for every m costs (N D)^3; here S is bounded from the derivatives of the few small quantities J is
built from (one head; sigma = 1/sqrt(d), k~_il = W_Q (k_l - kbar_i), v~_il = W_O^T (v_l - vbar_i), b_i = W_K q_i):

    J_il[F, E] = P_il (W_V W_O)[E, F] + sigma P_il v~_il[F] b_i[E] + delta_il sigma A_i[E, F],
    A_i = sum_l P_il k~_il v~_il^T                                   (`certify/jacobian/_dot_product.py`),

whose coordinate derivatives have closed forms (proved in proofs/slopes_derivatives.py, checked
against autodiff in tests/test_local_slopes.py), with M = W_K W_Q^T and WVO = W_V W_O:

    d_{t,r} P_il     = sigma P_il [delta_it k~_il[r] + (delta_lt - P_it) b_i[r]],
    d_{t,r} b_i[E]   = delta_it M[E, r],
    d_{t,r} v~_il[F] = (delta_lt - P_it) WVO[r, F] - sigma [delta_it A_i[r, F] + b_i[r] P_it v~_it[F]],
    d_{t,s} A_i[r,F] = delta_it sigma T_i[s, r, F] + P_it {sigma b_i[s] (k~_it[r] v~_it[F] - A_i[r, F])
                                                         + M[s, r] v~_it[F] + k~_it[r] WVO[s, F]},
    T_i[s, r, F]     = sum_l P_il k~_il[s] k~_il[r] v~_il[F].

By the product rule, sum_m h_m |dJ_il[F, E]/dX_m| is at most (sums over heads)

    S_P[i, l] |WVO[E, F] + sigma v~_il[F] b_i[E]| + sigma |P_il| S_v[i, l, F] |b_i[E]|
        + sigma |P_il v~_il[F]| S_b[i, E] + delta_il sigma S_A[i, E, F],

with S_Z = sum_m h_m |d_m Z| for each block Z. Every quantity is an interval enclosure over B (certify.interval,
outward rounded), every |.| its magnitude, and every product and sum of the nonnegative bounds is rounded up.
Work per head: N^2 D^2 for most blocks, N^3 D^2 for the product rule on P_il v~_il, plus N^2 D^3 for S_A when
`exact_diagonal` (else a separable bound, N^2 D^2).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import numpy as np

from ..._errors import BudgetExceeded
from ...interval import Interval, exp, intersect, interval_einsum, isum, reciprocal, round_down, round_up
from ...sdp._floating import sum_up
from ._diagonal_kernel import diagonal_slope
from ._enclosure import _Weights, clip01, const, point_einsum, token_differences
from ._simplex import simplex_centred_images, simplex_weighted_products
from ._upper import _add, _einsum_up, _mul

PRODUCT_RULE_MAX = 100_000_000
"""With product_rule=None, the product rule on P_il v~_il (N^3 D^2 work per head) when N^3 D^2 is at most this."""
SIMPLEX_CUT_MAX = 3_000_000
"""A = sum_l P_il k~_il v~_il^T is cut by the simplex bound (N^2 D^2 work per head, sorting) when N^2 D^2 is at most
this (k~ and v~ always: N^2 D); at (N, D) = (64, 64) the cut of all three took 70 s of a pass with a 10 s budget."""
EXACT_DIAGONAL_MAX = 3_000_000
"""With exact_diagonal=None, the N D^3 (per token) form of S_A when N D^3 is at most this (else separable)."""


def _weighted(h: np.ndarray, mag: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """sum over `axes` of h * mag (nonnegative, broadcast), rounded up."""
    terms = _mul(h, mag)
    if not np.all(np.isfinite(terms)):
        return np.sum(terms, axis=axes)  # an unbounded enclosure stays unbounded
    for axis in sorted(axes, reverse=True):
        terms = sum_up(terms, axis=axis)
    return terms


def centred(P: Interval, differences: Interval) -> Interval:
    """[i, l] = z_l - zbar_i = sum_k P_ik (z_l - z_k), from differences[l, k] = z_l - z_k (N, N, c)."""
    return isum(P.expand(1).expand(-1) * differences.expand(0), 2)


def head_blocks(box: Interval, centre: np.ndarray, h: np.ndarray, w: _Weights, head: int,
                known_L: Interval | None = None):
    """One head's building blocks over the box: (P, k~, v~, b, M, WVO, A) (module docstring), as intervals; with
    ``known_L`` (an enclosure of the scores L over a subset of the box) also intersected with it, and the blocks then
    hold on that subset.

    Linear images of X use the composed weights (M = W_K W_Q^T, WVO = W_V W_O, enclosed once), so each is the
    hull of a linear image of the box up to rounding. The scores L_ijk = s_ik - s_ij = sigma b_i . (x_k - x_j)
    are the intersection of that direct form with the mean-value form about the centre,
        |L_ijk(X) - L_ijk(X0)| <= sigma [sum_r h_ir |g_jk[r] + (delta_ik - delta_ij) b_i[r]|
                                        + (1 - delta_ik) sum_r h_kr |b_i[r]| + (1 - delta_ij) sum_r h_jr |b_i[r]|],
    g_jk = W_Q (k_k - k_j) (d L_ijk / d x_t[r] = sigma [delta_it g_jk[r] + (delta_tk - delta_tj) b_i[r]]); then
    P_ij = 1 / sum_k exp(L_ijk) with L_ijj = 0 exactly.
    """
    N, D = box.shape
    WQ, WK, WV, WO = w.W_Q[head], w.W_K[head], w.W_V[head], w.W_O[head]
    sigma = const(1.0 / math.sqrt(w.d))
    M = point_einsum("Ec,rc->Er", Interval.point(WK), WQ)  # M[E, r] = d b_i[E] / d x_i[r]
    WVO = point_einsum("ra,aF->rF", Interval.point(WV), WO)
    bias = None if w.b_Q is None else point_einsum("c,Ec->E", Interval.point(w.b_Q[head]), WK)

    def b_of(X: Interval) -> Interval:
        value = interval_einsum("iD,ED->iE", X, M)
        return value if bias is None else value + bias

    def scores(X: Interval, b: Interval) -> Interval:  # [i, j, k] = sigma b_i . (x_k - x_j)
        return -(interval_einsum("iD,jkD->ijk", b, token_differences(X)) * sigma)

    dX = token_differences(box)  # [j, k] = x_j - x_k
    b = b_of(box)
    g = -interval_einsum("jkD,Dr->jkr", dX, M)  # [j, k] = W_Q (k_k - k_j)
    point = Interval(centre, centre)
    L0 = scores(point, b_of(point))
    eye = np.eye(N)
    coefficient = Interval.point(eye[:, None, :] - eye[:, :, None])  # [i, j, k] = delta_ik - delta_ij
    own = _weighted(h[:, None, None, :], (g.expand(0) + coefficient.expand(-1) * b.expand(1).expand(1)).mag, (3,))
    hb = _weighted(h[None, :, :], b.mag[:, None, :], (2,))  # [i, t] = sum_r h_tr |b_i[r]|
    spread = _add(own, _mul(1.0 - eye[:, None, :], hb[:, None, :]), _mul(1.0 - eye[:, :, None], hb[:, :, None]))
    spread = _mul(np.full(1, sigma.hi.item()), spread)
    L = intersect(scores(box, b), Interval(round_down(L0.lo - spread), round_up(L0.hi + spread)))
    if known_L is not None:
        L = intersect(L, known_L)
    off_diagonal = ~np.eye(N, dtype=bool)[None]
    L = Interval(np.where(off_diagonal, L.lo, 0.0), np.where(off_diagonal, L.hi, 0.0))
    P = clip01(reciprocal(isum(exp(L), -1)))
    # weighted sums over a softmax row: term by term, cut by (1) of `_simplex` (sum_k P_ik = 1 kept)
    # (the differences are those of per-token images y_l = x_l M, x_l W_V W_O of independent tokens)
    k_tilde = intersect(centred(P, g.swapaxes(0, 1)), simplex_centred_images(P, interval_einsum("lD,Dr->lr", box, M)))
    v_tilde = intersect(centred(P, interval_einsum("lkD,DF->lkF", dX, WVO)),
                        simplex_centred_images(P, interval_einsum("lD,DF->lF", box, WVO)))
    A = interval_einsum("il,ilr,ilF->irF", P, k_tilde, v_tilde)
    if N**2 * D**2 <= SIMPLEX_CUT_MAX:
        A = intersect(A, simplex_weighted_products(P, k_tilde, v_tilde))
    return P, k_tilde, v_tilde, b, M, WVO, A


@dataclasses.dataclass(frozen=True)
class Blocks:
    """One head's building blocks over a box (intervals) and their slopes S_Z = sum_m h_m sup |d_m Z| (floats)."""

    P: Interval  # (N, N)
    k_tilde: Interval  # (N, N, D): [i, l] = W_Q (k_l - kbar_i)
    v_tilde: Interval  # (N, N, D): [i, l] = W_O^T (v_l - vbar_i)
    b: Interval  # (N, D): W_K q_i
    A: Interval  # (N, D, D): [i, r, F]
    S_P: np.ndarray  # (N, N)
    S_v: np.ndarray  # (N, N, D)
    S_A: np.ndarray  # (N, D, D)
    hb: np.ndarray  # (N, N): [i, t] = sum_r h_tr |b_i[r]|


def _slopes(P: Interval, k_tilde: Interval, v_tilde: Interval, b: Interval, A: Interval, M: Interval,
            WVO: Interval, sigma: Interval, h: np.ndarray, exact_diagonal: bool) -> Blocks:
    """The slopes of P, v~ and A over the box from the blocks' enclosures (module docstring)."""
    N, D = h.shape
    s = sigma.hi.item()  # an upper bound on 1/sqrt(d), for the nonnegative products
    eye = Interval.point(np.eye(N))
    P_diagonal = Interval(np.diagonal(P.lo).copy(), np.diagonal(P.hi).copy())
    # S_P[i, l] = sigma |P_il| (sum_r h_ir |k~_il[r] + (delta_il - P_ii) b_i[r]|
    #                          + sum_{t != i} |delta_lt - P_it| sum_r h_tr |b_i[r]|)
    own = k_tilde + (eye - P_diagonal.expand(-1)).expand(-1) * b.expand(-2)
    first = _weighted(h[:, None, :], own.mag, (2,))
    hb = _weighted(h[None, :, :], b.mag[:, None, :], (2,))  # [i, t]
    coupling = (eye.expand(0) - P.expand(1)).mag * (1.0 - np.eye(N))[:, None, :]  # [i, l, t], zero at t = i
    second = _weighted(coupling, hb[:, None, :], (2,))
    S_P = _mul(np.full((N, N), s), P.mag, _add(first, second))
    # S_v[i, l, F] = sum_t sum_r h_tr |U_it[r, F] + delta_lt WVO[r, F]|,
    # U_it = -P_it WVO - sigma (delta_it A_i + b_i[r] P_it v~_it[F]) = -P_it G_it - delta_it sigma A_i with
    # G_it[r, F] = WVO[r, F] + sigma b_i[r] v~_it[F]: P_it enclosed once as a factor (tighter, and fewer products)
    G = WVO.expand(0).expand(0) + b.expand(1).expand(-1) * v_tilde.expand(2) * sigma  # [i, t, r, F]
    U = -(P.expand(-1).expand(-1) * G)
    index = np.arange(N)
    own = U[index, index] - A * sigma  # t = i
    U.lo[index, index], U.hi[index, index] = own.lo, own.hi
    total = _weighted(h[None, :, :, None], U.mag, (1, 2))  # [i, F]
    # the t = l term is |U_il + WVO| instead of |U_il|: add the (nonnegative part of the) difference
    plus = _mul(h[None, :, :, None], (U + WVO.expand(0).expand(0)).mag)
    minus = round_down(h[None, :, :, None] * U.mag)
    correction = _weighted(np.ones(1), np.maximum(round_up(plus - minus), 0.0), (2,))  # [i, l, F]
    S_v = _add(total[:, None, :], correction)
    S_A = _diagonal_slope(P, k_tilde, v_tilde, b, A, M, WVO, sigma, h, hb, exact_diagonal)
    return Blocks(P, k_tilde, v_tilde, b, A, S_P, S_v, S_A, hb)


def _tighten(x: Interval, at_centre: Interval, slope: np.ndarray) -> Interval:
    """x intersected with the mean-value form at_centre +- slope (both contain the block over the box)."""
    return intersect(x, Interval(round_down(at_centre.lo - slope), round_up(at_centre.hi + slope)))


def dp_slopes(box: Interval, centre: np.ndarray, w: _Weights, exact_diagonal: bool | None = None,
              passes: int = 2, product_rule: bool | None = None, deadline: float | None = None,
              weights: np.ndarray | None = None, known_L: list[Interval] | None = None) -> np.ndarray:
    """S (N, D, N, D), nonnegative, with sum_m h_m |dJ[i, F, l, E]/dX_m(xi)| <= S[i, F, l, E] for every xi in the
    box (N, D) of a DP layer, h_m = max(hi_m - centre_m, centre_m - lo_m) (module docstring), or with h = ``weights``
    (N, D), nonnegative, where given: the box's half-widths still shape the enclosures of the building blocks (and
    their refinement passes), and the weights enter only as the coefficients of the sums over m, in which every
    slope below is linear (so S bounds sum_m weights_m |dJ/dX_m(xi)|, e.g. |dJ(xi)[v]| for any |v| <= weights).

    passes: after each pass but the last, the enclosures of P, v~ and A over the box are intersected with their
    mean-value forms Z(X0) +- S_Z (Z(X0) enclosed at the point), and the slopes are computed again from them.
    deadline: a `time.perf_counter()` time; after each head, `BudgetExceeded` when the heads left, at the mean
    time per head so far, would end past it (the safety net under `_taylor.predicted_seconds`).
    known_L: per head, an enclosure of the score differences over a subset of the box that is star-shaped about
    the centre (`certify.model._score_set`); S then bounds the sums at the points of that subset only."""
    N, D = box.shape
    centre = np.asarray(centre, dtype=np.float64)
    if centre.shape != (N, D) or np.any(centre < box.lo) or np.any(centre > box.hi):
        raise ValueError(f"the centre must be an ({N}, {D}) point of the box")
    h = half_widths(box, centre)
    if weights is not None and (weights.shape != (N, D) or np.any(weights < 0) or not np.all(np.isfinite(weights))):
        raise ValueError(f"weights must be finite, nonnegative, of shape {(N, D)}")
    if exact_diagonal is None:
        exact_diagonal = N * D**3 <= EXACT_DIAGONAL_MAX
    if product_rule is None:
        product_rule = N**3 * D**2 <= PRODUCT_RULE_MAX
    sigma = const(1.0 / math.sqrt(w.d))
    s = sigma.hi.item()
    point = Interval(centre, centre)
    S = np.zeros((N, D, N, D))
    began = time.perf_counter()
    for head in range(w.H):
        if deadline is not None and head > 0:
            spent = time.perf_counter() - began
            if began + spent * w.H / head > deadline:
                raise BudgetExceeded(
                    f"taylor: {head} of {w.H} heads of the slopes took {spent:.1f} s, so the pass needs about "
                    f"{spent * w.H / head:.0f} s, past its time budget (raise time_budget)")
        P, k_tilde, v_tilde, b, M, WVO, A = head_blocks(box, centre, h, w, head,
                                                        None if known_L is None else known_L[head])
        blocks = _slopes(P, k_tilde, v_tilde, b, A, M, WVO, sigma, h, exact_diagonal)
        if passes > 1:
            P0, _, v0, _, _, _, A0 = head_blocks(point, centre, np.zeros_like(h), w, head)
        for _ in range(passes - 1):
            blocks = _slopes(_tighten(blocks.P, P0, blocks.S_P), k_tilde, _tighten(blocks.v_tilde, v0, blocks.S_v),
                             b, _tighten(blocks.A, A0, blocks.S_A), M, WVO, sigma, h, exact_diagonal)
        if weights is not None:  # the same (tightened) enclosures, the sums over m weighted by ``weights``
            blocks = _slopes(blocks.P, k_tilde, blocks.v_tilde, b, blocks.A, M, WVO, sigma, weights, exact_diagonal)
        P, v_tilde, A, S_P, S_v, S_A = blocks.P, blocks.v_tilde, blocks.A, blocks.S_P, blocks.S_v, blocks.S_A
        P_mag, b_mag = P.mag, b.mag
        coefficients = h if weights is None else weights
        S_b = _weighted(coefficients[:, None, :], M.mag[None], (2,))  # S_b[i, E] = sum_r h_ir |M[E, r]|
        # assemble [i, F, l, E]
        first_term = _mul(S_P[:, None, :, None], (WVO.swapaxes(0, 1).expand(0).expand(2)
                                                  + (v_tilde.swapaxes(1, 2).expand(-1) * b.expand(1).expand(1))
                                                  * sigma).mag)
        second_term = _mul(np.full(1, s), P_mag[:, None, :, None], S_v.swapaxes(1, 2)[..., None], b_mag[:, None, None, :])
        third_term = _mul(np.full(1, s), (P.expand(-1) * v_tilde).mag.swapaxes(1, 2)[..., None], S_b[:, None, None, :])
        head_slope = _add(first_term, second_term, third_term)
        # the product rule on P_il v~_il as one factor (N^3 D^2 work): often tighter; both bound the slope
        if product_rule:
            S_Pv = _product_slope(P, k_tilde, v_tilde, b, A, WVO, sigma, coefficients)
            split = _add(_mul(S_P[:, None, :, None], WVO.mag.T[None, :, None, :]),
                         _mul(np.full(1, s), S_Pv.swapaxes(1, 2)[..., None], b_mag[:, None, None, :]), third_term)
            head_slope = np.minimum(head_slope, split)
        index = np.arange(N)
        head_slope[index, :, index, :] = _add(head_slope[index, :, index, :], _mul(np.full(1, s), S_A.swapaxes(1, 2)))
        S = _add(S, head_slope)
    return S


def _product_slope(P: Interval, k_tilde: Interval, v_tilde: Interval, b: Interval, A: Interval, WVO: Interval,
                   sigma: Interval, h: np.ndarray) -> np.ndarray:
    """S_Pv[i, l, F] >= sum_{t, r} h_tr |d_{t,r} (P_il v~_il[F])| over the box, (N, N, D), from
        d_{t,r} (P_il v~_il[F]) = P_il {delta_it sigma (k~_il[r] v~_il[F] - A_i[r, F])
                                        + (delta_lt - P_it) (sigma b_i[r] v~_il[F] + WVO[r, F]) - sigma b_i[r] P_it v~_it[F]}
    (the derivatives of P and v~ in the module docstring), per (i, l, t, r, F): N^3 D^2 work."""
    N, D = h.shape
    eye = Interval.point(np.eye(N))
    out = np.empty((N, N, D))
    for i in range(N):
        own = (k_tilde[i].expand(-1) * v_tilde[i].expand(1) - A[i].expand(0)) * sigma  # [l, r, F], t = i
        common = b[i].expand(0).expand(-1) * v_tilde[i].expand(1) * sigma + WVO.expand(0)  # [l, r, F]
        coupling = eye - P[i].expand(0)  # [l, t] = delta_lt - P_it
        other = (b[i].expand(0).expand(-1) * (P[i].expand(-1) * v_tilde[i]).expand(1)) * sigma  # [t, r, F]
        inner = coupling.expand(-1).expand(-1) * common.expand(1) - other.expand(0)  # [l, t, r, F]
        inner_i = inner[:, i] + own
        mags = inner.mag
        mags[:, i] = inner_i.mag
        out[i] = _mul(P[i].mag[:, None], _weighted(h[None, :, :, None], mags, (1, 2)))
    return out


def _diagonal_slope(P: Interval, k_tilde: Interval, v_tilde: Interval, b: Interval, A: Interval, M: Interval,
                    WVO: Interval, sigma: Interval, h: np.ndarray, hb: np.ndarray, exact: bool) -> np.ndarray:
    """S_A[i, r, F] >= sum_{t, s} h_ts |d_{t,s} A_i[r, F]| over the box (module docstring), (N, D, D).

    exact: the sum of magnitudes of the whole derivative, per (i, t, s, r, F) (N^2 D^3 work); else the triangle
    inequality over its four terms, each separable in (t, s) (N^2 D^2 work, plus N^2 D^2 for the T term)."""
    N, D = h.shape
    s = sigma.hi.item()
    if not exact:
        kv = k_tilde.expand(-1) * v_tilde.expand(-2)  # [i, t, r, F] = k~_it[r] v~_it[F]
        h_k = _einsum_up("is,ils->il", h, k_tilde.mag)  # sum_s h_is |k~_il[s]|
        T_part = _einsum_up("il,il,ilr,ilF->irF", P.mag, h_k, k_tilde.mag, v_tilde.mag)
        h_M = _einsum_up("ts,sr->tr", h, M.mag)  # sum_s h_ts |M[s, r]|
        h_W = _einsum_up("ts,sF->tF", h, WVO.mag)
        scaled = _einsum_up("it,it,itrF->irF", P.mag, hb, (kv - A.expand(1)).mag)
        rest = _add(_einsum_up("it,tr,itF->irF", P.mag, h_M, v_tilde.mag),
                    _einsum_up("it,itr,tF->irF", P.mag, k_tilde.mag, h_W))
        return _add(_mul(np.full(1, s), _add(T_part, scaled)), rest)
    T = interval_einsum("il,ils,ilr,ilF->isrF", P, k_tilde, k_tilde, v_tilde)  # [i, s, r, F]
    return diagonal_slope(P, k_tilde, v_tilde, b * sigma, A, M, WVO, T * sigma, h)


def half_widths(box: Interval, centre: np.ndarray) -> np.ndarray:
    """h_m >= max(hi_m - centre_m, centre_m - lo_m), rounded up: |X_m - centre_m| <= h_m for every X in the box."""
    return round_up(np.maximum(box.hi - centre, centre - box.lo))


def nested_box(box: Interval, centre: np.ndarray, t: float) -> Interval:
    """B_t = B intersected with centre +- t h (h the box's half-widths about the centre), rounded outward: it holds
    X0 + s (X - X0) for every X in B and 0 <= s <= t."""
    reach = round_up(t * half_widths(box, centre))
    return Interval(np.maximum(box.lo, round_down(centre - reach)), np.minimum(box.hi, round_up(centre + reach)))


def _reweighted(box: Interval, sub: Interval, centre: np.ndarray) -> float:
    """An upper bound on max_m h_m / h_m(B_t) (coordinates with h_m > 0): `dp_slopes` on B_t weighs coordinate m by
    B_t's half-width h_m(B_t) (about t h_m); the segment needs h_m."""
    h, h_t = half_widths(box, centre), half_widths(sub, centre)
    moving = h > 0
    if not np.any(moving):
        return 0.0
    return float(round_up(np.max(round_up(h[moving] / h_t[moving]))))


def integral_slopes(box: Interval, centre: np.ndarray, w: _Weights, *, max_steps: int = 16,
                    time_budget: float | None = None, exact_diagonal: bool = False,
                    product_rule: bool | None = None, deadline: float | None = None, passes: int = 2,
                    clock: Callable[[], float] = time.perf_counter) -> tuple[np.ndarray, int]:
    """(S, K): S >= |J(X) - J(X0)| entrywise for every X in the box, from `dp_slopes` on K nested boxes.

    The integral form of the mean-value theorem, J(X) - J(X0) = int_0^1 sum_m Delta_m dJ/dX_m(X0 + s Delta) ds
    (Delta = X - X0, |Delta_m| <= h_m), cut at t_k = k / K: for s in [t_{k-1}, t_k] the point X0 + s Delta lies in
    B_{t_k} (`nested_box`), so

        |J(X) - J(X0)| <= sum_k (t_k - t_{k-1}) sum_m h_m sup_{B_{t_k}} |dJ/dX_m| <= (1/K) sum_k c_k S(B_{t_k}),

    with S(B) = `dp_slopes` (weights h_m(B)) and c_k >= max_m h_m / h_m(B_{t_k}) (about 1/t_k). K = 1 is `dp_slopes`
    itself. The slopes grow with the box (the softmax moves), so the average over nested boxes is below the slope
    of the whole box: on a trained D = 48 layer at eps = 1e-2 the inf-norm bound drops from 77.0 (K = 1) to 68.5
    (K = 8), at eps = 3e-2 from 627 to 301. K grows as in `average_over_nested_boxes`. `deadline` applies to the
    first pass (`dp_slopes`); the later ones are timed by `average_over_nested_boxes`. `passes` as in `dp_slopes`.
    """
    def weighted_slope(t: float) -> list[np.ndarray]:
        sub = box if t == 1.0 else nested_box(box, centre, t)
        S = dp_slopes(sub, centre, w, exact_diagonal=exact_diagonal, product_rule=product_rule,
                      deadline=deadline if t == 1.0 else None, passes=passes)
        return [_mul(np.full(1, _reweighted(box, sub, centre)), S)]

    (S,), steps = average_over_nested_boxes(weighted_slope, max_steps, time_budget, clock)
    return S, steps


def average_over_nested_boxes(weighted_slope: Callable[[float], list[np.ndarray]], max_steps: int,
                              time_budget: float | None, clock: Callable[[], float] = time.perf_counter
                              ) -> tuple[list[np.ndarray], int]:
    """(bounds, K): (1/K) sum_{k <= K} weighted_slope(k / K), entrywise, for each array weighted_slope returns, and the
    entrywise minimum over the levels K = 1, 2, 4, ..., max_steps computed (each is a bound, `integral_slopes`).

    weighted_slope(t) must bound c_t S(B_t) (the slope of the nested box B_t with the whole box's weights). K doubles
    while the next level's passes (K of them: the odd multiples of 1 / 2K; the points of a level are reused by the
    next, t_k = k / K being exact binary fractions), timed by the slowest pass so far, fit in ``time_budget`` seconds
    from the start (None: up to max_steps). The first pass, t = 1, always runs.
    """
    start = clock()
    totals: list[np.ndarray] | None = None  # sum_k weighted_slope(t_k) over the current level's t_k
    best: list[np.ndarray] | None = None
    steps, seconds = 1, 0.0
    while True:
        for k in range(1, steps + 1, 2):  # the points t_k = k / K new at this level (K = 1: t = 1)
            pass_start = clock()
            parts = weighted_slope(k / steps)
            totals = parts if totals is None else [_add(a, b) for a, b in zip(totals, parts)]
            seconds = max(seconds, clock() - pass_start)
        level = [round_up(a / steps) for a in totals]  # steps is a power of two: exact but for subnormals
        best = level if best is None else [np.minimum(a, b) for a, b in zip(best, level)]
        if 2 * steps > max_steps:
            break
        if time_budget is not None and clock() - start + steps * seconds > time_budget:
            break
        steps *= 2
    return best, steps
