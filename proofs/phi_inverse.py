"""Claim: phi^{-1}(N-1) = W_0((N-1)/e), where phi(x) = x e^{x+1} (MATH.md section 4).

phi is increasing on [0, inf) (phi' = (x+1) e^{x+1} > 0), so phi^{-1} is well defined there, and
phi(W_0(n/e)) = W_0(n/e) e^{W_0(n/e)} e = (n/e) e = n by the defining identity W_0(z) e^{W_0(z)} = z.
"""

from __future__ import annotations

import sympy as sp

from proofs._check import fact
from proofs._result import ProofResult, combine

CLAIM = "phi^{-1}(N-1) = W_0((N-1)/e) with phi(x) = x e^{x+1}, and phi is increasing on [0, inf)"


def prove() -> ProofResult:
    n, x = sp.symbols("n x", positive=True)
    z = (n - 1) / sp.E
    w = sp.Symbol("w", positive=True)  # stands for W_0(z) > 0 (n > 1)
    phi_w = sp.expand(w * sp.exp(w + 1))
    # the definition of W_0: w e^w = z, i.e. exp(w) = z / w
    difference = sp.simplify(phi_w.subs(sp.exp(w), z / w) - (n - 1))
    derivative = sp.factor(sp.diff(x * sp.exp(x + 1), x))
    return combine(CLAIM, [
        fact(difference == 0, f"phi(W_0((n-1)/e)) - (n-1) using exp(W_0(z)) = z/W_0(z): simplifies to {difference}"),
        fact(bool(derivative.is_positive), f"phi'(x) = {derivative} > 0 for x > 0 (SymPy assumptions)"),
        fact(sp.LambertW(0) == 0, "W_0(0) = 0, so phi^{-1}(0) = 0 (N = 1)"),
    ])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
