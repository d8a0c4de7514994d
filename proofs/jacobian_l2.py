"""Claim (MATH.md section 2, L2): for f = P X A with A symmetric and P_ij = softmax_j(-(x_i - x_j)^T A (x_i - x_j)),
xbar_i = sum_k P_ik x_k:

    j != i: J_ij = P_ij A + 2 P_ij A (x_j - xbar_i)(x_i - x_j)^T A
    j == i: J_ii = P_ii A + 2 A Cov_{P_i}(x) A,

and for tied L2 multi-head attention F = concat_h P^h X A_h W_V^h W_O, A_h = W_Q^h W_Q^hT / sqrt(d),
J^F_ij = sum_h W_O_h^T W_V^{h T} J^h_ij.

Checked by SymPy as in `jacobian_dp` (exponentials generalised to independent symbols, difference the zero
rational function). A is a generic symmetric matrix, which covers every A = W_Q W_Q^T / sqrt(d). Multi-head:
the chain rule through F = sum_h g_h(X) W_V^h W_O_h for arbitrary g_h (N = 2, D = 2, H = 2), plus the logit
identity ||(x_i - x_j)^T W_Q||^2 / sqrt(d) = (x_i - x_j)^T A (x_i - x_j) (N = 3, D = d = 2).

Cross-check of the shipped code (SAMPLED; it can only lower the status): `certify.jacobian.jacobian`, the torch
closed form certify uses, against the lambdified SymPy derivative of the definition on random layers.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from certify.symbolic import differentiate, l2_closed_form, matrices_equal, softmax_rows, symbolic_input
from proofs._check import Check, matrix_identity
from proofs._composition import check_composition, check_shipped_jacobian, check_l2_logits
from proofs._result import ProofResult, Status, combine

CLAIM = ("L2 closed form J_ij = P_ij A + 2 P_ij A (x_j - xbar_i)(x_i - x_j)^T A (j != i), J_ii = P_ii A + "
         "2 A Cov_{P_i}(x) A equals d f_i/d x_j for f = P X A (N <= 3, D <= 2, generic symmetric A), and the "
         "multi-head composition")

SCOPE = {"(N, D)": "in {(2, 1), (3, 1), (2, 2), (3, 2)} (closed form); composition N = 2, D = 2, H = 2"}
REQUIRES = Status.PROVED

ClosedForm = Callable[[sp.Matrix, sp.Matrix, sp.Matrix], sp.Matrix]


def symmetric_matrix(D: int) -> sp.Matrix:
    return sp.Matrix(D, D, lambda r, c: sp.Symbol(f"a_{min(r, c) + 1}{max(r, c) + 1}", real=True))


def l2_attention_matrix(X: sp.Matrix, A: sp.Matrix) -> sp.Matrix:
    N = X.rows
    return softmax_rows(sp.Matrix(N, N, lambda i, j: -((X[i, :] - X[j, :]) * A * (X[i, :] - X[j, :]).T)[0, 0]))


def check_l2_jacobian(closed_form: ClosedForm, sizes: tuple[tuple[int, int], ...] = ((2, 1), (3, 1), (2, 2), (3, 2))
                      ) -> list[Check]:
    """Compare `closed_form(X, A, P)` with SymPy's derivative of P X A for each (N, D)."""
    parts = []
    for N, D in sizes:
        X, A = symbolic_input(N, D), symmetric_matrix(D)
        P = l2_attention_matrix(X, A)
        derivative, closed = differentiate(P * X * A, X), closed_form(X, A, P)
        parts.append(matrix_identity(derivative - closed, matrices_equal(derivative, closed),
                                     f"N={N}, D={D}: closed form - derivative"))
    return parts


def prove(closed_form: ClosedForm = l2_closed_form) -> ProofResult:
    parts = check_l2_jacobian(closed_form)
    if closed_form is l2_closed_form:
        parts += [check_composition(), check_l2_logits()]
    shipped = [check_shipped_jacobian("l2")] if closed_form is l2_closed_form else []
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=shipped)


def wrong_closed_form(X: sp.Matrix, A: sp.Matrix, P: sp.Matrix) -> sp.Matrix:
    """Deliberately wrong (a plausible slip): the covariance term with factor 1 instead of 2."""
    N, D = X.shape
    right = l2_closed_form(X, A, P)
    x = [X[k, :].T for k in range(N)]
    wrong = right.copy()
    for i in range(N):
        xbar = sum((P[i, k] * x[k] for k in range(N)), sp.zeros(D, 1))
        cov = sum((P[i, k] * (x[k] - xbar) * (x[k] - xbar).T for k in range(N)), sp.zeros(D, D))
        wrong[i * D:(i + 1) * D, i * D:(i + 1) * D] = right[i * D:(i + 1) * D, i * D:(i + 1) * D] - A * cov * A
    return wrong


INJECTIONS = {"jacobian": lambda: prove(wrong_closed_form)}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
