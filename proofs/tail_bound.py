"""Claim: the cluster / tail bound of the global L2 branch and bound (MATH.md section 7), and the recursion over N.

Setting (MATH.md section 2). N points y_k in R^d, P_ij = softmax_j(-||y_i - y_j||^2), and
M_ij = P_ij I + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T. Suppose the indices split into nonempty S, T
with d_ij = ||y_i - y_j|| >= r >= 1 for all i in S, j in T. Let m = N - 1, rho = e^{-r^2}, W = W_0((N-1)/e),
s = sqrt(W), K = 3 + 12 W + 4 r^2 + 8 r s, and E = M(Y) - blockdiag(M(Y_S), M(Y_T)) (indices kept in place).

Claim. For every block row i, sum_j ||E_ij||_2 <= m rho K. Hence ||E||_inf <= sqrt(d) m rho K =: eps_inf and
||E||_2 <= sqrt(N d) eps_inf =: eps_2, and ||M(Y)||_p <= max(||M(Y_S)||_p, ||M(Y_T)||_p) + eps_p, so

    c_p(N, d) <= max( sup_{r-connected Y} ||M(Y)||_p , max_{1 <= s < N} c_p(s, d) + eps_p(r, N, d) ),  c_p(1, d) = 1.

Proof. Fix i in S, t = |T| <= m. Write w_ij = e^{-d_ij^2}, Q_ij = softmax over j in S only (the P of Y_S), and
tau = sum_{k in T} P_ik. Since the k = i term of the denominator is 1, P_ik <= w_ik <= rho for k in T, so
tau <= t rho, and P_ij = (1 - tau) Q_ij for j in S. Lemma (MATH.md section 4, z_k = d_ik^2): sum_k P_ik d_ik^2 <= W
and sum_k Q_ik d_ik^2 <= W_0((|S|-1)/e) <= W; by Jensen ||y_i - ybar_i|| <= sum P_ik d_ik <= s and likewise for
ybar^S_i (the Q-mean). Delta := ybar_i - ybar^S_i = sum_{k in T} P_ik (y_k - ybar^S_i), so
||Delta|| <= sum_T w_ik (d_ik + s) <= t rho (r + s), because f2(x) = e^{-x^2}(x + s) is decreasing for x >= 1 (A2).
(a) j in T: ||E_ij|| = ||P_ij (I + 2 (y_j - ybar_i)(y_i - y_j)^T)|| <= w_ij (1 + 2 d_ij^2 + 2 s d_ij) <= rho (1 + 2 r^2
    + 2 r s), since f1(x) = e^{-x^2}(1 + 2x^2 + 2 s x) is decreasing for x >= 1 (A1). Sum over T: t rho (1 + 2r^2 + 2rs).
(b) j in S, j != i: E_ij = -tau Q_ij I + 2 Q_ij (-tau (y_j - ybar_i) - Delta)(y_i - y_j)^T. With
    sum_j Q_ij d_ij ||y_j - ybar_i|| <= sum Q d (d + s) <= W + s^2 = 2W and sum_j Q_ij d_ij <= s:
    sum_j ||E_ij|| <= tau (1 + 4W) + 2 s ||Delta|| <= t rho (1 + 6W + 2 r s)   (A4).
(c) j = i: E_ii = (P_ii - Q_ii) I + 2 (Cov_P - Cov_Q). With second moments about y_i, Cov = S2 - m m^T,
    S2_P - S2_Q = -tau S2_Q + sum_T P_ik u_k u_k^T has norm <= tau W + t rho r^2 (x^2 e^{-x^2} decreasing, A3), and
    ||m_P m_P^T - m_Q m_Q^T|| <= (||m_P|| + ||m_Q||) ||Delta|| <= 2 s t rho (r + s). So ||E_ii|| <= t rho (1 + 6W +
    2 r^2 + 4 r s).
Adding (a)-(c): t rho K (A5). For a d x d block B, ||B||_inf <= sqrt(d) ||B||_2, so ||E||_inf <= sqrt(d) m rho K; and
||E||_2 <= sqrt(N d) ||E||_inf for an (N d) x (N d) matrix. blockdiag(M(Y_S), M(Y_T)) is, up to a simultaneous
permutation of rows and columns (which preserves both norms), block diagonal, so its p-norm is the larger of the two
blocks' norms; the triangle inequality gives the bound on ||M(Y)||_p. Finally, if Y is not r-connected, let S be a
connected component of the graph d_ij < r and T the rest: then all cross distances are >= r, which gives the
recursion; M = I_d for N = 1. Also (A6): e^{-r^2} K(r) is decreasing for r >= 1, so a tail bound evaluated at a
smaller radius is still valid (used for boxes with a box-specific separation).

Checks. A1-A6 are sign and identity facts proven by SymPy (x = 1 + u, u >= 0, s >= 0: the polynomials have only
positive coefficients). The assembled inequality (which also relies on the Lemma, proven in `proofs/`, and on the
norm facts above) is SAMPLED numerically on random and adversarially shifted two-cluster configurations at the
smallest separations (cross distance exactly r, r in [1, 2.5]), against the code's ``tail_bound``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import sympy as sp

from proofs._check import fact, numeric
from proofs._l2numeric import core_blocks
from proofs._result import ProofResult, Status, combine

SCOPE = {"A1-A6": "exact, r >= 1, W >= 0", "assembled bound": "sampled, N 2..6, d 1..3, r in [1, 2.5]",
         "shipped formula": "N 2..7, d 1..3, r in {1, 2, 3.5}"}
CLAIM = ("for groups S, T at distance >= r >= 1: sum_j ||E_ij||_2 <= (N-1) e^{-r^2} (3 + 12W + 4r^2 + 8r sqrt W), "
         "eps_inf = sqrt(d) (N-1) rho K, eps_2 = sqrt(N d) eps_inf, and c_p(N) <= max(B&B, max_s c_p(s) + eps_p)")


def _symbolic() -> list[tuple[Status, str]]:
    u, s, r = sp.symbols("u s r", nonnegative=True)
    x = sp.Symbol("x", positive=True)
    W = s**2
    parts = []
    # A1: f1(x) = e^{-x^2}(1 + 2x^2 + 2 s x); -e^{x^2} f1'(x) at x = 1 + u has only positive coefficients
    f1 = sp.exp(-x**2) * (1 + 2 * x**2 + 2 * s * x)
    neg1 = sp.expand(-sp.simplify(sp.diff(f1, x) * sp.exp(x**2)).subs(x, 1 + u))
    parts.append(fact(bool(neg1.is_positive), f"A1: -e^(x^2) d/dx[e^(-x^2)(1+2x^2+2sx)] at x=1+u is {neg1} > 0"))
    f2 = sp.exp(-x**2) * (x + s)
    neg2 = sp.expand(-sp.simplify(sp.diff(f2, x) * sp.exp(x**2)).subs(x, 1 + u))
    parts.append(fact(bool(neg2.is_positive), f"A2: -e^(x^2) d/dx[e^(-x^2)(x+s)] at x=1+u is {neg2} > 0"))
    f3 = sp.exp(-x**2) * x**2
    neg3 = sp.expand(-sp.simplify(sp.diff(f3, x) * sp.exp(x**2)).subs(x, 1 + u))
    parts.append(fact(bool(neg3.is_nonnegative), f"A3: -e^(x^2) d/dx[x^2 e^(-x^2)] at x=1+u is {neg3} >= 0"))
    # A4: tau (1 + 4W) + 2 s t rho (r + s) with tau = t rho equals t rho (1 + 6W + 2 r s)
    a4 = sp.expand((1 + 4 * W) + 2 * s * (r + s) - (1 + 6 * W + 2 * r * s))
    parts.append(fact(a4 == 0, f"A4: (1+4W) + 2s(r+s) - (1+6W+2rs) = {a4}"))
    # A5: (a) + (b) + (c) = K
    a = 1 + 2 * r**2 + 2 * r * s
    b = 1 + 6 * W + 2 * r * s
    c = 1 + 2 * (W + r**2) + 4 * s * (r + s)
    K = 3 + 12 * W + 4 * r**2 + 8 * r * s
    a5 = sp.expand(a + b + c - K)
    parts.append(fact(a5 == 0, f"A5: (a) + (b) + (c) - K = {a5} (diag (c) = 1 + 2(W + r^2) + 4s(r + s))"))
    # A6: e^{-r^2} K(r) decreasing for r >= 1
    rr = sp.Symbol("rr", positive=True)
    Kr = 3 + 12 * W + 4 * rr**2 + 8 * rr * s
    neg6 = sp.expand(-sp.simplify(sp.diff(sp.exp(-rr**2) * Kr, rr) * sp.exp(rr**2)).subs(rr, 1 + u))
    parts.append(fact(bool(neg6.is_positive), f"A6: -e^(r^2) d/dr[e^(-r^2) K(r)] at r=1+u is {neg6} > 0"))
    return parts


def _core(Y: np.ndarray) -> np.ndarray:
    """M(Y) (N d x N d) in float64 (``_l2numeric.core_blocks``)."""
    N, d = Y.shape
    return core_blocks(Y).reshape(N * d, N * d)


def _two_clusters(rng: np.random.Generator, N: int, d: int, r: float) -> tuple[np.ndarray, np.ndarray]:
    """A configuration whose groups S (first n_S points) and T have minimum cross distance exactly r."""
    n_s = int(rng.integers(1, N))
    S = rng.normal(size=(n_s, d)) * rng.choice([0.2, 0.7, 1.5])
    T = rng.normal(size=(N - n_s, d)) * rng.choice([0.2, 0.7, 1.5])
    direction = rng.normal(size=d)
    direction /= np.linalg.norm(direction)
    T = T - T.mean(0) + S.mean(0)

    def gap(t: float) -> float:
        return float(np.min(np.linalg.norm(S[:, None] - (T + t * direction)[None], axis=-1)))

    t_hi = 1.0
    while gap(t_hi) < r:
        t_hi *= 2.0
    t_lo = 0.0
    for _ in range(60):  # find the crossing gap(t) = r, keeping the side where gap >= r
        mid = 0.5 * (t_lo + t_hi)
        if gap(mid) >= r:
            t_hi = mid
        else:
            t_lo = mid
    Y = np.concatenate([S, T + t_hi * direction])
    mask = np.zeros(N, dtype=bool)
    mask[:n_s] = True
    return Y, mask


def check_tail(eps_fn: Callable[[float, int, int, str], float], samples: int = 150, seed: int = 0) -> tuple[Status, str]:
    """Sample two-cluster configurations and check ||E||_p <= eps_fn(r, N, d, p) and the recursion inequality."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    worst_at = ""
    for k in range(samples):
        N = int(rng.integers(2, 7))
        d = int(rng.integers(1, 4))
        r = float(rng.uniform(1.0, 2.5))
        Y, mask = _two_clusters(rng, N, d, r)
        M = _core(Y)
        blocks = np.zeros_like(M)
        idx = np.flatnonzero(mask)
        jdx = np.flatnonzero(~mask)
        for group in (idx, jdx):
            rows = (group[:, None] * d + np.arange(d)[None]).ravel()
            blocks[np.ix_(rows, rows)] = _core(Y[group])
        E = M - blocks
        for p in ("inf", "2"):
            order = np.inf if p == "inf" else 2
            e_norm = np.linalg.norm(E, ord=order)
            eps = eps_fn(r, N, d, p)
            whole = np.linalg.norm(M, ord=order)
            parts = max(np.linalg.norm(_core(Y[idx]), ord=order), np.linalg.norm(_core(Y[jdx]), ord=order))
            ratio = e_norm / eps
            if ratio > worst:
                worst, worst_at = ratio, f"N={N} d={d} r={r:.3f} p={p}"
            if not (e_norm <= eps and whole <= parts + eps):
                return Status.UNPROVED, (f"||E||_{p} = {e_norm:.6g} > eps = {eps:.6g} (or recursion violated) at N={N}, "
                                       f"d={d}, r={r:.4f}, Y={np.round(Y, 4).tolist()}")
    return numeric(True, f"{samples} two-cluster configurations (N 2..6, d 1..3, cross distance exactly r in [1, 2.5]),"
                         f" both norms: ||E||_p <= eps_p and ||M|| <= max block norm + eps_p; "
                         f"largest ||E|| / eps = {worst:.3g} at {worst_at}")


