"""The largest radius at which a test passes, by doubling / quartering and bisection (robustness radii)."""

from __future__ import annotations

from typing import Callable


def largest_certified(test: Callable[[float], bool], start: float, steps: int = 12,
                      max_brackets: int = 30) -> tuple[float, int]:
    """(r, calls): the largest r found with test(r) true, by doubling / quartering from ``start`` then bisection.

    Returns 0.0 if no tested radius passes. Only radii at which ``test`` returned True are ever returned, so the
    result is certified even if ``test`` is not monotone.
    """
    return largest_radius(lambda r: r if test(r) else 0.0, start, steps, max_brackets)


def largest_radius(radius_at: Callable[[float], float], start: float, steps: int = 12, max_brackets: int = 30,
                   tolerance: float = 0.0) -> tuple[float, int]:
    """(r, calls): the largest certified radius found, where ``radius_at(e)`` returns a certified radius (at least e
    when the whole ball of radius e is certified, below e when it is not, 0 when nothing is; it may draw on its
    earlier calls, `certify.model._radius.nested_radius`): doubling / quartering from ``start``
    until a ball is not wholly certified, then bisection between the largest certified radius and the smallest
    radius whose ball was not. A partly certified ball still raises the lower end (the chain's enclosure at e
    certifies every smaller ball about the point, `ChainEnclosure.certified_scale`), so fewer calls are needed. Stops
    early once the bracket is within ``tolerance`` (relative). Only values returned by ``radius_at`` are returned.
    """
    calls, r = 0, float(start)
    lo, hi = 0.0, None
    for _ in range(max_brackets):
        calls += 1
        got = radius_at(r)
        lo = max(lo, got)
        if got >= r:
            if hi is not None:
                break
            r *= 2.0
        else:
            hi = r
            if lo > 0:
                break
            r /= 4.0
    if lo == 0.0 or hi is None:
        return lo, calls
    for _ in range(steps):
        if hi - lo <= tolerance * lo:
            break
        mid = 0.5 * (lo + hi)
        calls += 1
        got = radius_at(mid)
        lo = max(lo, got)
        if got < mid:
            hi = mid
    return lo, calls
