"""Certified global bound on c_p(N, d) = sup_Y ||M(Y)||_p by branch and bound (MATH.md sections 2 and 7).

M(Y) is the L2 core Jacobian (MATH.md section 2); c_p(N, d) bounds every tied L2 head of width d through the
factorisation Lip_p(F) <= ||[G_1 ... G_H]|| c_p(N, d) ||[V_1 ... V_H]|| (``factorised_bound``).

Theorem used (proof: ``proofs/tail_bound.py``; ``_tail``): for r >= 1,

    c_p(N, d) <= max( sup_{Y r-connected} ||M(Y)||_p ,  max_{1 <= s < N} c_p(s, d) + eps_p(r, N, d) ).

The first term is bounded by branch and bound over a domain of r-connected configurations modulo symmetry
(``_domain``). Each box first gets the split bound of ``_split`` (proof:
``proofs/split_bound.py``) for every partition of its tokens into groups at least SPLIT_MIN_DISTANCE apart in all its
configurations (``cluster_partitions``): max_g c_p(|G_g|) + a box enclosure of the remainder, cheap and independent
of the groups' internal widths; and the tail bound max_s c_p(s) + eps_p(r_box) when r_box >= 1. Boxes those do not
close get the mean-value / vertex bound and, on small boxes, the second-order Taylor bound of ``_mean_value``
(outward rounded). Boxes with r_box >= r are covered by the second term. r is the smallest radius on a grid whose
tail term stays below the closing threshold (``choose_r``): the smaller r, the smaller the domain. A box whose
bound is at most (1 + tol) times the best lower bound is closed, the others are bisected along the coordinate that
contributes most to their bound's error (h_l ||dM/dtheta_l|| for the mean-value form, h_l sum_m h_m
|d^2M/dtheta_l dtheta_m| for the Taylor form). The certified value is the maximum over closed boxes, open boxes
(their parent's bound, when the time budget ends first or on Ctrl-C) and the tail term. The lower bound is
||M(Y)||_p at a stored witness Y, recomputed in float64.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ... import interval as iv
from ..._memory import retain_freed_memory
from ..closed_form._dimension_reduction import embed, reduced_upper, reduces
from ._domain import Domain, cluster_partitions, gap_domain, octant_domain, plane_domain
from ._enclosure import Parametrisation
from ._frontier import Frontier, refine
from ._lower import core_norm, polish, search_lower
from ._mean_value import box_bounds
from ._split import split_bound
from ._tail import tail_bound, tail_bound_lookup, tail_bound_table

DEFAULT_R = 3.5
R_GRID = tuple(1.5 + 0.25 * k for k in range(9))  # 1.5, 1.75, ..., 3.5
"""Cluster radii tried by ``choose_r``."""
SPLIT_MIN_DISTANCE = 1.5
"""Partitions whose groups are at least this far apart get the split bound (``_split``). Measured at
N = 6: partitions at distance 1-1.5 closed at most 0.2% more random boxes than the farther ones alone, and cost 30%
of the split bounds' time."""


@dataclass(frozen=True)
class GlobalL2Result:
    """Outcome of ``global_l2_constant``: ``upper`` is certified (rounded up) when ``complete`` or not; it is
    always a valid upper bound. ``complete`` says whether every box was closed below (1 + tol) * lower."""

    N: int
    d: int
    norm: str
    upper: float
    lower: float
    witness: np.ndarray
    seconds: float
    boxes: int
    complete: bool
    r: float
    tail: float
    method: str
    details: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.upper / self.lower


def domain(N: int, d: int, norm: str, r: float) -> Domain:
    """The search domain for (N, d, norm); see ``_domain``."""
    if d == 1:
        return gap_domain(N, r)
    if d == 2 and norm == "2":
        return plane_domain(N, r)
    if d >= 2 and norm == "inf":
        return octant_domain(N, d, r)
    raise ValueError(f"global branch and bound in the 2-norm is implemented for d in (1, 2), and for d >= N through "
                     f"the dimension reduction to d = N - 1; got N = {N}, d = {d}")


def choose_r(N: int, d: int, norm: str, best_smaller: float, lower: float, tol: float) -> float:
    """The smallest radius r in R_GRID whose tail term max_s c_p(s) + eps_p(r, N, d) is at most lower (1 + tol / 2),
    so that it stays below the closing threshold; DEFAULT_R if none is. A smaller r shrinks the domain of
    r-connected configurations the branch and bound must cover (gaps, or coordinates, up to r or (N - 1) r)."""
    for r in R_GRID:
        if best_smaller + tail_bound(r, N, d, norm) <= lower * (1.0 + 0.5 * tol):
            return r
    return DEFAULT_R


