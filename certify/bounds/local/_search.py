"""Certified local bounds on Lip(F) over a bounded domain by branch and bound over boxes of X (MATH.md section 7).

Over a convex domain Omega, Lip_p(F) = sup_{X in Omega} ||J(X)||_p. Cover Omega by boxes (`_domain`); on each box
B, `_enclosure` gives an interval matrix containing J(X) for every X in B, and its norm is bounded with proof
(`certify.sdp`: the exact row sum for p = inf; min(||J_c|| + ||R||, || |J_c| + R ||) for p = 2, refined by the SDP
relaxation for the largest boxes when N D <= `sdp_max_size`); `_structured` gives a second, norm-based bound on the
same box, `_taylor` (direct enclosure) or optionally (`vertices=True`, N D <= 8) `_vertex` a third (first-order
form about the midpoint / maximised over the box's vertices), and for DP layers in the inf-norm `_simplex` a fourth
(row sums with every softmax row kept on the simplex: the tightest on wide boxes); the smallest is kept. For DP
layers the entrywise enclosure is also intersected with `_simplex`'s (both norms). So

    Lip_p(F) on Omega <= max over the current leaves of their bound,

whatever the leaves are, as long as they cover Omega: a box is only dropped when it misses Omega. Branch and bound
always splits the leaf with the largest bound (along its widest coordinate), until upper / lower <= tolerance or
the time budget is spent. On Ball(R) only the fundamental domain of token permutations (sorted first coordinates)
and, without query/key biases, of X -> -X is searched (`_domain.shrink`). Lower bounds come from the adversarial
ascent plus ||J|| at every box centre (projected into Omega); the ascent and the matrix-free norm come from
`lower_search` (`certify.adversarial.LOCAL_LOWER_SEARCH`: bounds never import the adversarial search). Ctrl-C stops
the search and returns the bound of the leaves so far, which is still valid.

`local_bound` runs the steps in order: `_check_arguments`, `_set_up` (a frozen `_Plan`: which bounds fit in
memory), `_seed_lower`, `_branch_and_bound` (over a `_Search`: the leaves and the best lower bound) and
`_certificate`.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from ..._domain import Ball, Domain, EpsBall
from ..._errors import InvalidInputError
from ..._memory import gib, memory_limit
from ..._progress import progress_bar
from ..._result import Certificate
from ...attention import AttentionWeights, check_tokens
from ...interval import Interval, intersect
from ...jacobian import check_norm, jacobian, jacobian_norm
from ...sdp import MatrixEnclosure, SDPFallbackWarning, baseline_bound, enclosure_norm, inf_norm_bound, magnitude_bound
from .._rounding import TAU, Scaled, scaled_norm
from ._domain import initial_box, shrink, split
from ._enclosure import _Weights, jacobian_enclosure, mean_value_enclosure, numpy_weights
from ._taylor import MEMORY_LIMIT, interval_norm2_upper, memory_estimate, taylor_box_bounds
from ._simplex import dp_inf_norm_bounds, dp_simplex_jacobian_enclosure
from ._structured import (StructuredConstants, dp_structured_bound, dp_structured_inf_bound, l2_structured_bound,
                          structured_constants)
from ._vertex import vertex_bounds


@dataclasses.dataclass(frozen=True)
class LowerSearch:
    """The lower-bound functions that steer the local branch and bound (the upper bound never uses them).

    lower_bound(weights, N, norm, domain, *, restarts, steps, seed, seconds) -> Certificate (kind "lower", value
    attained in the domain, details["witness"]): the adversarial ascent. attained_norm(X (N, D), weights, norm, *,
    iterations, seconds) -> (value, how): ||J(X)||_norm or a lower bound on it, matrix-free and time-limited.
    `certify.adversarial.LOCAL_LOWER_SEARCH` is the one certify uses.
    """

    lower_bound: Callable[..., Certificate]
    attained_norm: Callable[..., tuple[float, str]]


ENCLOSURES: tuple[str, ...] = ("auto", "direct", "mean-value")
VERTEX_COORDINATES = 8
"""With the mean-value enclosure and N D <= this, also use the first-order vertex bound (`_vertex`)."""
DILATION_MAX = 512
"""Up to this N D the 2-norm of an entrywise enclosure takes `certify.sdp`'s dense bounds (eigenvalue problems of
the 2 N D dilation); above, `_taylor.interval_norm2_upper` (Gram matrix and Collatz-Wielandt: 17 s -> 1.5 s at
N D = 2048, where one box took twice the 10 s budget)."""
CONSTANTS_SHARE = 0.5
"""The structured bound's exact weight norms may use up to this share of `local_bound`'s time budget (then Gram)."""
DENSE_LOWER_COORDINATES = 512
"""Above this N D the lower bounds at box centres use the matrix-free, time-limited `attained_norm` on one point
instead of the dense Jacobians of a batch ((N D)^2 per point: 8 GiB for 64 points at N = D = 64)."""


def enclosure_bytes(N: int, D: int, d: int, kind: str, boxes: int = 1, mean_value: bool = False) -> int:
    """Estimated peak bytes of the entrywise enclosure of J (`box_enclosure`) over ``boxes`` boxes.

    The result is an interval (N, D, N, D) (16 (N D)^2 bytes); the score and covariance intermediates are
    (N, N, N, d) for DP and (N, N, N, d, d) for tied L2. Measured with tracemalloc at N D <= 384 the peak is at most
    6.5 times 16 ((N D)^2 + N^3 d c) (c = 1 DP, d L2); we take 10. The mean-value form carries N D tangents.
    """
    n = N * D
    per_box = 10 * 16 * (n * n + N**3 * d * (1 if kind == "dp" else d))
    return int(boxes * per_box * ((n + 2) if mean_value else 1))


def structured_bytes(N: int, D: int, d: int, boxes: int = 1, scores: bool = True) -> int:
    """Estimated peak bytes of `structured_box_bound` over ``boxes`` boxes: measured <= 3.9 times
    16 (N^2 D + N^3 d) with the interval scores (we take 6), <= 12 times 16 (N D + N^2) without them (we take 16)."""
    if scores:
        return int(boxes * 6 * 16 * (N * N * D + N**3 * d))
    return int(boxes * 16 * 16 * (N * D + N * N))


def enclosure_bound(J: Interval, norm: str, *, sdp: bool = False, time_limit: float | None = None) -> float:
    """Proven upper bound on max ||J||_norm over an interval Jacobian J (N, D, N, D); inf if J is unbounded."""
    N, D = J.shape[:2]
    lo, hi = J.lo.reshape(N * D, N * D), J.hi.reshape(N * D, N * D)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return math.inf
    enclosure = MatrixEnclosure.from_bounds(lo, hi)
    if norm == "inf":
        return inf_norm_bound(enclosure)
    if sdp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SDPFallbackWarning)
            return enclosure_norm(enclosure, "2", method="sdp", time_limit=time_limit).value
    if lo.shape[0] > DILATION_MAX:
        return interval_norm2_upper(enclosure)
    return min(baseline_bound(enclosure), magnitude_bound(enclosure))


def box_enclosure(boxes: Interval, weights, enclosure: str) -> Interval:
    """J over boxes (..., N, D) by the direct interval evaluation or the mean-value form (intersected with it)."""
    if enclosure == "mean-value":
        return mean_value_enclosure(boxes, weights)
    return jacobian_enclosure(boxes, weights)


def structured_box_bound(boxes: Interval, nw, constants, N: int, norm: str, radius: float | None,
                         scores: bool = True) -> np.ndarray:
    """The norm-based bound of `_structured` per box (2-norm; for the inf-norm times sqrt(N D), or for DP
    `dp_structured_inf_bound` where smaller), inf where it is below
    TAU = 2^-900; scores=False: without the interval softmax (O(N D + N^2) memory)."""
    if nw.kind == "dp":
        value = dp_structured_bound(boxes, nw, constants, radius, scores=scores)
    else:
        value = l2_structured_bound(boxes, nw, constants, N, radius, scores=scores)
    if norm == "inf":
        value = value * math.sqrt(N * nw.D) * (1 + 1e-12)
        if nw.kind == "dp":
            value = np.minimum(value, dp_structured_inf_bound(boxes, nw, constants, radius, scores=scores))
    # its float products carry no absolute error term: a value this small may have underflowed (weights of 1e-300
    # gave 0.0 for a Jacobian of 1e-600), so it is not used; the enclosures' norms, outward rounded, decide there
    return np.where(value >= TAU, value, math.inf)


def _project(X: np.ndarray, domain: Domain) -> np.ndarray:
    """Points X (B, N, D) moved into the domain (per-token radial projection for Ball; clipping or radial
    projection around X0 for EpsBall), so ||J|| there is a valid lower bound."""
    if isinstance(domain, Ball):
        norms = np.linalg.norm(X, axis=-1, keepdims=True)
        return X * np.minimum(1.0, 0.999999 * domain.radius / np.maximum(norms, 1e-300))
    X0 = domain.center.detach().to(torch.float64).cpu().numpy()
    delta = X - X0
    if domain.p == "inf":
        return X0 + np.clip(delta, -domain.eps, domain.eps)
    norms = np.linalg.norm(delta.reshape(len(X), -1), axis=-1)[:, None, None]
    return X0 + delta * np.minimum(1.0, 0.999999 * domain.eps / np.maximum(norms, 1e-300))


RANGE_LIMIT = Scaled.of(1.0, 300)
"""Largest radius, weight norm, logit scale or Jacobian scale the float64 branch and bound accepts (2^300 ~ 2e90):
its squares and products of a few such terms stay far below the float64 limit of 2^1024."""


def check_float64_range(weights: AttentionWeights, N: int, domain: Domain) -> None:
    """Refuse (InvalidInputError) a layer and domain whose magnitudes could overflow float64 in the interval
    enclosures: every token norm bound R, weight norm, logit scale R^2 ||W^Q_h|| ||W^K_h|| and Jacobian
    scale ||W^O|| ||W^V|| max(1, ||W^Q|| ||W^K||) (1 + 4 N logit scale) must be <= 2^300 (`Scaled`, so this check
    cannot overflow itself); a product of three such numbers stays below 2^900 < 2^1024."""
    if isinstance(domain, Ball):
        R = Scaled.of(domain.radius)
    else:
        center = domain.center.detach().to(torch.float64)
        move = domain.eps * (math.sqrt(weights.D) if domain.p == "inf" else 1.0)
        R = Scaled.of(float(center.abs().max())) * math.sqrt(weights.D) + Scaled.of(move)
    one = Scaled.of(1.0)

    def augmented(W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return W if b is None else torch.cat([W, b[:, None, :]], dim=1)

    norms = {
        "W^Q": Scaled.max(scaled_norm(M, "2") for M in augmented(weights.W_Q, weights.b_Q)),
        "W^K": Scaled.max(scaled_norm(M, "2") for M in augmented(weights.W_K, weights.b_K)),
        "W^V": scaled_norm(weights.W_V.reshape(-1, weights.d), "2"),
        "W^O": scaled_norm(weights.W_O, "2"),
    }
    query_key = norms["W^Q"] * norms["W^K"]
    logits = R**2 * query_key
    jacobian_scale = norms["W^O"] * norms["W^V"] * Scaled.max([one, query_key]) * (one + logits * float(4 * N))
    for name, value in {"the token norm bound R": R, **{f"||{k}||": v for k, v in norms.items()},
                        "the logit scale R^2 ||W^Q|| ||W^K||": logits, "the Jacobian scale": jacobian_scale}.items():
        if Scaled.max([value, RANGE_LIMIT]) is not RANGE_LIMIT:
            raise InvalidInputError(
                f"{name} is about {float(value):.3g} > 2^300 ~ 2e90: the local branch and bound in float64 "
                "could overflow; rescale the layer or the domain (Lip(c F) = c Lip(F))"
            )


def local_bound(
    weights: AttentionWeights,
    N: int,
    norm: str = "2",
    domain: Domain = Ball(1.0),
    time_budget: float = 10.0,
    *,
    tolerance: float = 1.01,
    enclosure: str = "auto",
    sdp_max_size: int = 32,
    lower: Certificate | None = None,
    max_boxes: int | None = None,
    vertices: bool = False,
    quiet: bool = True,
    seed: int = 0,
    taylor: bool = True,
    lower_search: LowerSearch | None = None,
) -> Certificate:
    """Certified upper bound on Lip_norm(F) over a local domain, by branch and bound (module docstring).

    Args:
        weights: a DP ("dp") or tied L2 ("l2") layer.
        N: number of tokens.
        norm: "2" or "inf".
        domain: `Ball(R)` or `EpsBall(X0, eps, p)`.
        time_budget: seconds for the whole call: the adversarial lower bound (when `lower` is None) gets 20% of
            it, the branch and bound the rest; no batch of boxes starts unless its measured cost fits.
        tolerance: stop once upper / lower <= tolerance.
        enclosure: "direct", "mean-value" or "auto" (mean-value when N D <= 16).
        sdp_max_size: use the SDP on the leading leaves (2-norm) when N D is at most this; 0 disables it.
        lower: a known lower bound (kind "lower", attained in the domain); else the adversarial ascent of
            ``lower_search`` runs.
        max_boxes: stop after this many box evaluations (for tests).
        vertices: also use the first-order vertex bound (`_vertex`) when N D <= 8 and the enclosure is
            "mean-value" (tight on small boxes, useless on large ones; off by default as it halves throughput).
        quiet: no progress bar.
        seed: for the adversarial ascent.
        taylor: with the direct enclosure, also bound each box by the first-order Taylor form about its midpoint
            (`_taylor`: asymptotically exact as boxes shrink; its value part is the direct enclosure).
        lower_search: the adversarial ascent and matrix-free norm (`LowerSearch`;
            `certify.adversarial.LOCAL_LOWER_SEARCH`). None: no ascent, and the lower bound is ||J|| at sampled
            points and box centres when N D <= DENSE_LOWER_COORDINATES (else 0); the upper bound is the same.

    Returns:
        Certificate(kind="upper", certified=True, method="local-bnb"), details: lower, ratio, boxes, leaves,
        sdp_refinements, stopped ("tolerance", "time", "boxes", "interrupted", "exhausted").
    """
    start = time.perf_counter()
    _check_arguments(weights, N, norm, domain, enclosure, time_budget, tolerance)
    plan = _set_up(weights, N, norm, domain, enclosure, sdp_max_size, vertices, taylor,
                   constants_deadline=start + CONSTANTS_SHARE * time_budget)
    root = initial_box(domain, N, plan.weights.D)  # validates the domain against (N, D) before any work
    search = _Search(plan, lower_search, time_budget)
    search.best_lower, search.witness = _seed_lower(plan, lower, lower_search, time_budget, seed, start)
    stopped, root_done = _branch_and_bound(search, root, start + time_budget, tolerance, max_boxes, seed, quiet)
    return _certificate(search, stopped, root_done, start)


def _check_arguments(weights: AttentionWeights, N: int, norm: str, domain: Domain, enclosure: str,
                     time_budget: float, tolerance: float) -> None:
    """Refuse (InvalidInputError) what `local_bound` does not cover, before any work."""
    check_tokens(N)
    check_norm(norm)
    if weights.kind not in ("dp", "l2"):
        raise InvalidInputError(f"local bounds cover kinds 'dp' and 'l2', got {weights.kind!r}")
    if not (isinstance(domain, (Ball, EpsBall))):
        raise InvalidInputError(f"a local bound needs Ball(R) or EpsBall(X0, eps), got {domain!r}")
    if enclosure not in ENCLOSURES:
        raise InvalidInputError(f"enclosure must be one of {ENCLOSURES}, got {enclosure!r}")
    if not (time_budget > 0):
        raise InvalidInputError(f"time_budget must be positive, got {time_budget!r}")
    if tolerance < 1:
        raise InvalidInputError(f"tolerance must be >= 1, got {tolerance!r}")
    check_float64_range(weights, N, domain)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the search computes on every box, fixed before it starts: the layer in float64, the enclosure, and
    which bounds fit in memory (estimated before allocating; above the limit, the matrix-free norm-based path)."""

    weights: AttentionWeights  # float64, CPU
    nw: _Weights
    N: int
    norm: str
    domain: Domain
    enclosure: str
    entrywise: bool  # the (N, D, N, D) enclosure of J fits
    entrywise_bytes: int
    scores: bool  # the interval softmax of the structured bound fits
    memory_limit: int
    parts: tuple[str, ...]  # what was skipped, and why
    use_vertices: bool
    use_sdp: bool
    use_taylor: bool
    use_simplex: bool  # DP: the softmax rows kept on the simplex (`_simplex`): entrywise J, inf-norm row sums
    constants: StructuredConstants
    radius: float | None
    symmetric: bool  # search one fundamental domain of token permutations (Ball)
    sign: bool  # ... and of X -> -X (Ball without query/key biases)
    dense_lower: bool  # lower bounds from dense Jacobians at batches of box centres
    batch: int  # children per step, within the memory limit


