"""Claim: the second-derivative forms the global L2 branch and bound encloses (MATH.md sections 2 and 7).

``certify/bounds/global_l2/_enclosure.py`` encloses the Hessian of the L2 core Jacobian M over a box of parameters
theta in forms chosen to avoid interval dependency. Each form is an identity:

(H) softmax Hessian. For logits f_1..f_N (smooth functions of theta) and P_j = e^{f_j} / sum_k e^{f_k},

        d^2 P_j = P_j [ m_j m_j^T - Cov_P(grad f) + d^2 f_j - sum_k P_k d^2 f_k ],
        m_j = grad f_j - sum_k P_k grad f_k = sum_k P_k (grad f_j - grad f_k),
        Cov_P(grad f) = 1/2 sum_{j,k} P_j P_k (grad f_j - grad f_k)(grad f_j - grad f_k)^T.

    (In the code f_j = -||y_i - y_j||^2 for row i, grad f_j = a_ij and d^2 f_j = Qc[i, j], constant.)
(C) covariance. With ybar = sum_k P_k y_k: sum_{k,l} P_k P_l (y_k - y_l)(y_k - y_l)^T = 2 sum_k P_k (y_k - ybar)
    (y_k - ybar)^T (the pairwise form of 2 Cov used for values, the centred form for second derivatives).
(U) y_j - ybar_i = (y_j - y_i) - sum_k P_ik (y_k - y_i), so d^2 (y_j - ybar_i) = -d^2 w_i with w_i = sum_k P_ik
    (y_k - y_i), independent of j (y linear in theta).

Checks. (H) is PROVED for every N: SymPy differentiates P_j = e^{f_j} / Z with the rules d Z = Z E_P[df] and
d E_P[g] = E_P[dg] + Cov_P(g, df), which follow from linearity of the sums (see `_softmax_hessian_any_N`); and
directly for N = 2 logits that are arbitrary (undefined) functions of two parameters; for N = 6 with random
quadratic logits it is SAMPLED (a cross-check, which can only lower the status) at random points against mpmath second differences (30 digits). (C) is PROVED for
N = 2..4 in d = 1 and N = 3 in d = 2 with symbolic weights summing to 1. (U) is immediate from sum_k P_ik = 1 and
PROVED for N = 3 by SymPy in the same way.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp

from proofs._check import fact, numeric
from proofs._result import ProofResult, Status, combine

CLAIM = ("d^2 softmax_j = P_j [m_j m_j^T - Cov_P(grad f) + d^2 f_j - sum_k P_k d^2 f_k]; "
         "sum_kl P_k P_l (y_k - y_l)(y_k - y_l)^T = 2 sum_k P_k (y_k - ybar)(y_k - ybar)^T; "
         "d^2 (y_j - ybar_i) = -d^2 sum_k P_ik (y_k - y_i)")


def _softmax_hessian_identity(N: int) -> tuple[Status, str]:
    x = sp.symbols("x1 x2")
    f = [sp.Function(f"f{k}")(*x) for k in range(N)]
    Z = sum(sp.exp(fk) for fk in f)
    P = [sp.exp(fk) / Z for fk in f]
    grad = [[sp.diff(fk, v) for v in x] for fk in f]
    hess = [[[sp.diff(fk, a, b) for b in x] for a in x] for fk in f]
    j = 0
    worst = []
    for a in range(2):
        for b in range(2):
            lhs = sp.diff(P[j], x[a], x[b])
            m = [grad[j][c] - sum(P[k] * grad[k][c] for k in range(N)) for c in range(2)]
            cov = sp.Rational(1, 2) * sum(P[k] * P[l] * (grad[k][a] - grad[l][a]) * (grad[k][b] - grad[l][b])
                                          for k in range(N) for l in range(N))
            curvature = hess[j][a][b] - sum(P[k] * hess[k][a][b] for k in range(N))
            rhs = P[j] * (m[a] * m[b] - cov + curvature)
            worst.append(sp.simplify(sp.expand(sp.powsimp(lhs - rhs))))
    ok = all(w == 0 for w in worst)
    return fact(ok, f"(H) N = {N}, two parameters, arbitrary logits f_k(x1, x2): d^2 P_1/dx_a dx_b - formula "
                    f"simplifies to {'0 for all a, b' if ok else worst}")


def _softmax_hessian_any_N() -> tuple[Status, str]:
    """(H) for every N. With Z = sum_k e^{f_k} and E_a = E_P[d_a f], linearity of the sum gives d_a Z = Z E_a (R1),
    hence d_a P_j = P_j m_j,a; and for any g, d_b E_P[g] = E_P[d_b g] + sum_k P_k g_k m_k,b = E_P[d_b g] +
    Cov_P(g, d_b f) (R2: sum_k P_k = 1). SymPy then differentiates P_j = e^{f_j} / Z twice with the rules
    d_a Z -> Z E_a and d_b E_a -> E_P[d_ab f] + Cov_ab (R2 with g = d_a f): both sides agree for all a, b."""
    x = sp.symbols("x1 x2")
    f, Z = sp.Function("f")(*x), sp.Function("Z")(*x)
    E = [sp.Function(f"E{a}")(*x) for a in range(2)]
    rules = {sp.Derivative(Z, x[a]): Z * E[a] for a in range(2)}
    P = sp.exp(f) / Z
    m = [sp.diff(f, x[c]) - E[c] for c in range(2)]
    ok = True
    for a in range(2):
        ok &= sp.simplify(sp.diff(P, x[a]).subs(rules) - P * m[a]) == 0
        for b in range(2):
            mean_hessian, cov = sp.Symbol(f"Hbar_{a}{b}"), sp.Symbol(f"Cov_{min(a, b)}{max(a, b)}")
            second = sp.diff(P * m[a], x[b]).subs(rules).subs({sp.Derivative(E[a], x[b]): mean_hessian + cov})
            rhs = P * (m[a] * m[b] - cov + sp.diff(f, x[a], x[b]) - mean_hessian)
            ok &= sp.simplify(second.subs(rules) - rhs) == 0
    p_k, p_l, y_k, y_l = sp.symbols("p_k p_l y_k y_l", real=True)
    pair = sp.expand(sp.Rational(1, 2) * p_k * p_l * (y_k - y_l) ** 2
                     - (sp.Rational(1, 2) * (p_k * y_k ** 2) * p_l + sp.Rational(1, 2) * (p_l * y_l ** 2) * p_k
                        - (p_k * y_k) * (p_l * y_l)))
    return fact(ok and pair == 0, "(H) any N: d_a P_j = P_j m_j,a and d_ab P_j = P_j [m_j,a m_j,b - Cov_ab + d_ab f_j - "
                                  "E_P[d_ab f]] from d Z = Z E_P[df] and d E_P[g] = E_P[dg] + Cov_P(g, df) (linearity); "
                                  "Cov_P = 1/2 sum_kl P_k P_l (.)(.)^T by the per-pair identity 1/2 p_k p_l (y_k - y_l)^2 = "
                                  "1/2 p_k y_k^2 p_l + 1/2 p_l y_l^2 p_k - p_k y_k p_l y_l, summed with sum_k P_k = 1")


def _softmax_hessian_numeric(N: int = 6, L: int = 3, samples: int = 20, seed: int = 0) -> tuple[Status, str]:
    """Random quadratic logits f_k(theta) = theta^T A_k theta + b_k . theta, second differences in mpmath."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    with mpmath.workdps(30):
        for _ in range(samples):
            A = rng.normal(size=(N, L, L))
            A = 0.5 * (A + np.swapaxes(A, 1, 2))
            b = rng.normal(size=(N, L))
            th = rng.normal(size=L)

            def logits(t):
                return [sum(A[k, p, q] * t[p] * t[q] for p in range(L) for q in range(L))
                        + sum(b[k, p] * t[p] for p in range(L)) for k in range(N)]

            def softmax(t):
                e = [mpmath.exp(v) for v in logits(t)]
                return [v / sum(e) for v in e]

            t0 = [mpmath.mpf(float(v)) for v in th]
            P = softmax(t0)
            grad = [[2 * sum(A[k, p, q] * t0[q] for q in range(L)) + b[k, p] for p in range(L)] for k in range(N)]
            step = mpmath.mpf("1e-8")
            for a in range(L):
                for c in range(L):
                    def shifted(sa, sc):
                        t = list(t0)
                        t[a] += sa * step
                        t[c] += sc * step
                        return softmax(t)[0]
                    fd = (shifted(1, 1) - shifted(1, -1) - shifted(-1, 1) + shifted(-1, -1)) / (4 * step**2)
                    m = [grad[0][p] - sum(P[k] * grad[k][p] for k in range(N)) for p in range(L)]
                    cov = sum(P[k] * P[l] * (grad[k][a] - grad[l][a]) * (grad[k][c] - grad[l][c])
                              for k in range(N) for l in range(N)) / 2
                    curvature = 2 * A[0, a, c] - sum(P[k] * 2 * A[k, a, c] for k in range(N))
                    formula = P[0] * (m[a] * m[c] - cov + curvature)
                    worst = max(worst, float(abs(fd - formula) / (1 + abs(formula))))
    return numeric(worst < 1e-8, f"(H) N = {N}, L = {L}: {samples} random quadratic logits and points, formula vs "
                                 f"mpmath second differences (30 digits, step 1e-8): largest relative gap {worst:.2g}")


