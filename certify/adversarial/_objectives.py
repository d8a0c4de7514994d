"""Batched, differentiable Jacobian-norm objectives for the search (MATH.md sections 0 and 2).

- ``dense``: the closed-form Jacobian (`certify.jacobian.jacobian`) and its exact norm; for small N D.
- ``row``: the inf-norm of row block t of J (d F_t / d X, D rows), by reverse mode through `query_output`, which
  costs O(N D H d) instead of O(N^2). Over a permutation-invariant domain sup ||J||_inf is attained in row block 0.
- ``power``: the 2-norm, matrix-free: power iteration on J^T J with JVPs and VJPs, warm-started across steps; the
  objective u^T J(X) v (unit u, v, detached) has gradient u v^T : dJ/dX, that of sigma_max at a simple top
  singular pair. Its value never exceeds ||J(X)||_2.

All values are lower bounds on ||J(X)||_p at the current X; reported numbers are recomputed by `attained_norm`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..attention import AttentionWeights, attention_forward, projected_points
from ..jacobian import jacobian, jacobian_norm


def query_output(X: torch.Tensor, weights: AttentionWeights, t: int) -> torch.Tensor:
    """F_t(X), output token t of the layer, (B, D): one query against all N keys (any kind of attention)."""
    B = X.shape[0]
    if weights.kind == "l2":
        Y = projected_points(X, weights)  # (B, H, N, d)
        difference = Y[:, :, t : t + 1, :] - Y
        P = torch.softmax(-(difference * difference).sum(-1), dim=-1)  # (B, H, N)
        A_V = weights.W_Q.transpose(1, 2) @ weights.W_V / weights.d**0.25  # (H, d, d)
        heads = torch.einsum("bhn,bhne,hef->bhf", P, Y, A_V)
    else:
        if weights.kind == "l2-untied":
            scale = weights.d**0.25
            Q = torch.einsum("bD,hDe->bhe", X[:, t], weights.W_Q) / scale
            K = torch.einsum("bnD,hDe->bhne", X, weights.W_K) / scale
            difference = Q[:, :, None, :] - K
            P = torch.softmax(-(difference * difference).sum(-1), dim=-1)
            values = torch.einsum("bnD,hDe->bhne", X, weights.W_V)
        else:
            Q = torch.einsum("bD,hDe->bhe", X[:, t], weights.W_Q)
            K = torch.einsum("bnD,hDe->bhne", X, weights.W_K)
            values = torch.einsum("bnD,hDe->bhne", X, weights.W_V)
            if weights.b_Q is not None:
                Q = Q + weights.b_Q
            if weights.b_K is not None:
                K = K + weights.b_K[:, None, :]
            if weights.b_V is not None:
                values = values + weights.b_V[:, None, :]
            P = torch.softmax(torch.einsum("bhe,bhne->bhn", Q, K) / math.sqrt(weights.d), dim=-1)
        heads = torch.einsum("bhn,bhne->bhe", P, values)
    out = heads.reshape(B, weights.H * weights.d) @ weights.W_O
    return out if weights.b_O is None else out + weights.b_O


def row_block(X: torch.Tensor, weights: AttentionWeights, t: int, create_graph: bool,
              rows: Sequence[int] | None = None) -> torch.Tensor:
    """d F_t / d X, (B, D, N, D) (or only the given output coordinates ``rows``: (B, len(rows), N, D)), by one
    reverse-mode pass per row through `query_output`."""
    if not X.requires_grad:
        X = X.detach().requires_grad_(True)
    F_t = query_output(X, weights, t)
    chosen = range(weights.D) if rows is None else rows
    grads = [torch.autograd.grad(F_t[:, a].sum(), X, create_graph=create_graph, retain_graph=True)[0]
             for a in chosen]
    return torch.stack(grads, dim=1)


def row_inf_norm(X: torch.Tensor, weights: AttentionWeights, t: int = 0,
                 rows: Sequence[int] | None = None) -> torch.Tensor:
    """max over the D rows of block t (or over ``rows`` of them) of their absolute sums, (B,): a lower bound on
    ||J(X)||_inf (a max over a subset of rows is still one)."""
    return row_block(X, weights, t, create_graph=True, rows=rows).abs().sum((-1, -2)).amax(-1)


def dense_norm(X: torch.Tensor, weights: AttentionWeights, norm: str) -> torch.Tensor:
    """||J(X)||_norm exactly, from the closed-form Jacobian (B,); differentiable."""
    return jacobian_norm(jacobian(X, weights), norm)


def _jvp(X: torch.Tensor, weights: AttentionWeights, v: torch.Tensor) -> torch.Tensor:
    return torch.func.jvp(lambda Z: attention_forward(Z, weights), (X,), (v,))[1]


def _vjp(X: torch.Tensor, weights: AttentionWeights, u: torch.Tensor) -> torch.Tensor:
    return torch.func.vjp(lambda Z: attention_forward(Z, weights), X)[1](u)[0]


class PowerIteration:
    """Warm-started top singular pairs (u, v) of J(X_b) for a batch, updated by a few power steps per call."""

    def __init__(self, shape: torch.Size, generator: torch.Generator, dtype: torch.dtype, device: torch.device):
        v = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype=dtype, device=device)
        self.v = v / v.flatten(1).norm(dim=1)[:, None, None]

    def reset(self, index: torch.Tensor, generator: torch.Generator) -> None:
        fresh = torch.randn(self.v[index].shape, generator=generator, dtype=torch.float64).to(self.v)
        self.v[index] = fresh / fresh.flatten(1).norm(dim=1)[:, None, None]

    def refine(self, X: torch.Tensor, weights: AttentionWeights, iterations: int) -> torch.Tensor:
        """Run the power steps at X (no graph); return u = J v / ||J v|| (the v field is updated in place)."""
        X = X.detach()
        with torch.no_grad():
            for _ in range(iterations):
                w = _vjp(X, weights, _jvp(X, weights, self.v))
                self.v = w / w.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]
            u = _jvp(X, weights, self.v)
            return u / u.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]

    def objective(self, X: torch.Tensor, weights: AttentionWeights, iterations: int = 2) -> torch.Tensor:
        """u^T J(X) v per batch element (B,), differentiable in X (a lower bound on ||J(X)||_2)."""
        u = self.refine(X, weights, iterations)
        F = attention_forward(X, weights)
        (Jt_u,) = torch.autograd.grad((F * u).sum(), X, create_graph=True)
        return (Jt_u * self.v).flatten(1).sum(1)
