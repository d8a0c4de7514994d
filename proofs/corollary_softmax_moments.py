"""Claim (MATH.md section 4, Corollary): with P_ij = softmax_j(-z_j), z_j = ||y_i - y_j||^2 / sqrt(d), and
ybar_i = sum_j P_ij y_j, each of the following is <= sqrt(d) W, W = W_0((N-1)/e):

  (a) sum_j P_ij ||y_j - y_i||^2,   (b) sum_j P_ij ||y_j - ybar_i||^2,   (c) sum_j P_ij ||y_j - ybar_i|| ||y_i - y_j||.

Proof for every N >= 2, d >= 1 (SymPy proves each per-term identity; the sums follow by linearity of finite sums
and sum_j p_j = 1; the whole identities are also checked at N = 3, d = 2 with generic symbols), PROVED-MODULO the
Lemma (`lemma_softmax_bound`):
(a) = sqrt(d) sum_j p_j z_j <= sqrt(d) W by the Lemma (z_j >= 0, z_i = 0).
(b) = (a) - ||ybar_i - y_i||^2 (variance about the mean <= second moment about y_i), so (b) <= (a).
(c) <= sqrt((b)(a)) <= (a) by weighted Cauchy-Schwarz: (sum p a^2)(sum p b^2) - (sum p a b)^2 =
    1/2 sum_{j,k} p_j p_k (a_j b_k - a_k b_j)^2 >= 0 (weighted Lagrange identity).
"""

from __future__ import annotations

import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, Status, combine

CLAIM = ("Corollary: sum_j P_ij ||y_j - y_i||^2, sum_j P_ij ||y_j - ybar_i||^2 and sum_j P_ij ||y_j - ybar_i|| "
         "||y_i - y_j|| are each <= sqrt(d) W_0((N-1)/e)")
SCOPE = {"N": ">= 2", "d": ">= 1"}
REQUIRES = Status.PROVED_MODULO


def _weights(N: int) -> list[sp.Expr]:
    e = sp.symbols(f"e1:{N + 1}", positive=True)
    return [v / sum(e) for v in e]


def check_sizes(N: int, d: int) -> list[Check]:
    p = _weights(N)
    Y = sp.Matrix(N, d, lambda k, c: sp.Symbol(f"y_{k + 1}{c + 1}", real=True))
    y = [Y[k, :].T for k in range(N)]
    i = 0
    ybar = sum((p[k] * y[k] for k in range(N)), sp.zeros(d, 1))
    sq = lambda v: (v.T * v)[0, 0]  # noqa: E731
    s = sp.Symbol("s", positive=True)  # sqrt(d)
    a_term = sum(p[j] * sq(y[j] - y[i]) for j in range(N))
    z = [sq(y[i] - y[j]) / s for j in range(N)]
    b_term = sum(p[j] * sq(y[j] - ybar) for j in range(N))
    parts = [
        fact(sp.simplify(a_term - s * sum(p[j] * z[j] for j in range(N))) == 0 and z[i] == 0,
             f"(a) N={N}, d={d}: sum_j P_ij ||y_j - y_i||^2 = sqrt(d) sum_j p_j z_j with z_i = 0, z_j >= 0 "
             "(then the Lemma)"),
        fact(sp.simplify(sp.together(a_term - b_term - sq(ybar - y[i]))) == 0,
             f"(b) N={N}, d={d}: (a) - (b) = ||ybar_i - y_i||^2 >= 0"),
    ]
    alpha = sp.symbols(f"alpha1:{N + 1}", nonnegative=True)
    beta = sp.symbols(f"beta1:{N + 1}", nonnegative=True)
    lagrange = (sum(p[j] * alpha[j] ** 2 for j in range(N)) * sum(p[j] * beta[j] ** 2 for j in range(N))
                - sum(p[j] * alpha[j] * beta[j] for j in range(N)) ** 2)
    sos = sp.Rational(1, 2) * sum(p[j] * p[k] * (alpha[j] * beta[k] - alpha[k] * beta[j]) ** 2
                                  for j in range(N) for k in range(N))
    parts.append(fact(sp.simplify(sp.together(lagrange - sos)) == 0,
                      f"(c) N={N}: weighted Cauchy-Schwarz via the Lagrange identity (sum of squares), so (c) <= "
                      "sqrt((a)(b)) <= (a)"))
    return parts


def check_general() -> list[Check]:
    """The Corollary for every N >= 2 and d >= 1: per-term (per coordinate, per pair) identities proved by SymPy,
    then summed (linearity of finite sums, sum_j p_j = 1)."""
    p, q, s = sp.symbols("p_j p_k s", positive=True)
    y, yi, m = sp.symbols("y_j y_i m", real=True)
    a_j, a_k, b_j, b_k = sp.symbols("a_j a_k b_j b_k", nonnegative=True)
    per_a = sp.expand(p * (y - yi) ** 2 - s * p * ((y - yi) ** 2 / s))
    per_b = sp.expand(p * (y - yi) ** 2 - p * (y - m) ** 2 - p * (m - yi) ** 2 - 2 * p * (y - m) * (m - yi))
    per_pair = sp.expand(sp.Rational(1, 2) * p * q * (a_j * b_k - a_k * b_j) ** 2
                         - (sp.Rational(1, 2) * (p * a_j ** 2) * (q * b_k ** 2) + sp.Rational(1, 2) * (q * a_k ** 2) * (p * b_j ** 2)
                            - (p * a_j * b_j) * (q * a_k * b_k)))
    return [
        fact(per_a == 0, "(a) any N, d: per term and coordinate, P_ij (y_j - y_i)_c^2 = sqrt(d) P_ij z_j-part, so "
                         "(a) = sqrt(d) sum_j P_ij z_j with z_i = 0, z_j >= 0: <= sqrt(d) W by the Lemma"),
        fact(per_b == 0, "(b) any N, d: per term and coordinate, p (y - c)^2 = p (y - m)^2 + p (m - c)^2 + 2 p (y - m)(m - c) "
                         "(c = y_i, m = ybar_i); summed over j the last term is 2 (m - m sum_j p_j)(m - c) = 0, so "
                         "(a) - (b) = ||ybar_i - y_i||^2 >= 0"),
        fact(per_pair == 0, "(c) any N: per pair (j, k), 1/2 p_j p_k (a_j b_k - a_k b_j)^2 = 1/2 p_j a_j^2 p_k b_k^2 + "
                            "1/2 p_k a_k^2 p_j b_j^2 - p_j a_j b_j p_k a_k b_k; summed over all (j, k): (sum p a^2)(sum p b^2) - "
                            "(sum p a b)^2 >= 0 (weighted Cauchy-Schwarz), so (c) <= sqrt((b)(a)) <= (a)"),
    ]


def prove() -> ProofResult:
    return combine(CLAIM, check_general() + check_sizes(3, 2), scope=SCOPE, lemmas=("lemma_softmax_bound",))


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
