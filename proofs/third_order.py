"""Claim: the third-order Taylor bound of the global L2 branch and bound (MATH.md section 7;
``certify/bounds/global_l2/_mean_value.third_order_bounds``).

(P3) softmax third derivatives. For logits f_1..f_N (smooth functions of theta) and P_j = e^{f_j} / sum_k e^{f_k},
with m_j = grad f_j - sum_k P_k grad f_k and Cov = sum_k P_k m_k m_k^T,

    d^3 P_j = P_j [ m_j (x) m_j (x) m_j + sym3(m'_j (x) m_j) + m''_j ],
    m'_j  = d^2 f_j - sum_k P_k d^2 f_k - Cov,
    m''_j = d^3 f_j - sum_k P_k d^3 f_k - sum_k P_k [ m_k (x) m_k (x) m_k + sym3(d^2 f_k (x) m_k) ],

    sym3(A (x) b)_lmn = A_lm b_n + A_ln b_m + A_mn b_l. The code's logits f_j = -||y_i - y_j||^2 are quadratic in
    theta, so d^3 f = 0 there.
(R) Taylor's theorem with the Lagrange remainder, entry by entry of M (smooth in theta): for theta = c + t in the box,
    M(c + t) = M(c) + J(c) t + 1/2 t^T H(c) t + 1/6 T(xi)[t, t, t] with xi on the segment, inside the box. Hence, with
    |t_l| <= h_l, |M(c + t) - M(c) - J(c) t| <= 1/2 sum h_l h_m |H_lm(c)| + 1/6 sum h_l h_m h_n sup_box |T_lmn|, and the
    p-norm of the affine part, convex in t, is largest at a vertex of the box.

Checks. (P3) is PROVED by SymPy for N = 2 logits that are arbitrary (undefined) functions of two parameters, for the
four index patterns (lll, llm, lmm, mmm) that cover every (l, m, n) by symmetry: the difference of both sides
simplifies to 0 (N = 3 also simplifies to 0, in about a minute, too slow for every run). The algebra is the same for
every N; for N = 6 with random quadratic logits it is SAMPLED against mpmath third differences (40 digits). The
assembled bound (the third-derivative enclosure built from (P3) and the product rule
(u w)^(3) = u^(3) w + u w^(3) + sym3(u'' w') + sym3(w'' u'), the outward-rounded intervals, the point enclosures at
the centre and the vertex maximisation) is SAMPLED: on random boxes (N 2..5, d 1..2, both norms), ||M(Y)||_p at
sampled configurations, corners included, never exceeds the bound.
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath
import numpy as np
import sympy as sp

from proofs._check import fact, numeric
from proofs._result import ProofResult, Status, combine

CLAIM = ("d^3 softmax_j = P_j [m_j m_j m_j + sym3(m'_j m_j) + m''_j] (formulas in the module docstring), and "
         "max_box ||M||_p <= max_vertex ||M(c) + J(c) t||_p + ||1/2 sum h h |H(c)| + 1/6 sum h h h |T|(box)||_p")

PATTERNS = ((0, 0, 0), (0, 0, 1), (0, 1, 1), (1, 1, 1))


def _softmax_third_identity(N: int, drop_curvature: bool = False) -> tuple[Status, str]:
    x = sp.symbols("x1 x2")
    f = [sp.Function(f"f{k}")(*x) for k in range(N)]
    Z = sum(sp.exp(fk) for fk in f)
    P = [sp.exp(fk) / Z for fk in f]
    grad = [[sp.diff(fk, v) for v in x] for fk in f]
    hess = [[[sp.diff(fk, a, b) for b in x] for a in x] for fk in f]
    m = [[grad[j][a] - sum(P[k] * grad[k][a] for k in range(N)) for a in range(2)] for j in range(N)]
    cov = [[sum(P[k] * m[k][a] * m[k][b] for k in range(N)) for b in range(2)] for a in range(2)]
    m_prime = [[[hess[j][a][b] - sum(P[k] * hess[k][a][b] for k in range(N)) - cov[a][b] for b in range(2)]
                for a in range(2)] for j in range(N)]

    def sym3(A: list, v: list, a: int, b: int, c: int) -> sp.Expr:
        return A[a][b] * v[c] + A[a][c] * v[b] + A[b][c] * v[a]

    j = 0
    residues = []
    for a, b, c in PATTERNS:
        third = [sp.diff(fk, x[a], x[b], x[c]) for fk in f]
        curvature = sum(P[k] * sym3(hess[k], m[k], a, b, c) for k in range(N))
        m_second = (third[j] - sum(P[k] * third[k] for k in range(N))
                    - sum(P[k] * m[k][a] * m[k][b] * m[k][c] for k in range(N))
                    - (0 if drop_curvature else curvature))
        rhs = P[j] * (m[j][a] * m[j][b] * m[j][c] + sym3(m_prime[j], m[j], a, b, c) + m_second)
        residues.append(sp.simplify(sp.expand(sp.powsimp(sp.diff(P[j], x[a], x[b], x[c]) - rhs))))
    ok = all(r == 0 for r in residues)
    return fact(ok, f"(P3) N = {N}, two parameters, arbitrary logits f_k(x1, x2): d^3 P_1 - formula simplifies to "
                    f"{'0 for the index patterns lll, llm, lmm, mmm' if ok else 'a nonzero expression'}"
                    + (" [injected: sym3(d^2 f_k m_k) term dropped]" if drop_curvature else ""))


def _softmax_third_numeric(N: int = 6, L: int = 3, samples: int = 8, seed: int = 0) -> tuple[Status, str]:
    """Random quadratic logits f_k(theta) = theta^T A_k theta + b_k . theta (d^3 f = 0), third differences in mpmath."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    patterns = ((0, 0, 0), (0, 0, 1), (0, 1, 2), (1, 2, 2))
    with mpmath.workdps(40):
        for _ in range(samples):
            A = rng.normal(size=(N, L, L))
            A = 0.5 * (A + np.swapaxes(A, 1, 2))
            b = rng.normal(size=(N, L))
            t0 = [mpmath.mpf(float(v)) for v in rng.normal(size=L)]

            def softmax0(t: list) -> mpmath.mpf:
                e = [mpmath.exp(sum(A[k, p, q] * t[p] * t[q] for p in range(L) for q in range(L))
                                + sum(b[k, p] * t[p] for p in range(L))) for k in range(N)]
                return e[0] / sum(e)

            e = [mpmath.exp(sum(A[k, p, q] * t0[p] * t0[q] for p in range(L) for q in range(L))
                            + sum(b[k, p] * t0[p] for p in range(L))) for k in range(N)]
            P = [v / sum(e) for v in e]
            grad = [[2 * sum(A[k, p, q] * t0[q] for q in range(L)) + b[k, p] for p in range(L)] for k in range(N)]
            hess = [[[2 * A[k, p, q] for q in range(L)] for p in range(L)] for k in range(N)]
            m = [[grad[j][p] - sum(P[k] * grad[k][p] for k in range(N)) for p in range(L)] for j in range(N)]
            cov = [[sum(P[k] * m[k][p] * m[k][q] for k in range(N)) for q in range(L)] for p in range(L)]
            m_prime = [[hess[0][p][q] - sum(P[k] * hess[k][p][q] for k in range(N)) - cov[p][q] for q in range(L)]
                       for p in range(L)]
            step = mpmath.mpf("1e-7")
            for a, c, n in patterns:
                fd = mpmath.mpf(0)
                for sa in (1, -1):
                    for sc in (1, -1):
                        for sn in (1, -1):
                            t = list(t0)
                            t[a] += sa * step
                            t[c] += sc * step
                            t[n] += sn * step
                            fd += sa * sc * sn * softmax0(t)
                fd /= 8 * step**3

                def sym3(M: list, v: list) -> mpmath.mpf:
                    return M[a][c] * v[n] + M[a][n] * v[c] + M[c][n] * v[a]

                m_second = -sum(P[k] * (m[k][a] * m[k][c] * m[k][n] + sym3(hess[k], m[k])) for k in range(N))
                formula = P[0] * (m[0][a] * m[0][c] * m[0][n] + sym3(m_prime, m[0]) + m_second)
                worst = max(worst, float(abs(fd - formula) / (1 + abs(formula))))
    return numeric(worst < 1e-8, f"(P3) N = {N}, L = {L}: {samples} random quadratic logits and points, 4 index "
                                 f"patterns, formula vs mpmath third differences (40 digits, step 1e-7): largest "
                                 f"relative gap {worst:.2g}")


