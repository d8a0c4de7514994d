"""Claim (MATH.md section 4, Lemma): for z in R^N, z >= 0, z_i = 0 and p = softmax(-z),

    sum_j p_j z_j <= W := phi^{-1}(N-1) = W_0((N-1)/e),

with equality when the other N - 1 entries all equal 1 + W.

Proof (each step checked by SymPy):
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
from proofs._result import ProofResult, combine

CLAIM = ("Lemma: z >= 0, z_i = 0, p = softmax(-z) => sum_j p_j z_j <= W_0((N-1)/e), with equality at "
         "z_j = 1 + W_0((N-1)/e) for j != i")


def prove() -> ProofResult:
    n = sp.Symbol("n", positive=True)
    W = sp.Symbol("W", positive=True)  # W = W_0((n-1)/e): exp(W) = (n-1)/(e W)
    define_W = {sp.exp(W): (n - 1) / (sp.E * W)}
    z = sp.Symbol("z", real=True)
    parts: list[Check] = []

    # step 1 (N = 4 instance; the identity is linear in the terms for any N)
    zs = sp.symbols("z1:5", real=True)
    zs_i = (sp.Integer(0),) + zs[1:]
    weights = [sp.exp(-v) for v in zs_i]
    total = sum(weights)
    lhs = sum(w * v for w, v in zip(weights, zs_i)) / total - W
    rhs = (sum(w * (v - W) for w, v in zip(weights, zs_i))) / total
    parts.append(fact(sp.simplify(lhs - rhs) == 0,
                      "step 1 (N=4): sum p_j z_j - W = sum_j e^{-z_j}(z_j - W) / sum_j e^{-z_j}, the z_i = 0 term is -W"))

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

    # step 4 (N = 4): gradient and value at the maximiser
    value = sum(w * v for w, v in zip(weights, zs_i)) / total
    gradient_ok = all(sp.simplify(sp.diff(value, zj) - (sp.exp(-zj) / total) * (1 - zj + value)) == 0 for zj in zs[1:])
    parts.append(fact(gradient_ok, "step 4 (N=4): d/dz_j sum_k p_k z_k = p_j (1 - z_j + sum_k p_k z_k), so "
                                   "stationary points have z_j = 1 + value for all j != i"))
    m = sp.Symbol("m", positive=True)  # m = N - 1 equal entries at z = 1 + W
    at_max = (m * (1 + W) * sp.exp(-1 - W)) / (1 + m * sp.exp(-1 - W))
    at_max = sp.expand(at_max.subs(m, n - 1))
    at_max = sp.simplify(sp.expand(sp.expand(at_max, power_exp=True)).subs(define_W))
    parts.append(fact(sp.simplify(at_max - W) == 0,
                      f"equality: with the N-1 other entries at 1 + W, sum_j p_j z_j simplifies to {at_max}"))
    return combine(CLAIM, parts)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
