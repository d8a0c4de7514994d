"""Claim (MATH.md section 3, Theorem 3.1): dot-product attention is not Lipschitz on R^{N x D}.

For f = softmax(X A^T X^T) X (A = W_K W_Q^T / sqrt(d)):
- D = 1, at x_i = 0: row i of the softmax is uniform and d f_i / d x_i = 1/N + a Var(x), Var the population
  variance of all N token values (x_i = 0 included);
- D = 2 (MATH.md states it for general D; only D = 2 is checked here), at x_i = 0: J_ii = (1/N) X^T (I - 1 1^T / N) X A + I / N;
- witness: x_i = 0 and the other tokens scaled by t: the entry grows like t^2 and tends to infinity
  (`sympy.limit`), so no operator norm of J is bounded (every p-norm dominates the largest entry up to a constant).

All by SymPy differentiation of the definition (N = 3; D = 1 and D = 2 with generic symbols). One witness suffices
for the theorem (not Lipschitz at N = 3); the formulas for other N and D are not checked.
"""

from __future__ import annotations

import sympy as sp

from certify.symbolic import block, differentiate, matrices_equal, softmax_rows, symbol_matrix, symbolic_input
from proofs._check import Check, fact, matrix_identity
from proofs._result import ProofResult, Status, combine

CLAIM = ("Theorem 3.1: DP attention is not Lipschitz: at x_i = 0, d f_i/d x_i = 1/N + a Var(x) (D = 1) and J_ii = "
         "(1/N) X^T (I - 11^T/N) X A + I/N (D = 2); with the other tokens scaled by t the entry tends to infinity")
SCOPE = {"N": "= 3", "D": "in {1, 2}"}
REQUIRES = Status.PROVED


def _dp_jacobian(X: sp.Matrix, A: sp.Matrix) -> sp.Matrix:
    return differentiate(softmax_rows(X * A.T * X.T) * X, X)


def check_scalar(N: int = 3) -> list[Check]:
    X, a = symbolic_input(N, 1), sp.Symbol("a", real=True)
    at_zero = {X[0, 0]: 0}
    entry = _dp_jacobian(X, sp.Matrix([[a]]))[0, 0].subs(at_zero)
    values = [X[k, 0].subs(at_zero) for k in range(N)]
    mean = sum(values) / N
    variance = sum(v ** 2 for v in values) / N - mean ** 2
    difference = sp.simplify(entry - (sp.Rational(1, N) + a * variance))
    t = sp.Symbol("t", positive=True)
    witness = entry.subs({X[1, 0]: t, X[2, 0]: -t}).subs(a, 1)  # Var = 2 t^2 / 3
    limit = sp.limit(witness, t, sp.oo)
    return [
        matrix_identity(sp.Matrix([entry - (sp.Rational(1, N) + a * variance)]), difference == 0,
                        f"D=1, N={N}: d f_1/d x_1 at x_1 = 0 minus (1/N + a Var(x))"),
        fact(limit == sp.oo, f"witness x = (0, t, -t), a = 1: d f_1/d x_1 = {sp.simplify(witness)} -> {limit} as t -> oo"),
    ]


def check_general(N: int = 3, D: int = 2) -> list[Check]:
    X, A = symbolic_input(N, D), symbol_matrix("a", D, D)
    at_zero = {X[0, c]: 0 for c in range(D)}
    J_ii = block(_dp_jacobian(X, A), N, 0, 0).subs(at_zero)
    X0 = X.subs(at_zero)
    centre = sp.eye(N) - sp.ones(N, N) / N
    formula = X0.T * centre * X0 * A / N + sp.eye(D) / N
    ok = matrices_equal(J_ii, formula)
    t = sp.Symbol("t", positive=True)
    witness = J_ii.subs({X[k, c]: t * (1 if (k + c) % 2 else 2) for k in range(1, N) for c in range(D)})
    witness = witness.subs({A[r, c]: int(r == c) for r in range(D) for c in range(D)})  # A = I
    limit = sp.limit(witness[0, 0], t, sp.oo)
    return [
        matrix_identity(J_ii - formula, ok, f"N={N}, D={D}: J_11 at x_1 = 0 minus (1/N) X^T (I - 11^T/N) X A - I/N"),
        fact(limit == sp.oo, f"N={N}, D={D}, A = I, x_1 = 0, other tokens t*(fixed pattern): (J_11)_11 -> {limit}"),
    ]


def prove() -> ProofResult:
    return combine(CLAIM, check_scalar() + check_general(), scope=SCOPE)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
