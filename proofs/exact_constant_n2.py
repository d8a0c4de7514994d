"""Claim: the exact Lipschitz constant of single-head tied L2 attention with N = 2, D = H = 1 and unit weights
(W_Q = W_K = W_V = W_O = 1) is, in both the 2-norm and the inf-norm,

    Lip = h(u*) = 2 u* - 3 / (8 u*),   where u* > 0 solves 4 u tanh(u) = 3,   h(u) = tanh(u) + 2 u sech^2(u),

about 1.6016389300117480. Steps (SymPy unless marked):
1. J(X) = M(Y) with Y = X, and M = [[a, b], [b, a]], a = p + 2 p q s, b = q - 2 p q s, where s = (y_2 - y_1)^2,
   q = P_12 = 1/(1 + e^s), p = 1 - q.
2. a + b = 1 and a - b = h(s/2); M is symmetric with eigenvalues a +- b, so ||M||_2 = max(|a+b|, |a-b|) and
   ||M||_inf = |a| + |b| = max(|a+b|, |a-b|); h >= 0 on u >= 0, hence both norms equal max(1, h(s/2)).
3. h'(u) = sech^2(u) (3 - 4 u tanh u) and u tanh u is strictly increasing on u > 0, so h increases up to the single
   root u* of 4 u tanh u = 3 and decreases after it; h(0) = 0, h -> 1 as u -> oo. So sup = max(1, h(u*)).
4. At u*, tanh u* = 3/(4 u*), so h(u*) = 2 u* - 3/(8 u*).
5. (interval arithmetic, mpmath iv) u* is enclosed by sign changes of 4 u tanh u - 3, and h(u*) > 1 is enclosed
   by evaluating h on that interval: `certify.symbolic.exact_constant_n2`.
6. (numeric cross-check, SAMPLED: it can only lower the status) the grid maximum of ||M|| (lambdified oracle) lies in [lo - 1e-9, hi].
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from certify.symbolic import (SymbolicWeights, attention_jacobian, core_jacobian_function, exact_constant_n2,
                              exact_constant_n2_interval, matrices_equal, maximiser_enclosure, symbolic_input)
from proofs._check import Check, fact, matrix_identity, numeric, verified
from proofs._result import ProofResult, Status, combine

CLAIM = ("Exact constant, N = 2, D = H = 1, unit weights: Lip_2 = Lip_inf = h(u*) = 2u* - 3/(8u*) with "
         "4 u* tanh u* = 3 (about 1.60164), enclosed by interval arithmetic")
SCOPE = {"N": "= 2", "D = H": "= 1", "W_Q = W_V = W_O": "= 1"}
REQUIRES = Status.VERIFIED


def prove() -> ProofResult:
    parts: list[Check] = []
    # step 1
    one = sp.Matrix([[1]])
    weights = SymbolicWeights("l2", (one,), (one,), (one,), one)
    X = symbolic_input(2, 1, "y")
    J = attention_jacobian(X, weights)
    s = (X[0, 0] - X[1, 0]) ** 2
    e = sp.exp(-s)  # the exponential atom of P: P_12 = e / (1 + e)
    q = e / (1 + e)
    p = 1 - q
    a, b = p + 2 * p * q * s, q - 2 * p * q * s
    M = sp.Matrix([[a, b], [b, a]])
    parts.append(matrix_identity(J - M, matrices_equal(J, M),
                                 "step 1: J(X) (SymPy derivative of F) - [[a, b], [b, a]]"))
    # step 2
    u, S = sp.Symbol("u", positive=True), sp.Symbol("S", positive=True)
    h = sp.tanh(u) + 2 * u * sp.sech(u) ** 2
    qS = 1 / (1 + sp.exp(S))
    pS = 1 - qS
    a_minus_b = (pS + 2 * pS * qS * S) - (qS - 2 * pS * qS * S)
    diff_h = sp.simplify((a_minus_b - h.subs(u, S / 2)).rewrite(sp.exp))
    parts.append(fact(sp.simplify(a + b - 1) == 0 and diff_h == 0, "step 2: a + b = 1 and a - b = h(s/2)"))
    A_, B_ = sp.symbols("A B", real=True)
    eig = sp.Matrix([[A_, B_], [B_, A_]]).eigenvals()
    # (A +- B)^2 = A^2 + B^2 +- 2AB, so max(|A+B|, |A-B|)^2 = A^2 + B^2 + 2|AB| = (|A| + |B|)^2
    inf_identity = all(sp.expand((A_ + sign * B_) ** 2 - (A_ ** 2 + B_ ** 2 + sign * 2 * A_ * B_)) == 0
                       for sign in (1, -1))
    parts.append(fact(set(eig) == {A_ - B_, A_ + B_} and bool(h.is_nonnegative) and inf_identity,
                      f"step 2: eigenvalues of [[A, B], [B, A]] = {sorted(map(str, eig))}; h(u) >= 0 for u > 0 "
                      "(SymPy); (A +- B)^2 = A^2 + B^2 +- 2AB, so |A| + |B| = max(|A+B|, |A-B|)"))
    # step 3
    dh = sp.diff(h, u)
    dh_ok = sp.simplify((dh - sp.sech(u) ** 2 * (3 - 4 * u * sp.tanh(u))).rewrite(sp.exp)) == 0
    parts.append(fact(dh_ok, "step 3: h'(u) = sech^2(u)(3 - 4u tanh u)"))
    k_prime = sp.diff(u * sp.tanh(u), u)
    k_form = sp.simplify((k_prime - (sp.tanh(u) + u * sp.sech(u) ** 2)).rewrite(sp.exp)) == 0
    parts.append(fact(k_form and bool(sp.tanh(u).is_positive) and bool((u * sp.sech(u) ** 2).is_positive),
                      "step 3: (u tanh u)' = tanh u + u sech^2 u, both terms > 0 for u > 0 (SymPy), so the root u* "
                      "of 4u tanh u = 3 is unique and h' > 0 before it, < 0 after it"))
    limit = sp.limit(h, u, sp.oo)
    parts.append(fact(h.subs(u, 0) == 0 and limit == 1, f"step 3: h(0) = 0, lim_(u->oo) h = {limit}"))
    # step 4
    t = sp.Symbol("t", positive=True)  # t = tanh(u*) = 3/(4u*), sech^2 = 1 - tanh^2
    value = (t + 2 * u * (1 - t ** 2)).subs(t, sp.Rational(3, 4) / u)
    parts.append(fact(sp.simplify(value - (2 * u - sp.Rational(3, 8) / u)) == 0,
                      "step 4: h(u*) = 2u* - 3/(8u*) using tanh u* = 3/(4u*)"))
    # step 5
    u_lo, u_hi = maximiser_enclosure()
    lo, hi = exact_constant_n2_interval()
    f_lo, f_hi = exact_constant_n2("2")
    parts.append(verified(lo > 1 and f_lo <= lo and hi <= f_hi,
                         f"step 5 (mpmath interval arithmetic, 50 digits): u* in [{mp_str(u_lo)}, {mp_str(u_hi)}], "
                         f"h(u*) in [{mp_str(lo)}, {mp_str(hi)}]; as floats [{f_lo!r}, {f_hi!r}]"))
    # step 6
    f = core_jacobian_function(2, 1)
    grid = np.linspace(0.0, 6.0, 6001)
    norms_2 = [np.linalg.norm(f(np.array([[0.0], [g]])), 2) for g in grid]
    norms_inf = [np.abs(f(np.array([[0.0], [g]]))).sum(axis=1).max() for g in grid]
    best = max(max(norms_2), max(norms_inf))
    grid_check = (numeric(f_lo - 1e-6 <= max(norms_2) <= f_hi and f_lo - 1e-6 <= max(norms_inf) <= f_hi,
                         f"step 6 (numeric): grid of {grid.size} gaps g in [0, 6]: max ||M||_2 = {max(norms_2):.10f}, "
                         f"max ||M||_inf = {max(norms_inf):.10f} (<= hi; best {best:.10f})"))
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=[grid_check])


def mp_str(value: object) -> str:
    import mpmath

    return mpmath.nstr(value, 20)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
