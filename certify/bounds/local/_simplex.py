"""Row sums of the DP attention Jacobian over a box, with every softmax row kept on the simplex (MATH.md section 7;
issue 15; proved in proofs/simplex_row_sums.py).

Interval arithmetic treats the N weights of a softmax row as independent: on wide boxes (eps = 0.1 around a trained
layer's input) each P_il encloses to nearly [0, 1], and a weighted sum sum_l P_il z_l to nearly sum_l z_l, N times
too much. But sum_l P_il = 1 exactly, for every X. For P in a box lo <= P <= hi with sum_k P_k = 1, any z and any
real t,

    sum_k P_k z_k = t + sum_k P_k (z_k - t) <= t + sum_k (hi_k (z_k - t)_+ - lo_k (t - z_k)_+)          (1)

(term by term: P_k <= hi_k where z_k >= t, P_k >= lo_k where z_k < t). With t the z at which filling the mass from
the largest z down reaches 1, (1) is the maximum of that linear program (`simplex_upper`). It is used three times,
for one head (sigma = 1/sqrt(d); VO = W_O^T W_V^T, the (F, E) value-output matrix; U_l = VO x_l):

- score differences L[i, j, k] = sigma q_i . (k_k - k_j) (bilinear in X). About the box centre c with half-widths r
  (delta = X - c): L = L(c) + sigma delta_i W_Q . (k_k(c) - k_j(c)) + sigma q_i(c) . (delta_k - delta_j) W_K
  + sigma delta_i W_Q W_K^T (delta_k - delta_j)^T, so
      |L - L(c)| <= r_i . |a_jk| + (r_j + r_k) . |b_i| + sigma r_i^T |W_Q W_K^T| (r_j + r_k),
  a_jk = sigma W_Q (k_k(c) - k_j(c)), b_i = sigma W_K q_i(c) (triangle inequality where indices coincide);
  intersected with the interval evaluation (`score_differences`; about 2x narrower at eps = 0.1);
- u_il = W_O^T (v_l - vbar_i) = sum_k P_ik (U_l - U_k) and v_l - vbar_i = sum_k P_ik (v_l - v_k), each coordinate
  by (1) from the exact hulls of the differences;
- the row sums. J^h_il[F, E] = P_il (VO[F, E] + sigma u_il[F] w_i[E]) + delta_il diag_i[F, E] with w_i = W_K q_i
  and diag_i[F, E] = sigma sum_l P_il u_il[F] kt_il[E], kt_il = W_Q (k_l - k_i) (`dp_jacobian_enclosure`). So for
  every X in the box (triangle inequality over heads and terms)

      sum_{l, E} |J_il[F, E]| <= sum_h sum_l P^h_il (g^h_il[F] + z^h_il[F]),
      g_il[F] = sum_E |VO[F, E] + sigma u_il[F] w_i[E]|,   z_il[F] = sigma |u_il[F]| ||kt_il||_1,

  each head's sum over l bounded by (1); also by sum_h (1 on g^h) + sum_E |sum_h diag^h_i[F, E]|, with
  C_i K = sum_l P_il (v_l - vbar_i)(k_l - k_i)^T by (1) entrywise; and by sum_h (1 on g^h with g^h_ii set to 0)
  + sum_E |sum_h J^h_ii[F, E]|, the l = i block enclosed as one interval matrix (exact as the box shrinks to a
  point, for one head). The smallest of the three is kept per row.

The same blocks give an entrywise enclosure of J (`dp_simplex_jacobian_enclosure`: P_il, u_il, w_i and diag_i as
intervals in the decomposition above), which the local branch and bound and the whole-model chain intersect with
their other enclosures (both norms). The max over rows bounds ||J(X)||_inf over the box. On a trained D = 48 layer at eps = 0.1 it is about 80 times the
interval enclosure's row sum (benchmarks/README.md); as eps -> 0 it tends to ||J(X0)||_inf for one head and stays
above it by the triangle inequality over heads for several, where the Taylor forms are exact: the search keeps the
smallest bound per box.

Every step is outward rounded: intervals by `certify.interval` and `point_einsum`; (1) with its float error
bounded (`simplex_upper`); nonnegative sums and products rounded up. Work per head and box: N^4 D (the u_il, one
query token at a time: N^2 D memory). DP heads without masks only (L2 layers: see `_structured`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...interval import Interval, intersect, round_down, round_up, stack
from ...sdp._floating import ETA, U, gamma, sum_up, up
from ._enclosure import (_Weights, const, dp_score_differences, point_einsum, softmax_from_differences,
                         token_differences)
from ._upper import _add, _einsum_up, _mul


def simplex_upper(lo: np.ndarray, hi: np.ndarray, z: np.ndarray) -> np.ndarray:
    """An upper bound on max {sum_k P_k z_k : lo <= P <= hi, sum_k P_k = 1} along the last axis (module docstring, (1)).

    t is taken from the greedy filling (any t gives a valid bound); (1) is then evaluated with its rounding error
    bounded: (z - t)_+ rounded up and multiplied by hi rounded up, (t - z)_+ rounded down and multiplied by
    lo >= 0 rounded down, the two sums bounded above and below (Higham eq. 4.4), and the last two operations
    rounded up. inf where a z or hi is not finite.
    """
    lo, hi, z = np.broadcast_arrays(np.maximum(lo, 0.0), hi, z)
    K = z.shape[-1]
    finite = np.all(np.isfinite(z), axis=-1) & np.all(np.isfinite(hi), axis=-1)
    zf = np.where(np.isfinite(z), z, 0.0)
    hf = np.where(np.isfinite(hi), hi, 0.0)
    order = np.argsort(-zf, axis=-1, kind="stable")
    filled = np.cumsum(np.take_along_axis(hf - lo, order, -1), axis=-1)
    need = 1.0 - np.sum(lo, axis=-1, keepdims=True)
    split = np.minimum(np.sum(filled < need, axis=-1, keepdims=True), K - 1)
    t = np.take_along_axis(np.take_along_axis(zf, order, -1), split, -1)  # (..., 1)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        above = np.maximum(round_up(zf - t), 0.0)  # >= (z - t)_+
        below = np.maximum(round_down(t - zf), 0.0)  # <= (t - z)_+
        plus = up(np.sum(up(hf * above) + ETA, axis=-1) * (1.0 + 2.0 * (K + 2) * U))
        minus = np.maximum(round_down(np.sum(np.maximum(round_down(lo * below), 0.0), axis=-1)
                                      * (1.0 - 2.0 * (K + 2) * U)), 0.0)
        value = up(up(t[..., 0] + plus) - minus)
    return np.where(finite & np.isfinite(value), value, math.inf)


def simplex_sum(P: Interval, Z: Interval) -> Interval:
    """An enclosure of sum_k P_k Z_k (last axis) for P_k >= 0 in P with sum_k P_k = 1 and Z_k in Z: by (1) on Z.hi and
    on -Z.lo (P_k Z_k <= P_k Z.hi_k since P_k >= 0)."""
    return Interval(-simplex_upper(P.lo, P.hi, -Z.lo), simplex_upper(P.lo, P.hi, Z.hi))


def _sum_up(x: np.ndarray, axis: int) -> np.ndarray:
    """`sum_up` (an upper bound on a sum of nonnegative terms), inf where a term is inf or nan."""
    finite = np.isfinite(x)
    return np.where(np.all(finite, axis=axis), sum_up(np.where(finite, x, 0.0), axis), math.inf)


def simplex_centred_images(P: Interval, Y: Interval) -> Interval:
    """(N, N, F): [i, l] encloses sum_k P_ik (y_l - y_k) for softmax rows P (N, N) and per-token images y_l in Y[l]
    (F values each) of independent tokens. With sum_k P_ik = 1 it equals y_l (1 - P_il) - sum_{k != l} P_ik y_k, so
        <= Y_l.hi + max_P sum_k P_ik (-Y_k.lo) - P_il.lo (Y_l.hi - Y_l.lo),
        >= Y_l.lo - max_P sum_k P_ik Y_k.hi + P_il.lo (Y_l.hi - Y_l.lo),
    each max by (1) once per (i, F): N^2 F work (one linear program per difference y_l - y_k would be N^3 F)."""
    row = lambda x: x[:, None, :]  # noqa: E731  (N_i, 1, N_k) against (F, N_k)
    S_hi = simplex_upper(row(P.lo), row(P.hi), -Y.lo.T)  # (N_i, F)
    S_lo = simplex_upper(row(P.lo), row(P.hi), Y.hi.T)
    width = np.maximum(round_down(Y.hi - Y.lo), 0.0)  # (N_l, F)
    own = np.maximum(round_down(P.lo[:, :, None] * width[None]), 0.0)  # <= P_il.lo (Y_l.hi - Y_l.lo)
    with np.errstate(invalid="ignore"):
        hi = round_up(round_up(Y.hi[None] + S_hi[:, None, :]) - own)
        lo = round_down(round_down(Y.lo[None] - S_lo[:, None, :]) + own)
    return Interval(np.where(np.isnan(lo), -math.inf, lo), np.where(np.isnan(hi), math.inf, hi))


def simplex_weighted_products(P: Interval, a: Interval, b: Interval) -> Interval:
    """[i, r, F] = sum_l P_il a[i, l, r] b[i, l, F] for softmax rows P (N, N), by (1) on the interval products."""
    parts = []
    for i in range(P.shape[0]):
        product = a[i].expand(-1) * b[i].expand(-2)  # (N_l, r, F)
        Z = Interval(np.moveaxis(product.lo, 0, -1), np.moveaxis(product.hi, 0, -1))
        parts.append(simplex_sum(Interval(P.lo[i][None, None, :], P.hi[i][None, None, :]), Z))
    return stack(parts, 0)


def score_differences(box: Interval, dX: Interval, w: _Weights, h: int) -> tuple[Interval, Interval, Interval]:
    """(L, Q, dK) for head h over boxes (..., N, D): the score differences L[i, j, k] of `dp_score_differences`,
    intersected with their first-order form about the box centre (module docstring)."""
    N = box.shape[-2]
    WQ, WK = w.W_Q[h], w.W_K[h]
    Q, dK, L = dp_score_differences(box, dX, w, h)
    centre = np.clip(0.5 * box.lo + 0.5 * box.hi, box.lo, box.hi)
    r = round_up(np.maximum(box.hi - centre, centre - box.lo))
    point = Interval(centre, centre)
    Q_c, dK_c, L_c = dp_score_differences(point, token_differences(point), w, h)
    sigma = float(const(1.0 / math.sqrt(w.d)).hi)
    a = _mul(point_einsum("...jkc,Dc->...jkD", dK_c, WQ).mag, sigma)  # |a_jk|
    b = _mul(point_einsum("...ic,Dc->...iD", Q_c, WK).mag, sigma)  # |b_i|
    linear_b = _einsum_up("...jD,...iD->...ij", r, b)  # [i, j] = r_j . |b_i|
    linear = _add(_einsum_up("...iD,...jkD->...ijk", r, a), linear_b[..., :, :, None], linear_b[..., :, None, :])
    M = WQ @ WK.T  # |W_Q W_K^T| <= |fl(M)| + gamma_d |W_Q| |W_K|^T
    M_up = _add(np.abs(M), _mul(_einsum_up("Dc,Ec->DE", np.abs(WQ), np.abs(WK)), gamma(w.d + 2)))
    G = _mul(_einsum_up("...iD,DE,...jE->...ij", r, M_up, r), sigma)
    radius = _add(linear, G[..., :, :, None], G[..., :, None, :])
    radius = np.where(np.eye(N, dtype=bool), 0.0, radius)  # L[i, j, j] = 0 exactly
    first_order = Interval(round_down(L_c.lo - radius), round_up(L_c.hi + radius))
    return intersect(L, first_order), Q, dK


@dataclasses.dataclass(frozen=True)
class _HeadBlocks:
    """One head's blocks over boxes (..., N, D), each an enclosure for every X in the box (module docstring)."""

    P: Interval  # (..., N_i, N_l), from the narrowed score differences
    VO: Interval  # (F, E) = (W_V W_O)[E, F]
    w: Interval  # (..., N_i, E) = W_K q_i
    u: Interval  # (..., N_i, N_l, F) = W_O^T (v_l - vbar_i), by (1)
    diagonal: Interval  # (..., N_i, F, E) = sigma W_O^T C_i K W_Q^T, C_i K by (1) entrywise
    kt_norm: np.ndarray  # (..., N_i, N_l) >= ||W_Q (k_l - k_i)||_1


