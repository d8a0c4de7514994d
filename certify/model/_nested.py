"""The integral of the smallest slope over nested balls about one centre x0 (the fundamental theorem of calculus
along segments from x0; MATH.md section 0 for the norms): the step function that both the chain's boxes
(`_jacobian_chain.nested_spread`) and the margins of the radius search (`_radius.nested_radius`,
`_radius.nested_lower`) integrate.

For x = x0 + delta with ||delta|| = R, the point x0 + t delta lies in the ball of radius t R, so for any quantity
g with g(x) - g(x0) = int_0^1 g'(x0 + t delta) delta dt,
    |g(x) - g(x0)| <= int_0^R sigma(s) ds,  sigma(s) = min { slope_k / rho_k : rho_k >= s },
slope_k >= sup over the ball of radius rho_k of |g'(z) u| per ||u|| = rho_k. sigma is a step function: constant,
sigma_k, on the shell (rho_(k-1), rho_k] of the sorted radii.
"""

from __future__ import annotations

import numpy as np

from ..interval import round_up


def shells(radii: np.ndarray, per_unit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, widths, sigma) for radii rho_0 <= rho_1 <= ... (sorted) and per_unit[k] >= the slope per unit radius
    on ball k (rows: the balls; NaN read as +inf): shell k is (starts[k], rho_k], starts = (0, rho_0, ...), widths
    rho_k - starts[k] rounded up, sigma[k] = min_(j >= k) per_unit[j] (every ball j >= k contains shell k)."""
    radii = np.asarray(radii, dtype=np.float64)
    per_unit = np.where(np.isnan(per_unit), np.inf, per_unit)
    sigma = np.minimum.accumulate(per_unit[::-1], axis=0)[::-1]
    starts = np.concatenate([[0.0], radii[:-1]])
    return starts, round_up(radii - starts), sigma


def piece(width: float | np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """width * sigma rounded up; an empty piece (width 0) adds 0 even where sigma is infinite."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(width > 0, round_up(width * sigma), 0.0)


def step_integral(radii: np.ndarray, per_unit: np.ndarray, radius: float) -> np.ndarray:
    """An upper bound on int_0^radius sigma(s) ds (module docstring), entrywise, for 0 <= radius <= rho_last:
    every width, product and partial sum rounded up (+inf where a needed slope is)."""
    starts, widths, sigma = shells(radii, per_unit)
    total = np.zeros(sigma.shape[1:])
    for k, start in enumerate(starts):
        if start >= radius:
            break
        width = widths[k] if radii[k] <= radius else round_up(np.float64(radius) - start)
        with np.errstate(invalid="ignore"):
            total = round_up(total + piece(width, sigma[k]))
    return total
