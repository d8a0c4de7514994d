"""Search domains of the global L2 branch and bound: configurations modulo symmetry (MATH.md section 7).

M(Y) is invariant under translation, equivariant under rotations / reflections (M -> (I (x) Q) M (I (x) Q^T)) and
permutations (M -> (Pi (x) I) M (Pi^T (x) I)); ||M||_2 is invariant under all of them, and ||M||_inf under
permutations, translations, and for d = 1 also reflection (for d = 2 the inf-norm is not rotation invariant, so
for the inf-norm in d = 2 no rotation is quotiented out; see ``domain``).

A configuration is *r-connected* when the graph with edges ||y_i - y_j|| < r is connected. Every configuration
that is not r-connected is covered by the tail bound (``_tail``); a domain needs to cover only the
r-connected ones, up to symmetry.

- d = 1 (``gap_domain``): sort the points, y_1 = 0, gaps g_k = y_{k+1} - y_k in [0, r] (all gaps < r iff
  r-connected). The reflection y -> -y reverses the gaps, so boxes with g_1 > g_{N-1} everywhere are dropped.
- d = 2, 2-norm (``plane_domain``): label a closest pair 1, 2; translate y_1 to 0 and rotate y_2 onto (a, 0).
  An r-connected configuration has a < r, and every point within (N - 2) r + a < (N - 1) r of y_1. Boxes are
  dropped when every configuration in them has a pair closer than (1, 2), or violates the normalisation (N = 3:
  y_3 = (b, c) with c >= 0 (reflect y), b <= a / 2 (swap 1, 2 and reflect x -> a - x); N >= 4: b_3 <= ... <= b_N,
  c_3 >= 0, b_3 + ... + b_N <= (N - 2) a / 2), or is not r-connected (then the tail bound covers it).
- d >= 2, inf-norm (``octant_domain``): rotations do not preserve ||.||_inf, only the 2^d d! signed permutations of
  the axes do; y_2 with sorted nonnegative coordinates stays free (d = 2: y_2 = (u, v), 0 <= v <= u).
- d >= N, 2-norm: no domain; `_reduction` reduces c_2(N, d) to c_2(N, N - 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import interval as iv
from ...interval import Interval
from ._enclosure import Parametrisation, gap_parametrisation


@dataclass(frozen=True)
class Domain:
    """A box [lo, hi] of parameters theta (y = A theta) and the symmetry normalisation of its configurations.

    ``constraints`` (K, L): the normalised configurations satisfy constraints @ theta <= 0; a box where some
    constraint is violated everywhere is dropped. With ``closest_pair``, (y_1, y_2) is a closest pair, and a box
    where some other pair is closer everywhere is dropped.
    """

    par: Parametrisation
    lo: np.ndarray
    hi: np.ndarray
    description: str
    constraints: np.ndarray
    closest_pair: bool = False

    def symmetry_drop(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Boolean mask of boxes (B, L) in which every configuration is covered by a symmetric image."""
        N = self.par.N
        drop = np.zeros(lo.shape[0], dtype=bool)
        if self.constraints.size:
            theta = Interval(lo, hi).reshape(lo.shape[0], 1, lo.shape[1])
            low = iv.isum(theta * self.constraints[None], axis=-1).lo  # (B, K): min over the box of c . theta
            drop |= (low > 0).any(axis=1)
        if self.closest_pair:
            d2 = pair_sq_distances(self.par, lo, hi)
            first = d2.lo[:, 0, 1]
            for j in range(N):
                for k in range(j + 1, N):
                    if (j, k) != (0, 1):
                        drop |= d2.hi[:, j, k] < first
        return drop


def pair_sq_distances(par: Parametrisation, lo: np.ndarray, hi: np.ndarray) -> Interval:
    """Enclosure of ||y_j - y_k||^2 over boxes (B, L): Interval (B, N, N), outward rounded."""
    theta = Interval(lo, hi).reshape(lo.shape[0], 1, 1, 1, lo.shape[1])
    coef = par.A[:, None] - par.A[None, :]  # (N, N, d, L)
    diff = iv.isum(theta * coef[None], axis=-1)  # (B, N, N, d)
    return iv.isum(iv.square(diff), axis=-1)


