"""Claim: the simplex row sums of `certify/bounds/local/_simplex.py` bound the row sums of a DP layer's Jacobian
over a box (MATH.md section 7; issue 15).

Setting. One head of dot-product attention with biases (the notation of `slopes_derivatives`): q_i = W_Q^T x_i + b_Q,
k_i = W_K^T x_i + b_K, v_i = W_V^T x_i + b_V, sigma = 1/sqrt(d), P = softmax_rows(sigma q k^T), vbar_i =
sum_k P_ik v_k, u_il = W_O^T (v_l - vbar_i), w_i = W_K q_i, kt_il = W_Q (k_l - k_i), VO[F, E] = (W_V W_O)[E, F].

Parts, each proved by SymPy:

(1) The linear-program bound. For P_k in [lo_k, hi_k] with sum_k P_k = 1, any z and t, and a_k = (z_k - t)_+,
    b_k = (t - z_k)_+ (so z_k - t = a_k - b_k):
        t + sum_k (hi_k a_k - lo_k b_k) - sum_k P_k z_k = sum_k [(hi_k - P_k) a_k + (P_k - lo_k) b_k] >= 0.
    SymPy proves the per-term identity hi a - lo b - P (a - b) = (hi - P) a + (P - lo) b, its sign (every factor
    nonnegative) and t + sum_k P_k (z_k - t) = sum_k P_k z_k under sum_k P_k = 1 (K = 4; any K by linearity).
(2) The score differences' expansion about a centre C (delta = X - C): with L[i, j, k] = sigma q_i . (k_k - k_j),
        L(X) - L(C) = sigma delta_i^T W_Q (k_k(C) - k_j(C)) + sigma q_i(C)^T W_K^T (delta_k - delta_j)
                      + sigma delta_i^T W_Q W_K^T (delta_k - delta_j),
    every (i, j, k) at N = 3, D = 2, d = 2 with generic symbols and biases (the code's radius is the triangle
    inequality on each term, |delta| <= r entrywise).
(3) The Jacobian rows. `slopes_derivatives` (e) gives J_il[F, E] = P_il VO[F, E] + sigma P_il u_il[F] w_i[E]
    + delta_il sigma A_i[E, F], A_i = sum_l P_il W_Q (k_l - kbar_i) u_il^T. SymPy proves, under sum_l P_il = 1
    (N = 3, d = 2, D = 2, generic symbols and biases): sum_l P_il u_il = 0, hence A_i may use k_i for kbar_i
    (A_i[E, F] = sum_l P_il kt_il[E] u_il[F], the code's diag_i); u_il = sum_k P_ik W_O^T W_V^T (x_l - x_k) (the
    code's u from the differences U_l - U_k); and sigma W_O^T C_i K W_Q^T = sigma sum_l P_il u_il kt_il^T with
    C_i K = sum_l P_il (v_l - vbar_i)(k_l - k_i)^T (the covariance form).

From (3) and the triangle inequality, sum_{l, E} |J_il[F, E]| <= sum_l P_il (g_il[F] + z_il[F]) with the code's g, z
(module docstring), and <= sum_l P_il g_il[F] + sum_E |diag_i[F, E]|, and <= sum_{l != i} P_il g_il[F] +
sum_E |J_ii[F, E]|; summed over heads; each sum over l bounded by (1) with the enclosures of P and of g, z. The
entrywise enclosure `dp_simplex_jacobian_enclosure` is the decomposition (3) evaluated in interval arithmetic. Not
covered here: that the interval enclosures contain the values and that the float code rounds outward (the tests
check both against attained values, tests/test_local_simplex.py).

Cross-check of the shipped code (SAMPLED; it can only lower the status): `dp_row_sums` on random biased layers and
boxes against |J(X)| row sums attained at random points and corners.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from proofs._check import Check, check_nonnegative, fact, numeric
from proofs._result import ProofResult, Status, combine

CLAIM = ("the simplex row sums of certify/bounds/local/_simplex.py: the linear-program bound (1) over the softmax "
         "simplex, the score differences' expansion about the box centre, and the Jacobian row decomposition they "
         "bound (one DP head with biases, generic symbols)")
SCOPE = {"(1)": "any K (per-term identity and sign; the sum identity at K = 4)",
         "(2), (3)": "(N, D, d) = (3, 2, 2), generic symbols and biases",
         "enclosures and rounding": "not covered (tested against attained values)"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("slopes_derivatives", "triangle inequality")


def check_linear_program(K: int = 4) -> list[Check]:
    P, hi, lo, t = sp.symbols("P hi lo t", real=True)
    a, b, gap_hi, gap_lo = sp.symbols("a b u v", nonnegative=True)  # u = hi - P >= 0, v = P - lo >= 0
    per_term = sp.expand(hi * a - lo * b - P * (a - b) - ((hi - P) * a + (P - lo) * b))
    Ps, zs = sp.symbols(f"P1:{K}", real=True), sp.symbols(f"z1:{K + 1}", real=True)
    weights = [*Ps, 1 - sum(Ps)]  # sum_k P_k = 1
    total = sp.expand(t + sum(p * (z - t) for p, z in zip(weights, zs)) - sum(p * z for p, z in zip(weights, zs)))
    return [
        fact(per_term == 0, "(1) any K, per term: hi a - lo b - P (a - b) = (hi - P) a + (P - lo) b"),
        check_nonnegative(gap_hi * a + gap_lo * b, [gap_hi, a, gap_lo, b],
                          "(1) per term: (hi - P) a + (P - lo) b >= 0 for P in [lo, hi], a, b >= 0",
                          lambda rng: rng.uniform(0, 1, 4)),
        fact(total == 0, f"(1) K={K}: t + sum_k P_k (z_k - t) = sum_k P_k z_k when sum_k P_k = 1"),
    ]


def _head(N: int, D: int, d: int):
    """Generic symbols for one DP head with biases and a centre C: (X, C, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V)."""
    M = lambda name, rows, cols: sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}_{r}{c}", real=True))  # noqa: E731
    return (M("x", N, D), M("c", N, D), M("wq", D, d), M("wk", D, d), M("wv", D, d), M("wo", d, D), M("bq", d, 1),
            M("bk", d, 1), M("bv", d, 1))


def check_expansion(N: int = 3, D: int = 2, d: int = 2, drop_quadratic: bool = False) -> Check:
    X, C, WQ, WK, _, _, bQ, bK, _ = _head(N, D, d)
    sigma = sp.Symbol("sigma", positive=True)
    q = lambda Y, i: WQ.T * Y[i, :].T + bQ  # noqa: E731
    k = lambda Y, i: WK.T * Y[i, :].T + bK  # noqa: E731
    L = lambda Y, i, j, m: sigma * (q(Y, i).T * (k(Y, m) - k(Y, j)))[0, 0]  # noqa: E731
    delta = X - C
    worst = 0
    for i in range(N):
        for j in range(N):
            for m in range(N):
                di, dj, dm = delta[i, :].T, delta[j, :].T, delta[m, :].T
                form = (sigma * (di.T * WQ * (k(C, m) - k(C, j)))[0, 0]
                        + sigma * (q(C, i).T * WK.T * (dm - dj))[0, 0])
                if not drop_quadratic:
                    form += sigma * (di.T * WQ * WK.T * (dm - dj))[0, 0]
                if sp.expand(L(X, i, j, m) - L(C, i, j, m) - form) != 0:
                    worst += 1
    return fact(worst == 0, f"(2) N={N}, D={D}, d={d}: L(X) - L(C) = first-order terms + sigma delta_i^T W_Q W_K^T "
                            f"(delta_k - delta_j), every (i, j, k)" + (f" ({worst} entries differ)" if worst else ""))


def check_rows(N: int = 3, D: int = 2, d: int = 2) -> list[Check]:
    X, _, WQ, WK, WV, WO, _, bK, bV = _head(N, D, d)
    Ps = sp.symbols(f"p1:{N}", real=True)
    P = [*Ps, 1 - sum(Ps)]  # one row of the softmax, sum_l P_il = 1
    i = 0
    v = [WV.T * X[l, :].T + bV for l in range(N)]
    kk = [WK.T * X[l, :].T + bK for l in range(N)]
    vbar = sum((P[l] * v[l] for l in range(N)), sp.zeros(d, 1))
    kbar = sum((P[l] * kk[l] for l in range(N)), sp.zeros(d, 1))
    u = [WO.T * (v[l] - vbar) for l in range(N)]
    zero = lambda m: all(sp.expand(e) == 0 for e in m)  # noqa: E731
    mean = sum((P[l] * u[l] for l in range(N)), sp.zeros(D, 1))
    A_kbar = sum((P[l] * WQ * (kk[l] - kbar) * u[l].T for l in range(N)), sp.zeros(D, D))
    A_ki = sum((P[l] * WQ * (kk[l] - kk[i]) * u[l].T for l in range(N)), sp.zeros(D, D))
    from_differences = [sum((P[m] * WO.T * WV.T * (X[l, :] - X[m, :]).T for m in range(N)), sp.zeros(D, 1))
                        for l in range(N)]
    CK = sum((P[l] * (v[l] - vbar) * (kk[l] - kk[i]).T for l in range(N)), sp.zeros(d, d))
    tag = f"(3) N={N}, D={D}, d={d}, biases, sum_l P_il = 1"
    return [
        fact(zero(mean), f"{tag}: sum_l P_il u_il = 0"),
        fact(zero(A_kbar - A_ki), f"{tag}: A_i with kbar_i equals A_i with k_i (the code's diag_i)"),
        fact(all(zero(u[l] - from_differences[l]) for l in range(N)),
             f"{tag}: u_il = sum_k P_ik W_O^T W_V^T (x_l - x_k)"),
        fact(zero(WO.T * CK * WQ.T - A_ki.T), f"{tag}: W_O^T C_i K W_Q^T = sum_l P_il u_il kt_il^T"),
    ]


def check_shipped(layers: int = 4, points: int = 64, seed: int = 0) -> Check:
    """`dp_row_sums` >= the row sums of |J(X)| at random points and corners of random boxes (float64). SAMPLED."""
    import torch

    from certify.attention import AttentionWeights
    from certify.bounds.local._enclosure import numpy_weights
    from certify.bounds.local._simplex import dp_row_sums
    from certify.interval import Interval
    from certify.jacobian import jacobian

    rng = np.random.default_rng(seed)
    worst = 0.0
    for case in range(layers):
        H, d, N = 1 + case % 2, 2, 3 + case % 2
        D = H * d
        t = lambda *shape: torch.from_numpy(rng.standard_normal(shape) * 1.5 / math.sqrt(D))  # noqa: E731
        weights = AttentionWeights("dp", t(H, D, d), t(H, D, d), t(H, D, d), t(D, D), b_Q=t(H, d), b_K=t(H, d),
                                   b_V=t(H, d), b_O=t(D))
        X0, eps = rng.standard_normal((N, D)), [1e-3, 0.1, 0.5, 1.0][case]
        bound = dp_row_sums(Interval(X0 - eps, X0 + eps), numpy_weights(weights))
        X = X0 + eps * np.concatenate([rng.uniform(-1, 1, (points, N, D)), rng.choice([-1.0, 1.0], (points, N, D))])
        J = jacobian(torch.from_numpy(X), weights).numpy().reshape(len(X), N * D, N * D)
        attained = np.abs(J).sum(axis=-1).max(axis=0).reshape(N, D)
        worst = max(worst, float(np.max(attained / bound)))
        if not np.all(attained <= bound):
            return numeric(False, f"shipped dp_row_sums below an attained |J| row sum (H={H}, N={N}, eps={eps}): "
                                  f"ratio {worst:.6g}")
    return numeric(True, f"shipped dp_row_sums >= attained |J| row sums on {layers} random biased layers, "
                         f"{2 * points} points each (max attained / bound {worst:.3g})")


def prove(expansion: Check | None = None) -> ProofResult:
    parts = [*check_linear_program(), expansion or check_expansion(), *check_rows()]
    return combine(CLAIM, parts, scope=SCOPE, lemmas=LEMMAS, cross_checks=[check_shipped()])


INJECTIONS = {"bound": lambda: prove(check_expansion(drop_quadratic=True))}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
