"""Adversarial lower bounds: maximise ||J_F(X)||_p over X in a domain by projected gradient ascent (Adam).

Restarts are one batched tensor computation over the closed-form Jacobian (`certify.jacobian.jacobian`).
The best input is kept as a witness and its norm recomputed in float64, so the returned value is attained at
``details["witness"]``: a true lower bound on the Lipschitz constant over the domain (up to float64 rounding of
one norm evaluation). It is never marked certified: it is a lower bound, not a guarantee.
"""

from __future__ import annotations

import math
import time

import torch
from tqdm.auto import tqdm

from .._domain import Ball, Domain, EpsBall, Global
from .._result import Certificate
from ..attention import AttentionWeights, check_tokens
from ..jacobian import check_norm, jacobian, jacobian_norm


def project(X: torch.Tensor, domain: Domain) -> torch.Tensor:
    """Euclidean projection of a batch X (B, N, D) onto the domain (per token for a ball)."""
    if isinstance(domain, Ball):
        norms = X.norm(dim=-1, keepdim=True)
        return X * torch.clamp(domain.radius / norms.clamp_min(1e-300), max=1.0)
    if isinstance(domain, EpsBall):
        center = domain.center.to(X)
        delta = X - center
        if domain.p == "inf":
            return center + delta.clamp(-domain.eps, domain.eps)
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]
        return center + delta * torch.clamp(domain.eps / norms, max=1.0)
    return X


def starting_points(weights: AttentionWeights, N: int, domain: Domain, restarts: int,
                    generator: torch.Generator) -> torch.Tensor:
    """Random starts at several scales (0.3, 1, 3 times a unit per-token norm), projected onto the domain."""
    X = torch.randn(restarts, N, weights.D, generator=generator, dtype=torch.float64) / math.sqrt(weights.D)
    if isinstance(domain, EpsBall):
        return project(domain.center.to(torch.float64) + domain.eps * X.clamp(-1, 1), domain)
    scales = torch.tensor([0.3, 1.0, 3.0], dtype=torch.float64)[torch.arange(restarts) % 3]
    if isinstance(domain, Ball):
        scales = scales.clamp(max=1.0) * domain.radius
    return project(X * scales[:, None, None], domain)


def lower_bound(weights: AttentionWeights, N: int, norm: str, domain: Domain = Global(), restarts: int = 24,
                steps: int = 300, learning_rate: float = 0.05, seed: int = 0,
                seconds: float | None = None, progress: bool = False) -> Certificate:
    """max ||J_F(X)||_norm over X in the domain, found by batched projected Adam; the witness is kept."""
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    w = weights.to(torch.float64, "cpu")
    generator = torch.Generator().manual_seed(seed)
    X = starting_points(w, N, domain, restarts, generator).requires_grad_(True)
    optimizer = torch.optim.Adam([X], lr=learning_rate)
    best_value, best_X = -math.inf, X.detach()[0].clone()
    for _ in tqdm(range(steps), desc=f"lower bound ({norm}-norm)", disable=not progress, leave=False):
        values = jacobian_norm(jacobian(X, w), norm)
        top = int(values.detach().argmax())
        if float(values[top].detach()) > best_value:
            best_value, best_X = float(values[top].detach()), X.detach()[top].clone()
        optimizer.zero_grad()
        (-values.sum()).backward()
        optimizer.step()
        with torch.no_grad():
            X.copy_(project(X, domain))
        if seconds is not None and time.perf_counter() - start > seconds:
            break
    value = float(jacobian_norm(jacobian(best_X[None], w), norm)[0])  # recomputed at the stored witness
    return Certificate(
        value=value, kind="lower", certified=False, method="adversarial", scope=domain.scope, norm=norm,
        seconds=time.perf_counter() - start,
        message="attained: ||J(X*)|| at the stored witness X*, float64",
        details={"witness": best_X.tolist(), "restarts": restarts, "steps": steps, "seed": seed},
    )
