"""Claim (MATH.md section 4, Lemma): for z in R^N, z >= 0, z_i = 0 and p = softmax(-z),

    sum_j p_j z_j <= W := phi^{-1}(N-1) = W_0((N-1)/e),

with equality when the other N - 1 entries all equal 1 + W.

Proof (each step checked by SymPy, for symbolic N: the sums over j != i enter as symbols S, T):
1. sum_j p_j z_j - W = sum_j e^{-z_j} (z_j - W) / sum_j e^{-z_j}  (since sum_j p_j = 1), and the j = i term is -W,
   so the claim is  sum_{j != i} k(z_j) <= W  with k(z) = e^{-z} (z - W).
2. k'(z) = e^{-z} (1 + W - z): the only critical point is z = 1 + W, where k'' = -e^{-1-W} < 0, so it is the
   global maximum on R (k -> -oo as z -> -oo, k -> 0 as z -> oo), k(1 + W) = e^{-1-W}.
3. Hence sum_{j != i} k(z_j) <= (N-1) e^{-1-W} = W, because W e^{W+1} = N - 1 (definition of W_0).
4. Stationarity of sum_j p_j z_j: d/dz_j = p_j (1 - z_j + sum_k p_k z_k); at z_j = 1 + W (j != i) the value is W.
"""

from __future__ import annotations

import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, Status, combine

CLAIM = ("Lemma: z >= 0, z_i = 0, p = softmax(-z) => sum_j p_j z_j <= W_0((N-1)/e), with equality at "
         "z_j = 1 + W_0((N-1)/e) for j != i")
SCOPE = {"N": ">= 2"}
REQUIRES = Status.PROVED


def prove() -> ProofResult:
    n = sp.Symbol("n", positive=True)
    W = sp.Symbol("W", positive=True)  # W = W_0((n-1)/e): exp(W) = (n-1)/(e W)
    define_W = {sp.exp(W): (n - 1) / (sp.E * W)}
    z = sp.Symbol("z", real=True)
    parts: list[Check] = []

    # step 1, any N: S = sum_{j != i} e^{-z_j} and T = sum_{j != i} e^{-z_j} z_j (the z_i = 0 term contributes
    # e^0 = 1 to the denominator and 0 to the numerator), so sum_j p_j z_j = T / (1 + S), and by linearity of the
    # finite sums sum_{j != i} k(z_j) = T - W S.
    S, T = sp.symbols("S T", positive=True)
    parts.append(fact(sp.simplify(T / (1 + S) - W - (T - W * S - W) / (1 + S)) == 0,
                      "step 1 (any N): sum_j p_j z_j - W = (sum_{j != i} k(z_j) - W) / (1 + S), k(z) = e^{-z}(z - W), "
                      "S = sum_{j != i} e^{-z_j} > 0, with sum_{j != i} k(z_j) = T - W S (linearity)"))

    # step 2
    k = sp.exp(-z) * (z - W)
    k1 = sp.diff(k, z)
    critical = sp.solve(sp.Eq(k1, 0), z)
    k2_at = sp.simplify(sp.diff(k, z, 2).subs(z, 1 + W))
    limits = (sp.limit(k, z, -sp.oo), sp.limit(k, z, sp.oo))
    parts.append(fact(sp.simplify(k1 - sp.exp(-z) * (1 + W - z)) == 0 and critical == [1 + W]
                      and k2_at == -sp.exp(-1 - W) and limits == (-sp.oo, 0)
                      and sp.simplify(k.subs(z, 1 + W) - sp.exp(-1 - W)) == 0,
                      f"step 2: k'(z) = e^(-z)(1 + W - z), critical points {critical}, k''(1+W) = {k2_at}, "
                      f"limits {limits}, so max k = k(1+W) = e^(-1-W)"))

    # step 3
    bound = sp.expand((n - 1) * sp.exp(-1 - W)).subs(define_W)
    parts.append(fact(sp.simplify(bound - W) == 0, "step 3: (N-1) e^(-1-W) = W using W e^W = (N-1)/e"))

    # step 4, any N: the terms other than j enter through S_j = sum_{k != j} e^{-z_k} and T_j = sum_{k != j} e^{-z_k} z_k
    S_j, T_j = sp.symbols("S_j T_j", positive=True)
    value = (sp.exp(-z) * z + T_j) / (sp.exp(-z) + S_j)
    p_j = sp.exp(-z) / (sp.exp(-z) + S_j)
    gradient_ok = sp.simplify(sp.diff(value, z) - p_j * (1 - z + value)) == 0
    parts.append(fact(gradient_ok, "step 4 (any N): d/dz_j sum_k p_k z_k = p_j (1 - z_j + sum_k p_k z_k), so "
                                   "stationary points have z_j = 1 + value for all j != i"))
    m = sp.Symbol("m", positive=True)  # m = N - 1 equal entries at z = 1 + W
    at_max = (m * (1 + W) * sp.exp(-1 - W)) / (1 + m * sp.exp(-1 - W))
    at_max = sp.expand(at_max.subs(m, n - 1))
    at_max = sp.simplify(sp.expand(sp.expand(at_max, power_exp=True)).subs(define_W))
    parts.append(fact(sp.simplify(at_max - W) == 0,
                      f"equality: with the N-1 other entries at 1 + W, sum_j p_j z_j simplifies to {at_max}"))
    return combine(CLAIM, parts, scope=SCOPE)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
