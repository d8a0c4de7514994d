"""Claim (MATH.md section 2, DP): for f = softmax(X A^T X^T) X,

    J_ij = X^T P^(i) [E_ji X A^T + X A delta_ij] + P_ij I,

and for multi-head DP attention F = concat_h f^h W_O with f^h = softmax(X W_Q (X W_K)^T / sqrt(d)) X W_V,
J^F_ij = sum_h W_O_h^T W_V^{h T} J^h_ij with A_h = W_K W_Q^T / sqrt(d).

Checked by SymPy: the closed form minus the derivative of the definition, with every distinct exponential replaced
by an independent positive symbol (a generalisation, so zero there implies zero here), is the zero rational
function. Generic symbols: X (N x D), A (D x D); N = 2, 3 and D = 1, 2. Multi-head: the chain rule through
F = sum_h g_h(X) W_V^h W_O_h with arbitrary (undefined-function) g_h, N = 2, D = 2, H = 2, plus the identity
X W_Q (X W_K)^T / sqrt(d) = X A^T X^T (N = 3, D = d = 2).

Cross-check of the shipped code (SAMPLED; it can only lower the status): `certify.jacobian.jacobian`, the torch
closed form certify uses, against the lambdified SymPy derivative of the definition on random layers.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from certify.symbolic import differentiate, dp_closed_form, matrices_equal, softmax_jacobian_row, softmax_rows, symbol_matrix, symbolic_input
from proofs._check import Check, matrix_identity
from proofs._composition import check_composition, check_shipped_jacobian, check_dp_logits
from proofs._result import ProofResult, Status, combine

CLAIM = ("DP closed form J_ij = X^T P^(i) [E_ji X A^T + X A delta_ij] + P_ij I equals d f_i/d x_j for "
         "f = softmax(X A^T X^T) X (N <= 3, D <= 2, generic symbols), and J^F_ij = sum_h W_O_h^T W_V^hT J^h_ij")

SCOPE = {"(N, D)": "in {(2, 1), (3, 1), (2, 2), (3, 2)} (closed form); composition N = 2, D = 2, H = 2"}
REQUIRES = Status.PROVED

ClosedForm = Callable[[sp.Matrix, sp.Matrix, sp.Matrix], sp.Matrix]


def check_dp_jacobian(closed_form: ClosedForm, sizes: tuple[tuple[int, int], ...] = ((2, 1), (3, 1), (2, 2), (3, 2))
                      ) -> list[Check]:
    """Compare `closed_form(X, A, P)` with SymPy's derivative of softmax(X A^T X^T) X for each (N, D)."""
    parts = []
    for N, D in sizes:
        X, A = symbolic_input(N, D), symbol_matrix("a", D, D)
        P = softmax_rows(X * A.T * X.T)
        derivative, closed = differentiate(P * X, X), closed_form(X, A, P)
        parts.append(matrix_identity(derivative - closed, matrices_equal(derivative, closed),
                                     f"N={N}, D={D}: closed form - derivative"))
    return parts


def prove(closed_form: ClosedForm = dp_closed_form) -> ProofResult:
    parts = check_dp_jacobian(closed_form)
    if closed_form is dp_closed_form:
        parts += [check_composition(), check_dp_logits()]
    shipped = [check_shipped_jacobian("dp")] if closed_form is dp_closed_form else []
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=shipped)


def wrong_closed_form(X: sp.Matrix, A: sp.Matrix, P: sp.Matrix) -> sp.Matrix:
    """Deliberately wrong: the delta_ij term X A (the dependence through the query) is dropped."""
    N = X.rows
    return dp_closed_form(X, A, P) - sp.Matrix.vstack(*(sp.Matrix.hstack(*(
        X.T * softmax_jacobian_row(P, i) * X * A if i == j else sp.zeros(X.cols, X.cols) for j in range(N))) for i in range(N)))


INJECTIONS = {"jacobian": lambda: prove(wrong_closed_form)}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
