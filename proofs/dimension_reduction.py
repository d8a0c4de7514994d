"""Claim (MATH.md section 2; certify/bounds/closed_form/_dimension_reduction.py): for every d >= N >= 2,

    c_2(N, N - 1) <= c_2(N, d) <= max(c_2(N, N - 1), sqrt((N + 1) / 2)).

The argument: let S be the span of the differences of the points y_1..y_N in R^d. For every w orthogonal to S, each
block of the core Jacobian M_ij = P_ij I + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T satisfies

    (A)   M_ij w = P_ij w   and   w^T M_ij = P_ij w^T,

so M (and M^T) maps R^N (x) S and R^N (x) S-perp into themselves and acts on the second as P (x) I:
||M||_2 = max(||M on R^N (x) S||_2, ||P||_2) (an orthogonal direct sum of invariant subspaces). The first term is the
value of the same configuration rotated into R^k, k = dim S <= N - 1 (lemma: M is rotation equivariant and ||.||_2
rotation invariant), at most c_2(N, k) <= c_2(N, N - 1) (the same block form with zero coordinates appended shows the
constant does not decrease with d, which also gives the lower inequality). The second:

    (B)   P_ij <= P_ii  (P_ii - P_ij = (1 - exp(-||y_i - y_j||^2)) / Z >= 0), so P_ij <= 1/2 for j != i, every column
          of P sums to at most 1 + (N - 1)/2 and ||P||_2 <= sqrt(||P||_1 ||P||_inf) <= sqrt((N + 1)/2).

SymPy proves (A) as a polynomial identity (each rank-one term applied to w by associativity), for any row-stochastic
weights P (so for the softmax in particular):
coordinate-free in d = 3 (w symbolic, the points c + a_k (w x p) + b_k (w x q) with p, q, c symbolic: every
configuration whose differences are orthogonal to w), N = 2, 3; and in coordinates (w = e_d, points with last
coordinate 0) for d = 2..5, N = 2..4. (B): the derivative of 1 - exp(-s) is exp(-s) > 0 and the value at s = 0 is 0,
so 1 - exp(-s) >= 0 for s >= 0 (SymPy proves the sign and the value); the column sum and the norm step are the
standard facts named as lemmas. The step from (A) to the norm identity uses only that the same one-coordinate
identity holds for each direction orthogonal to S, so the code applies it for every d >= N; SymPy checked d <= 5.

Cross-check (SAMPLED, can only lower the status): the shipped float core Jacobian (`core_jacobian_float`) on random
configurations of R^{N-1} embedded in R^d (N = 2..4, d = N..6): ||M||_2 = max(||M'||_2, ||P||_2) to 1e-12, and
||P||_2 <= sqrt((N + 1)/2).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, Status, combine

CLAIM = ("c_2(N, N - 1) <= c_2(N, d) <= max(c_2(N, N - 1), sqrt((N + 1)/2)) for d >= N: every direction w orthogonal "
         "to the points' differences gives M_ij w = P_ij w and w^T M_ij = P_ij w^T, and ||P||_2 <= sqrt((N + 1)/2)")
SCOPE = {"(A), coordinate-free": "d = 3, N in {2, 3}", "(A), coordinates": "d in {2, ..., 5}, N in {2, 3, 4}",
         "(B)": "every N >= 2", "P": "any row-stochastic weights (the softmax included)"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("M is rotation equivariant: M(Y Q) = (I (x) Q^T) M(Y) (I (x) Q) for orthogonal Q (MATH.md section 2)",
          "||A (+) B||_2 = max(||A||_2, ||B||_2) for an orthogonal direct sum of invariant subspaces",
          "||P||_2 <= sqrt(||P||_1 ||P||_inf) (Hoelder / Riesz-Thorin)")


def block_products(Y: list[sp.Matrix], P: sp.Matrix, w: sp.Matrix) -> dict[tuple[int, int], tuple[sp.Matrix, sp.Matrix]]:
    """(M_ij w, w^T M_ij) for M_ij = P_ij I + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T (MATH.md section 2),
    Cov_i = sum_k P_ik (y_k - ybar_i)(y_k - ybar_i)^T, with weights P; each rank-one term applied to w by
    associativity ((a b^T) w = a (b^T w)), its scalar factor expanded first."""
    N, d = len(Y), Y[0].rows
    products = {}
    for i in range(N):
        ybar = sum((P[i, k] * Y[k] for k in range(N)), sp.zeros(d, 1))
        centred = [Y[k] - ybar for k in range(N)]
        along = [sp.expand((c.T * w)[0, 0]) for c in centred]  # (y_k - ybar_i)^T w
        cov_w = sum((P[i, k] * centred[k] * along[k] for k in range(N)), sp.zeros(d, 1))  # Cov_i w = w^T Cov_i
        for j in range(N):
            gap = sp.expand(((Y[i] - Y[j]).T * w)[0, 0])  # (y_i - y_j)^T w
            right = P[i, j] * w + 2 * P[i, j] * centred[j] * gap
            left = P[i, j] * w.T + 2 * P[i, j] * along[j] * (Y[i] - Y[j]).T
            if i == j:
                right, left = right + 2 * cov_w, left + 2 * cov_w.T
            products[i, j] = right, left
    return products


def stochastic_weights(N: int) -> sp.Matrix:
    """Row-stochastic symbolic weights: p_ij free for j < N - 1, the last entry of each row 1 minus the others."""
    P = sp.Matrix(N, N, lambda i, j: sp.Symbol(f"p_{i}{j}", real=True))
    for i in range(N):
        P[i, N - 1] = 1 - sum(P[i, j] for j in range(N - 1))
    return P


def orthogonal_identity(Y: list[sp.Matrix], w: sp.Matrix, P: sp.Matrix) -> bool:
    """(A): every block satisfies M_ij w - P_ij w = 0 and w^T M_ij - P_ij w^T = 0 identically."""
    for (i, j), (right, left) in block_products(Y, P, w).items():
        differences = list((right - P[i, j] * w).applyfunc(sp.expand)) + list((left - P[i, j] * w.T).applyfunc(sp.expand))
        if any(entry != 0 for entry in differences):
            return False
    return True


def coordinate_free(N: int) -> Check:
    """(A) in d = 3 for every configuration whose differences are orthogonal to a symbolic w."""
    w = sp.Matrix(sp.symbols("w1:4", real=True))
    p, q, c = (sp.Matrix(sp.symbols(f"{name}1:4", real=True)) for name in ("p", "q", "c"))
    u, v = w.cross(p), w.cross(q)  # together they span w-perp for generic p, q
    Y = [c + sp.Symbol(f"a{k}", real=True) * u + sp.Symbol(f"b{k}", real=True) * v for k in range(N)]
    ok = orthogonal_identity(Y, w, stochastic_weights(N))
    return fact(ok, f"d = 3, N = {N}, y_k = c + a_k (w x p) + b_k (w x q), w, p, q, c symbolic: "
                    "M_ij w - P_ij w and w^T M_ij - P_ij w^T are the zero polynomial")


def in_coordinates(N: int, d: int) -> Check:
    """(A) with w = e_d and every point in the hyperplane of the first d - 1 axes."""
    Y = [sp.Matrix([sp.Symbol(f"y{k}_{a}", real=True) for a in range(d - 1)] + [0]) for k in range(N)]
    w = sp.Matrix([0] * (d - 1) + [1])
    ok = orthogonal_identity(Y, w, stochastic_weights(N))
    return fact(ok, f"d = {d}, N = {N}, last coordinate 0, w = e_d: the identity holds")


def softmax_order() -> Check:
    """(B): P_ii - P_ij = (1 - exp(-s)) / Z with s = ||y_i - y_j||^2 >= 0 is >= 0."""
    s = sp.Symbol("s", nonnegative=True)
    gap = 1 - sp.exp(-s)
    ok = sp.diff(gap, s).is_positive is True and gap.subs(s, 0) == 0
    return fact(ok, "1 - exp(-s): derivative exp(-s) > 0 and value 0 at s = 0, so >= 0 for s >= 0 (P_ij <= P_ii)")


def column_sums() -> Check:
    """(B): with P_ij <= 1/2 off the diagonal, a column sums to at most 1 + (N - 1)/2 = (N + 1)/2."""
    N = sp.Symbol("N", positive=True, integer=True)
    return fact(sp.simplify(1 + (N - 1) / 2 - (N + 1) / 2) == 0, "1 + (N - 1)/2 = (N + 1)/2")


def shipped_cross_check(samples: int = 40, seed: int = 0) -> Check:
    from certify.bounds.closed_form._dimension_reduction import embed, perpendicular_bound
    from certify.bounds.global_l2._enclosure import core_jacobian_float

    rng = np.random.default_rng(seed)
    worst = 0.0
    for N in (2, 3, 4):
        for d in range(N, 7):
            for _ in range(samples):
                Y = rng.normal(size=(N, N - 1)) * rng.uniform(0.2, 2.0)
                full = np.linalg.norm(core_jacobian_float(embed(Y, d)[None])[0], 2)
                reduced = np.linalg.norm(core_jacobian_float(Y[None])[0], 2)
                P = np.exp(-((Y[:, None] - Y[None]) ** 2).sum(-1))
                P /= P.sum(1, keepdims=True)
                p_norm = np.linalg.norm(P, 2)
                worst = max(worst, abs(full - max(reduced, p_norm)))
                if p_norm > perpendicular_bound(N) or abs(full - max(reduced, p_norm)) > 1e-12:
                    return Status.UNPROVED, f"N = {N}, d = {d}: ||M|| {full}, reduced {reduced}, ||P|| {p_norm}"
    return Status.SAMPLED, (f"shipped core_jacobian_float at {samples} configurations per (N, d), N = 2..4, d = N..6: "
                            f"||M||_2 = max(||M'||_2, ||P||_2) within {worst:.1e}, ||P||_2 <= sqrt((N + 1)/2)")


def prove() -> ProofResult:
    parts = [coordinate_free(N) for N in (2, 3)]
    parts += [in_coordinates(N, d) for N in (2, 3, 4) for d in range(2, 6)]
    parts += [softmax_order(), column_sums()]
    return combine(CLAIM, parts, scope=SCOPE, lemmas=LEMMAS, cross_checks=[shipped_cross_check()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
