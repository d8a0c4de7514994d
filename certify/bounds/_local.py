"""Certified local bounds on Lip(F) over a bounded domain by branch and bound over boxes of X (MATH.md section 7).

Over a convex domain Omega, Lip_p(F) = sup_{X in Omega} ||J(X)||_p. Cover Omega by boxes (`_local_domain`);
on each box B, `_local_enclosure` gives an interval matrix containing J(X) for every X in B, and its norm is
bounded with proof (`certify.sdp`: the exact row sum for p = inf; min(||J_c|| + ||R||, || |J_c| + R ||) for p = 2,
refined by the SDP relaxation for the largest boxes when N D <= `sdp_max_size`); `_local_structured` gives a
second, norm-based bound on the same box, and optionally (`vertices=True`, N D <= 8) `_local_vertex` a third (first-order form, maximised
over the box's vertices); the smallest is kept. So

    Lip_p(F) on Omega <= max over the current leaves of their bound,

whatever the leaves are, as long as they cover Omega: a box is only dropped when it misses Omega. Branch and bound
always splits the leaf with the largest bound (along its widest coordinate), until upper / lower <= tolerance or
the time budget is spent. On Ball(R) only the fundamental domain of token permutations (sorted first coordinates)
and, without query/key biases, of X -> -X is searched (`_local_domain.shrink`). Lower bounds come from the adversarial ascent plus ||J|| at every box centre
(projected into Omega). Ctrl-C stops the search and returns the bound of the leaves so far, which is still valid.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import warnings

import numpy as np
import torch

from .._domain import Ball, Domain, EpsBall
from .._errors import InvalidInputError
from .._result import Certificate
from ..attention import AttentionWeights, check_tokens
from ..interval import Interval
from ..jacobian import check_norm, jacobian, jacobian_norm
from ..sdp import MatrixEnclosure, SDPFallbackWarning, baseline_bound, enclosure_norm, inf_norm_bound, magnitude_bound
from ._rounding import round_up
from ._local_domain import initial_box, shrink, split
from ._local_enclosure import jacobian_enclosure, mean_value_enclosure, numpy_weights
from ._local_taylor import MEMORY_LIMIT, memory_estimate, taylor_box_bounds
from ._local_structured import dp_structured_bound, l2_structured_bound, structured_constants
from ._local_vertex import vertex_bounds

ENCLOSURES: tuple[str, ...] = ("auto", "direct", "mean-value")
VERTEX_COORDINATES = 8
"""With the mean-value enclosure and N D <= this, also use the first-order vertex bound (`_local_vertex`)."""


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


def structured_box_bound(boxes: Interval, nw, constants, N: int, norm: str, radius: float | None) -> np.ndarray:
    """The norm-based bound of `_local_structured` per box (2-norm; times sqrt(N D) for the inf-norm)."""
    if nw.kind == "dp":
        value = dp_structured_bound(boxes, nw, constants, radius)
    else:
        value = l2_structured_bound(boxes, nw, constants, N, radius)
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
) -> Certificate:
    """Certified upper bound on Lip_norm(F) over a local domain, by branch and bound (module docstring).

    Args:
        weights: a DP ("dp") or tied L2 ("l2") layer.
        N: number of tokens.
        norm: "2" or "inf".
        domain: `Ball(R)` or `EpsBall(X0, eps, p)`.
        time_budget: seconds for the branch and bound; the adversarial lower bound (when `lower` is None) gets
            0.2 * time_budget more (it may overrun on its first call, which warms up torch).
        tolerance: stop once upper / lower <= tolerance.
        enclosure: "direct", "mean-value" or "auto" (mean-value when N D <= 16).
        sdp_max_size: use the SDP on the leading leaves (2-norm) when N D is at most this; 0 disables it.
        lower: a known lower bound (kind "lower", attained in the domain); else the adversarial ascent runs.
        max_boxes: stop after this many box evaluations (for tests).
        vertices: also use the first-order vertex bound (`_local_vertex`) when N D <= 8 and the enclosure is
            "mean-value" (tight on small boxes, useless on large ones; off by default as it halves throughput).
        quiet: no progress bar.
        seed: for the adversarial ascent.
        taylor: with the direct enclosure, also bound each box by the first-order Taylor form about its midpoint
            (`_local_taylor`: asymptotically exact as boxes shrink; its value part is the direct enclosure).

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
    w64 = weights.to(torch.float64, "cpu")
    nw = numpy_weights(w64)
    D = w64.D
    if enclosure == "auto":
        enclosure = "mean-value" if N * D <= 16 else "direct"
    use_sdp = norm == "2" and N * D <= sdp_max_size
    use_vertices = vertices and enclosure == "mean-value" and N * D <= VERTEX_COORDINATES
    use_taylor = taylor and enclosure == "direct" and memory_estimate(N, D, 8) <= MEMORY_LIMIT
    constants = structured_constants(nw)
    radius = domain.radius if isinstance(domain, Ball) else None
    symmetric = isinstance(domain, Ball)
    sign = symmetric and w64.b_Q is None and w64.b_K is None

    # lower bound: given, or adversarial ascent on a share of the budget
    root = initial_box(domain, N, D)  # validates the domain against (N, D) before any work
    best_lower, witness = 0.0, None
    if lower is None:
        from ..adversarial import lower_bound

        try:
            lower = lower_bound(w64, N, norm, domain, restarts=8, steps=150, seed=seed, seconds=0.2 * time_budget)
        except Exception as error:  # the lower bound only steers the search; the upper bound does not use it
            warnings.warn(f"adversarial lower bound failed ({error!r}); using sampled inputs only", stacklevel=2)
            lower = None
    if lower is not None:
        best_lower = float(lower.value)
        witness = lower.details.get("witness")

    def lower_at(X: np.ndarray) -> None:
        nonlocal best_lower, witness
        Xp = _project(X, domain)
        values = jacobian_norm(jacobian(torch.from_numpy(Xp), w64), norm)
        top = int(values.argmax())
        if float(values[top]) > best_lower:
            best_lower, witness = float(values[top]), Xp[top].tolist()

    search_start = time.perf_counter()
    counter = itertools.count()
    heap: list[tuple[float, int, bool, Interval]] = []  # (-bound, tie, sdp_refined, box)
    boxes = 0
    sdp_refinements = 0
    batch = 32 if N * D <= 16 else 8

    def evaluate(children: list[Interval], parent_bounds: list[float]) -> None:
        nonlocal boxes
        boxes += len(children)
        stacked = Interval(np.stack([c.lo for c in children]), np.stack([c.hi for c in children]))
        shrunk, keep = shrink(stacked, domain, symmetric, sign)
        if not np.any(keep):
            return
        kept = Interval(shrunk.lo[keep], shrunk.hi[keep])
        parents = np.asarray(parent_bounds)[keep]
        if use_vertices:
            vertex, J = vertex_bounds(kept, nw, norm)
        elif use_taylor:  # the root gets the exact-slope seeds when they are cheap; later boxes the directional one
            vertex, J = taylor_box_bounds(kept, nw, norm, seeds="auto" if boxes == 1 else "directional")
        else:
            vertex, J = np.full(kept.shape[0], math.inf), box_enclosure(kept, nw, enclosure)
        structured = structured_box_bound(kept, nw, constants, N, norm, radius)
        lower_at(0.5 * kept.lo + 0.5 * kept.hi)
        for b in range(kept.shape[0]):
            entrywise = enclosure_bound(J[b], norm)
            bound = min(entrywise, float(vertex[b]), float(structured[b]), float(parents[b]))
            heapq.heappush(heap, (-bound, next(counter), False, kept[b]))

    progress = None
    if not quiet:
        from tqdm import tqdm

        progress = tqdm(total=None, desc="local bnb", unit="box", leave=False)
    stopped = "time"
    popped: list = []
    try:
        generator = np.random.default_rng(seed)
        lower_at(generator.uniform(root.lo, root.hi, size=(64, N, D)))
        evaluate([root], [math.inf])
        while heap:
            if -heap[0][0] <= best_lower * tolerance:
                stopped = "tolerance"
                break
            elapsed = time.perf_counter() - search_start
            if elapsed > time_budget:
                stopped = "time"
                break
            if max_boxes is not None and boxes >= max_boxes:
                stopped = "boxes"
                break
            if use_sdp and not heap[0][2] and elapsed > 0.5 * time_budget:
                popped = [heapq.heappop(heap)]
                neg_bound, _, _, box = popped[0]
                J = box_enclosure(box, nw, enclosure)
                limit = max(1.0, time_budget - elapsed)
                value = min(-neg_bound, enclosure_bound(J, norm, sdp=True, time_limit=limit))
                sdp_refinements += 1
                heapq.heappush(heap, (-value, next(counter), True, box))
                popped = []
                continue
            popped = [heapq.heappop(heap) for _ in range(min(batch // 2, len(heap)))]
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
    upper = -heap[0][0] if heap else 0.0
    if not heap:
        stopped = "exhausted"
    ratio = upper / best_lower if best_lower > 0 else math.inf
    return Certificate(
        value=float(upper),
        kind="upper",
        certified=True,
        method="local-bnb",
        scope=domain.scope,
        norm=norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=f"branch and bound over boxes of X: upper / lower = {ratio:.4f} after {boxes} boxes ({stopped})",
        details={
            "lower": best_lower,
            "witness": witness,
            "ratio": ratio,
            "boxes": boxes,
            "leaves": len(heap),
            "sdp_refinements": sdp_refinements,
            "enclosure": enclosure,
            "stopped": stopped,
        },
    )
