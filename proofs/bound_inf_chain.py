"""Claim (MATH.md section 4, Theorem 3.2, inf-norm):

    Lip_inf(F) <= (4 W + 1/sqrt(d)) ||W^O^T||_inf max_h(||W^Q_h||_inf ||W^Q_h^T||_inf) max_h ||W^V_h^T||_inf,

W = W_0((N-1)/e). The chain, each step checked as an inequality on every test instance (numeric: SAMPLED), with
c_Q = ||W^Q||_inf ||W^Q^T||_inf, v_k = W^Q^T (x_k - xbar_i), u_j = W^Q^T (x_i - x_j), K^h_i = W^V_h^T J^h_i: :
 s1  ||J^F||_inf = max_i ||W_O^T [K^1_i; ...; K^H_i]||_inf <= ||W^O^T||_inf max_h max_i ||K^h_i||_inf
 s2  ||K^h_i||_inf <= ||W^V_h^T||_inf ||J^h_i:||_inf
 s3  ||J^h_i:||_inf <= sum_j ||J^h_ij||_inf
 s4  sum_j ||J_ij||_inf <= ||A||_inf + 2 ||A Cov_i A||_inf + 2 sum_j P_ij ||A (x_j - xbar_i)(x_i - x_j)^T A||_inf
 s5  ||A||_inf <= c_Q / sqrt(d)
 s6  ||A Cov_i A||_inf <= (c_Q / d) sum_k P_ik ||v_k||_inf ||v_k||_1 <= (c_Q / sqrt(d)) sum_k P_ik ||v_k||_2^2
 s7  ||A (x_j - xbar)(x_i - x_j)^T A||_inf <= (c_Q / d) ||v_j||_inf ||u_j||_1 <= (c_Q / sqrt(d)) ||v_j||_2 ||u_j||_2
 s8  sum_k P_ik ||v_k||^2 <= sqrt(d) W and sum_j P_ij ||v_j|| ||u_j|| <= sqrt(d) W (Corollary)
 end ||J^F||_inf <= the bound certify ships (`certify.bounds.paper_bound`).
Status: the step bounds are assembled into the constant in SymPy, and `certify.bounds.paper_constant`, called on
SymPy symbols, must equal it exactly (PROVED-MODULO the Corollary, the closed-form Jacobian and the norm facts).
The numeric step checks, the shipped weight factor and the end check are SAMPLED cross-checks: they can only
lower the status.
Steps s5-s8 are algebra plus the Corollary (proved in `corollary_softmax_moments`); the checks here guard the
assembly. Instances: `proofs._l2numeric.instances` (random, two-cluster, hill-climbed, the exact N=2 maximiser,
W^Q scaled by 0.3 to 10); s0 first checks the numpy closed form against the SymPy oracle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import lambertw

from certify.symbolic import paper_bound_expr
from proofs._chain import Step, check_assembly, constant_text, check_weight_factor, expression_bound, shipped_paper_bound
from proofs._l2numeric import Layer, head, instances, layer_jacobian, op_norm, oracle_step
from proofs._result import ProofResult, Status, combine

CLAIM = ("Theorem 3.2 (inf): Lip_inf(F) <= ({constant}) ||W^O^T||_inf max_h ||W^Q_h||_inf "
         "||W^Q_h^T||_inf max_h ||W^V_h^T||_inf, the constant assembled from the chain's steps in SymPy and equal to the shipped paper_constant")

Bound = Callable[[Layer, int], float]


SCOPE = {"N": ">= 2", "D, d, H": ">= 1"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("corollary_softmax_moments", "jacobian_l2", "norm facts of steps s1-s5 (triangle inequality, "
          "submultiplicativity, ||a b^T|| = ||a|| ||b||, block-row norms)")
default_bound = shipped_paper_bound("inf")


def prove(bound_for_heads: Callable[[int], Bound] = default_bound, count: int = 160) -> ProofResult:
    names = ["s0 numpy closed form = SymPy oracle", "s1 ||J^F|| <= ||W_O^T|| max ||K^h_i||", "s2 ||K^h_i|| <= ||W_V^T|| ||J^h_i:||",
             "s3 ||J_i:|| <= sum_j ||J_ij||", "s4 triangle over the closed form", "s5 ||A|| <= c_Q/sqrt(d)",
             "s6 covariance term", "s7 cross term", "s8 Corollary (b), (c)", "end ||J^F||_inf <= bound"]
    steps = {n: Step(n) for n in names}
    oracle_step(steps[names[0]])
    names = names[1:]
    bounds: dict[int, Bound] = {}
    for X, layer, label in instances("inf", count):
        N, D = X.shape
        d = layer.d
        W0 = float(np.real(lambertw((N - 1) / np.e)))
        J_F = layer_jacobian(X, layer)
        norm_F = op_norm(J_F, "inf")
        heads = [head(X, layer.W_Q[h]) for h in range(layer.H)]
        K = [np.einsum("ab,ibjc->iajc", layer.W_V[h].T, heads[h].J).reshape(N, d, N * D) for h in range(layer.H)]
        steps[names[0]].check(norm_F, op_norm(layer.W_O.T, "inf") * max(op_norm(K[h][i], "inf") for h in range(layer.H)
                                                                         for i in range(N)), label)
        for h, hd in enumerate(heads):
            W = layer.W_Q[h]
            c_Q = op_norm(W, "inf") * op_norm(W.T, "inf")
            A = hd.A
            Jh = hd.J.reshape(N, D, N * D)
            for i in range(N):
                steps[names[1]].check(op_norm(K[h][i], "inf"), op_norm(layer.W_V[h].T, "inf") * op_norm(Jh[i], "inf"), label)
                blocks = [op_norm(hd.J[i, :, j, :], "inf") for j in range(N)]
                steps[names[2]].check(op_norm(Jh[i], "inf"), sum(blocks), label)
                centred = X - hd.xbar[i]
                cov = (centred.T * hd.P[i]) @ centred
                cross = [hd.P[i, j] * op_norm(A @ np.outer(X[j] - hd.xbar[i], X[i] - X[j]) @ A, "inf") for j in range(N)]
                steps[names[3]].check(sum(blocks), op_norm(A, "inf") + 2 * op_norm(A @ cov @ A, "inf") + 2 * sum(cross), label)
                steps[names[4]].check(op_norm(A, "inf"), c_Q / np.sqrt(d), label)
                v = centred @ W
                u = (X[i] - X) @ W
                vv = np.sum(hd.P[i] * np.sum(v ** 2, axis=1))
                steps[names[5]].check(op_norm(A @ cov @ A, "inf"), c_Q / np.sqrt(d) * vv, label)
                vu = np.sum(hd.P[i] * np.linalg.norm(v, axis=1) * np.linalg.norm(u, axis=1))
                steps[names[6]].check(sum(cross), c_Q / np.sqrt(d) * vu, label)
                steps[names[7]].check(max(vv, vu), np.sqrt(d) * W0, label)
        if layer.H not in bounds:
            bounds[layer.H] = bound_for_heads(layer.H)
        steps[names[8]].check(norm_F, bounds[layer.H](layer, N), label)
    cross = [s.result() for s in steps.values()] + [check_weight_factor("inf")]
    claim = CLAIM.format(constant=constant_text("paper", "inf"))
    return combine(claim, [check_assembly("paper", "inf")], scope=SCOPE, lemmas=LEMMAS, cross_checks=cross)


def wrong_bound(H: int) -> Bound:
    """Deliberately wrong: W^Q enters to the first power in total ((||W^Q|| ||W^Q^T||)^(1/2)), so it scales like t."""
    return expression_bound(paper_bound_expr("inf", H, q_power=1))


INJECTIONS = {"bound": lambda: prove(wrong_bound)}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
