"""Projection onto the input domains and random starting points (MATH.md sections 3, 5 and 7)."""

from __future__ import annotations

import math

import torch

from .._domain import Ball, Domain, EpsBall, Global
from ..attention import AttentionWeights


def project(X: torch.Tensor, domain: Domain) -> torch.Tensor:
    """Euclidean projection of a batch X (B, N, D) onto the domain (per token for a ball)."""
    if isinstance(domain, Ball):
        norms = X.norm(dim=-1, keepdim=True)
        return X * torch.clamp(domain.radius / norms.clamp_min(1e-300), max=1.0)
    if isinstance(domain, EpsBall):
        # radii shrunk by the rounding of center + delta (and of the norm), so that the exact X - X0 is inside
        center = domain.center.to(X)
        delta = X - center
        u = torch.finfo(X.dtype).eps / 2
        if domain.p == "inf":
            limit = (domain.eps - 4 * u * (center.abs() + domain.eps)).clamp_min(0.0)
            return center + torch.maximum(torch.minimum(delta, limit), -limit)
        n = center.numel()
        radius = max(domain.eps * (1 - (n + 8) * u) - 4 * u * (float(center.norm()) + domain.eps), 0.0)
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]
        return center + delta * torch.clamp(radius / norms, max=1.0)
    return X


def symmetric(domain: Domain) -> bool:
    """True when the domain is invariant under permuting tokens (then so is sup ||J||, and row block 0 suffices)."""
    return isinstance(domain, (Global, Ball))


def cpu64(weights: AttentionWeights) -> AttentionWeights:
    """The weights in float64 on the CPU and detached, without a copy (and its validation) when they already are."""
    if (weights.dtype == torch.float64 and weights.W_Q.device.type == "cpu"
            and not any(t.requires_grad for t in weights.tensors().values())):
        return weights
    return weights.to(torch.float64, "cpu")


def natural_scale(weights: AttentionWeights) -> float:
    """A per-token input norm at which attention scores are of order one.

    L2: 1 / max_h ||V_h||_2 (V_h = W^Q_h / d^{1/4}, so ||y|| ~ 1); dot product: 1 / sqrt(max_h ||A_h||_2).
    """
    w = cpu64(weights)
    if weights.kind == "dp":
        # ||W_Q W_K^T|| = ||R_Q R_K^T|| with W = Q R (thin QR): d x d work instead of a D x D SVD (BERT: 25 s)
        R_Q, R_K = torch.linalg.qr(w.W_Q)[1], torch.linalg.qr(w.W_K)[1]
        sizes = torch.linalg.matrix_norm(R_Q @ R_K.transpose(-1, -2), ord=2) / math.sqrt(w.d)
        size = math.sqrt(float(sizes.max()))
    else:
        size = max(float(torch.linalg.matrix_norm(W, ord=2).max()) for W in (w.W_Q, w.W_K)) / w.d**0.25
    return 1.0 / size if size > 0 else 1.0


def starting_points(weights: AttentionWeights, N: int, domain: Domain, restarts: int,
                    generator: torch.Generator, scales: tuple[float, ...] = (0.3, 1.0, 2.0, 3.0),
                    scale: float | None = None) -> torch.Tensor:
    """Gaussian starts, float64 on the CPU (B, N, D): per-token norm ~ scale * `natural_scale`, cycling the scales.

    In an eps-ball: the centre plus uniform noise of size eps; in a ball: scales capped at the radius.
    """
    X = torch.randn(restarts, N, weights.D, generator=generator, dtype=torch.float64) / math.sqrt(weights.D)
    if isinstance(domain, EpsBall):
        noise = 2 * torch.rand(restarts, N, weights.D, generator=generator, dtype=torch.float64) - 1
        return project(domain.center.to(device="cpu", dtype=torch.float64) + domain.eps * noise, domain)
    factor = torch.tensor(scales, dtype=torch.float64)[torch.arange(restarts) % len(scales)]
    factor = factor * (natural_scale(weights) if scale is None else scale)
    if isinstance(domain, Ball):
        factor = factor.clamp(max=domain.radius)
    return project(X * factor[:, None, None], domain)
