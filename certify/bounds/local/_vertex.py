"""First-order bound with vertex enumeration on small boxes (MATH.md section 7, "a mean-value form, with vertex
enumeration"), for boxes X in R^{N x D} with n = N D <= VERTEX_MAX_COORDINATES.

For X in the box with centre c and radius h, and t = X - c (|t_m| <= h_m), entrywise
J(X) = J(c) + sum_m t_m int_0^1 dJ/dX_m(c + tau t) dtau, and the integral lies in the interval tangent T_m(box) of
a forward-mode evaluation over the box (`_dual.Dual`). With float centre values Jc ~ J(c), Tc_m ~ dJ/dX_m(c)
(from a forward-mode evaluation at the point c, whose radii are added to E):

    J(X) = A(t) + E_X,   A(t) = Jc + sum_m t_m Tc_m,
    |E_X| <= E = rad J(c) + sum_m h_m (max |T_m(box) - Tc_m| + rad T_m(c)) + (rounding of A, below).

||A(t)|| is convex in t, so its maximum over the box is attained at one of the 2^n vertices t = s h; hence

    max_X ||J(X)|| <= max_s ||A(s h)|| + ||E||,

where ||E||_2 <= norm2_upper(E) (E >= 0 dominates |E_X|) and ||E||_inf is its largest row sum.

Floating point: A(s h) is formed in float64; each entry is a sum of n + 1 terms, so its error is at most
gamma_{2n+4} (|Jc| + sum_m h_m |Tc_m|), which is added to E. The vertex norms are LAPACK singular values (or exact
row sums for the inf-norm), multiplied by (1 + 1e-9), the stated relative margin of `certify/bounds/_rounding.py`.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...interval import Interval
from ...sdp._floating import gamma, norm2_upper
from ._dual import Dual
from ._enclosure import _Weights, jacobian_enclosure

VERTEX_MAX_COORDINATES = 10


def _mid_rad(x: Interval) -> tuple[np.ndarray, np.ndarray]:
    mid = np.clip(0.5 * x.lo + 0.5 * x.hi, x.lo, x.hi)
    rad = np.nextafter(np.maximum(x.hi - mid, mid - x.lo), np.inf)
    return mid, rad


def vertex_bounds(boxes: Interval, w: _Weights, norm: str) -> tuple[np.ndarray, Interval]:
    """(bounds (B,), direct-and-mean-value enclosure (B, N, D, N, D)) for boxes (B, N, D) with N D small."""
    B, N, D = boxes.shape
    n = N * D
    if n > VERTEX_MAX_COORDINATES:
        raise ValueError(f"vertex enumeration needs N D <= {VERTEX_MAX_COORDINATES}, got {n}")
    over_box = jacobian_enclosure(Dual.seed(boxes), w)
    centre, h = _mid_rad(boxes)
    at_centre = jacobian_enclosure(Dual.seed(Interval(centre, centre)), w)
    h = h.reshape(B, 1, 1, 1, 1, n)
    Jc, Jr = _mid_rad(at_centre.v)
    Tc, Tr = _mid_rad(at_centre.t)
    deviation = np.maximum(np.abs(over_box.t.hi - Tc), np.abs(Tc - over_box.t.lo)) + Tr
    E = Jr + np.sum(h * deviation, axis=-1)
    g = gamma(2 * n + 4)
    E = E + g * (np.abs(Jc) + np.sum(h * np.abs(Tc), axis=-1))
    E = E * (1 + 4 * g) + 1e-300
    # the enclosure from the same forward pass (mean-value form intersected with the direct evaluation)
    spread = np.sum(h * np.maximum(np.abs(over_box.t.lo), np.abs(over_box.t.hi)), axis=-1) * (1 + 4 * g)
    mean_value = Interval(np.maximum(over_box.v.lo, Jc - Jr - spread), np.minimum(over_box.v.hi, Jc + Jr + spread))
    mean_value = Interval(np.minimum(mean_value.lo, mean_value.hi), np.maximum(mean_value.lo, mean_value.hi))
    # vertices
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))  # (V, n)
    Jc2 = Jc.reshape(B, n, n)
    Tc2 = (Tc * h).reshape(B, n, n, n)  # h_m Tc_m
    A = Jc2[:, None] + np.einsum("vm,bklm->bvkl", signs, Tc2)
    E2 = E.reshape(B, n, n)
    if norm == "inf":
        vertex = np.abs(A).sum(axis=-1).max(axis=(-2, -1)) * (1 + 1e-9)
        rest = E2.sum(axis=-1).max(axis=-1) * (1 + 1e-12)
    else:
        vertex = np.linalg.norm(A, ord=2, axis=(-2, -1)).max(axis=-1) * (1 + 1e-9)
        rest = np.array([norm2_upper(E2[b]) for b in range(B)])
    bounds = np.nextafter((vertex + rest) * (1 + 1e-15), np.inf)
    bounds = np.where(np.isfinite(bounds), bounds, np.inf)
    return bounds, mean_value