def check_bound(bound: Callable, boxes: int = 60, samples: int = 16, seed: int = 0) -> tuple[Status, str]:
    """bound(lo, hi, par, norm) >= ||M(Y)||_p at sampled configurations of random boxes (corners included)."""
    from certify.bounds.global_l2._search import domain
    from certify.bounds.global_l2._enclosure import core_jacobian_float

    rng = np.random.default_rng(seed)
    worst = -np.inf
    for case in range(boxes):
        d = 1 if case % 3 else 2
        N = int(rng.integers(2, 6 if d == 1 else 4))
        norm = ("2", "inf")[case % 2]
        par = domain(N, d, norm, 3.5).par
        h = float(rng.choice([0.01, 0.03, 0.1]))
        centre = rng.uniform(0.0, 1.5, size=(1, par.L)) * (1 if d == 1 else rng.choice([-1, 1], size=(1, par.L)))
        lo, hi = centre - h, centre + h
        upper = float(bound(lo, hi, par, norm)[0])
        t = np.concatenate([rng.integers(0, 2, size=(samples // 2, par.L)).astype(float),
                            rng.uniform(size=(samples - samples // 2, par.L))])
        M = core_jacobian_float(par.points(lo + t * (hi - lo)))
        values = np.linalg.norm(M, ord=np.inf if norm == "inf" else 2, axis=(-2, -1))
        worst = max(worst, float(values.max() / upper))
        if values.max() > upper:
            return numeric(False, f"box {case} (N = {N}, d = {d}, p = {norm}, h = {h}): sampled ||M|| "
                                  f"{values.max():.10g} > bound {upper:.10g}")
    return numeric(True, f"{boxes} random boxes (N 2..5, d 1..2, both norms, half-widths 0.01-0.1), {samples} "
                         f"configurations each, corners included: sampled max / bound <= {worst:.6f}")


def _code_bound(lo, hi, par, norm):
    from certify.bounds.global_l2._mean_value import third_order_bounds

    return third_order_bounds(lo, hi, par, norm)[0]


def _ten_percent_low(lo, hi, par, norm):
    return _code_bound(lo, hi, par, norm) / 1.1


SCOPE = {"(P3) N": "= 2 exact (N = 6 sampled), two parameters", "bound": "sampled boxes, N 2..5, d 1..2"}


def prove() -> ProofResult:
    parts = [_softmax_third_identity(2), _softmax_third_numeric(), check_bound(_code_bound)]
    return combine(CLAIM, parts, scope=SCOPE)


INJECTIONS = {
    "identity": lambda: combine(CLAIM + " [injected]", [_softmax_third_identity(2, drop_curvature=True)]),
    "bound": lambda: combine(CLAIM + " [injected: bound / 1.1]", [check_bound(_ten_percent_low)]),
}

if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
