"""A proven upper bound on the residual ||g(X) - Y|| = ||X + F(X) - Y|| of tied L2 attention, whatever the dtype the
iteration ran in (MATH.md sections 1 and 2).

F(X) is evaluated in outward-rounded interval arithmetic (`certify.interval`, and `point_einsum` / `l2_scores` of
the local enclosures) from exact float64 copies of X, Y and the weights (float32 -> float64 is exact), so the
interval contains the exact real F(X) for the weights as stored:

    y_i = W^Q_h^T x_i,  P^h_ij = softmax_j(-||y_i - y_j||^2 / sqrt(d)),
    F(X) = sum_h P^h (X W^Q_h W^Q_h^T W^V_h / sqrt(d)) W^O_h (+ b^O).

With T(X) = Y - F(X) an L-contraction and X* = T(X*), ||X - X*|| <= ||X - T(X)|| + ||T(X) - T(X*)||, so

    ||X - g^{-1}(Y)|| <= ||g(X) - Y|| / (1 - L),

a bound on the error of any point X, however it was computed: it includes the rounding of F in float32 or float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import AttentionWeights
from ..bounds.local import const, l2_scores, numpy_weights, point_einsum, token_differences
from ..interval import Interval, isum, round_up
from ..sdp._floating import sum_up, up


def residual_upper(weights: AttentionWeights, X: torch.Tensor, Y: torch.Tensor, norm: str) -> float:
    """max over the batch of a proven upper bound on ||vec(X_b + F(X_b) - Y_b)||_norm (inf if float64 overflows)."""
    if weights.kind != "l2":
        raise ValueError(f"the residual enclosure covers tied L2 attention, got kind {weights.kind!r}")
    w = numpy_weights(weights)
    X64 = X.detach().to("cpu", torch.float64).numpy()
    Y64 = Y.detach().to("cpu", torch.float64).numpy()
    points = Interval.point(X64)  # (B, N, D)
    differences = token_differences(points)  # x_j - x_k, exactly 0 for j = k
    out = Interval.point(np.zeros_like(X64))
    for h in range(w.H):
        _, P = l2_scores(differences, w, h)  # (B, N, N)
        XA = point_einsum("bnc,Dc->bnD", point_einsum("bnD,Dc->bnc", points, w.W_Q[h]), w.W_Q[h])
        values = point_einsum("bnD,De->bne", XA * const(1.0 / math.sqrt(w.d)), w.W_V[h])  # (B, N, d)
        head = isum(P.expand(-1) * values.expand(-3), axis=-2)  # sum_j P_ij v_j
        out = out + point_einsum("bne,eD->bnD", head, w.W_O[h])
    if weights.b_O is not None:
        out = out + weights.b_O.detach().to("cpu", torch.float64).numpy()
    magnitude = (points + out - Y64).mag.reshape(len(X64), -1)  # max |residual| per entry
    if not np.all(np.isfinite(magnitude)):
        return math.inf
    if norm == "inf":
        return float(magnitude.max())
    with np.errstate(over="ignore"):
        squares = round_up(magnitude * magnitude)
        if not np.all(np.isfinite(squares)):
            return math.inf
        return float(max(up(math.sqrt(float(sum_up(row)))) for row in squares))