def split_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str, distances: np.ndarray,
                 labels: np.ndarray, smaller: dict[int, float]) -> np.ndarray:
    """The smallest split bound (``_split``) over the partitions of ``cluster_partitions`` whose groups are
    at least SPLIT_MIN_DISTANCE apart (inf where none is)."""
    best = np.full(lo.shape[0], np.inf)
    for k in range(distances.shape[1]):
        new = distances[:, k] >= SPLIT_MIN_DISTANCE
        if k > 0:
            new &= distances[:, k] < distances[:, k - 1]  # same threshold, same partition
        if new.any():
            best[new] = np.minimum(best[new], split_bound(lo[new], hi[new], par, norm, labels[new, k], smaller))
    return best


@dataclass(frozen=True)
class BoxSetting:
    """What ``evaluate_boxes`` needs besides the boxes: the domain, the norm, the tail radius r, whether to use
    the Taylor form and the split bounds, the certified constants c_p(s) for s < N, their maximum and the tail table."""

    domain: Domain
    norm: str
    r: float
    second_order: bool
    third_order: bool
    split: bool
    smaller: dict[int, float]
    best_smaller: float
    table: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class BoxEvaluation:
    """The boxes of a batch that are still open after their cheap bounds, with their bounds (``ub``), the norm at
    their centres (``centre_norm``, for the lower bound) and per-axis split scores; ``closed_max`` is the largest
    bound of the boxes the split / tail bounds closed (-inf if none), ``evaluated`` the number of boxes bounded."""

    lo: np.ndarray
    hi: np.ndarray
    ub: np.ndarray
    centre_norm: np.ndarray
    scores: np.ndarray
    closed_max: float
    evaluated: int

    @staticmethod
    def concatenate(parts: list["BoxEvaluation"]) -> "BoxEvaluation":
        return BoxEvaluation(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                               ("lo", "hi", "ub", "centre_norm", "scores")),
                             max(p.closed_max for p in parts), sum(p.evaluated for p in parts))


def evaluate_boxes(lo: np.ndarray, hi: np.ndarray, parent_ub: np.ndarray, threshold: float,
                   setting: BoxSetting) -> BoxEvaluation:
    """Certified bounds on max ||M||_p over boxes (B, L), each also capped by its parent's bound.

    Boxes covered by a symmetric image, or by the tail term (r_box >= r), are dropped. Then the split bounds and the
    tail bound with r_box; boxes they bring to at most ``threshold`` are closed at once, and the others also get the
    mean-value / Taylor bounds of ``box_bounds`` (the smallest bound is kept).
    """
    dom, norm, par = setting.domain, setting.norm, setting.domain.par
    keep = ~dom.symmetry_drop(lo, hi)
    distances, labels = cluster_partitions(par, lo, hi)
    keep &= distances[:, 0] < setting.r  # not r-connected anywhere: covered by the tail term
    lo, hi, parent_ub, distances, labels = lo[keep], hi[keep], parent_ub[keep], distances[keep], labels[keep]
    L = lo.shape[1]
    if lo.shape[0] == 0:
        empty = np.zeros((0, L))
        return BoxEvaluation(empty, empty, np.zeros(0), np.zeros(0), empty, -np.inf, 0)
    # groups far apart in every configuration of the box: the split bound of each such partition (cheap, so it goes
    # first: boxes it closes skip the Taylor / mean-value forms), and the tail bound with r_box
    split = np.full(lo.shape[0], np.inf)
    if setting.split:
        split = split_bounds(lo, hi, par, norm, distances, labels, setting.smaller)
    split = np.minimum(split, iv.round_up(setting.best_smaller + tail_bound_lookup(setting.table, distances[:, 0])))
    split = np.minimum(split, parent_ub)
    evaluated = lo.shape[0]
    closed = split <= threshold
    closed_max = float(split[closed].max()) if closed.any() else -np.inf
    lo, hi, split = lo[~closed], hi[~closed], split[~closed]
    if lo.shape[0] == 0:
        empty = np.zeros((0, L))
        return BoxEvaluation(empty, empty, np.zeros(0), np.zeros(0), empty, closed_max, evaluated)
    ub, centre_norm, scores = box_bounds(lo, hi, par, norm, setting.second_order, threshold, setting.third_order)
    ub = np.minimum(ub, split)
    return BoxEvaluation(lo, hi, ub, centre_norm, scores, closed_max, evaluated)


