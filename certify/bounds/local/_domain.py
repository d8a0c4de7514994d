"""Covering a local domain by boxes of inputs X (N x D), and shrinking boxes to the domain (MATH.md section 7).

- `Ball(R)` (every token ||x_i||_2 <= R): the first box is [-R, R]^D per token; a box is shrunk with the ball
  constraint: if m_e = min |x_e| over the box, every point of the box inside the ball has
  |x_e| <= sqrt(R^2 - sum_{e' != e} m_e'^2), and the box misses the ball when sum_e m_e^2 > R^2.
- `EpsBall(X0, eps, p)`: the first box is X0 +- eps. For p = "inf" that is the domain; for p = "2" the same shrinking
  applies to vec(X - X0) as one group.

Floating point: the shrunk ends are rounded outward (relative 1e-12, far above the few roundings involved), and a
box is discarded only when sum m_e^2 exceeds R^2 by that relative margin, so no point of the domain is lost.
"""

from __future__ import annotations

import numpy as np
import torch

from ..._domain import Ball, Domain, EpsBall, Global
from ..._errors import InvalidInputError
from ...interval import Interval, round_down, round_up

_REL = 1e-12


def initial_box(domain: Domain, N: int, D: int) -> Interval:
    """A box (N, D) containing the domain."""
    if isinstance(domain, Ball):
        R = float(round_up(domain.radius))
        return Interval(np.full((N, D), -R), np.full((N, D), R))
    if isinstance(domain, EpsBall):
        X0 = domain.center.detach().to(torch.float64).cpu().numpy()
        if X0.shape != (N, D):
            raise InvalidInputError(f"the eps-ball centre X0 must have shape (N, D) = {(N, D)}, got {X0.shape}")
        eps = float(round_up(domain.eps))
        return Interval(round_down(X0 - eps), round_up(X0 + eps))
    if isinstance(domain, Global):
        raise InvalidInputError("a local bound needs a bounded domain: Ball(R) or EpsBall(X0, eps)")
    raise InvalidInputError(f"unknown domain {domain!r}")


def _shrink_group(lo: np.ndarray, hi: np.ndarray, centre: np.ndarray, radius: float):
    """Shrink boxes to a Euclidean ball of `radius` around `centre`, grouping over the last axis.

    Returns (lo, hi, empty) with `empty` True for groups whose box misses the ball.
    """
    a, b = lo - centre, hi - centre
    m = np.where((a <= 0) & (b >= 0), 0.0, np.minimum(np.abs(a), np.abs(b)))
    m2 = m * m
    total = m2.sum(axis=-1, keepdims=True)
    empty = (total * (1 - _REL)).squeeze(-1) > radius * radius * (1 + _REL)
    rest = np.maximum(radius * radius - (total - m2) * (1 - _REL), 0.0)
    bound = np.sqrt(rest) * (1 + _REL) + 1e-300
    return np.maximum(lo, round_down(centre - bound)), np.minimum(hi, round_up(centre + bound)), empty


def _fundamental(lo: np.ndarray, hi: np.ndarray, sign: bool) -> tuple[np.ndarray, np.ndarray]:
    """Cut boxes (B, N, D) to the fundamental domain of token permutations (and of X -> -X when `sign`):
    x_{0,0} <= x_{1,0} <= ... <= x_{N-1,0}, and x_{0,0} + x_{N-1,0} >= 0. Only float comparisons and negations
    (exact), so nothing is lost to rounding."""
    lo, hi = lo.copy(), hi.copy()
    lo[:, :, 0] = np.maximum.accumulate(lo[:, :, 0], axis=1)
    hi[:, :, 0] = np.minimum.accumulate(hi[:, ::-1, 0], axis=1)[:, ::-1]
    if sign:
        lo[:, -1, 0] = np.maximum(lo[:, -1, 0], -hi[:, 0, 0])
        lo[:, 0, 0] = np.maximum(lo[:, 0, 0], -hi[:, -1, 0])
    return lo, hi


def shrink(boxes: Interval, domain: Domain, symmetric: bool = False, sign: bool = False) -> tuple[Interval, np.ndarray]:
    """Boxes (B, N, D) cut down to (boxes containing) their intersection with the domain, and a mask (B,) of the
    boxes that meet the domain (the others are to be dropped; their cut-down ends are meaningless).

    symmetric: also cut to the fundamental domain of token permutations (valid when the domain and ||J(X)|| are
    invariant under permuting tokens: Ball(R), any attention layer here, since J(pi X) = (pi x I) J(X) (pi x I)^T);
    sign: and of X -> -X (valid when F(-X) = -F(X) + const, i.e. no query or key biases; then J(-X) = J(X)).
    """
    B = boxes.shape[0]
    if isinstance(domain, Ball):
        lo, hi, empty = _shrink_group(boxes.lo, boxes.hi, np.zeros_like(boxes.lo), domain.radius)
        if symmetric:
            lo, hi = _fundamental(lo, hi, sign)
        keep = ~np.any(empty, axis=-1) & ~np.any(lo > hi, axis=(-2, -1))
    elif isinstance(domain, EpsBall) and domain.p == "2":
        X0 = domain.center.detach().to(torch.float64).cpu().numpy().reshape(1, -1)
        lo, hi, empty = _shrink_group(boxes.lo.reshape(B, -1), boxes.hi.reshape(B, -1), X0, domain.eps)
        lo, hi = lo.reshape(boxes.shape), hi.reshape(boxes.shape)
        keep = ~empty & ~np.any(lo > hi, axis=(-2, -1))
    else:
        return boxes, np.ones(B, dtype=bool)
    hi = np.where(keep[:, None, None], hi, np.maximum(lo, hi))
    return Interval(lo, hi), keep


def split(box: Interval) -> tuple[Interval, Interval]:
    """Bisect the box along its widest coordinate."""
    width = box.hi - box.lo
    k = int(np.argmax(width))
    index = np.unravel_index(k, box.shape)
    mid = 0.5 * box.lo[index] + 0.5 * box.hi[index]
    left_hi = box.hi.copy()
    left_hi[index] = mid
    right_lo = box.lo.copy()
    right_lo[index] = mid
    return Interval(box.lo, left_hi), Interval(right_lo, box.hi)
