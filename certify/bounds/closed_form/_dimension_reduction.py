"""Dimension reduction of the 2-norm universal constant (MATH.md section 2; proofs/dimension_reduction.py):

    c_2(N, N - 1) <= c_2(N, d) <= max(c_2(N, N - 1), sqrt((N + 1) / 2))      for every d >= N.

Proof. Let Y be N points in R^d and S the span of their differences (dim S = k <= N - 1 < d). For w orthogonal to
S, (y_i - y_j)^T w = 0 and (y_k - ybar_i)^T w = sum_l P_il (y_k - y_l)^T w = 0, so every block of M (MATH.md
section 2) satisfies M_ij w = P_ij w and w^T M_ij = P_ij w^T. Hence M maps R^N (x) S and R^N (x) S-perp into
themselves (and so does M^T), acting on the second as P (x) I, and ||M(Y)||_2 = max(||M on R^N (x) S||_2, ||P||_2).
A rotation taking S onto the first k axes (M is rotation equivariant, ||.||_2 invariant) makes the first term
||M(Y')||_2 for N points Y' in R^k, which is at most c_2(N, k) <= c_2(N, N - 1) (the same block form, with
Y' embedded in R^{N-1} by zero coordinates, shows that c_2(N, d) does not decrease with d). For the second, every row
of P sums to 1 and P_ij <= P_ii (||y_i - y_i|| = 0 is the smallest distance), so P_ij <= 1/2 for j != i, every
column sums to at most 1 + (N - 1)/2, and ||P||_2 <= sqrt(||P||_1 ||P||_inf) <= sqrt((N + 1)/2). The lower bound:
a configuration of R^{N-1} embedded in R^d by zero coordinates keeps ||M|| >= its value in R^{N-1}.

The inf-norm is not rotation invariant, so nothing of the kind is claimed for it.
"""

from __future__ import annotations

import math

import numpy as np

from .._rounding import round_up


def reduces(N: int, d: int, norm: str) -> bool:
    """Whether c_norm(N, d) reduces to c_norm(N, N - 1): the 2-norm with d >= N >= 2."""
    return norm == "2" and N >= 2 and d >= N


def perpendicular_bound(N: int) -> float:
    """A float >= sqrt((N + 1) / 2), the bound on ||P||_2 (the block of M orthogonal to the points' span)."""
    return round_up(math.sqrt((N + 1) / 2))


def reduced_upper(upper: float, N: int) -> float:
    """The bound on c_2(N, d), d >= N, from a certified upper bound on c_2(N, N - 1)."""
    return max(float(upper), perpendicular_bound(N))


def embed(Y: np.ndarray, d: int) -> np.ndarray:
    """The configuration Y (N, k), k <= d, in R^d by zero coordinates (its ||M||_2 there is at least its value in R^k)."""
    Y = np.asarray(Y, dtype=np.float64)
    return np.concatenate([Y, np.zeros((Y.shape[0], d - Y.shape[1]))], axis=1)
