"""Theorem 3.1 made visible: inputs X_t = t X_0 at which the dot-product Jacobian norm grows without bound.

MATH.md section 3: at x_i = 0 (so row i of the softmax is uniform), J_ii = (1/N) X^T (I - 11^T/N) X A + I/N
for one head with W^V = I (A = W^K W^Q^T / sqrt(d)): quadratic in t when the other tokens are t times fixed
vectors. X_0 has token 0 at the origin and the other tokens at +-u, alternating, with u a unit vector chosen
among the top singular vectors of the heads' A and a few random directions (the largest norm at the last scale
wins). Norms are exact closed-form Jacobian norms in float64, so each is a true lower bound on the Lipschitz
constant over any domain that contains X_t.
"""

from __future__ import annotations

import dataclasses

import torch

from ...attention import AttentionWeights, check_tokens
from ...jacobian import check_norm, jacobian, jacobian_norm


@dataclasses.dataclass(frozen=True)
class Witness:
    scales: tuple[float, ...]
    norms: tuple[float, ...]
    norm: str
    X0: torch.Tensor

    @property
    def growth(self) -> float:
        """norm at the largest scale / norm at the smallest."""
        return self.norms[-1] / self.norms[0]


def _candidate_directions(weights: AttentionWeights, count: int, generator: torch.Generator) -> torch.Tensor:
    candidates = [torch.randn(count, weights.D, generator=generator, dtype=torch.float64)]
    for h in range(weights.H):
        A = weights.W_Q[h] @ weights.W_K[h].T
        U, _, Vh = torch.linalg.svd(A)
        candidates += [U[:, :1].T, Vh[:1], (U[:, :1].T + Vh[:1])]
    directions = torch.cat(candidates)
    return directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-300)


def dp_witness(weights: AttentionWeights, N: int, scales: tuple[float, ...] = (1, 2, 4, 8, 16, 32),
               norm: str = "2", seed: int = 0) -> Witness:
    """||J(t X_0)||_norm for each scale t (MATH.md section 3); N >= 2."""
    check_tokens(N)
    check_norm(norm)
    if N < 2:
        raise ValueError("the Theorem 3.1 witness needs N >= 2 tokens")
    w = weights.to(torch.float64, "cpu")
    generator = torch.Generator().manual_seed(seed)
    signs = torch.tensor([0.0] + [(-1.0) ** k for k in range(N - 1)], dtype=torch.float64)
    directions = _candidate_directions(w, 8, generator)
    X0 = signs[None, :, None] * directions[:, None, :]  # (candidates, N, D)
    best = int(jacobian_norm(jacobian(scales[-1] * X0, w), norm).argmax())
    X0 = X0[best]
    norms = jacobian_norm(jacobian(torch.stack([t * X0 for t in scales]), w), norm)
    return Witness(tuple(float(t) for t in scales), tuple(norms.tolist()), norm, X0)
