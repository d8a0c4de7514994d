"""The largest radius at which a test passes, by doubling / quartering and bisection (robustness radii)."""

from __future__ import annotations

from typing import Callable


def largest_certified(test: Callable[[float], bool], start: float, steps: int = 12,
                      max_brackets: int = 30) -> tuple[float, int]:
    """(r, calls): the largest r found with test(r) true, by doubling / quartering from ``start`` then bisection.

    Returns 0.0 if no tested radius passes. Only radii at which ``test`` returned True are ever returned, so the
    result is certified even if ``test`` is not monotone.
    """
    calls, r = 0, float(start)
    lo: float | None = None
    hi: float | None = None
    for _ in range(max_brackets):
        calls += 1
        if test(r):
            lo = r
            if hi is not None:
                break
            r *= 2.0
        else:
            hi = r
            if lo is not None:
                break
            r /= 4.0
    if lo is None:
        return 0.0, calls
    if hi is None:
        return lo, calls
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        calls += 1
        if test(mid):
            lo = mid
        else:
            hi = mid
    return lo, calls
