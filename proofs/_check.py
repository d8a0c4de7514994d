"""Shared helpers: try to prove with SymPy, fall back to a stated numeric check, never overclaim.

Every helper returns (Status, evidence). PROVED only when SymPy establishes it (an expression simplified to 0, a
sign proven by SymPy's assumptions, a limit computed). When SymPy gives up, the claim is sampled and reported SAMPLED
with the number of samples and the worst value; a sample that violates the claim makes it UNPROVED with the point
(a floating-point counterexample is not a proof of falsity: REFUTED needs `refuted`, exact or interval evidence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp

from ._result import Status

Check = tuple[Status, str]


def _point(symbols: Sequence[sp.Symbol], values: Sequence[float]) -> str:
    return "{" + ", ".join(f"{s}={v:.6g}" for s, v in zip(symbols, values)) + "}"


def check_zero(expr: sp.Expr, symbols: Sequence[sp.Symbol], what: str, sample: Callable[[np.random.Generator], Sequence[float]],
               samples: int = 200, tol: float = 1e-9, simplifier: Callable[[sp.Expr], sp.Expr] = sp.simplify,
               seed: int = 0) -> Check:
    """PROVED if simplifier(expr) == 0; else SAMPLED if |expr| <= tol on `samples` points; else UNPROVED (the point)."""
    simplified = simplifier(expr)
    if simplified == 0:
        return Status.PROVED, f"{what}: simplifies to 0"
    f = sp.lambdify(list(symbols), expr, modules="mpmath")
    rng = np.random.default_rng(seed)
    worst, worst_at = 0.0, None
    for _ in range(samples):
        values = [float(v) for v in sample(rng)]
        value = abs(complex(f(*values)))
        if not np.isfinite(value) or value > worst:
            worst, worst_at = value, values
        if not np.isfinite(value) or value > tol:
            return Status.UNPROVED, f"{what}: not simplified to 0 and equals {value:.3g} at {_point(symbols, values)}"
    return Status.SAMPLED, (f"{what}: SymPy did not simplify it to 0; |difference| <= {worst:.2g} on {samples} random "
                            f"samples (tolerance {tol:g})")


def check_nonnegative(expr: sp.Expr, symbols: Sequence[sp.Symbol], what: str,
                      sample: Callable[[np.random.Generator], Sequence[float]], samples: int = 500,
                      tol: float = 1e-12, seed: int = 0) -> Check:
    """PROVED if SymPy proves expr >= 0 from the symbols' assumptions; else sampled: SAMPLED, or UNPROVED (the point)."""
    for candidate in (expr, sp.factor(expr), sp.simplify(expr)):
        if candidate.is_nonnegative:
            return Status.PROVED, f"{what}: SymPy proves {sp.sstr(candidate)} >= 0"
    f = sp.lambdify(list(symbols), expr, modules="mpmath")
    rng = np.random.default_rng(seed)
    lowest = float("inf")
    for _ in range(samples):
        values = [float(v) for v in sample(rng)]
        value = float(f(*values))
        lowest = min(lowest, value)
        if not value >= -tol:
            return Status.UNPROVED, f"{what}: value {value:.6g} < 0 at {_point(symbols, values)}"
    return Status.SAMPLED, f"{what}: sign not proven by SymPy; min {lowest:.3g} >= 0 on {samples} random samples"


def fact(ok: bool, what: str) -> Check:
    """A symbolic fact SymPy decided (a limit, a solved equation): PROVED if ok, else UNPROVED (not shown false)."""
    return (Status.PROVED if ok else Status.UNPROVED), what + ("" if ok else " [SymPy did not establish this]")


def numeric(ok: bool, what: str) -> Check:
    """A numeric fact (the evidence must state the samples): SAMPLED if ok, else UNPROVED (a float counterexample)."""
    return (Status.SAMPLED if ok else Status.UNPROVED), what


def verified(ok: bool, what: str) -> Check:
    """A fact established by rigorous interval arithmetic (the evidence names the enclosure): VERIFIED, else UNPROVED."""
    return (Status.VERIFIED if ok else Status.UNPROVED), what


def refuted(rigorous: bool, what: str) -> Check:
    """A counterexample to the claim: REFUTED if it is rigorous (exact or interval-verified), else UNPROVED."""
    return (Status.REFUTED if rigorous else Status.UNPROVED), what


def matrix_identity(difference: sp.Matrix, proved: bool, what: str, points: int = 3, seed: int = 0) -> Check:
    """A matrix identity `difference == 0`: PROVED if `proved` (SymPy's exact zero test passed); otherwise
    evaluated at `points` random rational points with 30 digits: UNPROVED with the point if it is not ~0 there,
    SAMPLED (stating the points) if it is."""
    if proved:
        return Status.PROVED, f"{what}: difference is identically 0"
    symbols = sorted(difference.free_symbols, key=sp.default_sort_key)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(points):
        point = {s: sp.Rational(int(rng.integers(-20, 21)), int(rng.integers(5, 15))) for s in symbols}
        value = max(abs(complex(v)) for v in difference.subs(point).evalf(30))
        worst = max(worst, value)
        if value > 1e-20:
            shown = ", ".join(f"{s}={v}" for s, v in list(point.items())[:8])
            return Status.UNPROVED, f"{what}: difference is {value:.3g} at {{{shown}{', ...' if len(point) > 8 else ''}}}"
    return Status.SAMPLED, (f"{what}: SymPy did not prove it; |difference| <= {worst:.2g} at {points} random rational "
                            "points (30 digits)")
