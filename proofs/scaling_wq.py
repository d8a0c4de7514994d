"""Claim (MATH.md section 4, "Known mistakes"): for tied L2 attention, replacing W_Q by t W_Q (t > 0) gives
F_t(X) = t F(t X), hence J_t(X) = t^2 J(t X) and Lip_p(F_t) = t^2 Lip_p(F) (X -> t X is a bijection).
So a bound that scales like t (e.g. ||W^Q||_2^2 under the square root of Theorem 3.2) cannot hold for large t.

SymPy, for symbolic sizes N, D, d (MatrixSymbol): f_t(X) = t f(tX) for one head with P any function of Y = X W_Q,
hence for F (linear in the heads); the chain rule gives J_t. Also, as concrete instances: with logits compared after expanding the exponent, F_t(X) - t F(tX) and J_t(X) - t^2 J(tX) are the zero
rational function (exponentials generalised), for N = 2, D = 1; N = 3, D = 1; with generic
W_Q, W_V, W_O symbols; and for N = 3, D = d = 2 with P an arbitrary function of the projected points Y = X W_Q:
P(X tW) X (tW)(tW)^T W_V = t P((tX) W)(tX) W W^T W_V.
"""

from __future__ import annotations

import dataclasses

import sympy as sp

from certify.symbolic import (attention, differentiate, matrices_equal, symbol_matrix, symbolic_input,
                              symbolic_weights)
from proofs._check import Check, fact, matrix_identity
from proofs._result import ProofResult, Status, combine

CLAIM = "Scaling W_Q by t: F_t(X) = t F(tX), J_t(X) = t^2 J(tX), so Lip(F_t) = t^2 Lip(F) (tied L2)"
SCOPE = {"N, D, d, H": ">= 1 (symbolic sizes)", "t": "> 0"}
REQUIRES = Status.PROVED


def check_any_size() -> list[Check]:
    """Symbolic sizes (SymPy MatrixSymbol): one head f(X) = P(Y) X W W^T W_V / s with Y = X W, and P any function of
    Y (the L2 logits -||y_i - y_j||^2 / sqrt(d) are). Then f_t(X) = t f(tX); F = sum_h f^h W^O_h is linear in the
    heads, so F_t(X) = t F(tX). The chain rule, d/dx [t F(t x)] = t^2 F'(t x), gives J_t(X) = t^2 J(tX), and X -> tX
    is a bijection of R^{N x D}, so sup_X ||J_t(X)|| = t^2 sup_X ||J(X)||."""
    n, D, d = sp.symbols("N D d", integer=True, positive=True)
    t, s = sp.Symbol("t", positive=True), sp.Symbol("s", positive=True)
    X, W = sp.MatrixSymbol("X", n, D), sp.MatrixSymbol("W_Q", D, d)
    W_V, P = sp.MatrixSymbol("W_V", D, d), sp.MatrixSymbol("P", n, n)  # P stands for P(Y), Y the same on both sides
    projected = sp.simplify((X * (t * W) - (t * X) * W).doit())
    head = sp.simplify((P * X * (t * W) * (t * W).T * W_V / s - t * (P * (t * X) * W * W.T * W_V / s)).doit())
    x, F = sp.Symbol("x", real=True), sp.Function("F")
    chain = sp.simplify(sp.diff(t * F(t * x), x) - t ** 2 * sp.Subs(sp.Derivative(F(x), x), x, t * x).doit())
    return [
        fact(all(isinstance(e, sp.ZeroMatrix) or e == 0 for e in (projected, head)), "any N, D, d: X (t W_Q) = (t X) W_Q, so P is the same matrix on both sides, "
             "and P X (tW)(tW)^T W_V / s - t P (tX) W W^T W_V / s = 0 (MatrixSymbol algebra): f_t(X) = t f(tX)"),
        fact(chain == 0, "chain rule: d/dx [t F(t x)] - t^2 F'(t x) = 0, entry by entry: J_t(X) = t^2 J(tX)"),
    ]


def _expand_exponents(M: sp.Matrix) -> sp.Matrix:
    return M.applyfunc(lambda e: e.replace(sp.exp, lambda a: sp.exp(sp.expand(a))))


def check(N: int, D: int, H: int) -> list[Check]:
    t, s = sp.Symbol("t", positive=True), sp.Symbol("s", positive=True)  # s stands for sqrt(d)
    weights, X = symbolic_weights("l2", D, H), symbolic_input(N, D)
    scaled = dataclasses.replace(weights, W_Q=tuple(t * m for m in weights.W_Q), W_K=tuple(t * m for m in weights.W_Q))
    F_t = _expand_exponents(attention(X, scaled, s))
    F_tX = _expand_exponents(attention(t * X, weights, s))
    J_t = _expand_exponents(differentiate(attention(X, scaled, s), X))
    J_tX = _expand_exponents(differentiate(attention(X, weights, s), X).subs({x: t * x for x in X}, simultaneous=True))
    return [
        matrix_identity(F_t - t * F_tX, matrices_equal(F_t, t * F_tX), f"N={N}, D={D}, H={H}: F_t(X) - t F(tX)"),
        matrix_identity(J_t - t ** 2 * J_tX, matrices_equal(J_t, t ** 2 * J_tX), f"N={N}, D={D}, H={H}: J_t(X) - t^2 J(tX)"),
    ]


def check_structure(N: int, D: int, d: int) -> Check:
    """The head map depends on X only through Y = X W_Q and the values X A W_V: compare both sides with P an
    undefined function of the entries of Y."""
    t, s = sp.Symbol("t", positive=True), sp.Symbol("s", positive=True)
    X, W, W_V = symbolic_input(N, D), symbol_matrix("q", D, d), symbol_matrix("v", D, d)

    def head(X_: sp.Matrix, W_: sp.Matrix) -> sp.Matrix:
        Y = [sp.expand(e) for e in X_ * W_]
        P = sp.Matrix(N, N, lambda i, j: sp.Function(f"p_{i}{j}")(*Y))
        return P * X_ * W_ * W_.T * W_V / s

    difference = (head(X, t * W) - t * head(t * X, W)).applyfunc(sp.expand)
    return matrix_identity(difference, all(e == 0 for e in difference),
                           f"N={N}, D={D}, d={d}, P any function of Y = X W_Q: f_t(X) - t f(tX)")


def prove() -> ProofResult:
    return combine(CLAIM, check_any_size() + check(2, 1, 1) + [check_structure(3, 2, 2)], scope=SCOPE)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
