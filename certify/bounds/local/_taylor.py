"""A first-order Taylor form of J over a box: asymptotically exact local bounds (MATH.md section 7; issue 15).

Let B be a box of inputs X (N x D), X0 a point of B and Delta = X - X0. For X in B the segment [X0, X] lies in B
(a box is convex) and J is smooth, so entry by entry (fundamental theorem of calculus on t -> J(X0 + t Delta)):

    J(X) = J(X0) + int_0^1 dJ(X0 + t Delta)[Delta] dt,

where dJ(xi)[Delta] = sum_m Delta_m dJ/dX_m(xi) is the directional derivative. One forward pass of interval
forward-mode differentiation (`_dual.Dual`) whose tangent has a *single* trailing axis, seeded with the box
B as value and the interval direction B - X0 as tangent, returns T with dJ(xi)[Delta] in T for every xi in B and
every Delta in B - X0 (inclusion property: the exact chain rule, applied to members of the operands, stays inside
the interval operations). The integrand lies in the box T for every t, hence so does its integral, and

    J(X) in J(X0) + T   for every X in B        (proofs/taylor_remainder.py).

J(X0) is enclosed by the interval evaluation at the point box [X0, X0] (a few ulps wide). As B shrinks to X0,
T -> 0, so the bound below tends to ||J(X0)||: the bound is asymptotically exact, unlike an enclosure of J over
B. The cost is one forward pass with a tangent of size 1 (about 3x one enclosure of J), never (N D)^3.

Norms (`certify.sdp`, each proven and rounded up): with J0 = [c - r, c + r] the centre's enclosure,
- p = 2: ||J(X)||_2 <= ||c||_2 + || r + |T| ||_2 (triangle inequality; ||E||_2 <= || |E| ||_2 and monotonicity of
  the spectral norm on nonnegative matrices), and the cheap bounds of the intersection of J0 + T with the direct
  enclosure of J over B (the value part of the same pass) when that intersection is narrower;
- p = inf: the exact row-sum bound of the intersection of J0 + T with the direct enclosure, and (seeds "slopes")
  per row the smaller of that and `_row_functional`'s bound, which sums each row's sign-certain entries before
  taking magnitudes.

Memory: the pass holds a few arrays of N^2 D^2 intervals per box (about `BYTES_PER_ENTRY` bytes per entry of J in
all, measured); `check_memory` refuses above `MEMORY_LIMIT` bytes before allocating.
"""

from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch

from ..._domain import Ball, Domain, EpsBall
from ..._errors import BudgetExceeded, InvalidInputError
from ..._result import Certificate
from ...attention import AttentionWeights, check_tokens
from ...interval import Interval, intersect, isum, round_down, round_up
from ...jacobian import check_norm, jacobian, jacobian_norm
from ...sdp import MatrixEnclosure, baseline_bound, inf_norm_bound, scaled_bound
from ...sdp._floating import ETA, U, gamma, lambda_min_lower, sum_up, up
from ._domain import initial_box
from ._dual import Dual
from ._enclosure import _Weights, jacobian_enclosure, numpy_weights, point_einsum
from ._slopes import EXACT_DIAGONAL_MAX, PRODUCT_RULE_MAX, dp_slopes, integral_slopes
from ._row_functional import row_functional_sums
from ._upper import _einsum_up

BYTES_PER_ENTRY = 400
"""Peak bytes per entry of J (N^2 D^2 entries per box) of one Taylor evaluation, rounded up from tracemalloc
measurements (benchmarks/local_taylor.py prints the measured peak)."""

MEMORY_LIMIT = 4 * 2**30
"""Refuse a Taylor evaluation whose estimated peak exceeds this (bytes)."""

SLOPES_BYTES_PER_ENTRY = 240
"""Peak bytes per entry of J of one Taylor evaluation with seeds "slopes" (no tangent axis), rounded up from
tracemalloc measurements of `taylor_bound` (eps = 1e-2, no budget): 153 B without the inf-norm's row functionals
and 213-214 B with them at (D, H, N) = (64, 4, 32) and (128, 4, 16) (153-164 B at D = 64, 128, 256, N = 17 before
the rows). Small layers run above it (417 B at (48, 3, 17), both norms): the exact diagonal's N D^3 arrays, at most
EXACT_DIAGONAL_MAX entries, i.e. a few hundred MB at worst."""

DENSE_NORM_MAX = 2048
"""Above this N D the direct enclosure of J over the box is skipped (memory), and the 2-norms of the centre
(`gram_norm2_upper`) and of J(X0) (`attained_at`) take power-iteration guesses, not eigenvalue problems."""


REFINEMENT_SHARE = 0.6
"""taylor_bound with seeds "slopes": the share of its time_budget the extra passes of the integral form may use."""
ROWS_SHARE = 0.85
"""taylor_bound with seeds "slopes", inf-norm: the nested passes of the row functionals (`_row_functional`) may run
until this share of the time_budget is spent (the first pass always runs; it is in `predicted_seconds`)."""


SLOPES_SECONDS = 3.5e-7
"""Reference seconds (this repository's 2-core CPU, otherwise idle; `_fit_budget` rescales them by the measured
time of the centre's enclosure) per H N^2 D^2 for one `dp_slopes` pass with its two refinements and the separable
diagonal. Fitted with the next ones to the unbudgeted taylor passes of benchmarks/budgets.py: predicted / measured
1.17-1.3 from (D, H, N) = (48, 3, 17) to (128, 4, 16), 0.6 at (64, 4, 64), where the centre's enclosure is slower
by the same factor 1.4, so that the calibrated prediction is about 0.85 (`dp_slopes`' deadline covers the rest)."""
ONE_PASS_SHARE = 0.65
"""`dp_slopes` with passes=1 (no refinement of P, v~ and A by their mean-value forms) over passes=2: measured
0.56-0.89 here, for slopes 5% larger (a fresh layer, eps = 1e-2, from (D, H, N) = (48, 3, 17) to (128, 4, 16))."""
EXACT_DIAGONAL_SECONDS = 3e-8
"""Added per H N^2 D^3 by the exact diagonal slope (the compiled `_diagonal_kernel`, two passes: 2.6e-8 measured at
(N, D) = (17, 48); the numpy form it replaced took 1e-7)."""
PRODUCT_RULE_SECONDS = 2e-8
"""Added per H N^3 D^2 by the product rule on P_il v~_il."""
ROW_FUNCTIONAL_SECONDS = 3.5e-7
"""Per H N^2 D^2 for one pass of the row functionals' derivatives (inf-norm, seeds "slopes"; measured 2.5-3.8e-7
at (D, H, N) = (48, 3, 17) and (64, 4, 32))."""
ENCLOSURE_SECONDS = 0.8e-7
"""Per H N^2 D^2 for one interval enclosure of J (at the centre, or over the box)."""
MATRIX_SECONDS = 2e-7
"""Per (N D)^2 for the matrix enclosures and their norm bounds."""
DENSE_NORM_SECONDS = 3e-10
"""Per (N D)^3 for the symmetric eigenvalue problems of the 2-norm of the centre and of ||J(X0)||_2 (N D <=
DENSE_NORM_MAX; about 2 s at N D = 2048)."""