def cluster_partitions(par: Parametrisation, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Partitions of the tokens into groups that are far apart in every configuration of each box (B, L).

    Let a[0] >= ... >= a[N-2] be the edges of a minimum spanning tree of the lower bounds of the pairwise distances
    (Prim). Returns (a, labels): a (B, N - 1) and labels (B, N - 1, N), where labels[b, k] numbers (0..N-1, each
    component by its smallest token) the connected components of the graph of pairs whose distance lower bound is
    < a[b, k]. Two tokens in different components are at distance >= a[b, k] in every configuration of the box. The
    graph has at least k + 2 components: removing the k + 1 tree edges >= a[k] leaves k + 2 trees, and no pair
    below a[k] joins two of them (it would close a cycle with a tree edge >= a[k], so the tree would not be minimal).
    So a[:, 0] is the bottleneck distance: every configuration splits into two groups at least that far apart.
    """
    d2 = pair_sq_distances(par, lo, hi).lo
    dist = np.maximum(iv.round_down(np.sqrt(np.maximum(d2, 0.0))), 0.0)  # (B, N, N)
    B, N, _ = dist.shape
    in_tree = np.zeros((B, N), dtype=bool)
    in_tree[:, 0] = True
    best = dist[:, 0, :].copy()
    edges = np.zeros((B, N - 1))
    rows = np.arange(B)
    for k in range(N - 1):
        cand = np.where(in_tree, np.inf, best)
        nxt = np.argmin(cand, axis=1)
        edges[:, k] = cand[rows, nxt]
        in_tree[rows, nxt] = True
        best = np.minimum(best, dist[rows, nxt, :])
    a = -np.sort(-edges, axis=1)
    close = dist[:, None] < a[:, :, None, None]  # (B, N - 1, N, N)
    close |= np.eye(N, dtype=bool)
    labels = np.broadcast_to(np.arange(N), (B, N - 1, N))
    for _ in range(N - 1):  # each token takes the smallest label among its neighbours: the component's smallest
        labels = np.where(close, labels[:, :, None, :], N).min(axis=-1)
    return a, labels


def bottleneck_distance(par: Parametrisation, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A lower bound, for each box, on max over partitions (S, T) of min_{i in S, j in T} ||y_i - y_j||: every
    configuration in the box splits into two groups at distance >= the returned value (``cluster_partitions``)."""
    return cluster_partitions(par, lo, hi)[0][:, 0]


def gap_domain(N: int, r: float) -> Domain:
    """d = 1: gaps in [0, r]^{N-1}, reflection g_1 <= g_{N-1}."""
    par = gap_parametrisation(N)
    constraints = np.zeros((0, N - 1))
    if N >= 3:
        constraints = np.zeros((1, N - 1))
        constraints[0, 0], constraints[0, -1] = 1.0, -1.0
    return Domain(par, np.zeros(N - 1), np.full(N - 1, float(r)),
                  f"d = 1 gaps in [0, {r}]^{N - 1}, g_1 <= g_(N-1)", constraints)


def _plane_par(N: int) -> Parametrisation:
    """d = 2: y_1 = 0; y_2 = (a, 0) (rotation quotiented); then y_k = two parameters each."""
    L = 1 + 2 * (N - 2)
    A = np.zeros((N, 2, L))
    A[1, 0, 0] = 1.0
    for k in range(2, N):
        A[k, 0, 1 + 2 * (k - 2)] = 1.0
        A[k, 1, 2 + 2 * (k - 2)] = 1.0
    return Parametrisation(A)


def plane_domain(N: int, r: float) -> Domain:
    """d = 2, 2-norm (invariant under all isometries): closest pair y_1 = 0, y_2 = (a, 0), a in [0, r].

    Normalisation: N = 3: y_3 = (b, c), c >= 0 (reflect y), b <= a / 2 (swap 1, 2 and reflect x -> a - x), and then
    ||y_3|| < r (r-connected), so b in [-r, r/2], c in [0, r]. N >= 4: y_k = (b_k, c_k) for k >= 3 with
    b_3 <= b_4 <= ... <= b_N (permute tokens 3..N), c_3 >= 0 (reflect y), b_3 + ... + b_N <= (N - 2) a / 2 (swap 1, 2
    and reflect x -> a - x), coordinates within (N - 1) r (N = 4: b + e <= a, b <= e, c >= 0, within 3 r).
    """
    if not 2 <= N <= 6:
        raise ValueError(f"the d = 2 domain is implemented for N = 2..6, got N = {N}")
    par = _plane_par(N)
    r = float(r)
    if N == 2:
        return Domain(par, np.array([0.0]), np.array([r]), f"d = 2, y_2 = (a, 0), a in [0, {r}]", np.zeros((0, 1)))
    if N == 3:
        return Domain(par, np.array([0.0, -r, 0.0]), np.array([r, r / 2, r]),
                      f"d = 2, closest pair y_1 = 0, y_2 = (a, 0), y_3 = (b, c): b <= a/2, c >= 0, |y_3| < {r}",
                      np.array([[-0.5, 1.0, 0.0]]), closest_pair=True)
    R = (N - 1) * r
    L = par.L
    lo, hi = np.full(L, -R), np.full(L, R)
    lo[0], hi[0], lo[2] = 0.0, r, 0.0
    sums = np.zeros(L)
    sums[0], sums[1::2] = -(N - 2) / 2, 1.0
    rows = [sums]
    for k in range(N - 3):  # b_(k+3) - b_(k+4) <= 0
        row = np.zeros(L)
        row[1 + 2 * k], row[3 + 2 * k] = 1.0, -1.0
        rows.append(row)
    return Domain(par, lo, hi, f"d = 2, closest pair y_1 = 0, y_2 = (a, 0), b_3 <= ... <= b_N, sum b_k <= (N - 2) a / 2, "
                  f"c_3 >= 0, |coords| <= {R}", np.array(rows), closest_pair=True)


def _octant_par(N: int, d: int) -> Parametrisation:
    """y_1 = 0; y_k = d free parameters each (y_2 first)."""
    A = np.zeros((N, d, d * (N - 1)))
    for k in range(1, N):
        A[k, :, d * (k - 1):d * k] = np.eye(d)
    return Parametrisation(A)


def octant_domain(N: int, d: int, r: float) -> Domain:
    """d >= 2, inf-norm: only the 2^d d! signed permutations of the axes preserve ||.||_inf, so rotations stay in the
    search.

    Closest pair y_1 = 0, y_2 with sorted nonnegative coordinates y_21 >= ... >= y_2d >= 0 (a signed permutation of
    the axes, applied to every point, takes any y_2 there), each in [0, r] (||y_2|| < r when r-connected); the other
    points within (N - 1) r of y_1 in each coordinate (r-connected: a path of at most N - 1 edges shorter than r); the
    first coordinates of y_3, ..., y_N in increasing order (permute tokens 3..N).
    """
    if not 2 <= N <= 6:
        raise ValueError(f"the inf-norm domain for d >= 2 is implemented for N = 2..6, got N = {N}")
    if d < 2:
        raise ValueError(f"octant_domain needs d >= 2 (d = 1: gap_domain), got d = {d}")
    par = _octant_par(N, d)
    r = float(r)
    R = (N - 1) * r
    L = d * (N - 1)
    lo = np.array([0.0] * d + [-R] * (L - d))
    hi = np.array([r] * d + [R] * (L - d))
    rows = []
    for c in range(d - 1):  # y_2,c+1 - y_2,c <= 0
        row = np.zeros(L)
        row[c], row[c + 1] = -1.0, 1.0
        rows.append(row)
    for k in range(3, N):  # y_k1 - y_(k+1)1 <= 0
        row = np.zeros(L)
        row[d * (k - 2)], row[d * (k - 1)] = 1.0, -1.0
        rows.append(row)
    return Domain(par, lo, hi, f"d = {d} (inf-norm), closest pair y_1 = 0, y_2 sorted nonnegative, |coords| <= {R}",
                  np.array(rows).reshape(-1, L), closest_pair=True)