def _head_blocks(box: Interval, dX: Interval, w: _Weights, h: int) -> _HeadBlocks:
    """The blocks of head h; the weighted sums over the softmax rows by (1), one query token at a time."""
    N = box.shape[-2]
    WQ, WK, WV, WO = w.W_Q[h], w.W_K[h], w.W_V[h], w.W_O[h]
    sigma = const(1.0 / math.sqrt(w.d))
    L, Q, dK = score_differences(box, dX, w, h)
    P = softmax_from_differences(L)  # (..., N, N)
    dU = point_einsum("...lkD,Da,aF->...lFk", dX, WV, WO)  # U_l - U_k, k last
    dV = point_einsum("...lkD,Da->...lak", dX, WV)  # v_l - v_k, k last
    kt = point_einsum("...liD,Dc,Ec->...ilE", dX, WK, WQ)  # W_Q (k_l - k_i)
    u, diagonal = [], []
    for i in range(N):
        P_i = P[..., i, :]  # (..., N_k)
        P_row = Interval(P_i.lo[..., None, None, :], P_i.hi[..., None, None, :])
        u.append(simplex_sum(P_row, dU))  # (..., N_l, F)
        v = simplex_sum(P_row, dV)  # (..., N_l, a) = v_l - vbar_i
        product = v.expand(-1) * dK[..., :, i, :].expand(-2)  # (..., N_l, a, c): (v_l - vbar_i)(k_l - k_i)^T
        CK = simplex_sum(P_row, Interval(np.moveaxis(product.lo, -3, -1), np.moveaxis(product.hi, -3, -1)))
        diagonal.append(point_einsum("...ac,aF,Ec->...FE", CK, WO, WQ) * sigma)
    return _HeadBlocks(P=P, VO=point_einsum("aF,Ea->FE", Interval(WO, WO), WV),
                       w=point_einsum("...ic,Ec->...iE", Q, WK), u=stack(u, -3), diagonal=stack(diagonal, -3),
                       kt_norm=_sum_up(kt.mag, -1))


