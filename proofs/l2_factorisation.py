"""Claim (MATH.md section 2, "Structure"): write A = V V^T (V = W_Q / d^{1/4}) and y_k = V^T x_k. Then the L2 head
Jacobian factors as J_ij = V M_ij(Y) V^T with

    M_ij(Y) = P_ij I_d + 2 delta_ij Cov_{P_i}(y) + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T,
    P_ij = softmax_j(-||y_i - y_j||^2),

M(Y) is the derivative of g(Y) = P Y, and M is invariant under translation Y -> Y + 1 c^T.

SymPy checks (exponentials generalised to independent symbols): the logits agree, V M_ij V^T equals the L2 closed
form (itself proved equal to the derivative in `jacobian_l2`) for N = 3, D = 2, d = 1 and N = 2, D = 2, d = 2;
the M closed form equals SymPy's derivative of P Y (N = 2, 3; d = 1, 2); M(Y + 1 c^T) = M(Y) for N = 3, d = 2.
Cross-check of the shipped code (SAMPLED; can only lower the status): the torch and numpy M(Y) certify uses.
"""

from __future__ import annotations

import sympy as sp

from certify.symbolic import (core_closed_form, core_map, differentiate, from_blocks, l2_closed_form,
                              matrices_equal, softmax_rows, squared_distance_logits, symbol_matrix, symbolic_input)
from proofs._check import Check, matrix_identity
from proofs._check import numeric
from proofs._result import ProofResult, Status, combine

CLAIM = ("L2 head Jacobian J_ij = V M_ij(Y) V^T with Y = X V, V = W_Q/d^{1/4}; M = d(P Y)/dY in closed form; "
         "M(Y + 1 c^T) = M(Y)")
SCOPE = {"(N, D, d)": "in {(3, 2, 1), (2, 2, 2)} (factorisation)", "(N, d)": "in {(2, 1), (3, 1), (2, 2), (3, 2)} (M = "
         "d(PY)/dY); N = 3, d = 2 (translation)"}
REQUIRES = Status.PROVED


def check_shipped_core(cases: tuple[tuple[int, int], ...] = ((2, 1), (3, 1), (3, 2)), seed: int = 0) -> Check:
    """Cross-check of the shipped code: M(Y) from `certify.jacobian.l2_core_jacobian` (torch) and from the numpy
    `core_jacobian_float` of the global branch and bound, against SymPy's derivative of P Y, lambdified."""
    import numpy as np
    import torch

    from certify import jacobian as shipped
    from certify.bounds.global_l2 import _enclosure as enclosure
    from certify.symbolic import core_jacobian_function

    rng = np.random.default_rng(seed)
    worst = 0.0
    for N, d in cases:
        for scale in (0.5, 1.5):
            Y = rng.standard_normal((N, d)) * scale
            oracle = core_jacobian_function(N, d)(Y)
            torch_M = shipped.l2_core_jacobian(torch.tensor(Y))[0].reshape(N * d, N * d).numpy()
            numpy_M = enclosure.core_jacobian_float(Y[None])[0]
            gap = max(float(np.abs(torch_M - oracle).max()), float(np.abs(numpy_M - oracle).max()))
            worst = max(worst, gap)
            if not gap <= 1e-12 * (1 + float(np.abs(oracle).max())):
                return numeric(False, f"shipped M(Y) (l2_core_jacobian / core_jacobian_float) differs from d(PY)/dY by "
                                      f"{gap:.3g} at N={N}, d={d}, Y={np.round(Y, 4).tolist()}")
    return numeric(True, f"shipped certify.jacobian.l2_core_jacobian and core_jacobian_float = SymPy d(PY)/dY at "
                         f"{2 * len(cases)} random Y, (N, d) in {list(cases)}: largest gap {worst:.2g}")


def check_factorisation(N: int, D: int, d: int) -> list[Check]:
    X, V = symbolic_input(N, D), symbol_matrix("v", D, d)
    Y = X * V
    A = V * V.T
    logits_y = squared_distance_logits(Y, Y)
    logits_x = sp.Matrix(N, N, lambda i, j: -((X[i, :] - X[j, :]) * A * (X[i, :] - X[j, :]).T)[0, 0])
    logits_ok = all(sp.expand(e) == 0 for e in logits_y - logits_x)
    P = softmax_rows(logits_x)
    M = core_closed_form(Y, P)
    factored = from_blocks(N, lambda i, j: V * M[i * d:(i + 1) * d, j * d:(j + 1) * d] * V.T)
    closed = l2_closed_form(X, A, P)
    return [
        matrix_identity(logits_y - logits_x, logits_ok, f"N={N}, D={D}, d={d}: -||y_i - y_j||^2 = "
                        "-(x_i - x_j)^T A (x_i - x_j)"),
        matrix_identity(factored - closed, matrices_equal(factored, closed),
                        f"N={N}, D={D}, d={d}: V M_ij(Y) V^T - J_ij(closed form)"),
    ]


def check_core_derivative(N: int, d: int) -> Check:
    Y = symbolic_input(N, d, "y")
    derivative, closed = differentiate(core_map(Y), Y), core_closed_form(Y)
    return matrix_identity(derivative - closed, matrices_equal(derivative, closed),
                           f"N={N}, d={d}: M(Y) closed form - d(P Y)/dY")


def check_translation(N: int, d: int) -> Check:
    Y, c = symbolic_input(N, d, "y"), symbol_matrix("c", 1, d)
    shifted = core_closed_form(Y + sp.ones(N, 1) * c)
    original = core_closed_form(Y)
    return matrix_identity(shifted - original, matrices_equal(shifted, original),
                           f"N={N}, d={d}: M(Y + 1 c^T) - M(Y)")


def prove() -> ProofResult:
    parts = check_factorisation(3, 2, 1) + check_factorisation(2, 2, 2)
    parts += [check_core_derivative(2, 1), check_core_derivative(3, 1), check_core_derivative(2, 2),
              check_core_derivative(3, 2), check_translation(3, 2)]
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=[check_shipped_core()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