def predicted_seconds(N: int, D: int, H: int, norm: str, seeds: str, exact_diagonal: bool = False,
                      product_rule: bool = False, passes: int = 2, rows: bool = True) -> tuple[float, float]:
    """(remainder pass, the rest): reference seconds of `taylor_bound` (module constants), before any nested box.

    The remainder pass: `dp_slopes` with `passes` for seeds "slopes", about four enclosures of J for "directional"
    (one forward pass with a tangent), N D of them for "coordinates" (a tangent per coordinate: tied L2 with a 10 s
    budget took 20 s at (D, H, N) = (64, 4, 6), 8 s at (32, 4, 8), when this said N D / 8); the rest: the enclosure
    of J at the centre, the direct enclosure over the box (N D <= DENSE_NORM_MAX), the matrix norm bounds, and for
    the 2-norm with N D <= DENSE_NORM_MAX the dense eigenvalue problems, for the inf-norm with seeds "slopes" one
    pass of the row functionals (unless rows is False). A prediction, not a promise: `dp_slopes` also checks
    its deadline after each head."""
    units, n = H * (N * D) ** 2, N * D
    enclosure = ENCLOSURE_SECONDS * units
    if seeds == "slopes":
        first = (SLOPES_SECONDS * units * (1.0 if passes > 1 else ONE_PASS_SHARE)
                 + (EXACT_DIAGONAL_SECONDS * H * N**2 * D**3 if exact_diagonal else 0.0)
                 + (PRODUCT_RULE_SECONDS * H * N**3 * D**2 if product_rule else 0.0)
                 + (enclosure * n if n <= COORDINATES_MAX else 0.0))  # the unit tangents too
    elif seeds == "directional":
        first = 4 * enclosure
    else:  # one tangent per coordinate, each about one enclosure's work (n / 16 chunks of 16)
        first = enclosure * n
    rest = enclosure * (2 if n <= DENSE_NORM_MAX else 1) + MATRIX_SECONDS * n**2
    if rows and norm == "inf" and seeds == "slopes":  # the first pass of the row functionals
        rest += ROW_FUNCTIONAL_SECONDS * units
    if norm == "2" and n <= DENSE_NORM_MAX:
        rest += DENSE_NORM_SECONDS * n**3
    return first, rest


def memory_estimate(N: int, D: int, boxes: int = 1, seeds: str = "directional") -> int:
    """Estimated peak bytes of `taylor_enclosure` on `boxes` boxes of N x D inputs: BYTES_PER_ENTRY (N D)^2 per box
    (SLOPES_BYTES_PER_ENTRY for seeds "slopes"; up to N D = COORDINATES_MAX at least the unit tangents'
    TANGENT_BOXES, which run there too: a few MB)."""
    per_entry = SLOPES_BYTES_PER_ENTRY if seeds == "slopes" else BYTES_PER_ENTRY
    if seeds == "slopes" and N * D <= COORDINATES_MAX:
        per_entry = max(per_entry, TANGENT_BOXES * BYTES_PER_ENTRY)
    return int(per_entry * (N * D) ** 2 * boxes)


def check_memory(N: int, D: int, boxes: int = 1, limit: int = MEMORY_LIMIT, seeds: str = "directional") -> None:
    """Raise InvalidInputError, naming the size, when the estimated peak exceeds `limit` bytes."""
    need = memory_estimate(N, D, boxes, seeds)
    if need > limit:
        raise InvalidInputError(
            f"the Taylor bound materialises J as (N, D, N, D) = ({N}, {D}, {N}, {D}) intervals per box: about "
            f"{need / 2**30:.1f} GiB for {boxes} box(es), above the limit of {limit / 2**30:.1f} GiB "
            f"(N D = {N * D}; the largest N D that fits one box is {int(math.sqrt(limit / BYTES_PER_ENTRY))})"
        )


def directional_seed(box: Interval, direction: Interval) -> Dual:
    """A Dual over the box (..., N, D) whose tangent is the interval direction (..., N, D, 1): forward mode then
    encloses the directional derivative df(xi)[Delta] for all xi in the box and Delta in the direction box."""
    if box.shape != direction.shape:
        raise InvalidInputError(f"box and direction must have one shape, got {box.shape} and {direction.shape}")
    return Dual(box, direction.expand(-1))


@dataclasses.dataclass(frozen=True)
class TaylorEnclosure:
    """J(X) in at_centre + remainder, and J(X) in direct, for every X in the box (module docstring).

    Attributes:
        at_centre: J(X0) enclosed at the point X0, (..., N, D, N, D).
        remainder: T, enclosing dJ(xi)[X - X0] over xi, X in the box, (..., N, D, N, D).
        direct: the interval evaluation of J over the box, (..., N, D, N, D).
    """

    at_centre: Interval
    remainder: Interval
    direct: Interval
    steps: int = 1  # nested boxes of the slopes' integral form (`_slopes.integral_slopes`; 1 for the other seeds)


SEEDS: tuple[str, ...] = ("directional", "coordinates", "layered", "slopes")
SCALED_MAX = 1024
"""`taylor_bound`'s 2-norm also takes the solver-free relaxation (`certify.sdp.scaled_bound`) up to this N D (each
iteration a Lanczos top eigenpair of a 2 N D matrix: about 0.5 s at N D = 816 here)."""

SCALED_ITERATIONS = 10
"""Its L-BFGS iterations without a time budget (at N D = 816: 28.73 against the baseline's 30.27 in 5 s)."""

SCALED_SLACK = 2.0
"""Seconds `taylor_bound` keeps after the scaled iterations, for their certification and the attained value."""

CUT_MAX = 256
"""For p = 2, the dense norm bounds of the cut enclosure (two more eigenvalue problems) only up to this N D."""
COORDINATES_MAX = 96
"""With seeds="auto", the unit tangents (exact slope, (N D)^3 work: about 2 s at N D = 96 on this CPU; for DP layers
intersected with the slopes) up to this N D."""
TANGENT_BOXES = 8
"""The unit tangents' memory counts as this many boxes (chunks of 16 tangents, `check_memory`'s chunk // 2)."""


