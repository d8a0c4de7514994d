"""Jacobians of the symbolic attention maps: by differentiation, and the closed forms of MATH.md section 2.

Every Jacobian is returned as one (N D_out) x (N D) matrix in row-major (token by token) order, the flattening
of `certify.jacobian.jacobian`: entry (i D_out + a, j D + c) is d F_{ia} / d x_{jc}, so block (i, j) is
J_ij = d f_i / d x_j with output coordinates as rows.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from ._maps import SymbolicWeights, attention, softmax_rows, squared_distance_logits


def differentiate(F: sp.Matrix, X: sp.Matrix) -> sp.Matrix:
    """d vec(F) / d vec(X) by SymPy differentiation (row-major vec), shape (N D_out) x (N D)."""
    return sp.Matrix(list(F)).jacobian(list(X))


def from_blocks(N: int, block: Callable[[int, int], sp.Matrix]) -> sp.Matrix:
    """Assemble the N x N block matrix [block(i, j)]."""
    return sp.Matrix.vstack(*(sp.Matrix.hstack(*(block(i, j) for j in range(N))) for i in range(N)))


def block(J: sp.Matrix, N: int, i: int, j: int) -> sp.Matrix:
    """Block J_ij of a (N D_out) x (N D) Jacobian."""
    r, c = J.rows // N, J.cols // N
    return J[i * r:(i + 1) * r, j * c:(j + 1) * c]


def softmax_jacobian_row(P: sp.Matrix, i: int) -> sp.Matrix:
    """P^(i) = diag(P_i:) - P_i:^T P_i: (MATH.md section 0)."""
    p = P[i, :]
    return sp.diag(*p) - p.T * p


def dp_closed_form(X: sp.Matrix, A: sp.Matrix, P: sp.Matrix | None = None) -> sp.Matrix:
    """Jacobian of f = softmax(X A^T X^T) X (MATH.md section 2, DP):

    J_ij = X^T P^(i) [E_ji X A^T + X A delta_ij] + P_ij I,  E_ji the N x N matrix with a single 1 at (j, i).
    """
    N, D = X.shape
    P = softmax_rows(X * A.T * X.T) if P is None else P

    def J(i: int, j: int) -> sp.Matrix:
        E = sp.zeros(N, N)
        E[j, i] = 1
        inner = E * X * A.T + (X * A if i == j else sp.zeros(N, D))
        return X.T * softmax_jacobian_row(P, i) * inner + P[i, j] * sp.eye(D)

    return from_blocks(N, J)


def l2_closed_form(X: sp.Matrix, A: sp.Matrix, P: sp.Matrix) -> sp.Matrix:
    """Jacobian of f = P X A for L2 attention (MATH.md section 2, L2), with xbar_i = sum_k P_ik x_k:

    j != i: J_ij = P_ij A + 2 P_ij A (x_j - xbar_i)(x_i - x_j)^T A;
    j == i: J_ii = P_ii A + 2 A Cov_{P_i}(x) A,  Cov_{P_i}(x) = sum_k P_ik (x_k - xbar_i)(x_k - xbar_i)^T.
    P must be the L2 attention matrix of X for this A (P_ij = softmax_j(-(x_i - x_j)^T A (x_i - x_j))).
    """
    N = X.rows
    x = [X[k, :].T for k in range(N)]

    def J(i: int, j: int) -> sp.Matrix:
        xbar = sum((P[i, k] * x[k] for k in range(N)), sp.zeros(X.cols, 1))
        if i == j:
            cov = sum(((P[i, k] * (x[k] - xbar) * (x[k] - xbar).T) for k in range(N)), sp.zeros(X.cols, X.cols))
            return P[i, i] * A + 2 * A * cov * A
        return P[i, j] * A + 2 * P[i, j] * A * (x[j] - xbar) * (x[i] - x[j]).T * A

    return from_blocks(N, J)


def core_closed_form(Y: sp.Matrix, P: sp.Matrix | None = None) -> sp.Matrix:
    """M(Y) (MATH.md section 2): with P_ij = softmax_j(-||y_i - y_j||^2) and ybar_i = sum_k P_ik y_k,

    M_ij = P_ij I_d + 2 delta_ij Cov_{P_i}(y) + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T.
    """
    N, d = Y.shape
    P = softmax_rows(squared_distance_logits(Y, Y)) if P is None else P
    y = [Y[k, :].T for k in range(N)]

    def M(i: int, j: int) -> sp.Matrix:
        ybar = sum((P[i, k] * y[k] for k in range(N)), sp.zeros(d, 1))
        out = P[i, j] * sp.eye(d) + 2 * P[i, j] * (y[j] - ybar) * (y[i] - y[j]).T
        if i == j:
            out += 2 * sum((P[i, k] * (y[k] - ybar) * (y[k] - ybar).T for k in range(N)), sp.zeros(d, d))
        return out

    return from_blocks(N, M)


def attention_jacobian(X: sp.Matrix, weights: SymbolicWeights, scale: sp.Expr | None = None) -> sp.Matrix:
    """Jacobian of F by differentiating the definition (`attention`); any kind, biases included."""
    return differentiate(attention(X, weights, scale), X)


def generalise_exponentials(expr: sp.Basic) -> tuple[sp.Basic, dict[sp.Symbol, sp.Expr]]:
    """Replace exponentials by powers of fresh positive symbols; return the new expression and {e_k: exp(s_k)}.

    Each exp(c_1 s_1 + c_2 s_2 + ...) with rational c_l becomes prod_l e_l^{c_l}, one symbol e_l per distinct
    term s_l (SymPy merges exp(s)^2 into exp(2 s), so the coefficients matter). If the result is identically 0
    as a rational function of independent e_l, the original is 0 too (it is the special case e_l = exp(s_l)).
    The converse can fail (related s_l), so a False from a zero test on the result proves nothing.
    """
    symbols: dict[sp.Expr, sp.Symbol] = {}

    def symbol(term: sp.Expr) -> sp.Symbol:
        if term not in symbols:
            symbols[term] = sp.Symbol(f"e_{len(symbols)}", positive=True)
        return symbols[term]

    def canonical(term: sp.Expr) -> sp.Expr:
        # (y_2 - y_1)^2 and (y_1 - y_2)^2 are the same number: pick one sign for even powers of sums
        return term.replace(lambda e: e.is_Pow and e.exp.is_even and e.base.is_Add and e.base.could_extract_minus_sign(),
                            lambda e: sp.Pow(-e.base, e.exp))

    def replace(arg: sp.Expr) -> sp.Expr:
        out = sp.Integer(1)
        for term in sp.Add.make_args(arg):
            coeff, rest = term.as_coeff_Mul()
            rest = canonical(rest)
            if not coeff.is_Rational:
                coeff, rest = sp.Integer(1), term
            out *= symbol(rest) ** coeff
        return out

    atoms = sorted(expr.atoms(sp.exp), key=sp.default_sort_key)
    replaced = expr.xreplace({a: replace(a.args[0]) for a in atoms})
    return replaced, {s: sp.exp(t) for t, s in symbols.items()}


def is_zero_rational(expr: sp.Expr) -> bool:
    """True iff `expr`, a rational function of its symbols over QQ, is identically zero.

    Uses SymPy's sparse rational-function field (fast); falls back to together + expand when the expression has
    coefficients outside QQ (e.g. sqrt(2)).
    """
    symbols = sorted(expr.free_symbols, key=sp.default_sort_key)
    if not symbols:
        return sp.simplify(expr) == 0
    try:
        field = sp.field(symbols, sp.QQ)[0]
        return field.from_expr(expr) == 0
    except (ValueError, sp.polys.polyerrors.CoercionFailed):
        numerator, _ = sp.fraction(sp.together(expr))
        return sp.expand(numerator) == 0


def matrices_equal(A: sp.Matrix, B: sp.Matrix) -> bool:
    """Exact test A == B entrywise, after replacing exponentials by powers of independent positive symbols.

    True is a proof of the identity; False means SymPy did not prove it (check numerically before calling it
    false).
    """
    if A.shape != B.shape:
        raise ValueError(f"shapes differ: {A.shape} vs {B.shape}")
    difference, _ = generalise_exponentials(A - B)
    return all(is_zero_rational(entry) for entry in difference)
