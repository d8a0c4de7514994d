"""Claim: the derivative of a row functional of the DP Jacobian, as ``certify/bounds/local/_row_functional.py``
states it (its module docstring), and the row-sum bound built on it (MATH.md section 7; issue 15).

Setting. One head of dot-product attention with biases, the blocks of ``proofs/slopes_derivatives.py`` (P, k~, v~,
b, M = W_K W_Q^T, WVO = W_V W_O, A, sigma) and J_il[F, E] = P_il WVO[E, F] + sigma P_il v~_il[F] b_i[E]
+ delta_il sigma A_i[E, F] (its part (e)). For a row (i, F) and any fixed real weights s_lE (l = 1..N, E = 1..D),
phi = sum_{l, E} s_lE J_il[F, E].

Claim (derivative). For every coordinate (t, r),

    d_{t,r} phi = b_i[r] C^b_t + WVO[r, F] C^w_t + (M s_i)[r] C^m_t + delta_it own[r],

with c_l = sum_E s_lE WVO[E, F], beta_l = sum_E s_lE b_i[E], kappa_l = sum_E s_iE k~_il[E], alpha = sum_E s_iE
A_i[E, F], (M s_i)[r] = sum_E M[r, E] s_iE, mu_l[r] = sum_E s_lE M[E, r], G_l = c_l + sigma v~_il[F] beta_l,
Gbar = sum_l P_il G_l, betabar = sum_l P_il beta_l and

    C^b_t = sigma P_it [G_t - Gbar + sigma (kappa_t v~_it[F] - alpha - betabar v~_it[F])],
    C^w_t = sigma P_it (beta_t - betabar + kappa_t),    C^m_t = sigma P_it v~_it[F],
    own[r] = sigma sum_l P_il [G_l k~_il[r] + v~_il[F] mu_l[r] + sigma kappa_l k~_il[r] v~_il[F]]
             - sigma^2 betabar A_i[r, F].

Both sides are linear in s, so the identity for every s follows from the identity at the N D unit weights
s = e_(l0, E0), where phi = J_il0[F, E0]. Checks: at every row, unit weight and coordinate, for each stated size,
the closed form minus the chain-rule derivative of J (part (e)'s polynomial, `SymbolicHead.deriv`: the exact chain
rule through the softmax symbols) is the zero polynomial: PROVED at those sizes, modulo part (e) of
``slopes_derivatives`` (J as the blocks' closed form; PROVED there) and the bound's lemma below (PROVED-MODULO).
Several heads add (J and phi are sums over heads, the derivative is linear).

Claim (bound; the lemma of ``_row_functional``, not checked by SymPy: it is the mean-value theorem and the sign
argument). If J(X)_ab keeps the sign s_ab for every X in a box B (the entries where the enclosure misses 0), then
sum_b |J_ab(X)| = phi_a(X) + sum over the other b of |J_ab(X)| with phi_a = sum_b s_ab J_ab (s_ab = 0 on the
others), and phi_a(X) <= phi_a(X0) + sum_m h_m sup_B |d_m phi_a| along the segment [X0, X] inside the convex box.

Cross-check of the shipped code (SAMPLED): ``row_derivatives`` on a point box contains the float64 closed form of
the derivative evaluated through ``proofs.slopes_derivatives.Head`` on random biased layers and random weights s.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from proofs._check import Check, numeric
from proofs._result import ProofResult, Status, combine
from proofs.slopes_derivatives import Head, _nonzero_at, _vanishes, delta, jacobian_formula, symbolic_head

CLAIM = ("d phi for a row functional phi = sum_{l,E} s_lE J_il[F, E] of the DP Jacobian "
         "(certify/bounds/local/_row_functional.py): b_i[r] C^b_t + WVO[r, F] C^w_t + (M s_i)[r] C^m_t "
         "+ delta_it own[r], for every weight s (by linearity from the unit weights)")

SIZES = ((2, 2, 1), (3, 2, 2), (2, 3, 1))
"""(N, D, d) at which SymPy proves every entry."""

SCOPE = {"(N, D, d)": "in {(2, 2, 1), (3, 2, 2), (2, 3, 1)} (SymPy, every row, unit weight and coordinate); one "
                      "head, biases b_Q, b_K, b_V, sigma a free symbol; several heads by linearity",
         "the bound": "mean-value theorem and the sign argument, stated, not checked by SymPy",
         "shipped row_derivatives": "float64, 3 random biased layers, random weights in {-1, 0, 1}"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("slopes_derivatives (e): J_il[F, E] as the blocks' closed form", "the mean-value theorem and the sign "
          "argument for the bound")


def row_derivative_formula(h: Head, i: int, F: int, s: Sequence[Sequence], t: int, r: int):
    """The claimed d_{t,r} phi for row (i, F) and weights s[l][E] (module docstring)."""
    N, D, sigma = h.N, h.D, h.sigma
    c = [sum(s[l][E] * h.WVO[E][F] for E in range(D)) for l in range(N)]
    beta = [sum(s[l][E] * h.b[i][E] for E in range(D)) for l in range(N)]
    kappa = [sum(s[i][E] * h.kt[i][l][E] for E in range(D)) for l in range(N)]
    alpha = sum(s[i][E] * h.A[i][E][F] for E in range(D))
    M_s = sum(h.M[r][E] * s[i][E] for E in range(D))
    mu = [sum(s[l][E] * h.M[E][r] for E in range(D)) for l in range(N)]
    G = [c[l] + sigma * h.vt[i][l][F] * beta[l] for l in range(N)]
    G_bar = sum(h.P[i][l] * G[l] for l in range(N))
    beta_bar = sum(h.P[i][l] * beta[l] for l in range(N))
    C_b = sigma * h.P[i][t] * (G[t] - G_bar + sigma * (kappa[t] * h.vt[i][t][F] - alpha - beta_bar * h.vt[i][t][F]))
    C_w = sigma * h.P[i][t] * (beta[t] - beta_bar + kappa[t])
    C_m = sigma * h.P[i][t] * h.vt[i][t][F]
    value = h.b[i][r] * C_b + h.WVO[r][F] * C_w + M_s * C_m
    if t == i:
        own = sigma * sum(h.P[i][l] * (G[l] * h.kt[i][l][r] + h.vt[i][l][F] * mu[l]
                                       + sigma * kappa[l] * h.kt[i][l][r] * h.vt[i][l][F]) for l in range(N))
        value = value + own - sigma * sigma * beta_bar * h.A[i][r][F]
    return value


def _unit(N: int, D: int, l0: int, E0: int) -> list[list[int]]:
    return [[int(l == l0 and E == E0) for E in range(D)] for l in range(N)]


def check_identity(sizes: Sequence[tuple[int, int, int]] = SIZES, seed: int = 0) -> Check:
    """Closed form minus d_{t,r} J_il0[F, E0] (part (e)'s polynomial, differentiated by the chain rule) at every
    row (i, F), unit weight (l0, E0) and coordinate (t, r): PROVED if all are the zero polynomial."""
    rng = np.random.default_rng(seed)
    count = 0
    for size in sizes:
        N, D, d = size
        h = symbolic_head(N, D, d)
        for i, F, l0, E0 in itertools.product(range(N), range(D), range(N), range(D)):
            s = _unit(N, D, l0, E0)
            J = jacobian_formula(h, i, l0, F, E0)
            for t, r in itertools.product(range(N), range(D)):
                count += 1
                difference = row_derivative_formula(h, i, F, s, t, r) - h.deriv(J, t, r)
                if _vanishes(difference):
                    continue
                witness = _nonzero_at(difference, h, rng)
                what = f"row (i, F) = {(i, F)}, unit weight {(l0, E0)}, coordinate {(t, r)}, (N, D, d) = {size}"
                if witness is not None:
                    return Status.UNPROVED, f"{what}: closed form - derivative = {witness}"
                return Status.SAMPLED, f"{what}: SymPy did not reduce it to 0; exactly 0 at 3 random rational points"
    return Status.PROVED, (f"d phi: closed form - chain-rule derivative of J is the zero polynomial at all {count} "
                           f"(row, unit weight, coordinate) triples, (N, D, d) in {list(sizes)}; every weight s by "
                           f"linearity")


def check_shipped(cases: Sequence[tuple[int, int, int]] = ((3, 2, 1), (4, 3, 2), (2, 4, 4)), seed: int = 0) -> Check:
    """The shipped interval `row_derivatives` at a point box contains the float64 closed form (one head, biases)."""
    import torch

    from certify.attention import AttentionWeights
    from certify.bounds.local._enclosure import numpy_weights
    from certify.bounds.local._row_functional import row_derivatives
    from certify.interval import Interval

    rng = np.random.default_rng(seed)
    worst = 0.0
    for N, D, d in cases:
        m = lambda *shape: rng.standard_normal(shape) / math.sqrt(D)  # noqa: E731
        WQ, WK, WV, WO, bQ, bK, bV, bO = m(D, d), m(D, d), m(D, d), m(d, D), m(d), m(d), m(d), m(D)
        X = rng.standard_normal((N, D))
        weights = AttentionWeights("dp", *(torch.from_numpy(w)[None] for w in (WQ, WK, WV)), torch.from_numpy(WO),
                                   *(torch.from_numpy(b)[None] for b in (bQ, bK, bV)), torch.from_numpy(bO))
        signs = rng.choice([-1.0, 0.0, 1.0], size=(N, D, N, D))
        shipped = row_derivatives(Interval(X, X), X, numpy_weights(weights), signs)
        h = Head(X.tolist(), WQ.tolist(), WK.tolist(), WV.tolist(), WO.tolist(), bQ.tolist(), bK.tolist(),
                 bV.tolist(), 1 / math.sqrt(d))
        closed = np.array([[[[row_derivative_formula(h, i, F, signs[i, F].tolist(), t, r) for r in range(D)]
                             for t in range(N)] for F in range(D)] for i in range(N)])
        slack = 1e-12 * (1 + float(np.abs(closed).max()))
        outside = np.maximum(shipped.lo - closed, closed - shipped.hi).max()
        worst = max(worst, float(outside))
        if outside > slack:
            return numeric(False, f"the shipped row_derivatives misses the closed form by {outside:.3g} at "
                                  f"(N, D, d) = {(N, D, d)}")
    return numeric(True, f"the shipped row_derivatives (point boxes) contains the closed form on {len(cases)} random "
                         f"biased layers, (N, D, d) in {list(cases)} (largest excess {worst:.2g})")


def prove() -> ProofResult:
    return combine(CLAIM, [check_identity()], scope=SCOPE, lemmas=LEMMAS, cross_checks=[check_shipped()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
