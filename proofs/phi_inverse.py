"""Claim: phi^{-1}(N-1) = W_0((N-1)/e), where phi(x) = x e^{x+1} (MATH.md section 4).

phi is increasing on [0, inf) (phi' = (x+1) e^{x+1} > 0), so phi^{-1} is well defined there, and
phi(W_0(n/e)) = W_0(n/e) e^{W_0(n/e)} e = (n/e) e = n by the defining identity W_0(z) e^{W_0(z)} = z.

Cross-check of the shipped code: `certify.bounds.phi_inverse(n)` (float64, rounded up) against mpmath's W_0(n/e) at
40 digits on a grid of n: it must be >= the exact value and within 4 ulps of it (SAMPLED; it can only lower the
status).
"""

from __future__ import annotations

import sympy as sp

from proofs._check import Check, fact, numeric
from proofs._result import ProofResult, Status, combine

CLAIM = "phi^{-1}(N-1) = W_0((N-1)/e) with phi(x) = x e^{x+1}, and phi is increasing on [0, inf)"
SCOPE = {"N": ">= 1"}
REQUIRES = Status.PROVED
GRID = tuple(range(0, 65)) + (100, 1000, 10**4, 10**6)


def check_shipped(grid: tuple[int, ...] = GRID) -> Check:
    """certify.bounds.phi_inverse(n) >= W_0(n/e) (mpmath, 40 digits) and within 4 ulps, on `grid`."""
    import math

    import mpmath

    from certify.bounds.closed_form import _lambert

    worst = 0.0
    for n in grid:
        with mpmath.workdps(40):
            exact = mpmath.lambertw(mpmath.mpf(n) / mpmath.e).real
            shipped = _lambert.phi_inverse(n)
            ulps = float(abs(mpmath.mpf(shipped) - exact) / math.ulp(max(float(exact), 1e-300))) if n else 0.0
            if mpmath.mpf(shipped) < exact or ulps > 4:
                return numeric(False, f"shipped phi_inverse({n}) = {shipped!r} vs W_0({n}/e) = {mpmath.nstr(exact, 20)}")
        worst = max(worst, ulps)
    return numeric(True, f"shipped certify.bounds.phi_inverse(n) >= W_0(n/e) and within {worst:.1f} ulps on {len(grid)} "
                         "values of n in [0, 10^6] (mpmath, 40 digits)")


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
    ], scope=SCOPE, cross_checks=[check_shipped()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
