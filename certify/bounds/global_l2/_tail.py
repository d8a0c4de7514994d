"""The cluster / tail bound of the global L2 branch and bound (MATH.md section 7; proof in proofs/tail_bound.py).

Let Y be N points in R^d whose indices split into two nonempty groups S, T with ||y_i - y_j|| >= r >= 1 for every
i in S, j in T. With m = N - 1, rho = e^{-r^2}, W = W_0((N-1)/e) and

    K(r, N) = 3 + 12 W + 4 r^2 + 8 r sqrt(W),

every block row of E = M(Y) - blockdiag(M(Y_S), M(Y_T)) has sum_j ||E_ij||_2 <= m rho K. Hence

    eps_inf(r, N, d) = sqrt(d) m rho K,          eps_2(r, N, d) = sqrt(N d) eps_inf(r, N, d),

bound ||E||_inf and ||E||_2, and ||M(Y)||_p <= max(c_p(|S|, d), c_p(|T|, d)) + eps_p(r, N, d). Consequently

    c_p(N, d) <= max( sup over r-connected Y of ||M(Y)||_p ,  max_{1 <= s < N} c_p(s, d) + eps_p(r, N, d) ),

with c_p(1, d) = 1 (M = I_d). The values are evaluated with mpmath at 40 digits and rounded up to float64.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

from ..closed_form import phi_inverse


def _round_up(x: mpmath.mpf) -> float:
    value = float(x)
    while mpmath.mpf(value) < x:
        value = math.nextafter(value, math.inf)
    return value


def tail_constant(r: float, N: int) -> mpmath.mpf:
    """m rho K(r, N): the bound on every block-row sum of block 2-norms of E (mpmath, 40 digits; W rounded up)."""
    if not r >= 1.0:
        raise ValueError(f"the tail bound needs r >= 1, got r = {r}")
    if N < 2:
        raise ValueError(f"the tail bound needs N >= 2 tokens, got N = {N}")
    with mpmath.workdps(40):
        W = mpmath.mpf(phi_inverse(N - 1))
        r_ = mpmath.mpf(r)
        K = 3 + 12 * W + 4 * r_**2 + 8 * r_ * mpmath.sqrt(W)
        return (N - 1) * mpmath.exp(-r_**2) * K


def tail_bound(r: float, N: int, d: int, norm: str) -> float:
    """eps_p(r, N, d) rounded up: sqrt(d) m rho K for p = inf, sqrt(N d) times that for p = 2."""
    with mpmath.workdps(40):
        eps_inf = mpmath.sqrt(d) * tail_constant(r, N)
        if norm == "inf":
            return _round_up(eps_inf)
        if norm == "2":
            return _round_up(mpmath.sqrt(N * d) * eps_inf)
    raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")


def tail_bound_table(N: int, d: int, norm: str, r_max: float, step: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(radii, eps) with eps[k] = tail_bound(radii[k], N, d, norm) on the grid 1, 1 + step, ..., <= r_max.

    eps_p(r) is decreasing in r for r >= 1 (d/dr [e^{-r^2} K(r)] = e^{-r^2} (8 r + 8 sqrt(W) - 2 r K(r)) < 0, since
    2 r K(r) >= 6 r + 8 r^3 + 16 r^2 sqrt(W) > 8 r + 8 sqrt(W) for r >= 1), so for any r >= 1 the entry at the
    largest grid radius <= r is a valid upper bound on eps_p(r) (``tail_bound_lookup``).
    """
    radii = 1.0 + step * np.arange(int(np.floor((r_max - 1.0) / step + 1e-9)) + 1)
    return radii, np.array([tail_bound(float(x), N, d, norm) for x in radii])


def tail_bound_lookup(table: tuple[np.ndarray, np.ndarray], r: np.ndarray) -> np.ndarray:
    """Upper bounds on eps_p(r) for an array of r (inf where r < 1), from ``tail_bound_table``."""
    radii, eps = table
    k = np.searchsorted(radii, r, side="right") - 1
    return np.where(k >= 0, eps[np.clip(k, 0, None)], np.inf)
