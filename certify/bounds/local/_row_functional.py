"""Row sums of the DP Jacobian over a box through one scalar per row: cancellation the entrywise slopes lose (issue 15).

The inf-norm over a box B about X0 is max_X max_a sum_b |J_ab(X)|. The entrywise Taylor form bounds each |J_ab(X)|
by |J_ab(X0)| + S_ab with its own worst X per entry. Where an entry's sign is the same over the whole box (its
enclosure over B, e.g. J0 + [-S, S], misses 0: "certain", sign s_ab), |J_ab(X)| = s_ab J_ab(X), so for a row a,
with s_ab = 0 on the other ("uncertain") entries,

    sum_b |J_ab(X)| = phi_a(X) + sum_{b uncertain} |J_ab(X)|,    phi_a(X) = sum_b s_ab J_ab(X),

and phi_a is one smooth scalar function of X (the signs are fixed numbers): by the mean-value theorem along
[X0, X] (inside the convex box),

    phi_a(X) <= phi_a(X0) + sum_m h_m sup_{xi in B} |d_m phi_a(xi)|,

where the sum over b is taken *inside* the derivative, before any magnitude; phi_a(X0) <= sum of the certain
entries' magnitudes at X0. The uncertain entries keep the magnitude of their enclosure. On the digits ViT layer 0
(N = 17, D = 48) at eps = 1e-2 the first-order row bound with exact derivatives at X0 is 62.9 (entrywise 66.0;
attained 61.4), and the certified one 76.3 (entrywise 85.0).

For a row a = (i, F) of one head (notation of `_slopes`: sigma = 1/sqrt(d), M = W_K W_Q^T, WVO = W_V W_O,
J_il[F, E] = P_il WVO[E, F] + sigma P_il v~_il[F] b_i[E] + delta_il sigma A_i[E, F]) and signs s_lE = s_{(i,F),(l,E)}:

    phi = sum_l P_il G_l + sigma alpha_i,   G_l = c_l + sigma v~_il[F] beta_l,   c_l = sum_E s_lE WVO[E, F],
    beta_l = sum_E s_lE b_i[E],   alpha_i = sum_E s_iE A_i[E, F],

and from the block derivatives of `_slopes` (proofs/slopes_derivatives.py), for the coordinate m = (t, r):

    d_{t,r} phi = b_i[r] C^b_t + WVO[r, F] C^w_t + (M s_i)[r] C^m_t + delta_it own[r],
    C^b_t = sigma P_it [G_t - Gbar + sigma (kappa_t v~_it[F] - alpha_i - betabar v~_it[F])],
    C^w_t = sigma P_it (beta_t - betabar + kappa_t),    C^m_t = sigma P_it v~_it[F],
    own[r] = sigma sum_l P_il [G_l k~_il[r] + v~_il[F] mu_l[r] + sigma kappa_l k~_il[r] v~_il[F]]
             - sigma^2 betabar A_i[r, F],

with Gbar = sum_l P_il G_l, betabar = sum_l P_il beta_l, kappa_l = sum_E s_iE k~_il[E], mu_l[r] = sum_E s_lE M[E, r],
(M s_i)[r] = sum_E M[r, E] s_iE. Heads add: d phi is summed over heads as intervals, then its magnitude taken.
Every block is the interval enclosure over B of `_slopes.head_blocks` (outward rounded), so the magnitude of the
computed interval bounds sup_B |d_m phi|. Work: N^2 D^2 per head (the entrywise slopes' order), memory a few
N^2 D^2 intervals (about 125 bytes per entry of J, measured). The formula for d phi: proofs/row_functional.py
(PROVED-MODULO slopes_derivatives' J decomposition, at small sizes; every weight s by linearity); the lemma above
is the mean-value theorem and the sign argument; also checked against autodiff at points of boxes up to eps = 0.3
(tests/test_row_functional.py).
"""

from __future__ import annotations

import math

import numpy as np

from ...interval import Interval, interval_einsum, round_up
from ...sdp._floating import sum_up
from ._enclosure import _Weights, const, point_einsum
from ._slopes import _weighted, average_over_nested_boxes, half_widths, head_blocks, nested_box


def row_signs(enclosure: Interval) -> np.ndarray:
    """s (N, D, N, D): +1 where the enclosure of J over the box is positive, -1 where negative, else 0."""
    return np.where(enclosure.lo > 0, 1.0, np.where(enclosure.hi < 0, -1.0, 0.0))