@dataclass(frozen=True)
class SearchPlan:
    """Everything fixed during one branch and bound for c_p(N, d) (MATH.md section 7): the closing tolerance, the
    cluster radius r, eps_p(r, N, d), the tail term max_{s < N} c_p(s) + eps_p(r) rounded up (``tail_total``), the
    box setting (domain, norm, forms, c_p(s) for s < N) and a description of the method."""

    N: int
    d: int
    norm: str
    tol: float
    r: float
    eps: float
    tail_total: float
    setting: BoxSetting
    method: str


def plan_search(N: int, d: int, norm: str, smaller: dict[int, float], lower: float, *, r: float | None, tol: float,
                second_order: bool, third_order: bool, split: bool) -> SearchPlan:
    """The plan of one branch and bound, given certified c_p(s, d) for 1 <= s < N (``smaller``) and the attained
    lower bound; r None picks the smallest adequate radius (``choose_r``), which depends on ``lower``."""
    missing = [s for s in range(1, N) if s not in smaller]
    if missing:
        raise ValueError(f"smaller must hold c_p(s, d) for s = 1..{N - 1}; missing s = {missing}")
    best_smaller = max(smaller[s] for s in range(1, N))
    if r is None:
        r = choose_r(N, d, norm, best_smaller, lower, tol)
    eps = tail_bound(r, N, d, norm)
    tail_total = float(iv.round_up(np.array(best_smaller + eps)))
    dom = domain(N, d, norm, r)
    table = tail_bound_table(N, d, norm, r)
    setting = BoxSetting(dom, norm, float(r), second_order, third_order and second_order, split,
                         {s: smaller[s] for s in range(1, N)}, best_smaller, table)
    forms = "mean-value and second-order Taylor forms" if second_order else "mean-value form"
    if second_order and third_order:
        forms = "mean-value and third-order Taylor forms"
    if split:
        forms += f", split bounds for groups >= {SPLIT_MIN_DISTANCE} apart"
    method = (f"branch and bound, {forms} with vertex enumeration, outward-rounded intervals; "
              f"tail bound r = {r}; {dom.description}")
    return SearchPlan(N, d, norm, float(tol), r, eps, tail_total, setting, method)


def reduced_result(base: GlobalL2Result, d: int, start: float) -> GlobalL2Result:
    """c_2(N, d), d >= N, from the result ``base`` for c_2(N, N - 1) (``_dimension_reduction``): the upper bound
    max(base.upper, sqrt((N + 1) / 2)) rounded up, the lower bound and witness of ``base`` embedded in R^d."""
    witness = embed(base.witness, d)
    return dataclasses.replace(
        base, d=d, upper=reduced_upper(base.upper, base.N), lower=core_norm(witness, base.norm), witness=witness,
        seconds=time.perf_counter() - start,
        method=(f"dimension reduction (proofs/dimension_reduction.py): c_2(N, d) <= max(c_2(N, N - 1), "
                f"sqrt((N + 1) / 2)) for d >= N; c_2({base.N}, {base.d}) by {base.method}"),
        details={**base.details, "reduced_from": base.d})


def _ignore_interrupt() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent, which stops the workers


def _pool(workers: int):
    """A pool of forked worker processes, or None for ``workers == 1``."""
    if workers == 1:
        return None
    return multiprocessing.get_context("fork").Pool(workers, initializer=_ignore_interrupt)