def coordinate_remainder(box: Interval, centre: np.ndarray, w: _Weights, chunk: int = 16) -> tuple[Interval, Interval]:
    """T = sum_m [-h_m, h_m] dJ/dX_m(box) (unit tangents, `chunk` coordinates per forward pass), and the direct
    enclosure. Exact in each coordinate (no dependency between the terms of dJ/dX_m), at (N D)^3 cost."""
    N, D = box.shape[-2:]
    n = N * D
    h = round_up(np.maximum(box.hi - centre, centre - box.lo)).reshape(*box.shape[:-2], n)
    total, direct = None, None
    for start in range(0, n, chunk):
        K = min(chunk, n - start)
        seed = np.zeros((N * D, K))
        seed[start + np.arange(K), np.arange(K)] = 1.0
        seed = np.broadcast_to(seed.reshape(N, D, K), (*box.shape, K))
        dual = jacobian_enclosure(Dual(box, Interval(seed, seed)), w)
        hk = h[..., start:start + K].reshape(*box.shape[:-2], 1, 1, 1, 1, K)
        part = isum(dual.t * Interval(-hk, hk), axis=-1)
        total = part if total is None else total + part
        direct = dual.v
    return total, direct


def direction_remainder(box: Interval, w: _Weights, directions: Interval, radii: np.ndarray, norm: str,
                        spread: np.ndarray | None = None, chunk: int = 8) -> np.ndarray | None:
    """T (N, D, N, D), nonnegative, with |sum_j delta_j dJ(xi)[g_j] + dJ(xi)[u]| <= T for every xi in the box, every
    g_j in the interval direction directions[..., j] (N, D, K), every delta with |delta_j| <= radii[j] (norm "inf")
    or ||delta||_2 <= radii[0] (norm "2"), and every u with |u| <= spread (N, D) (None: u = 0). None when the
    enclosure is not finite (the box is too wide for it).

    dJ(xi)[.] is linear, so the left side is at most sum_j |delta_j| |dJ(xi)[g_j]| + |dJ(xi)[u]|, which is at most
    sum_j radii[j] M_j (inf) or radii[0] (sum_j M_j^2)^(1/2) (2; Cauchy-Schwarz), plus M_u, with M_j the magnitude
    of the forward-mode enclosure of dJ[g] over the box and the direction box g in directions[..., j] (`_dual.Dual`
    with an interval tangent, `chunk` tangents per pass) and M_u that of dJ[u] over u in [-spread, spread] (one
    more pass). The model chain uses it with the columns of a prefix's Jacobian as the g_j (`certify.model`): when
    the layer's input moves in a space of K << N D dimensions, this is far tighter than the coordinate slopes, which
    bound every coordinate's movement separately (the sum over m of h_m |dJ/dX_m|)."""
    bounds = direction_remainder_times(box, w, directions, radii, norm, None, spread, chunk)
    return None if bounds is None else bounds[0]


