"""X + c DP(X) need not be injective (MATH.md section 6): the paper's example with W^K = -W^Q, D = 1, N = 2.

One head, d = D = 1, W^Q = 1, W^K = -1, W^V = W^O = 1, no biases, so P_ij = softmax_j(-x_i x_j) and
g(x) = x + 0.5 DP(x) for x in R^2. At x = (0, t) row 1 of P is uniform, so g(0, t) = (t / 4, t + t / (2 (1 + e^{t^2}))).
For t = 3 a second input x' (about (-0.9587, 3.4795)) has g(x') = g(x): it is found by Newton's method in float64,
started at (-1, 3.5). The Jacobian of g changes sign between the two points (det J_g(0, 3) < 0 < det J_g(x')), which
no injective smooth map with an invertible Jacobian allows; the Lipschitz constraint of `InvertibleResidualBlock`
is what rules this out.
"""

from __future__ import annotations

import dataclasses

import torch

from ..attention import AttentionWeights, attention


def non_injective_weights() -> AttentionWeights:
    """The single-head D = 1 dot-product layer with W^K = -W^Q (float64)."""
    one = torch.ones(1, 1, 1, dtype=torch.float64)
    return AttentionWeights("dp", W_Q=one, W_K=-one, W_V=one, W_O=torch.ones(1, 1, dtype=torch.float64))


def residual(X: torch.Tensor, weights: AttentionWeights, scale: float = 0.5) -> torch.Tensor:
    """g(X) = X + scale * F(X) for X (B, N, D) or (N, D); returns (B, N, D)."""
    X = X if X.ndim == 3 else X.unsqueeze(0)
    return X + scale * attention(X, weights)


@dataclasses.dataclass(frozen=True)
class NonInjectivePair:
    weights: AttentionWeights
    scale: float
    X1: torch.Tensor  # (N, D) = (2, 1)
    X2: torch.Tensor  # (N, D), X2 != X1 and g(X2) == g(X1) to float64 accuracy
    Y: torch.Tensor  # g(X1)
    newton_steps: int


def dp_non_injective_pair(t: float = 3.0, start: tuple[float, float] = (-1.0, 3.5), scale: float = 0.5,
                          steps: int = 50) -> NonInjectivePair:
    """Two different inputs X1 = (0, t) and X2 with X1 + scale DP(X1) = X2 + scale DP(X2) (D = 1, N = 2)."""
    weights = non_injective_weights()
    X1 = torch.tensor([[0.0], [t]], dtype=torch.float64)
    Y = residual(X1, weights, scale)[0]
    X2 = torch.tensor(start, dtype=torch.float64).reshape(2, 1)
    g = lambda x: residual(x.reshape(2, 1), weights, scale).reshape(2)  # noqa: E731
    taken = 0
    for taken in range(1, steps + 1):
        residue = g(X2.reshape(2)) - Y.reshape(2)
        if float(residue.abs().max()) < 1e-15:
            break
        J = torch.autograd.functional.jacobian(g, X2.reshape(2))
        X2 = (X2.reshape(2) - torch.linalg.solve(J, residue)).reshape(2, 1)
    return NonInjectivePair(weights, scale, X1, X2.detach(), Y.detach(), taken)
