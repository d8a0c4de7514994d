"""Claim (MATH.md section 4, Theorem 3.2, 2-norm):

    Lip_2(F) <= (sqrt(N)/sqrt(d)) (4 W + 1) sqrt(sum_h ||W^Q_h||_2^4 ||W^V_h||_2^2) ||W^O||_2,

W = W_0((N-1)/e). The chain, each step checked as an inequality on every test instance (numeric: SAMPLED), with
v_k = W^Q^T (x_k - xbar_i), u_j = W^Q^T (x_i - x_j), K^h_i = W^V_h^T J^h_i: :
 s1  ||J^F||_2 <= sqrt(sum_i ||J^F_i:||_2^2) <= sqrt(N) max_i ||J^F_i:||_2
 s2  ||J^F_i:||_2 = ||W_O^T [K^1_i; ...; K^H_i]||_2 <= ||W^O||_2 sqrt(sum_h ||K^h_i||_2^2)
 s3  ||K^h_i||_2 <= ||W^V_h||_2 ||J^h_i:||_2
 s4  ||J^h_i:||_2 <= ||P_i:||_2 ||A||_2 + 2 ||A Cov_i A||_2 + 2 sum_j P_ij ||A (x_j - xbar_i)|| ||A (x_i - x_j)||
 s5  ||P_i:||_2 ||A||_2 <= ||W^Q||_2^2 / sqrt(d)
 s6  ||A Cov_i A||_2 <= (||W^Q||^2 / d) sum_k P_ik ||v_k||^2
 s7  sum_j P_ij ||A (x_j - xbar)|| ||A (x_i - x_j)|| <= (||W^Q||^2 / d) sum_j P_ij ||v_j|| ||u_j||
 s8  both sums <= sqrt(d) W (Corollary), so ||J^h_i:||_2 <= ||W^Q||^2 (4 W + 1) / sqrt(d)
 end ||J^F||_2 <= the bound certify ships (`certify.bounds.paper_bound`).
Status: the step bounds are assembled into the constant in SymPy, and `certify.bounds.paper_constant`, called on
SymPy symbols, must equal it exactly (PROVED-MODULO the Corollary, the closed-form Jacobian and the norm facts).
The numeric step checks, the shipped weight factor and the end check are SAMPLED cross-checks: they can only
lower the status.
Instances as in `bound_inf_chain`; s0 first checks the numpy closed form against the SymPy oracle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import lambertw

from certify.symbolic import paper_bound_expr
from proofs._chain import Step, check_assembly, constant_text, check_weight_factor, expression_bound, shipped_paper_bound
from proofs._l2numeric import Layer, head, instances, layer_jacobian, op_norm, oracle_step
from proofs._result import ProofResult, Status, combine

CLAIM = ("Theorem 3.2 (2): Lip_2(F) <= ({constant}) sqrt(sum_h ||W^Q_h||_2^4 ||W^V_h||_2^2) "
         "||W^O||_2, the constant assembled from the chain's steps in SymPy and equal to the shipped paper_constant")

Bound = Callable[[Layer, int], float]


SCOPE = {"N": ">= 2", "D, d, H": ">= 1"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("corollary_softmax_moments", "jacobian_l2", "norm facts of steps s1-s5 (triangle inequality, "
          "submultiplicativity, ||a b^T|| = ||a|| ||b||, block-row norms)")
default_bound = shipped_paper_bound("2")


def prove(bound_for_heads: Callable[[int], Bound] = default_bound, count: int = 160) -> ProofResult:
    names = ["s0 numpy closed form = SymPy oracle", "s1 ||J^F|| <= sqrt(N) max_i ||J^F_i:||", "s2 ||J^F_i:|| <= ||W_O|| sqrt(sum_h ||K^h_i||^2)",
             "s3 ||K^h_i|| <= ||W_V|| ||J^h_i:||", "s4 triangle over the closed form", "s5 ||P_i|| ||A|| <= ||W_Q||^2/sqrt(d)",
             "s6 covariance term", "s7 cross term", "s8 Corollary (b), (c)", "end ||J^F||_2 <= bound"]
    steps = {n: Step(n) for n in names}
    oracle_step(steps[names[0]])
    names = names[1:]
    bounds: dict[int, Bound] = {}
    for X, layer, label in instances("2", count):
        N, D = X.shape
        d = layer.d
        W0 = float(np.real(lambertw((N - 1) / np.e)))
        J_F = layer_jacobian(X, layer)
        norm_F = op_norm(J_F, "2")
        rows = J_F.reshape(N, D, N * D)
        steps[names[0]].check(norm_F, np.sqrt(N) * max(op_norm(rows[i], "2") for i in range(N)), label)
        heads = [head(X, layer.W_Q[h]) for h in range(layer.H)]
        K = [np.einsum("ab,ibjc->iajc", layer.W_V[h].T, heads[h].J).reshape(N, d, N * D) for h in range(layer.H)]
        for i in range(N):
            steps[names[1]].check(op_norm(rows[i], "2"), op_norm(layer.W_O, "2") * np.sqrt(
                sum(op_norm(K[h][i], "2") ** 2 for h in range(layer.H))), label)
        for h, hd in enumerate(heads):
            W = layer.W_Q[h]
            q2 = op_norm(W, "2") ** 2
            A = hd.A
            Jh = hd.J.reshape(N, D, N * D)
            for i in range(N):
                steps[names[2]].check(op_norm(K[h][i], "2"), op_norm(layer.W_V[h], "2") * op_norm(Jh[i], "2"), label)
                centred = X - hd.xbar[i]
                cov = (centred.T * hd.P[i]) @ centred
                cross = sum(hd.P[i, j] * np.linalg.norm(A @ (X[j] - hd.xbar[i])) * np.linalg.norm(A @ (X[i] - X[j]))
                            for j in range(N))
                first = np.linalg.norm(hd.P[i]) * op_norm(A, "2")
                steps[names[3]].check(op_norm(Jh[i], "2"), first + 2 * op_norm(A @ cov @ A, "2") + 2 * cross, label)
                steps[names[4]].check(first, q2 / np.sqrt(d), label)
                v = centred @ W
                u = (X[i] - X) @ W
                vv = np.sum(hd.P[i] * np.sum(v ** 2, axis=1))
                vu = np.sum(hd.P[i] * np.linalg.norm(v, axis=1) * np.linalg.norm(u, axis=1))
                steps[names[5]].check(op_norm(A @ cov @ A, "2"), q2 / d * vv, label)
                steps[names[6]].check(cross, q2 / d * vu, label)
                steps[names[7]].check(max(vv, vu), np.sqrt(d) * W0, label)
        if layer.H not in bounds:
            bounds[layer.H] = bound_for_heads(layer.H)
        steps[names[8]].check(norm_F, bounds[layer.H](layer, N), label)
    cross = [s.result() for s in steps.values()] + [check_weight_factor("2")]
    claim = CLAIM.format(constant=constant_text("paper", "2"))
    return combine(claim, [check_assembly("paper", "2")], scope=SCOPE, lemmas=LEMMAS, cross_checks=cross)


def wrong_bound(H: int) -> Bound:
    """Deliberately wrong (MATH.md section 4, "Known mistakes"): ||W^Q_h||_2^2 instead of ||W^Q_h||_2^4."""
    return expression_bound(paper_bound_expr("2", H, q_power=2))


INJECTIONS = {"bound": lambda: prove(wrong_bound)}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
