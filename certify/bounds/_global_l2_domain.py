"""Search domains of the global L2 branch and bound: configurations modulo symmetry (MATH.md section 7).

M(Y) is invariant under translation, equivariant under rotations / reflections (M -> (I (x) Q) M (I (x) Q^T)) and
permutations (M -> (Pi (x) I) M (Pi^T (x) I)); ||M||_2 is invariant under all of them, and ||M||_inf under
permutations, translations, and for d = 1 also reflection (for d = 2 the inf-norm is not rotation invariant, so
for the inf-norm in d = 2 no rotation is quotiented out; see ``domain``).

A configuration is *r-connected* when the graph with edges ||y_i - y_j|| < r is connected. Every configuration
that is not r-connected is covered by the tail bound (``_global_l2_tail``); a domain needs to cover only the
r-connected ones, up to symmetry.

- d = 1 (``gap_domain``): sort the points, y_1 = 0, gaps g_k = y_{k+1} - y_k in [0, r] (all gaps < r iff
  r-connected). The reflection y -> -y reverses the gaps, so boxes with g_1 > g_{N-1} everywhere are dropped.
- d = 2 (``plane_domain``): label a closest pair 1, 2; translate y_1 to 0 and rotate y_2 onto (a, 0), a >= 0
  (2-norm only). An r-connected configuration has a < r, and every point within (N - 2) r + a of y_1, so
  |coordinates| < (N - 1) r. Boxes are dropped when every configuration in them has a pair closer than (1, 2), or
  violates the symmetry normalisation below, or is not r-connected (covered by the tail). Normalisation (valid for
  the 2-norm, which is invariant under all isometries): N = 3: y_3 = (b, c) with c >= 0, b <= a / 2 (swap 1, 2 and
  reflect x -> a - x). N = 4: y_3 = (b, c), y_4 = (e, f) with b + e <= a, b <= e and c >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import interval as iv
from ..interval import Interval
from ._global_l2_enclosure import Parametrisation, gap_parametrisation


@dataclass(frozen=True)
class Domain:
    """A box [lo, hi] of parameters theta, y = A theta, plus a rule dropping boxes the symmetry argument covers."""

    par: Parametrisation
    lo: np.ndarray
    hi: np.ndarray
    description: str

    def symmetry_drop(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Boolean mask of boxes (B, L) in which every configuration is covered by a symmetric image."""
        N, d = self.par.N, self.par.d
        drop = np.zeros(lo.shape[0], dtype=bool)
        if d == 1:
            if N >= 3:
                drop |= lo[:, 0] > hi[:, -1]
            return drop
        # d = 2: theta = (a, b, c, [e, f]); distances: every pair at least as far as (1, 2)
        a_sq_lo = iv.square(Interval(lo[:, 0], hi[:, 0])).lo
        d2 = pair_sq_distances(self.par, lo, hi)
        for j in range(N):
            for k in range(j + 1, N):
                if (j, k) != (0, 1):
                    drop |= d2.hi[:, j, k] < a_sq_lo
        if N == 3:
            drop |= 2.0 * lo[:, 1] > hi[:, 0]
        if N == 4:
            drop |= iv.round_down(lo[:, 1] + lo[:, 3]) > hi[:, 0]
            drop |= lo[:, 1] > hi[:, 3]
        return drop


def pair_sq_distances(par: Parametrisation, lo: np.ndarray, hi: np.ndarray) -> Interval:
    """Enclosure of ||y_j - y_k||^2 over boxes (B, L): Interval (B, N, N), outward rounded."""
    theta = Interval(lo, hi).reshape(lo.shape[0], 1, 1, 1, lo.shape[1])
    coef = par.A[:, None] - par.A[None, :]  # (N, N, d, L)
    diff = iv.isum(theta * coef[None], axis=-1)  # (B, N, N, d)
    return iv.isum(iv.square(diff), axis=-1)


def bottleneck_distance(par: Parametrisation, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A lower bound, for each box, on max over partitions (S, T) of min_{i in S, j in T} ||y_i - y_j||.

    It is the largest edge of a minimum spanning tree of the lower bounds of the pairwise distances (Prim), so every
    configuration in the box splits into two groups at distance >= the returned value.
    """
    d2 = pair_sq_distances(par, lo, hi).lo
    dist = np.maximum(iv.round_down(np.sqrt(np.maximum(d2, 0.0))), 0.0)  # (B, N, N)
    B, N, _ = dist.shape
    in_tree = np.zeros((B, N), dtype=bool)
    in_tree[:, 0] = True
    best = dist[:, 0, :].copy()
    largest = np.zeros(B)
    rows = np.arange(B)
    for _ in range(N - 1):
        cand = np.where(in_tree, np.inf, best)
        nxt = np.argmin(cand, axis=1)
        largest = np.maximum(largest, cand[rows, nxt])
        in_tree[rows, nxt] = True
        best = np.minimum(best, dist[rows, nxt, :])
    return largest


def gap_domain(N: int, r: float) -> Domain:
    """d = 1: gaps in [0, r]^{N-1}."""
    par = gap_parametrisation(N)
    return Domain(par, np.zeros(N - 1), np.full(N - 1, float(r)),
                  f"d = 1 gaps g in [0, {r}]^{N - 1}, reflection g_1 <= g_(N-1)")


def plane_parametrisation(N: int) -> Parametrisation:
    """d = 2: y_1 = 0, y_2 = (a, 0), y_k = (theta_{2k-4}, theta_{2k-3}) for k >= 3; theta = (a, b, c, e, f, ...)."""
    L = 1 + 2 * (N - 2)
    A = np.zeros((N, 2, L))
    A[1, 0, 0] = 1.0
    for k in range(2, N):
        A[k, 0, 1 + 2 * (k - 2)] = 1.0
        A[k, 1, 2 + 2 * (k - 2)] = 1.0
    return Parametrisation(A)


def plane_domain(N: int, r: float) -> Domain:
    """d = 2 (2-norm): closest pair on the x-axis; see the module docstring for the normalisation."""
    if not 2 <= N <= 4:
        raise ValueError(f"the d = 2 domain is implemented for N = 2..4, got N = {N}")
    par = plane_parametrisation(N)
    R = (N - 1) * float(r)
    lo = [0.0]
    hi = [float(r)]
    if N == 3:
        lo += [-float(r), 0.0]
        hi += [float(r) / 2, float(r)]
    if N == 4:
        lo += [-R, 0.0, -R, -R]
        hi += [R, R, R, R]
    return Domain(par, np.array(lo), np.array(hi),
                  f"d = 2, y_1 = 0, y_2 = (a, 0) closest pair, a in [0, {r}], coordinates within {R}")


def free_plane_domain(N: int, r: float) -> Domain:
    """d = 2 without quotienting rotations (for the inf-norm): y_1 = 0 and y_k in [-R, R]^2, R = (N - 1) r.

    Only translation is quotiented out; boxes that are not r-connected are dropped (tail bound).
    """
    L = 2 * (N - 1)
    A = np.zeros((N, 2, L))
    for k in range(1, N):
        A[k, 0, 2 * (k - 1)] = 1.0
        A[k, 1, 2 * (k - 1) + 1] = 1.0
    R = (N - 1) * float(r)
    return Domain(Parametrisation(A), np.full(L, -R), np.full(L, R),
                  f"d = 2 (inf-norm), y_1 = 0, y_k in [-{R}, {R}]^2")
