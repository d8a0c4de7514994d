"""Claim (MATH.md section 1): untied L2 attention (W_K != W_Q) is not Lipschitz.

D = 1, N = 3, logits -(a x_i - b x_j)^2 (a = w_Q / d^{1/4}, b = w_K / d^{1/4}, a != b), f_1 = sum_j P_1j x_j.
Witness: x_1 = t, x_{2,3} = (a/b) t +- delta(t) with delta(t) = |a - b| t / (2 b). Then tokens 2 and 3 share the
logit -(b delta)^2, which dominates the token-1 logit -(a - b)^2 t^2, so P_12, P_13 -> 1/2 while
d f_1/d x_1 = P_11 + 2 a b Var_{P_1}(x) grows like 2 a b delta^2 -> oo (`sympy.limit`, several (a, b)).

For symbolic a > b > 0 (a = b + c, c > 0) SymPy computes the limit in seconds; for a < b it does not finish, so
that case is checked at (a, b) = (1, 2) and (1, 3). (With delta fixed the limit is the finite 2 a b delta^2, which is
why the witness needs delta growing with t; MATH.md section 1 now says so.)
"""

from __future__ import annotations

import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, Status, combine

CLAIM = ("Untied L2 attention is not Lipschitz: x_1 = t, x_2,3 = (a/b) t +- |a-b| t/(2b) gives d f_1/d x_1 -> oo "
         "as t -> oo (D = 1, N = 3)")

PAIRS = ((1, 2), (1, 3))
SCOPE = {"D": "= 1", "N": "= 3", "(a, b)": "a > b > 0 symbolic; (1, 2), (1, 3)"}
REQUIRES = Status.PROVED


def untied_derivative(a: sp.Expr, b: sp.Expr) -> tuple[sp.Expr, tuple[sp.Symbol, ...]]:
    """d f_1 / d x_1 for N = 3, D = 1, logits -(a x_i - b x_j)^2, values x_j (untied L2, unit W_V), by SymPy."""
    x = sp.symbols("x1:4", real=True)
    logits = [-(a * x[0] - b * xj) ** 2 for xj in x]
    weights = [sp.exp(s) for s in logits]
    f1 = sum(w * xj for w, xj in zip(weights, x)) / sum(weights)
    return sp.diff(f1, x[0]), x


def witness_limit(a: sp.Expr, b: sp.Expr, delta: sp.Expr, t: sp.Symbol) -> sp.Expr:
    derivative, x = untied_derivative(sp.sympify(a), sp.sympify(b))
    centre = sp.sympify(a) / b * t
    return sp.limit(derivative.subs({x[0]: t, x[1]: centre + delta, x[2]: centre - delta}), t, sp.oo)


def prove() -> ProofResult:
    t = sp.Symbol("t", positive=True)
    b, c = sp.symbols("b c", positive=True)
    limit = witness_limit(b + c, b, c * t / (2 * b), t)
    parts: list[Check] = [fact(limit == sp.oo, f"a = b + c > b > 0 symbolic, delta = (a - b) t/(2b): lim d f_1/d x_1 = {limit}")]
    for a, b in PAIRS:
        limit = witness_limit(a, b, sp.Rational(abs(a - b), 2 * b) * t, t)
        parts.append(fact(limit == sp.oo, f"a={a}, b={b}, delta = |a-b| t/(2b): lim d f_1/d x_1 = {limit}"))
    return combine(CLAIM, parts, scope=SCOPE)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