def _covariance_identity(N: int, d: int) -> tuple[Status, str]:
    p = sp.symbols(f"p0:{N}")
    y = [sp.Matrix(sp.symbols(f"y{k}_0:{d}")) for k in range(N)]
    weights = list(p[:-1]) + [1 - sum(p[:-1])]
    ybar = sum((weights[k] * y[k] for k in range(N)), sp.zeros(d, 1))
    pairwise = sum(((weights[k] * weights[l]) * (y[k] - y[l]) * (y[k] - y[l]).T for k in range(N) for l in range(N)),
                   sp.zeros(d, d))
    centred = 2 * sum(((weights[k]) * (y[k] - ybar) * (y[k] - ybar).T for k in range(N)), sp.zeros(d, d))
    diff = (pairwise - centred).applyfunc(sp.expand)
    ok = diff == sp.zeros(d, d)
    return fact(ok, f"(C) N = {N}, d = {d}, weights summing to 1: pairwise - 2 centred covariance expands to "
                    f"{'0' if ok else diff}")


def _u_identity() -> tuple[Status, str]:
    N = 3
    p = sp.symbols(f"p0:{N}")
    y = sp.symbols(f"y0:{N}")
    weights = list(p[:-1]) + [1 - sum(p[:-1])]
    i, j = 0, 2
    ybar = sum(weights[k] * y[k] for k in range(N))
    w = sum(weights[k] * (y[k] - y[i]) for k in range(N))
    diff = sp.expand((y[j] - ybar) - ((y[j] - y[i]) - w))
    return fact(diff == 0, f"(U) N = 3: (y_j - ybar_i) - ((y_j - y_i) - w_i) expands to {diff}")


SCOPE = {"(H) N": ">= 1 (also directly at N = 2), any logits of two parameters (every entry of the Hessian)", "(C) (N, d)": "in {(2, 1), (3, 1), (4, 1), (3, 2)}",
         "(U) N": "= 3"}
REQUIRES = Status.PROVED


def prove() -> ProofResult:
    parts = [_softmax_hessian_any_N(), _softmax_hessian_identity(2)]
    parts += [_covariance_identity(N, 1) for N in (2, 3, 4)] + [_covariance_identity(3, 2)]
    parts.append(_u_identity())
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=[_softmax_hessian_numeric()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