def row_derivatives(box: Interval, centre: np.ndarray, w: _Weights, signs: np.ndarray) -> Interval:
    """d_{t,r} phi_{i,F} over the box, (N, D, N, D) indexed [i, F, t, r] (module docstring), summed over heads."""
    N, D = box.shape
    if signs.shape != (N, D, N, D):
        raise ValueError(f"signs must have shape {(N, D, N, D)}, got {signs.shape}")
    h = half_widths(box, centre)
    sigma = const(1.0 / math.sqrt(w.d))
    index = np.arange(N)
    own_signs = np.ascontiguousarray(signs[index, :, index, :])  # [i, F, E] = s_{(i,F),(i,E)}
    total = None
    for head in range(w.H):
        P, k_tilde, v_tilde, b, M, WVO, A = head_blocks(box, centre, h, w, head)
        v_row = v_tilde.swapaxes(1, 2)  # [i, F, l] = v~_il[F]
        c = point_einsum("EF,iFlE->iFl", WVO, signs)
        beta = point_einsum("iE,iFlE->iFl", b, signs)
        kappa = point_einsum("ilE,iFE->iFl", k_tilde, own_signs)
        alpha = point_einsum("iEF,iFE->iF", A, own_signs)
        M_s = point_einsum("rE,iFE->iFr", M, own_signs)
        mu = point_einsum("Er,iFlE->iFlr", M, signs)
        G = c + v_row * beta * sigma
        G_bar = interval_einsum("il,iFl->iF", P, G)
        beta_bar = interval_einsum("il,iFl->iF", P, beta)
        P_row = P.expand(1)  # [i, 1, t]
        spread = kappa * v_row - alpha.expand(-1) - beta_bar.expand(-1) * v_row
        C_b = P_row * ((G - G_bar.expand(-1)) + spread * sigma) * sigma
        C_w = P_row * (beta - beta_bar.expand(-1) + kappa) * sigma
        C_m = P_row * v_row * sigma
        part = (b.expand(1).expand(1) * C_b.expand(-1)  # [i, F, t, r]
                + WVO.swapaxes(0, 1).expand(0).expand(2) * C_w.expand(-1)
                + M_s.expand(2) * C_m.expand(-1))
        own = (interval_einsum("il,iFl,ilr->iFr", P, G, k_tilde)
               + interval_einsum("il,iFl,iFlr->iFr", P, v_row, mu)
               + interval_einsum("il,iFl,ilr,iFl->iFr", P, kappa, k_tilde, v_row) * sigma) * sigma
        own = own - beta_bar.expand(-1) * A.swapaxes(1, 2) * sigma * sigma
        diagonal = part[index, :, index, :] + own  # t = i
        part.lo[index, :, index, :], part.hi[index, :, index, :] = diagonal.lo, diagonal.hi
        total = part if total is None else total + part
    return total


def row_functional_sums(box: Interval, centre: np.ndarray, w: _Weights, at_centre: Interval, enclosure: Interval,
                        max_steps: int = 1, time_budget: float | None = None) -> tuple[np.ndarray, int]:
    """(rows, K): rows (N D,) upper bounds on max_{X in box} sum_b |J_ab(X)| for every row a = (i, F) of a DP layer
    (module docstring), from the enclosure at_centre of J(X0) and an enclosure of J over the whole box (e.g. the cut
    Taylor form J0 + [-S, S]), which fixes the signs; (N, D, N, D) both.

    The slope of phi_a is the integral form of `_slopes.integral_slopes`: for s in [t_{k-1}, t_k] the point
    X0 + s (X - X0) lies in the nested box B_{t_k}, so phi_a(X) - phi_a(X0) <= (1/K) sum_k sum_m h_m sup_{B_{t_k}}
    |d_m phi_a| with h the whole box's half-widths; K as in `_slopes.average_over_nested_boxes` (up to max_steps
    levels while they fit in time_budget seconds; the first pass, the whole box, always runs)."""
    N, D = box.shape
    h = half_widths(box, centre)
    signs = row_signs(enclosure)

    def weighted_slope(t: float) -> list[np.ndarray]:
        sub = box if t == 1.0 else nested_box(box, centre, t)
        derivative = row_derivatives(sub, centre, w, signs)
        return [_weighted(h[None, None], derivative.mag, (2, 3))]  # [i, F] = sum_{t,r} h_tr sup |d_{t,r} phi_iF|

    (slope,), steps = average_over_nested_boxes(weighted_slope, max_steps, time_budget)
    # phi_a(X0) <= the certain entries' magnitudes at X0; an uncertain entry keeps its magnitude over the box
    certain = np.where(signs > 0, at_centre.hi, np.where(signs < 0, -at_centre.lo, 0.0))
    uncertain = np.where(signs == 0, enclosure.mag, 0.0)
    rows = sum_up(sum_up(np.maximum(certain, 0.0) + uncertain, axis=3), axis=2)  # nonnegative terms
    return round_up(rows + slope).reshape(N * D), steps