def _code_eps(r: float, N: int, d: int, p: str) -> float:
    from certify.bounds.global_l2._tail import tail_bound

    return tail_bound(r, N, d, p)


def _code_formula_matches() -> tuple[Status, str]:
    """The code's tail_bound equals the formula of the claim (evaluated here independently, to 1e-12)."""
    from certify.bounds.global_l2._tail import tail_bound
    from scipy.special import lambertw

    worst = 0.0
    for N in range(2, 8):
        for d in (1, 2, 3):
            for r in (1.0, 2.0, 3.5):
                W = float(lambertw((N - 1) / math.e).real)
                K = 3 + 12 * W + 4 * r**2 + 8 * r * math.sqrt(W)
                e_inf = math.sqrt(d) * (N - 1) * math.exp(-r**2) * K
                for p, ref in (("inf", e_inf), ("2", math.sqrt(N * d) * e_inf)):
                    code = tail_bound(r, N, d, p)
                    if not abs(code / ref - 1) <= 1e-12:
                        return numeric(False, f"tail_bound({r}, {N}, {d}, {p}) = {code} != formula {ref}")
                    worst = max(worst, abs(code / ref - 1))
    return numeric(True, f"certify's tail_bound matches the formula (rounded up) for N 2..7, d 1..3, r in (1, 2, 3.5); "
                         f"largest relative difference {worst:.2g}")


def prove() -> ProofResult:
    return combine(CLAIM, _symbolic() + [_code_formula_matches(), check_tail(_code_eps)], scope=SCOPE)


def _too_small(r: float, N: int, d: int, p: str) -> float:
    """Deliberately wrong: the bound of the claim divided by 20."""
    return _code_eps(r, N, d, p) / 20.0


INJECTIONS = {"bound": lambda: combine(CLAIM + " [injected: eps / 20]", [check_tail(_too_small)])}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
