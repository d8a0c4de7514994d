"""Certified local bounds on Lip(F) over a bounded domain by branch and bound over boxes of X (MATH.md section 7).

Over a convex domain Omega, Lip_p(F) = sup_{X in Omega} ||J(X)||_p. Cover Omega by boxes (`_domain`);
on each box B, `_enclosure` gives an interval matrix containing J(X) for every X in B, and its norm is
bounded with proof (`certify.sdp`: the exact row sum for p = inf; min(||J_c|| + ||R||, || |J_c| + R ||) for p = 2,
refined by the SDP relaxation for the largest boxes when N D <= `sdp_max_size`); `_structured` gives a
second, norm-based bound on the same box, and optionally (`vertices=True`, N D <= 8) `_vertex` a third (first-order form, maximised
over the box's vertices); the smallest is kept. So

    Lip_p(F) on Omega <= max over the current leaves of their bound,

whatever the leaves are, as long as they cover Omega: a box is only dropped when it misses Omega. Branch and bound
always splits the leaf with the largest bound (along its widest coordinate), until upper / lower <= tolerance or
the time budget is spent. On Ball(R) only the fundamental domain of token permutations (sorted first coordinates)
and, without query/key biases, of X -> -X is searched (`_domain.shrink`). Lower bounds come from the adversarial ascent plus ||J|| at every box centre
(projected into Omega); the ascent and the matrix-free norm come from `lower_search` (`certify.adversarial`
provides them as `LOCAL_LOWER_SEARCH`: bounds never import the adversarial search). Ctrl-C stops the search and returns the bound of the leaves so far, which is still valid.
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
from ...interval import Interval
from ...jacobian import check_norm, jacobian, jacobian_norm
from ...sdp import MatrixEnclosure, SDPFallbackWarning, baseline_bound, enclosure_norm, inf_norm_bound, magnitude_bound
from .._rounding import Scaled, scaled_norm
from ._domain import initial_box, shrink, split
from ._enclosure import jacobian_enclosure, mean_value_enclosure, numpy_weights
from ._taylor import MEMORY_LIMIT, memory_estimate, taylor_box_bounds
from ._structured import dp_structured_bound, l2_structured_bound, structured_constants
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
"""With the mean-value enclosure and N D <= this, also use the first-order vertex bound (`_vertex`)."""


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
    return min(baseline_bound(enclosure), magnitude_bound(enclosure))


def box_enclosure(boxes: Interval, weights, enclosure: str) -> Interval:
    """J over boxes (..., N, D) by the direct interval evaluation or the mean-value form (intersected with it)."""
    if enclosure == "mean-value":
        return mean_value_enclosure(boxes, weights)
    return jacobian_enclosure(boxes, weights)


def structured_box_bound(boxes: Interval, nw, constants, N: int, norm: str, radius: float | None,
                         scores: bool = True) -> np.ndarray:
    """The norm-based bound of `_structured` per box (2-norm; times sqrt(N D) for the inf-norm);
    scores=False: without the interval softmax (O(N D + N^2) memory)."""
    if nw.kind == "dp":
        value = dp_structured_bound(boxes, nw, constants, radius, scores=scores)
    else:
        value = l2_structured_bound(boxes, nw, constants, N, radius, scores=scores)
    if norm == "inf":
        value = value * math.sqrt(N * nw.D) * (1 + 1e-12)
    return value


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
        sdp_refinements, stopped ("tolerance", "time", "boxes", "interrupted").
    """
    start = time.perf_counter()
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
    w64 = weights.to(torch.float64, "cpu")
    nw = numpy_weights(w64)
    D = w64.D
    if enclosure == "auto":
        enclosure = "mean-value" if N * D <= 16 else "direct"
    use_vertices = vertices and enclosure == "mean-value" and N * D <= VERTEX_COORDINATES
    # memory: estimate before allocating; above the limit take the matrix-free (norm-based) path
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
    use_sdp = norm == "2" and N * D <= sdp_max_size and entrywise
    use_taylor = (taylor and enclosure == "direct" and entrywise
                  and memory_estimate(N, D, 8) <= min(MEMORY_LIMIT, limit))
    constants = structured_constants(nw)
    radius = domain.radius if isinstance(domain, Ball) else None
    symmetric = isinstance(domain, Ball)
    sign = symmetric and w64.b_Q is None and w64.b_K is None
    dense_lower = N * D <= DENSE_LOWER_COORDINATES

    # lower bound: given, or adversarial ascent on a share of the budget
    root = initial_box(domain, N, D)  # validates the domain against (N, D) before any work
    best_lower, witness = 0.0, None
    if lower is None and lower_search is not None:
        try:
            share = max(0.2 * time_budget - (time.perf_counter() - start), 0.05 * time_budget)
            lower = lower_search.lower_bound(w64, N, norm, domain, restarts=8, steps=150, seed=seed, seconds=share)
        except Exception as error:  # the lower bound only steers the search; the upper bound does not use it
            warnings.warn(f"adversarial lower bound failed ({error!r}); using sampled inputs only", stacklevel=2)
            lower = None
    if lower is not None:
        best_lower = float(lower.value)
        witness = lower.details.get("witness")

    def lower_at(X: np.ndarray) -> None:
        nonlocal best_lower, witness
        Xp = _project(X, domain)
        if dense_lower:
            values = jacobian_norm(jacobian(torch.from_numpy(Xp), w64), norm)
            top = int(values.argmax())
            value = float(values[top])
        elif lower_search is not None:  # matrix-free and time-limited, one point (a Rayleigh value or a row subset)
            top = 0
            value = lower_search.attained_norm(torch.from_numpy(Xp[0]), w64, norm, iterations=3,
                                               seconds=0.02 * time_budget)[0]
        else:
            return
        if value > best_lower:
            best_lower, witness = value, Xp[top].tolist()

    search_start = time.perf_counter()
    deadline = start + time_budget
    counter = itertools.count()
    heap: list[tuple[float, int, bool, Interval]] = []  # (-bound, tie, sdp_refined, box)
    boxes = 0
    sdp_refinements = 0
    batch = 32 if N * D <= 16 else 8
    batch = max(2, min(batch, int(limit // max(per_box, 1))))  # children per step, within the memory limit
    box_seconds = 0.0  # measured cost of one box evaluation

    def evaluate(children: list[Interval], parent_bounds: list[float]) -> None:
        nonlocal boxes, box_seconds
        began = time.perf_counter()
        boxes += len(children)
        stacked = Interval(np.stack([c.lo for c in children]), np.stack([c.hi for c in children]))
        shrunk, keep = shrink(stacked, domain, symmetric, sign)
        if not np.any(keep):
            return
        kept = Interval(shrunk.lo[keep], shrunk.hi[keep])
        parents = np.asarray(parent_bounds)[keep]
        J = None
        if use_vertices:
            vertex, J = vertex_bounds(kept, nw, norm)
        elif use_taylor:  # the root gets the exact-slope seeds when they are cheap; later boxes the directional one
            vertex, J = taylor_box_bounds(kept, nw, norm, seeds="auto" if boxes == 1 else "directional")
        else:
            vertex = np.full(kept.shape[0], math.inf)
            if entrywise:
                J = box_enclosure(kept, nw, enclosure)
        structured = structured_box_bound(kept, nw, constants, N, norm, radius, scores)
        if dense_lower:
            lower_at(0.5 * kept.lo + 0.5 * kept.hi)
        for b in range(kept.shape[0]):
            entrywise_bound = enclosure_bound(J[b], norm) if J is not None else math.inf
            bound = min(entrywise_bound, float(vertex[b]), float(structured[b]), float(parents[b]))
            heapq.heappush(heap, (-bound, next(counter), False, kept[b]))
        box_seconds = (time.perf_counter() - began) / len(children)

    progress = None
    if not quiet:
        progress = progress_bar(total=None, desc="local bnb", unit="box", leave=False)
    stopped = "time"
    popped: list = []
    root_done = False
    try:
        generator = np.random.default_rng(seed)
        lower_at(generator.uniform(root.lo, root.hi, size=(64 if dense_lower else 1, N, D)))
        evaluate([root], [math.inf])
        root_done = True
        while heap:
            if -heap[0][0] <= best_lower * tolerance:
                stopped = "tolerance"
                break
            now = time.perf_counter()
            if now > deadline:
                stopped = "time"
                break
            if max_boxes is not None and boxes >= max_boxes:
                stopped = "boxes"
                break
            if use_sdp and not heap[0][2] and now > search_start + 0.5 * (deadline - search_start):
                popped = [heapq.heappop(heap)]
                neg_bound, _, _, box = popped[0]
                J = box_enclosure(box, nw, enclosure)
                limit_s = max(1.0, deadline - now)
                value = min(-neg_bound, enclosure_bound(J, norm, sdp=True, time_limit=limit_s))
                sdp_refinements += 1
                heapq.heappush(heap, (-value, next(counter), True, box))
                popped = []
                continue
            pairs = max(1, min(batch // 2, len(heap)))
            if now + box_seconds * 2 * pairs > deadline:  # the measured cost of this batch would overrun
                pairs = int((deadline - now) / max(2 * box_seconds, 1e-9))
                if pairs < 1:
                    stopped = "time"
                    break
            popped = [heapq.heappop(heap) for _ in range(min(pairs, len(heap)))]
            children, parents = [], []
            for neg_bound, _, _, box in popped:
                for child in split(box):
                    children.append(child)
                    parents.append(-neg_bound)
            evaluate(children, parents)
            popped = []
            if progress is not None:
                progress.update(len(children))
                progress.set_postfix(upper=f"{-heap[0][0]:.5g}" if heap else "-", lower=f"{best_lower:.5g}")
    except KeyboardInterrupt:
        stopped = "interrupted"
        for item in popped:
            heapq.heappush(heap, item)
    finally:
        if progress is not None:
            progress.close()
    if not root_done:  # interrupted before the first box was bounded: nothing is certified beyond infinity
        upper = math.inf
    else:
        upper = -heap[0][0] if heap else 0.0
        if not heap:
            stopped = "exhausted"
    if root_done and not math.isfinite(upper):
        raise InvalidInputError(f"the local branch and bound ended at {upper}: float64 overflowed for this layer")
    ratio = upper / best_lower if best_lower > 0 else math.inf
    worst = None
    if heap:  # the centre of the leaf with the largest bound, in the domain: a start for `lower_bound(starts=...)`
        box = heap[0][3]
        worst = _project((0.5 * box.lo + 0.5 * box.hi)[None], domain)[0].tolist()
    ran = "; ".join(parts) if parts else "entrywise enclosure and structured bound on every box"
    return Certificate(
        value=float(upper),
        kind="upper",
        certified=True,
        method="local-bnb",
        scope=domain.scope,
        norm=norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=f"branch and bound over boxes of X: upper / lower = {ratio:.4f} after {boxes} boxes ({stopped}); "
                f"{ran}",
        details={
            "lower": best_lower,
            "witness": witness,
            "ratio": ratio,
            "boxes": boxes,
            "leaves": len(heap),
            "sdp_refinements": sdp_refinements,
            "enclosure": enclosure if entrywise else "skipped",
            "entrywise": entrywise,
            "interval_scores": scores,
            "memory_limit": limit,
            "entrywise_bytes": entrywise_bytes,
            "parts": parts,
            "worst_box_centre": worst,
            "stopped": stopped,
        },
    )
