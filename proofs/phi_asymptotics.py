"""Claim (MATH.md section 4): phi^{-1}(N-1) = W_0((N-1)/e) ~ log N - log log N (ratio -> 1 as N -> oo).

Proof (SymPy): for x >= e, L(x) = log x - log log x <= W_0(x) <= U(x) = log x - (1/2) log log x, because
w -> w e^w is increasing and
- L e^L = x (1 - log log x / log x) <= x  (log log x >= 0);
- U e^U = x (l - log(l)/2) / sqrt(l) >= x with l = log x >= 1: with l = r^2, m(r) = r^2 - log(r) - r has m(1) = 0
  and m'(r) = (2r + 1)(r - 1) / r >= 0 for r >= 1.
Then U/L -> 1, so W_0(x)/L(x) -> 1, and L((N-1)/e) / (log N - log log N) -> 1 (limits by SymPy).
"""

from __future__ import annotations

import mpmath
import sympy as sp

from proofs._check import Check, fact
from proofs._result import ProofResult, combine

SCOPE = {"bounds": "x >= e", "ratio": "N -> oo"}
CLAIM = "W_0((N-1)/e) ~ log N - log log N (ratio tends to 1), via log x - log log x <= W_0(x) <= log x - log(log x)/2"


def prove() -> ProofResult:
    x = sp.Symbol("x", positive=True)
    n = sp.Symbol("n", positive=True)
    r, s = sp.symbols("r s", positive=True)
    L = sp.log(x) - sp.log(sp.log(x))
    U = sp.log(x) - sp.log(sp.log(x)) / 2
    parts: list[Check] = []
    lower = sp.simplify(sp.expand(L * sp.exp(L), power_exp=True) - x * (1 - sp.log(sp.log(x)) / sp.log(x)))
    parts.append(fact(lower == 0, "L e^L = x (1 - log log x / log x) <= x for x >= e"))
    l_sym = sp.Symbol("l", positive=True)
    upper_ratio = sp.simplify(sp.expand(U * sp.exp(U), power_exp=True).subs(sp.log(x), l_sym) / x)
    target = (l_sym - sp.log(l_sym) / 2) / sp.sqrt(l_sym)
    parts.append(fact(sp.simplify(upper_ratio - target) == 0,
                      f"U e^U / x = (l - log(l)/2)/sqrt(l) with l = log x"))
    m = r ** 2 - sp.log(r) - r  # sqrt(l) * ((l - log(l)/2)/sqrt(l) - 1) with l = r^2
    m_check = sp.simplify(sp.expand_log(((r ** 2 - sp.log(r ** 2) / 2) / r - 1) * r - m, force=True))
    dm = sp.factor(sp.diff(m, r))
    dm_shift = sp.factor(dm.subs(r, 1 + s))
    parts.append(fact(m_check == 0 and m.subs(r, 1) == 0 and bool(dm_shift.is_nonnegative),
                      f"m(r) = r^2 - log r - r: m(1) = 0, m'(r) = {dm}, at r = 1 + s: {dm_shift} >= 0, so U e^U >= x"))
    ratio = sp.limit(U / L, x, sp.oo)
    parts.append(fact(ratio == 1, f"lim U/L = {ratio} as x -> oo, so W_0(x) / L(x) -> 1"))
    to_n = sp.limit(L.subs(x, (n - 1) / sp.E) / (sp.log(n) - sp.log(sp.log(n))), n, sp.oo)
    table = ", ".join(f"N=10^{k}: {float(mpmath.lambertw((10 ** k - 1) / mpmath.e).real / (k * mpmath.log(10) - mpmath.log(k * mpmath.log(10)))):.3f}"
                      for k in (2, 4, 8, 16))
    parts.append(fact(to_n == 1, f"lim L((N-1)/e) / (log N - log log N) = {to_n} (illustration only, slow "
                                 f"convergence: W/(log N - log log N) at {table})"))
    return combine(CLAIM, parts, scope=SCOPE)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