def dp_row_sums(box: Interval, w: _Weights) -> np.ndarray:
    """(..., N, D): upper bounds on the row sums sum_{l, E} |J_il[F, E](X)| of a DP layer's Jacobian over every X in
    the boxes (..., N, D) (module docstring)."""
    if w.kind != "dp":
        raise ValueError(f"simplex row sums cover DP layers, got {w.kind!r}")
    N = box.shape[-2]
    dX = token_differences(box)  # [l, k] = x_l - x_k
    sigma = const(1.0 / math.sqrt(w.d))
    combined, values, off_diagonal = np.zeros(box.shape), np.zeros(box.shape), np.zeros(box.shape)
    diagonal = [None] * N  # sum_h sigma W_O^T C_i K W_Q^T
    block = [None] * N  # sum_h J^h_ii: its P_ii term and its diagonal part together
    for h in range(w.H):
        b = _head_blocks(box, dX, w, h)
        for i in range(N):
            P_i, u = b.P[..., i, :], b.u[..., i, :, :]  # (..., N_l), (..., N_l, F)
            term = b.VO + (u * sigma).expand(-1) * b.w[..., i, :].expand(-2).expand(-2)  # (..., N_l, F, E)
            g = _sum_up(term.mag, -1)  # (..., N_l, F)
            z = _mul(u.mag, b.kt_norm[..., i, :, None], float(sigma.hi))
            lo, hi = P_i.lo[..., None, :], P_i.hi[..., None, :]
            combined[..., i, :] = _add(combined[..., i, :], simplex_upper(lo, hi, np.swapaxes(_add(g, z), -1, -2)))
            values[..., i, :] = _add(values[..., i, :], simplex_upper(lo, hi, np.swapaxes(g, -1, -2)))
            g_off = np.where(np.arange(N)[:, None] == i, 0.0, g)  # z_i = 0: the l = i block is bounded jointly
            off_diagonal[..., i, :] = _add(off_diagonal[..., i, :], simplex_upper(lo, hi, np.swapaxes(g_off, -1, -2)))
            head = b.diagonal[..., i, :, :]
            diagonal[i] = head if diagonal[i] is None else diagonal[i] + head
            P_ii = Interval(P_i.lo[..., i, None, None], P_i.hi[..., i, None, None])
            J_ii = P_ii * term[..., i, :, :] + head
            block[i] = J_ii if block[i] is None else block[i] + J_ii
    covariance = np.stack([_sum_up(diagonal[i].mag, -1) for i in range(N)], axis=-2)  # (..., N, F)
    blocks = np.stack([_sum_up(block[i].mag, -1) for i in range(N)], axis=-2)  # (..., N, F)
    return np.minimum(np.minimum(combined, _add(values, covariance)), _add(off_diagonal, blocks))