def global_l2_constant(N: int, d: int, norm: str, *, r: float | None = None, tol: float = 0.005,
                       time_budget: float = 600.0, smaller: dict[int, float] | None = None, batch: int = 256,
                       lower_restarts: int = 24, seed: int = 0, second_order: bool = True,
                       third_order: bool = False, split: bool = True,
                       workers: int = 1,
                       progress: Callable[[str], None] | None = None) -> GlobalL2Result:
    """Certified upper bound (and attained lower bound) on c_p(N, d) = sup_Y ||M(Y)||_p.

    ``smaller`` maps s -> a certified upper bound on c_p(s, d) for 2 <= s < N (c_p(1, d) = 1); missing entries
    are computed recursively with the same settings. ``time_budget`` is in seconds of wall time for this N.
    ``r`` is the cluster radius of the tail bound; None picks the smallest adequate one (``choose_r``).
    ``second_order=False`` leaves out the Taylor bound (first-order forms only), ``split=False`` the split bounds
    (both for benchmarks). ``third_order=True`` uses the third-order Taylor bound (``third_order_bounds``) instead
    of the second-order one: fewer boxes, more time per box (benchmarks/box_bounds.py).
    ``workers`` > 1 evaluates each batch (``batch * workers`` boxes) in that many forked processes; the boxes, their
    bounds and the certified value do not depend on it, only the wall time (and, through the larger batches, the
    order in which boxes are refined).
    Ctrl-C (KeyboardInterrupt) during the branch and bound ends it early with the bound certified so far
    (``complete`` False, ``details["interrupted"]`` True); during the lower-bound search or the recursion it
    propagates.
    """
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    if not (isinstance(N, int) and N >= 2):
        raise ValueError(f"N must be an integer >= 2, got {N!r}")
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    retain_freed_memory()  # process-wide: freed temporaries stay in the heap (see certify/_memory.py)
    start = time.perf_counter()
    if reduces(N, d, norm):  # c_2(N, d) from c_2(N, N - 1) (closed_form/_dimension_reduction.py)
        base = global_l2_constant(N, N - 1, norm, r=r, tol=tol, time_budget=time_budget, batch=batch,
                                  lower_restarts=lower_restarts, seed=seed, second_order=second_order,
                                  third_order=third_order, split=split, workers=workers, progress=progress)
        return reduced_result(base, d, start)
    domain(N, d, norm, DEFAULT_R)  # a ValueError now, before the recursion, where no domain covers (N, d, norm)
    smaller = dict(smaller or {})
    smaller[1] = 1.0
    for s in range(2, N):
        if s not in smaller:
            smaller[s] = global_l2_constant(s, d, norm, r=r, tol=tol, time_budget=time_budget, smaller=smaller,
                                            batch=batch, seed=seed, second_order=second_order,
                                            third_order=third_order,
                                            split=split, workers=workers).upper
    lower, witness = search_lower(N, d, norm, restarts=lower_restarts, seed=seed)
    plan = plan_search(N, d, norm, smaller, lower, r=r, tol=tol, second_order=second_order,
                       third_order=third_order, split=split)
    r, eps, tail_total, setting, method = plan.r, plan.eps, plan.tail_total, plan.setting, plan.method
    dom = setting.domain
    par = dom.par
    # open boxes, processed best first (largest bound first), so that the certified value falls steadily
    frontier = Frontier.root(dom.lo, dom.hi)
    closed_max = -np.inf
    boxes = 0
    last_report = start
    timed_out = interrupted = False
    in_flight = -np.inf  # the largest parent bound of the batch being processed (not in the frontier meanwhile)
    pool = _pool(workers)
    batch = batch * workers
    try:
        while frontier.size:
            if time.perf_counter() - start > time_budget:
                timed_out = True
                break
            in_flight = frontier.max  # set before the batch leaves the frontier, cleared once it is back
            taken, frontier = frontier.take(batch)
            lo, hi, parent_ub = taken.lo, taken.hi, taken.ub
            threshold = lower * (1.0 + tol)
            if pool is None:
                out = evaluate_boxes(lo, hi, parent_ub, threshold, setting)
            else:
                chunks = [c for c in np.array_split(np.arange(lo.shape[0]), workers) if c.size]
                out = BoxEvaluation.concatenate(pool.starmap(
                    evaluate_boxes, [(lo[c], hi[c], parent_ub[c], threshold, setting) for c in chunks]))
            boxes += out.evaluated
            closed_max = max(closed_max, out.closed_max)
            step = refine(out.lo, out.hi, out.ub, out.centre_norm, out.scores, lower, witness, par, norm, tol)
            lower, witness = step.lower, step.witness
            closed_max = max(closed_max, step.closed_max)
            if step.children.size:
                frontier = Frontier.concatenate([frontier, step.children])
            in_flight = -np.inf
            if progress is not None and time.perf_counter() - last_report > 10.0:
                last_report = time.perf_counter()
                progress(f"N={N} d={d} p={norm}: {boxes} boxes, {frontier.size} open, lower {lower:.6f}, "
                         f"closed max {closed_max:.6f}, open max {frontier.max:.6f}, "
                         f"{time.perf_counter() - start:.0f} s")
    except KeyboardInterrupt:  # Ctrl-C: keep what is certified so far (the batch in flight keeps its parents' bound)
        interrupted = True
    finally:
        if pool is not None:
            pool.terminate()
    open_max = max(frontier.max, in_flight)
    upper = max(closed_max, open_max, tail_total)
    if not interrupted:  # after Ctrl-C, return at once with the lower bound found so far
        lower, witness = polish(witness, norm)
    seconds = time.perf_counter() - start
    return GlobalL2Result(N=N, d=d, norm=norm, upper=float(upper), lower=float(lower), witness=witness,
                          seconds=seconds, boxes=boxes, complete=not (timed_out or interrupted), r=r, tail=tail_total,
                          method=method, details={"closed_max": closed_max, "open_max": open_max,
                                                  "eps": eps, "smaller": dict(smaller), "tol": tol,
                                                  "interrupted": interrupted})