def direction_remainder_times(box: Interval, w: _Weights, directions: Interval, radii: np.ndarray, norm: str,
                              right: np.ndarray | None, spread: np.ndarray | None = None, chunk: int = 8,
                              workers: int = 1, scores: Callable[[np.ndarray], list] | None = None
                              ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(T, T_right): T as in `direction_remainder`, and for a float matrix ``right`` (N D, q) a nonnegative T_right
    (N D, q) with |(sum_j delta_j dJ(xi)[g_j] + dJ(xi)[u]) right| <= T_right for the same xi, g_j, delta, u
    (None when ``right`` is None). None when an enclosure is not finite.

    Same argument, with the product taken before the magnitudes: |sum_j delta_j M_j right| <= sum_j radii[j]
    |M_j right| (inf) or radii[0] (sum_j |M_j right|^2)^(1/2) (2), where |M_j right| is the magnitude of the
    interval product of M_j's enclosure with the exact ``right`` (`point_einsum`, rounded outward): the sum over
    the N D inner coordinates keeps its cancellations, which the entrywise T times |right| loses (on the digits
    ViT's first attention block, 9.5x over the sampled |(J(y) - A) W| against 2.9x for T alone); the u part
    keeps M_u |right|. ``workers`` threads run the chunks' forward passes at once (memory: that many chunks).
    ``scores(g)`` (float directions only): per head, a `Dual` enclosing the DP score differences and their
    derivatives along the directions g (N, D, k) of a chunk, intersected into each pass (`_enclosure.dp_scores`);
    the sup over xi is then over the box's points where those enclosures hold (`certify.model._score_set`)."""
    N, D, K = directions.shape
    if box.shape != (N, D):
        raise InvalidInputError(f"directions must have shape (N, D, K) = ({box.shape}, K), got {directions.shape}")
    n = N * D
    if right is not None and (right.ndim != 2 or right.shape[0] != n):
        raise InvalidInputError(f"right must have shape (N D, q) = ({n}, q), got {right.shape}")
    radii = np.asarray(radii, dtype=np.float64)

    def chunk_sums(start: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The chunk's terms of T and T_right (None when its enclosure is not finite)."""
        seed = Interval(np.ascontiguousarray(directions.lo[..., start:start + chunk]),
                        np.ascontiguousarray(directions.hi[..., start:start + chunk]))
        known = None
        if scores is not None:
            if not np.array_equal(seed.lo, seed.hi):
                raise InvalidInputError("score enclosures need float directions")
            known = scores(seed.lo)
        with np.errstate(over="ignore", invalid="ignore"):  # a too-wide box: inf or NaN ends, caught below
            tangent = jacobian_enclosure(Dual(box, seed), w, known).t
        mag = tangent.mag
        if not np.all(np.isfinite(mag)):
            return None
        k, part_right = mag.shape[-1], None
        with np.errstate(over="ignore"):  # an overflow gives an infinite (still valid) bound
            if norm == "inf":
                part = _einsum_up("abcdk,k->abcd", mag, radii[start:start + chunk])
            else:
                part = _einsum_up("abcdk,abcdk->abcd", mag, mag)
            if right is not None:
                product = point_einsum("abk,bq->akq", tangent.reshape(n, n, k), right).mag  # |M_j right|
                if norm == "inf":
                    part_right = _einsum_up("akq,k->aq", product, radii[start:start + chunk])
                else:
                    part_right = _einsum_up("akq,akq->aq", product, product)
        return part, part_right

    starts = list(range(0, K, chunk))
    with ThreadPoolExecutor(max(1, min(workers, len(starts)))) as pool:  # numpy releases the GIL in its loops
        parts = list(pool.map(chunk_sums, starts))
    if any(part is None for part in parts):
        return None
    total = np.zeros((N, D, N, D))
    total_right = None if right is None else np.zeros(right.shape)
    with np.errstate(over="ignore"):
        for part, part_right in parts:  # summed in chunk order: the result does not depend on the threads
            total = round_up(total + part) + ETA
            if right is not None:
                total_right = round_up(total_right + part_right) + ETA
    if norm == "2":
        total = round_up(round_up(np.sqrt(total)) * float(radii[0])) + ETA
        if right is not None:
            total_right = round_up(round_up(np.sqrt(total_right)) * float(radii[0])) + ETA
    if spread is not None and np.any(spread > 0):
        with np.errstate(over="ignore", invalid="ignore"):
            mag = jacobian_enclosure(directional_seed(box, Interval(-spread, spread)), w).t[..., 0].mag
        if not np.all(np.isfinite(mag)):
            return None
        total = round_up(total + mag) + ETA
        if right is not None:
            total_right = round_up(total_right + _einsum_up("ab,bq->aq", mag.reshape(n, n), np.abs(right))) + ETA
    return total, total_right


def taylor_enclosure(box: Interval, centre: np.ndarray, w: _Weights, *, seeds: str = "directional",
                     chunk: int = 16, remainder_scale: float = 1.0, exact_diagonal: bool | None = None,
                     max_steps: int = 1, time_budget: float | None = None, product_rule: bool | None = None,
                     deadline: float | None = None, at_centre: Interval | None = None,
                     passes: int = 2) -> TaylorEnclosure:
    """The Taylor form of J over boxes (..., N, D) about points `centre` (..., N, D) inside them.

    seeds: "directional" (one tangent holding the interval direction B - X0: cost about 3 enclosures of J) or
    "coordinates" (unit tangents, T = sum_m [-h_m, h_m] dJ/dX_m(B), in chunks of `chunk` coordinates: (N D)^3
    cost, but free of the dependency between the terms that share a coordinate, so its slope in eps is the exact
    one entrywise) or "layered" (DP, one box: `dp_layered_enclosure`; 4-5x tighter remainder than "directional"
    on small layers, but slow: over 10 minutes at N = 17, D = 48 here) or "slopes" (DP: T = [-S, S] with S the
    coordinate slopes of J bounded from its building blocks, `_slopes.dp_slopes`: N^2 D^3 work per head, within
    1.5x of the exact entrywise slope on trained layers; intersected with the "coordinates" remainder when N D <=
    COORDINATES_MAX; with max_steps > 1, `_slopes.integral_slopes`: the slopes
    averaged over up to max_steps nested boxes, as many as fit in time_budget seconds, each with the separable
    diagonal unless exact_diagonal is True; product_rule, passes and deadline as in `_slopes.dp_slopes`, the deadline
    on the first pass only). `at_centre`: the enclosure of J at the centre, if already computed. `remainder_scale` < 1
    deliberately shrinks T (for tests that must catch a too-small remainder); it is never used by a certified
    bound.
    """
    if seeds not in SEEDS:
        raise InvalidInputError(f"seeds must be one of {SEEDS}, got {seeds!r}")
    steps = 1
    centre = np.asarray(centre, dtype=np.float64)
    if centre.shape != box.shape:
        raise InvalidInputError(f"the centre must have the box's shape {box.shape}, got {centre.shape}")
    if np.any(centre < box.lo) or np.any(centre > box.hi):
        raise InvalidInputError("the Taylor centre must lie in the box")
    N, D = box.shape[-2:]
    batch = int(np.prod(box.shape[:-2]))
    check_memory(N, D, batch * (1 if seeds in ("directional", "slopes") else max(1, chunk // 2)), seeds=seeds)
    if seeds == "directional":
        direction = Interval(round_down(box.lo - centre), round_up(box.hi - centre))
        dual = jacobian_enclosure(directional_seed(box, direction), w)
        remainder, direct = dual.t[..., 0], dual.v
    elif seeds == "slopes":
        if w.kind != "dp":
            raise InvalidInputError("seeds='slopes' covers DP layers (the building blocks of the DP Jacobian)")
        flat_lo, flat_hi = box.lo.reshape(-1, N, D), box.hi.reshape(-1, N, D)
        flat_centre = centre.reshape(-1, N, D)
        if max_steps > 1:
            parts = [integral_slopes(Interval(flat_lo[b], flat_hi[b]), flat_centre[b], w, max_steps=max_steps,
                                     time_budget=time_budget, exact_diagonal=bool(exact_diagonal),
                                     product_rule=product_rule, deadline=deadline, passes=passes)
                     for b in range(batch)]
            S, steps = np.stack([part[0] for part in parts]), min(part[1] for part in parts)
        else:
            S = np.stack([dp_slopes(Interval(flat_lo[b], flat_hi[b]), flat_centre[b], w,
                                    exact_diagonal=exact_diagonal, product_rule=product_rule, deadline=deadline,
                                    passes=passes)
                          for b in range(batch)])
        S = S.reshape(*box.shape[:-2], N, D, N, D)
        if N * D <= DENSE_NORM_MAX:
            direct = jacobian_enclosure(box, w)
        else:  # no direct enclosure at this size (memory); intersecting with the whole line changes nothing
            direct = Interval(np.full(S.shape, -np.inf), np.full(S.shape, np.inf))
        remainder = Interval(-S, S)
        if N * D <= COORDINATES_MAX:
            # both enclose J(X) - J(X0) over the box, so their intersection does: the unit tangents are tighter
            # as eps -> 0 (exact slope entrywise), the slopes' mean-value refinement once the box's interval
            # enclosures widen (a D = 16, N = 6 layer at eps = 1e-2: 1.14 against 1.70 for the tangents alone)
            coordinates, coordinates_direct = coordinate_remainder(box, centre, w, chunk)
            remainder, direct = intersect(remainder, coordinates), intersect(direct, coordinates_direct)
    elif seeds == "layered":
        if w.kind != "dp" or box.lo.ndim != 2:
            raise InvalidInputError("seeds='layered' covers one box (N, D) of a DP layer")
        remainder, direct = dp_layered_enclosure(box, centre, w, chunk)
    else:
        remainder, direct = coordinate_remainder(box, centre, w, chunk)
    if remainder_scale != 1.0:
        remainder = Interval(remainder.lo * remainder_scale, remainder.hi * remainder_scale)
    if at_centre is None:
        at_centre = jacobian_enclosure(Interval(centre, centre), w)
    return TaylorEnclosure(at_centre, remainder, direct, steps)


def _matrix(x: Interval) -> tuple[np.ndarray, np.ndarray]:
    N, D = x.shape[:2]
    return x.lo.reshape(N * D, N * D), x.hi.reshape(N * D, N * D)


def nonnegative_norm2_upper(R: np.ndarray, iterations: int = 30) -> float:
    """A proven upper bound on ||R||_2 for a nonnegative float matrix R, in O(iterations * size) work.

    Collatz-Wielandt: for a nonnegative square matrix A and any x > 0, rho(A) <= max_i (A x)_i / x_i. With
    A = R^T R, ||R||_2^2 = rho(A). x comes from power iteration (floored at 1e-3 max x, so x > 0); A x is formed as
    R^T (R x) with every product and sum of nonnegative terms rounded up by the margin of `sum_up` (relative
    2 (n + 2) u per matrix-vector product, plus underflow), so the computed ratio bounds the exact one.
    """
    R = np.asarray(R, dtype=np.float64)
    if R.size == 0 or not np.any(R):
        return 0.0
    if np.any(R < 0) or not np.all(np.isfinite(R)):
        raise ValueError("nonnegative_norm2_upper needs a finite nonnegative matrix")
    # scale by an exact power of two to a largest entry in [1/2, 1), so that R^T R x cannot overflow; entries that
    # become subnormal are rounded by at most eta / 2, which adding eta covers; the bound is scaled back exactly
    exponent = math.frexp(float(R.max()))[1]
    with np.errstate(under="ignore"):
        R = np.ldexp(R, -exponent) + ETA
    value = _scaled_norm2_upper(R, iterations)
    if not math.isfinite(value):
        return math.inf
    with np.errstate(over="ignore"):
        return float(up(np.ldexp(value, exponent)))  # inf on overflow: still an upper bound


def _scaled_norm2_upper(R: np.ndarray, iterations: int) -> float:
    """`nonnegative_norm2_upper` for a positive matrix with entries below 1."""
    x = np.ones(R.shape[1])
    for _ in range(iterations):
        y = R.T @ (R @ x)
        top = y.max()
        if not top > 0:
            break
        x = y / top
    x = np.maximum(x, 1e-3 * x.max())
    m, n = R.shape
    u = up(up(R @ x) * (1.0 + 2.0 * (n + 2) * U) + (n + 1) * ETA)
    v = up(up(R.T @ u) * (1.0 + 2.0 * (m + 2) * U) + (m + 1) * ETA)
    ratio = up(up(v / x).max() * (1.0 + 4.0 * U))
    return float(up(np.sqrt(ratio) * (1.0 + 4.0 * U)))


def interval_norm2_upper(enclosure: MatrixEnclosure) -> float:
    """A proven upper bound on max ||J||_2 over an interval matrix J_c +- R: min(||J_c||_2 + ||R||_2, || |J_c| + R ||_2)
    (`certify.sdp`'s baseline and magnitude bounds) by `gram_norm2_upper` and `nonnegative_norm2_upper`, without
    the dense eigenvalue problems of the dilation: at n = 2048 about 1.5 s where `baseline_bound` and
    `magnitude_bound` take about 17 s (three 4096 x 4096 eigenvalue problems)."""
    baseline = float(up(gram_norm2_upper(enclosure.center) + nonnegative_norm2_upper(enclosure.radius)))
    return min(baseline, nonnegative_norm2_upper(enclosure.magnitude()))


GRAM_EIGH_MAX = 2048
"""Gram matrices up to this size get LAPACK's eigenvalue estimate as the guess of the Cholesky check (2048: about
0.8 s here); larger ones a power-iteration guess 0.2% above its estimate."""


def gram_norm2_upper(C: np.ndarray) -> float:
    """A proven upper bound on ||C||_2 for any float matrix, from the Gram matrix B = fl(C^T C) of its shorter side
    (C^T C or C C^T), symmetrised:

        ||C||_2^2 = lambda_max(C^T C) <= lambda_max(B) + ||C^T C - B||_2,   |C^T C - B| <= 2 gamma_n |C|^T |C|

    (Higham 3.5, the factor 2 covering the symmetrising average), so ||C^T C - B||_2 <= 2 gamma_n || |C| ||_2^2, with
    lambda_max(B) = -lambda_min(-B) bounded by `lambda_min_lower`'s Cholesky check at LAPACK's estimate (up to
    GRAM_EIGH_MAX rows) or a power-iteration guess, and || |C| ||_2 by `nonnegative_norm2_upper`. Work: one Gram
    product, one Cholesky (and one symmetric eigenvalue problem up to GRAM_EIGH_MAX). Against the dense eigenvalue
    problem of the dilation (2n x 2n, `norm2_upper`) at n = 2048: 0.8 s for 5.8 s, and 2e-10 above the exact norm
    for 2e-9 (a random matrix)."""
    C = np.asarray(C, dtype=np.float64)
    if C.shape[1] > C.shape[0]:
        C = C.T
    if not np.any(C):
        return 0.0
    exponent = math.frexp(float(np.abs(C).max()))[1]
    with np.errstate(under="ignore"):
        scaled = np.ldexp(C, -exponent)
    value = _gram_norm2_upper(scaled) + C.shape[0] * ETA
    with np.errstate(over="ignore"):
        return float(up(np.ldexp(value, exponent)))


def _gram_norm2_upper(C: np.ndarray) -> float:
    """`gram_norm2_upper`'s bound for a matrix (m, n) with entries of magnitude below 1; the Gram
    matrix C^T C is n x n, its entries sums of m products."""
    n = C.shape[0]
    magnitude_norm = nonnegative_norm2_upper(np.abs(C))
    with np.errstate(over="ignore", invalid="ignore"):
        B = C.T @ C
        B = 0.5 * B + 0.5 * B.T
    if not np.all(np.isfinite(B)):
        return magnitude_norm
    if B.shape[0] <= GRAM_EIGH_MAX:  # LAPACK's estimate as the guess, no 0.2% above it
        top = -lambda_min_lower(-B)
        error = up(2.0 * gamma(n) * up(magnitude_norm * magnitude_norm))
        return min(float(up(np.sqrt(up(max(top, 0.0) + error)) * (1 + 4 * U))), magnitude_norm)
    v = np.ones(B.shape[0]) / math.sqrt(B.shape[0])
    for _ in range(100):
        w = B @ v
        size = np.linalg.norm(w)
        if not size > 0:
            break
        v = w / size
    estimate = float(v @ B @ v)
    # the guess sits 0.2% above the estimate (power iteration approaches lambda_max from below); the Cholesky check
    # proves whatever shift passes, and widens the shift itself when the guess was too low
    top = -lambda_min_lower(-B, guess=-estimate * 1.002)
    error = up(2.0 * gamma(n) * up(magnitude_norm * magnitude_norm))
    gram = float(up(np.sqrt(up(max(top, 0.0) + error)) * (1 + 4 * U)))
    return min(gram, magnitude_norm)


def taylor_norm_bound(form: TaylorEnclosure, norm: str, centre_value: float | None = None,
                      scaled: bool = False, deadline: float | None = None) -> float:
    """Proven bound on max ||J(X)||_norm over the box of one Taylor form (module docstring); inf if unbounded.

    For p = 2: ||c||_2 (`norm2_upper`; pass `centre_value` >= it to reuse one) + || r + |T| ||_2
    (`nonnegative_norm2_upper`), and, when the direct enclosure cut J0 + T, || |cut| ||_2 and (N D <= CUT_MAX)
    the baseline of the cut enclosure. With ``scaled`` (N D <= SCALED_MAX), also the relaxation with solver-free
    multipliers (`certify.sdp.scaled_bound`, 6% below the baseline on a trained D = 48 layer at eps = 1e-2) on the
    narrower of the two enclosures, its iterations until ``deadline`` (a `time.perf_counter()` value) or, without
    one, SCALED_ITERATIONS of them."""
    lo0, hi0 = _matrix(form.at_centre)
    loT, hiT = _matrix(form.remainder)
    if not all(np.all(np.isfinite(a)) for a in (lo0, hi0, loT, hiT)):
        return math.inf
    summed = form.at_centre + form.remainder
    cut = intersect(summed, form.direct)
    lo, hi = _matrix(cut)
    enclosure = MatrixEnclosure.from_bounds(lo, hi)
    if norm == "inf":
        return inf_norm_bound(enclosure)
    centre = MatrixEnclosure.from_bounds(lo0, hi0)
    radius = round_up(centre.radius + np.maximum(np.abs(loT), np.abs(hiT)))
    c_norm = gram_norm2_upper(centre.center) if centre_value is None else centre_value
    value = float(up(c_norm + nonnegative_norm2_upper(radius)))
    narrowest = MatrixEnclosure(centre.center, radius)
    if np.any(cut.lo > summed.lo) or np.any(cut.hi < summed.hi):  # the direct enclosure cut something
        value = min(value, nonnegative_norm2_upper(enclosure.magnitude()))
        if lo.shape[0] <= CUT_MAX:
            value = min(value, baseline_bound(enclosure))
        narrowest = enclosure
    if scaled and lo.shape[0] <= SCALED_MAX:
        iterations = 40 if deadline is not None else SCALED_ITERATIONS
        value = min(value, scaled_bound(narrowest, iterations=iterations, deadline=deadline))
    return value


def taylor_row_sums_bound(box: Interval, centre: np.ndarray, w: _Weights, form: TaylorEnclosure, max_steps: int = 1,
                          time_budget: float | None = None) -> tuple[float, int]:
    """(bound, K): a proven bound on max_X ||J(X)||_inf over the box of a DP layer's Taylor form: per row, the smaller
    of the row sum of the cut enclosure (J0 + T intersected with the direct one) and `row_functional_sums` with that
    cut fixing the signs (K nested boxes for its slopes)."""
    cut = intersect(form.at_centre + form.remainder, form.direct)
    if not (np.all(np.isfinite(cut.lo)) and np.all(np.isfinite(cut.hi))):
        return math.inf, 0
    entrywise = sum_up(sum_up(cut.mag, axis=3), axis=2).reshape(-1)
    rows, steps = row_functional_sums(box, centre, w, form.at_centre, cut, max_steps, time_budget)
    return float(np.max(np.minimum(entrywise, rows))), steps


def resolve_seeds(seeds: str, N: int, D: int, kind: str = "dp") -> str:
    """"auto": "slopes" for DP (which also intersects in the unit tangents' remainder when N D <= COORDINATES_MAX);
    for L2 "coordinates" when N D <= COORDINATES_MAX, else "directional"."""
    if seeds == "auto":
        if kind == "dp":
            return "slopes"
        return "coordinates" if N * D <= COORDINATES_MAX else "directional"
    if seeds not in SEEDS:
        raise InvalidInputError(f"seeds must be 'auto' or one of {SEEDS}, got {seeds!r}")
    return seeds


def taylor_box_bounds(boxes: Interval, w: _Weights, norm: str, seeds: str = "auto") -> tuple[np.ndarray, Interval]:
    """Per box (B, N, D): the Taylor bound about the box's midpoint, and the direct enclosure of J (B, N, D, N, D)."""
    centre = np.clip(0.5 * boxes.lo + 0.5 * boxes.hi, boxes.lo, boxes.hi)
    # per box inside a time-budgeted search: the separable diagonal slope (10x faster, within 6%)
    form = taylor_enclosure(boxes, centre, w, seeds=resolve_seeds(seeds, *boxes.shape[-2:], w.kind),
                            exact_diagonal=False)
    values = np.array([taylor_norm_bound(TaylorEnclosure(form.at_centre[b], form.remainder[b], form.direct[b]), norm)
                       for b in range(boxes.shape[0])])
    return values, form.direct


def taylor_bound(weights: AttentionWeights, N: int, norm: str = "2", domain: Domain = Ball(1.0), *,
                 seeds: str = "auto", exact_diagonal: bool | None = None, time_budget: float | None = None,
                 max_steps: int = 16, **_: object) -> Certificate:
    """Certified bound on Lip_norm(F) over a local domain from one Taylor form (module docstring).

    EpsBall(X0, eps, p): the box X0 +- eps about X0 (it contains the ball for both p); Ball(R): the box [-R, R]^{N D}
    about 0 (valid, but loose: use the branch and bound there). seeds: "auto" (`resolve_seeds`; with a time_budget,
    tied L2 above COORDINATES_MAX also tries "coordinates" first and keeps it where its predicted pass fits),
    "directional", "coordinates", "layered" or "slopes" (`taylor_enclosure`); details["seeds"] says which ran. The
    lower bound in the details is ||J(X0)||_norm,
    attained at the centre, which lies in the domain. With seeds "slopes" and a time_budget, the slopes are averaged
    over up to max_steps nested boxes (`_slopes.integral_slopes`), their extra passes within REFINEMENT_SHARE of the
    budget (the first pass, the centre and the norms are not bounded by it).

    Returns Certificate(kind="upper", certified=True, method="taylor"), details: lower, ratio, at_centre (a proven
    upper bound on ||J(X0)||, the limit of the bound as eps -> 0), remainder (value minus at_centre), memory_estimate.
    """
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    if weights.kind not in ("dp", "l2"):
        raise InvalidInputError(f"the Taylor bound covers kinds 'dp' and 'l2', got {weights.kind!r}")
    if not isinstance(domain, (Ball, EpsBall)):
        raise InvalidInputError(f"the Taylor bound needs Ball(R) or EpsBall(X0, eps), got {domain!r}")
    w64 = weights.to(torch.float64, "cpu")
    D = w64.D
    box = initial_box(domain, N, D)  # checks the centre's shape
    nw = numpy_weights(w64)
    if isinstance(domain, EpsBall):
        X0 = domain.center.detach().to(torch.float64).cpu().numpy()
    else:
        X0 = np.zeros((N, D))
    requested, seeds = seeds, resolve_seeds(seeds, N, D, nw.kind)
    check_memory(N, D, seeds=seeds)
    steps = max_steps if seeds == "slopes" and time_budget is not None else 1
    product_rule, passes, deadline, at_centre, rows = None, 2, None, None, seeds == "slopes"
    if time_budget is not None:
        fitted = None
        if requested == "auto" and seeds == "directional" and memory_estimate(N, D, TANGENT_BOXES) <= MEMORY_LIMIT:
            # tied L2 above COORDINATES_MAX: the unit tangents where their calibrated prediction fits the budget
            # (a default-initialised (D, H, N) = (32, 2, 6) layer at eps = 1e-3: 2.05 -> 0.754 with ||J(X0)|| =
            # 0.680, `benchmarks/small_taylor.py`); near the limit the choice follows the machine's load
            try:
                fitted = _fit_budget(X0, nw, norm, "coordinates", exact_diagonal, steps, time_budget, start)
                seeds = "coordinates"
            except BudgetExceeded:
                pass
        if fitted is None:
            fitted = _fit_budget(X0, nw, norm, seeds, exact_diagonal, steps, time_budget, start)
        product_rule, passes, deadline, at_centre, rows = fitted
    passes_budget = None if time_budget is None else REFINEMENT_SHARE * time_budget - (time.perf_counter() - start)
    form = taylor_enclosure(box, X0, nw, seeds=seeds, exact_diagonal=exact_diagonal, max_steps=steps,
                            time_budget=passes_budget, product_rule=product_rule, deadline=deadline,
                            at_centre=at_centre, passes=passes)
    centre = MatrixEnclosure.from_bounds(*_matrix(form.at_centre))
    row_steps = None
    if norm == "2":
        c_norm = gram_norm2_upper(centre.center)
        at_centre = float(up(c_norm + nonnegative_norm2_upper(centre.radius)))
        scaled_deadline = None if time_budget is None else start + time_budget - SCALED_SLACK
        value = taylor_norm_bound(form, norm, c_norm, scaled=True, deadline=scaled_deadline)
    else:
        at_centre, value = inf_norm_bound(centre), taylor_norm_bound(form, norm)
        row_steps = 0
        if rows:  # one scalar per row: the cancellation inside each row sum (`_row_functional`)
            rows_budget = (None if time_budget is None
                           else max(0.0, ROWS_SHARE * time_budget - (time.perf_counter() - start)))
            row_value, row_steps = taylor_row_sums_bound(box, X0, nw, form, steps, rows_budget)
            value = min(value, row_value)
    lower = attained_at(torch.from_numpy(X0), w64, norm)
    ratio = value / lower if lower > 0 else math.inf
    return Certificate(
        value=float(value), kind="upper", certified=True, method="taylor", scope=domain.scope,
        norm=norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=(f"first-order Taylor form about the centre: ||J(X0)|| <= {at_centre:.6g} plus the remainder "
                 + (f"(slopes averaged over {form.steps} nested boxes; " if form.steps > 1 else "(")
                 + "proofs/taylor_remainder.py)"
                 + (f"; row sums through the sign-certain row functionals ({row_steps} nested boxes; "
                    "proofs/row_functional.py)" if row_steps else "")
                 + f"; upper / ||J(X0)|| = {ratio:.4f}"),
        details={"lower": lower, "witness": X0.tolist(), "ratio": ratio, "at_centre": at_centre,
                 "remainder": value - at_centre, "seeds": seeds, "steps": form.steps, "slope_passes": passes if seeds == "slopes" else None,
                 "row_steps": row_steps,
                 "memory_estimate": memory_estimate(N, D, seeds=seeds)},
    )


PREDICTION_SLACK = 1.1
"""A calibrated prediction may exceed the time left by this factor: predicted / measured was 1.17-1.3 on the passes
that fit a 10 s budget (benchmarks/budgets.py), and `dp_slopes`' deadline still stops a pass that runs late."""


def _centre_and_speed(X0: np.ndarray, w: _Weights) -> tuple[Interval, float]:
    """The enclosure of J(X0), and its measured time over its reference time (`ENCLOSURE_SECONDS`), at least 1/4:
    how much slower than the reference this machine runs now."""
    N, D = X0.shape
    began = time.perf_counter()
    at_centre = jacobian_enclosure(Interval(X0, X0), w)
    return at_centre, max((time.perf_counter() - began) / (ENCLOSURE_SECONDS * w.H * (N * D) ** 2), 0.25)


def _fit_budget(X0: np.ndarray, w: _Weights, norm: str, seeds: str, exact_diagonal: bool | None, steps: int,
                time_budget: float, start: float) -> tuple[bool | None, int, float | None, Interval, bool]:
    """(product_rule, passes, deadline, the enclosure of J(X0), rows) for `taylor_bound` within time_budget seconds
    of `start`.

    A pass predicted at over twice the budget at the reference speed is refused at once. Otherwise the enclosure of
    J at the centre (needed anyway) runs first and calibrates `predicted_seconds` to this machine as it is now (its
    measured time over its reference time, at least 1/4); then the product rule of the slopes, the inf-norm's row
    functionals and next the slopes' refinement pass are dropped while the pass does not fit, and `BudgetExceeded` is raised when it does not fit
    without both. The deadline (slopes only) leaves the predicted rest after the pass."""
    N, D = X0.shape
    units = w.H * (N * D) ** 2
    if steps > 1:  # `integral_slopes`: the separable diagonal unless asked for the exact one
        exact = bool(exact_diagonal)
    else:
        exact = N * D**3 <= EXACT_DIAGONAL_MAX if exact_diagonal is None else exact_diagonal
    exact = exact and seeds == "slopes"
    least = sum(predicted_seconds(N, D, w.H, norm, seeds, exact, False, 1, rows=False))
    if ENCLOSURE_SECONDS * units > time_budget or least > 2 * time_budget:  # not worth calibrating
        raise BudgetExceeded(
            f"taylor: the pass needs about {least:.0f} s at this machine's reference speed (up to twice that on a "
            f"large layer) > the time budget {time_budget:.0f} s (raise time_budget well above it)")
    at_centre, speed = _centre_and_speed(X0, w)
    product_rule, passes = seeds == "slopes" and N**3 * D**2 <= PRODUCT_RULE_MAX, 2
    rows = seeds == "slopes" and norm == "inf"

    def predicted() -> tuple[float, float]:
        first, rest = predicted_seconds(N, D, w.H, norm, seeds, exact, product_rule, passes, rows)
        return speed * first, speed * (rest - ENCLOSURE_SECONDS * units)  # the centre's enclosure is done

    first, rest = predicted()
    left = PREDICTION_SLACK * (time_budget - (time.perf_counter() - start))
    if product_rule and first + rest > left:
        product_rule = False
        first, rest = predicted()
    if rows and first + rest > left:
        rows = False
        first, rest = predicted()
    if seeds == "slopes" and first + rest > left:
        passes = 1
        first, rest = predicted()
    if first + rest > left:
        raise BudgetExceeded(
            f"taylor: the pass needs about {first + rest:.0f} s more on this machine now (remainder {first:.0f} s, "
            f"norms {rest:.0f} s; {time.perf_counter() - start:.1f} s spent) > the time budget {time_budget:.0f} s "
            f"(raise time_budget to {1.2 * (time.perf_counter() - start + first + rest):.0f} or more)")
    deadline = start + PREDICTION_SLACK * time_budget - rest if seeds == "slopes" else None
    return (product_rule if seeds == "slopes" else None), passes, deadline, at_centre, rows


def attained_at(X0: torch.Tensor, weights: AttentionWeights, norm: str, iterations: int = 50) -> float:
    """||J(X0)||_norm (float64), or for the 2-norm above 512 rows ||J v|| / ||v|| with v the top eigenvector of J^T J
    (up to GRAM_EIGH_MAX rows) or from power iteration (a value attained at X0, <= ||J(X0)||_2, without the SVD)."""
    J = jacobian(X0[None], weights)
    n = X0.numel()
    if norm == "inf" or n <= 512:
        return float(jacobian_norm(J, norm)[0])
    M = J.reshape(n, n)
    if n <= GRAM_EIGH_MAX:  # the top eigenvector of M^T M (a symmetric eigenvalue problem, not the SVD)
        v = torch.linalg.eigh(M.T @ M).eigenvectors[:, -1]
    else:
        v = torch.ones(n, dtype=M.dtype)
        for _ in range(iterations):
            v = M.T @ (M @ v)
            v = v / v.norm()
    return float((M @ v).norm() / v.norm())


def _collapse(x: Dual, h: Interval) -> Interval:
    """sum_m [-h_m, h_m] t_m over the last (tangent) axis: encloses the derivative of x along every Delta in the box."""
    return isum(x.t * h, axis=-1)


def dp_layered_enclosure(box: Interval, centre: np.ndarray, w: _Weights, chunk: int = 16) -> tuple[Interval, Interval]:
    """(T, direct) for one DP box (N, D) by the layered form ("layered" seeds): the per-head intermediates that are
    small (softmax P (N, N), W^O-mapped C (N, D, N), W_K q_i (N, D), the diagonal term (N, D, D)) get unit tangents,
    in chunks of `chunk` coordinates, collapsed to interval tangents sum_m [-h_m, h_m] t_m (each encloses that
    quantity's directional derivative over the box, without dependency between its terms); the (N, D, N, D) terms
    are then assembled with these one-axis interval tangents, as in the directional form. Work (N D) N^2 D d H
    for the small part, about one directional pass for the rest."""
    from ._enclosure import _eye_mask, _where_zero, const, dp_scores, point_einsum_any, token_differences

    N, D = box.shape
    n = N * D
    h = round_up(np.maximum(box.hi - centre, centre - box.lo)).reshape(n)
    scale = const(1.0 / math.sqrt(w.d))
    diagonal_mask = _eye_mask(N, 4, (0, 2))
    sums: list[dict[str, Interval]] = [dict() for _ in range(w.H)]
    values: list[dict[str, Interval]] = [dict() for _ in range(w.H)]
    for start in range(0, n, chunk):
        K = min(chunk, n - start)
        seed = np.zeros((n, K))
        seed[start + np.arange(K), np.arange(K)] = 1.0
        X = Dual(box, Interval(seed.reshape(N, D, K), seed.reshape(N, D, K)))
        hk = Interval(-h[start:start + K], h[start:start + K])
        dX = token_differences(X)
        for head in range(w.H):
            WQ, WK, WV, WO = w.W_Q[head], w.W_K[head], w.W_V[head], w.W_O[head]
            Q, dK, P = dp_scores(X, dX, w, head)
            dV = point_einsum_any("...jkD,Dc->...jkc", dX, WV)
            Dv = _isum_dual(P.expand(-2).expand(-1) * dV.expand(-4), -2)
            C = P.expand(-1) * Dv
            CK = _isum_dual(C.expand(-1) * dK.swapaxes(-3, -2).expand(-2), -3)
            parts = {"P": P, "Kq": point_einsum_any("...ic,Ec->...iE", Q, WK),
                     "OC": point_einsum_any("...ila,aF->...iFl", C, WO),
                     "diagonal": point_einsum_any("...iac,aF,Ec->...iFE", CK, WO, WQ)}
            for name, part in parts.items():
                collapsed = _collapse(part, hk)
                sums[head][name] = collapsed if name not in sums[head] else sums[head][name] + collapsed
                values[head][name] = part.v
    J = None
    for head in range(w.H):
        WV, WO = w.W_V[head], w.W_O[head]
        d = {name: Dual(values[head][name], sums[head][name].expand(-1)) for name in values[head]}
        cross = d["OC"].expand(-1) * d["Kq"].expand(-2).expand(-2) * scale
        value = point_einsum_any("...il,aF,Ea->...iFlE", d["P"], WO, WV)
        term = value + cross + _where_zero(diagonal_mask, (d["diagonal"] * scale).expand(-2))
        J = term if J is None else J + term
    return J.t[..., 0], J.v


def _isum_dual(x: Dual, axis: int) -> Dual:
    from ._dual import d_isum

    return d_isum(x, axis)
