"""Claim (MATH.md section 2, "Structure"): for tied L2 attention, with V_h = W^Q_h / d^{1/4}, Y_h = X V_h and
G_h = W^O_h^T W^{V,h T} V_h,

    J^F = [I (x) G_1, ..., I (x) G_H] blockdiag(M(Y_1), ..., M(Y_H)) [I (x) V_1^T; ...; I (x) V_H^T],

so Lip_p(F) <= ||[G_1 ... G_H]||_p c_p(N, d) ||V||_p (||V||_2 = ||[V_1 ... V_H]||_2, ||V||_inf = max_h ||V_h^T||_inf),
and Theorem 3.2's chain in projected coordinates gives c_2(N, d) <= sqrt(N)(4 W + 1), c_inf(N, d) <= 1 + 4 sqrt(d) W.

Status: the c_p bounds are assembled from the chain's steps in SymPy, and the shipped
`certify.bounds.default_constant` (the c_p(N, d) the factorised bound uses where no certified table entry exists),
called on SymPy symbols, must equal them exactly: PROVED-MODULO the factorisation, the Corollary and norm facts.
Table entries of `universal_constant` rest on the global branch and bound and are not covered here.
Cross-checks (SAMPLED; they can only lower the status) on the instances of `bound_inf_chain`: the factorisation (to
1e-10 relative), the norm inequality, ||M(Y_h)||_p <= the c_p bound, the shipped `factorised_bound` and its weight
factors, and the exact value c(2, 1) (`exact_constant_n2`) against the c bound.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from certify.symbolic import exact_constant_n2, universal_constant_bound_expr, weight_norms
from certify.symbolic import N as N_symbol
from certify.symbolic import d as d_symbol
from proofs._chain import Step, check_assembly, constant_text
from proofs._check import Check, numeric
from proofs._l2numeric import core_blocks, instances, layer_jacobian, op_norm
from proofs._result import ProofResult, Status, combine

CLAIM = ("Factorised bound: J^F = [I(x)G_h] blockdiag(M(Y_h)) [I(x)V_h^T], so Lip_p <= ||G||_p c_p(N,d) ||V||_p with "
         "c_2 <= {c2}, c_inf <= {cinf} (assembled from the chain in SymPy, equal to the shipped default_constant)")


def core_jacobian(Y: np.ndarray) -> np.ndarray:
    """M(Y) (N d, N d) from `_l2numeric.core_blocks`."""
    N, d = Y.shape
    return core_blocks(Y).reshape(N * d, N * d)


SCOPE = {"N": ">= 2", "D, d, H": ">= 1"}
REQUIRES = Status.PROVED_MODULO
LEMMAS = ("l2_factorisation", "jacobian_l2", "corollary_softmax_moments",
          "norm facts: ||[I(x)G_1 ... I(x)G_H]||_p = ||[G_1 ... G_H]||_p, ||blockdiag(M_h)||_p = max_h ||M_h||_p, "
          "||[I(x)V_1^T; ...]||_2 = ||[V_1 ... V_H]||_2, ||[I(x)V_1^T; ...]||_inf = max_h ||V_h^T||_inf")


def check_factor_norms(count: int = 24) -> Check:
    """Cross-check of the shipped code: `certify.bounds.factorised_weight_factors` (||[G_1 ... G_H]||_p, ||V||_p)
    equals the numpy values of `certify.symbolic.weight_norms` to 1e-12 relative, both norms (SAMPLED)."""
    from certify.bounds.closed_form import _factorised

    from proofs._chain import attention_weights

    worst = 0.0
    for norm in ("2", "inf"):
        for _, layer, label in instances(norm, count, seed=4, climb=0):
            norms = weight_norms(layer, norm)
            left, right = map(float, _factorised.factorised_weight_factors(attention_weights(layer), norm))  # Scaled
            gap = max(abs(left / norms["G"] - 1), abs(right / norms["V"] - 1))
            worst = max(worst, gap)
            if not gap <= 1e-12:
                return numeric(False, f"shipped factorised_weight_factors({norm}) = ({left:.12g}, {right:.12g}) != "
                                      f"({norms['G']:.12g}, {norms['V']:.12g}) at {label}")
    return numeric(True, f"shipped certify.bounds.factorised_weight_factors = (||G||_p, ||V||_p) on {2 * count} layers, "
                         f"both norms (largest relative gap {worst:.2g})")


def prove(count: int = 96) -> ProofResult:
    from certify.bounds.closed_form import _factorised

    from proofs._chain import attention_weights

    parts = [check_assembly("core", norm) for norm in ("2", "inf")]
    checks: list = []
    for norm in ("2", "inf"):
        c_bound = sp.lambdify([N_symbol, d_symbol], universal_constant_bound_expr(norm), modules="mpmath")
        steps = [Step(f"{norm}: factorisation |J^F - L blockdiag(M) R|"), Step(f"{norm}: ||J^F|| <= ||G|| max_h ||M_h|| ||V||"),
                 Step(f"{norm}: ||M(Y_h)|| <= c bound"), Step(f"{norm}: ||J^F|| <= shipped factorised_bound")]
        for X, layer, label in instances(norm, count, seed=2):
            N, D = X.shape
            H, d = layer.H, layer.d
            V = layer.W_Q / d ** 0.25
            G = [layer.W_O[h * d:(h + 1) * d].T @ layer.W_V[h].T @ V[h] for h in range(H)]
            M = [core_jacobian(X @ V[h]) for h in range(H)]
            left = np.hstack([np.kron(np.eye(N), G[h]) for h in range(H)])
            right = np.vstack([np.kron(np.eye(N), V[h].T) for h in range(H)])
            middle = np.zeros((H * N * d, H * N * d))
            for h in range(H):
                middle[h * N * d:(h + 1) * N * d, h * N * d:(h + 1) * N * d] = M[h]
            J = layer_jacobian(X, layer)
            steps[0].check(float(np.abs(J - left @ middle @ right).max()), 1e-10 * (1 + float(np.abs(J).max())), label)
            norms = weight_norms(layer, norm)
            M_norm = max(op_norm(M[h], norm) for h in range(H))
            steps[1].check(op_norm(J, norm), norms["G"] * M_norm * norms["V"], label)
            steps[2].check(M_norm, float(c_bound(N, d)), label)
            weights = attention_weights(layer)
            steps[3].check(op_norm(J, norm), _factorised.factorised_bound(weights, N, norm).value, label)
        checks += [s.result() for s in steps]
        lo, _ = exact_constant_n2(norm)
        exact = Step(f"{norm}: exact c(2, 1) >= {lo:.6f} <= c bound")
        exact.check(lo, float(c_bound(2, 1)), "N=2, d=1")
        checks.append(exact.result())
    claim = CLAIM.format(c2=constant_text("core", "2"), cinf=constant_text("core", "inf"))
    return combine(claim, parts, scope=SCOPE, lemmas=LEMMAS, cross_checks=checks + [check_factor_norms()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