def dp_inf_norm_bounds(boxes: Interval, w: _Weights) -> np.ndarray:
    """(B,): per box (B, N, D), an upper bound on max ||J(X)||_inf over X in the box (the largest row sum)."""
    rows = dp_row_sums(boxes, w)
    return np.max(rows.reshape(rows.shape[0], -1), axis=-1)


def dp_simplex_jacobian_enclosure(box: Interval, w: _Weights) -> Interval:
    """(..., N, D, N, D): an entrywise enclosure of a DP layer's Jacobian J[i, F, l, E] over the boxes (..., N, D),

        J_il[F, E] = sum_h P_il (VO[F, E] + sigma u_il[F] w_i[E]) + delta_il diag_i[F, E]

    with the blocks of `_head_blocks` (P from the narrowed score differences, u and C_i K by (1)): on wide boxes
    much narrower than `dp_jacobian_enclosure`, which encloses each weighted sum term by term; intersect the two."""
    if w.kind != "dp":
        raise ValueError(f"simplex enclosures cover DP layers, got {w.kind!r}")
    N = box.shape[-2]
    dX = token_differences(box)
    sigma = const(1.0 / math.sqrt(w.d))
    diagonal_mask = np.eye(N, dtype=bool)[:, None, :, None]  # [i, F, l, E]: i = l
    J = None
    for h in range(w.H):
        b = _head_blocks(box, dX, w, h)
        P = b.P.expand(-2).expand(-1)  # (..., N_i, 1, N_l, 1)
        Pu = (b.P.expand(-1) * b.u).swapaxes(-2, -1)  # (..., N_i, F, N_l)
        cross = Pu.expand(-1) * (b.w * sigma).expand(-2).expand(-2)  # (..., N_i, F, N_l, E)
        diagonal = b.diagonal.expand(-2)  # (..., N_i, F, 1, E)
        head = P * b.VO.expand(-2) + cross + Interval(np.where(diagonal_mask, diagonal.lo, 0.0),
                                                      np.where(diagonal_mask, diagonal.hi, 0.0))
        J = head if J is None else J + head
    return Interval(np.where(np.isnan(J.lo), -math.inf, J.lo), np.where(np.isnan(J.hi), math.inf, J.hi))  # inf * 0