def _set_up(weights: AttentionWeights, N: int, norm: str, domain: Domain, enclosure: str, sdp_max_size: int,
            vertices: bool, taylor: bool, constants_deadline: float | None = None) -> _Plan:
    """The `_Plan` of one call: memory estimates (`enclosure_bytes`, `structured_bytes`, `memory_estimate`)
    against `memory_limit()` decide which bounds run; the structured bound's weight norms take the exact form for
    the heads that fit before ``constants_deadline`` (`structured_constants`)."""
    w64 = weights.to(torch.float64, "cpu")
    nw = numpy_weights(w64)
    D = w64.D
    if enclosure == "auto":
        enclosure = "mean-value" if N * D <= 16 else "direct"
    use_vertices = vertices and enclosure == "mean-value" and N * D <= VERTEX_COORDINATES
    limit = memory_limit()
    parts: list[str] = []
    entrywise_bytes = enclosure_bytes(N, D, w64.d, w64.kind, 1, enclosure == "mean-value" or use_vertices)
    entrywise = entrywise_bytes <= limit
    if not entrywise:
        parts.append(f"entrywise enclosure skipped: would need {gib(entrywise_bytes)} per box "
                     f"(limit {gib(limit)}); structured norm bound only")
        use_vertices = False
    scores_bytes = structured_bytes(N, D, w64.d, 1, scores=True)
    scores = scores_bytes <= limit
    if not scores:
        parts.append(f"interval softmax skipped: would need {gib(scores_bytes)} per box; "
                     f"structured bound with logit-range caps")
    per_box = (entrywise_bytes if entrywise else 0) + structured_bytes(N, D, w64.d, 1, scores)
    batch = 32 if N * D <= 16 else 8
    symmetric = isinstance(domain, Ball)
    return _Plan(
        weights=w64, nw=nw, N=N, norm=norm, domain=domain, enclosure=enclosure, entrywise=entrywise,
        entrywise_bytes=entrywise_bytes, scores=scores, memory_limit=limit, parts=tuple(parts),
        use_vertices=use_vertices,
        use_sdp=norm == "2" and N * D <= sdp_max_size and entrywise,
        use_taylor=(taylor and enclosure == "direct" and entrywise
                    and memory_estimate(N, D, 8) <= min(MEMORY_LIMIT, limit)),
        use_simplex=w64.kind == "dp" and entrywise,
        constants=structured_constants(nw, constants_deadline),
        radius=domain.radius if isinstance(domain, Ball) else None,
        symmetric=symmetric,
        sign=symmetric and w64.b_Q is None and w64.b_K is None,
        dense_lower=N * D <= DENSE_LOWER_COORDINATES,
        batch=max(2, min(batch, int(limit // max(per_box, 1)))),
    )


def _seed_lower(plan: _Plan, lower: Certificate | None, lower_search: LowerSearch | None, time_budget: float,
                seed: int, start: float) -> tuple[float, list | None]:
    """(best lower bound, its witness) before the search: the given `lower`, or the adversarial ascent of
    `lower_search` on what is left of 20% of the budget (at least 5%); (0, None) without either or if it fails."""
    if lower is None and lower_search is not None:
        try:
            share = max(0.2 * time_budget - (time.perf_counter() - start), 0.05 * time_budget)
            lower = lower_search.lower_bound(plan.weights, plan.N, plan.norm, plan.domain, restarts=8, steps=150,
                                             seed=seed, seconds=share)
        except Exception as error:  # the lower bound only steers the search; the upper bound does not use it
            warnings.warn(f"adversarial lower bound failed ({error!r}); using sampled inputs only", stacklevel=3)
            lower = None
    if lower is None:
        return 0.0, None
    return float(lower.value), lower.details.get("witness")


@dataclasses.dataclass
class _Search:
    """The state of one branch and bound: the leaves (a heap on -bound), the best attained lower bound and
    the counters. Every leaf bound is certified; the leaves always cover the domain (module docstring)."""

    plan: _Plan
    lower_search: LowerSearch | None
    time_budget: float
    heap: list[tuple[float, int, bool, Interval]] = dataclasses.field(default_factory=list)  # (-bound, tie, sdp, box)
    counter: itertools.count = dataclasses.field(default_factory=itertools.count)
    best_lower: float = 0.0
    witness: list | None = None
    boxes: int = 0
    sdp_refinements: int = 0
    box_seconds: float = 0.0  # measured cost of one box evaluation

    @property
    def upper(self) -> float:
        """The largest leaf bound: a certified bound on Lip over the domain."""
        return -self.heap[0][0]

    def push(self, bound: float, box: Interval, sdp_refined: bool = False) -> None:
        heapq.heappush(self.heap, (-bound, next(self.counter), sdp_refined, box))

    def lower_at(self, X: np.ndarray) -> None:
        """Raise the lower bound to ||J|| at the points X (B, N, D) projected into the domain: dense Jacobians of
        all of them, or (N D > DENSE_LOWER_COORDINATES) `lower_search.attained_norm` at the first, time-limited."""
        plan = self.plan
        Xp = _project(X, plan.domain)
        if plan.dense_lower:
            values = jacobian_norm(jacobian(torch.from_numpy(Xp), plan.weights), plan.norm)
            top = int(values.argmax())
            value = float(values[top])
        elif self.lower_search is not None:  # matrix-free, time-limited, one point (a Rayleigh value or a row subset)
            top = 0
            value = self.lower_search.attained_norm(torch.from_numpy(Xp[0]), plan.weights, plan.norm, iterations=3,
                                                    seconds=0.02 * self.time_budget)[0]
        else:
            return
        if value > self.best_lower:
            self.best_lower, self.witness = value, Xp[top].tolist()

    def evaluate(self, children: list[Interval], parent_bounds: list[float]) -> None:
        """Bound each child box (shrunk to the domain; dropped if it misses it) by the smallest of its entrywise,
        vertex or Taylor, structured and parent bounds, and push it; lower bounds at the centres."""
        plan = self.plan
        began = time.perf_counter()
        self.boxes += len(children)
        stacked = Interval(np.stack([c.lo for c in children]), np.stack([c.hi for c in children]))
        shrunk, keep = shrink(stacked, plan.domain, plan.symmetric, plan.sign)
        if not np.any(keep):
            return
        kept = Interval(shrunk.lo[keep], shrunk.hi[keep])
        parents = np.asarray(parent_bounds)[keep]
        J = None
        if plan.use_vertices:
            vertex, J = vertex_bounds(kept, plan.nw, plan.norm)
        elif plan.use_taylor:  # exact-slope seeds at the root when cheap; later boxes the directional one
            seeds = "auto" if self.boxes == 1 else "directional"
            vertex, J = taylor_box_bounds(kept, plan.nw, plan.norm, seeds=seeds)
        else:
            vertex = np.full(kept.shape[0], math.inf)
            if plan.entrywise:
                J = box_enclosure(kept, plan.nw, plan.enclosure)
        if plan.use_simplex and J is not None:
            J = intersect(J, dp_simplex_jacobian_enclosure(kept, plan.nw))
        structured = structured_box_bound(kept, plan.nw, plan.constants, plan.N, plan.norm, plan.radius, plan.scores)
        if plan.use_simplex and plan.norm == "inf":
            structured = np.minimum(structured, dp_inf_norm_bounds(kept, plan.nw))
        if plan.dense_lower:
            self.lower_at(0.5 * kept.lo + 0.5 * kept.hi)
        for b in range(kept.shape[0]):
            entrywise_bound = enclosure_bound(J[b], plan.norm) if J is not None else math.inf
            self.push(min(entrywise_bound, float(vertex[b]), float(structured[b]), float(parents[b])), kept[b])
        self.box_seconds = (time.perf_counter() - began) / len(children)

    def refine_with_sdp(self, popped: list, time_limit: float) -> None:
        """Re-bound the leading leaf (popped[0]) with the certified SDP norm of its enclosure, and push it back."""
        neg_bound, _, _, box = popped[0]
        J = box_enclosure(box, self.plan.nw, self.plan.enclosure)
        if self.plan.use_simplex:
            J = intersect(J, dp_simplex_jacobian_enclosure(box, self.plan.nw))
        value = min(-neg_bound, enclosure_bound(J, self.plan.norm, sdp=True, time_limit=time_limit))
        self.sdp_refinements += 1
        self.push(value, box, sdp_refined=True)


def _branch_and_bound(search: _Search, root: Interval, deadline: float, tolerance: float, max_boxes: int | None,
                      seed: int, quiet: bool) -> tuple[str, bool]:
    """Split the leaves with the largest bounds (in batches whose measured cost fits the deadline) until
    upper / lower <= tolerance, the deadline, `max_boxes` or Ctrl-C. Returns (why it stopped, whether the root
    box was bounded). In the second half of the time, the leading leaf gets the SDP once (`_Plan.use_sdp`)."""
    plan, heap = search.plan, search.heap
    search_start = time.perf_counter()
    progress = None if quiet else progress_bar(total=None, desc="local bnb", unit="box", leave=False)
    stopped = "time"
    popped: list = []
    root_done = False
    try:
        generator = np.random.default_rng(seed)
        search.lower_at(generator.uniform(root.lo, root.hi, size=(64 if plan.dense_lower else 1, plan.N,
                                                                  plan.weights.D)))
        search.evaluate([root], [math.inf])
        root_done = True
        while heap:
            if search.upper <= search.best_lower * tolerance:
                stopped = "tolerance"
                break
            now = time.perf_counter()
            if now > deadline:
                stopped = "time"
                break
            if max_boxes is not None and search.boxes >= max_boxes:
                stopped = "boxes"
                break
            if plan.use_sdp and not heap[0][2] and now > search_start + 0.5 * (deadline - search_start):
                popped = [heapq.heappop(heap)]
                search.refine_with_sdp(popped, max(1.0, deadline - now))
                popped = []
                continue
            pairs = max(1, min(plan.batch // 2, len(heap)))
            if now + search.box_seconds * 2 * pairs > deadline:  # the measured cost of this batch would overrun
                pairs = int((deadline - now) / max(2 * search.box_seconds, 1e-9))
                if pairs < 1:
                    stopped = "time"
                    break
            popped = [heapq.heappop(heap) for _ in range(min(pairs, len(heap)))]
            children, parents = [], []
            for neg_bound, _, _, box in popped:
                for child in split(box):
                    children.append(child)
                    parents.append(-neg_bound)
            search.evaluate(children, parents)
            popped = []
            if progress is not None:
                progress.update(len(children))
                progress.set_postfix(upper=f"{search.upper:.5g}" if heap else "-", lower=f"{search.best_lower:.5g}")
    except KeyboardInterrupt:
        stopped = "interrupted"
        for item in popped:
            heapq.heappush(heap, item)
    finally:
        if progress is not None:
            progress.close()
    return stopped, root_done


def _certificate(search: _Search, stopped: str, root_done: bool, start: float) -> Certificate:
    """The Certificate of a finished search: the largest leaf bound (inf if interrupted before the root box was
    bounded, 0 if no leaf is left: every box missed the domain), with the lower bound and counters as details."""
    plan, heap = search.plan, search.heap
    if not root_done:  # interrupted before the first box was bounded: nothing is certified beyond infinity
        upper = math.inf
    else:
        upper = search.upper if heap else 0.0
        if not heap:
            stopped = "exhausted"
    if root_done and not math.isfinite(upper):
        raise InvalidInputError(f"the local branch and bound ended at {upper}: float64 overflowed for this layer")
    best_lower = search.best_lower
    ratio = upper / best_lower if best_lower > 0 else math.inf
    worst = None
    if heap:  # the centre of the leaf with the largest bound, in the domain: a start for `lower_bound(starts=...)`
        box = heap[0][3]
        worst = _project((0.5 * box.lo + 0.5 * box.hi)[None], plan.domain)[0].tolist()
    ran = "; ".join(plan.parts) if plan.parts else "entrywise enclosure and structured bound on every box"
    return Certificate(
        value=float(upper),
        kind="upper",
        certified=True,
        method="local-bnb",
        scope=plan.domain.scope,
        norm=plan.norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=f"branch and bound over boxes of X: upper / lower = {ratio:.4f} after {search.boxes} boxes "
                f"({stopped}); {ran}",
        details={
            "lower": best_lower,
            "witness": search.witness,
            "ratio": ratio,
            "boxes": search.boxes,
            "leaves": len(heap),
            "sdp_refinements": search.sdp_refinements,
            "enclosure": plan.enclosure if plan.entrywise else "skipped",
            "entrywise": plan.entrywise,
            "interval_scores": plan.scores,
            "memory_limit": plan.memory_limit,
            "entrywise_bytes": plan.entrywise_bytes,
            "parts": list(plan.parts),
            "worst_box_centre": worst,
            "stopped": stopped,
        },
    )
