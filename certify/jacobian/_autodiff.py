"""Reference Jacobian by reverse-mode autodiff (`torch.func.jacrev`, vectorised over the batch with `vmap`)."""

from __future__ import annotations

import torch

from ..attention import AttentionWeights, attention_forward, check_input


def autodiff_jacobian(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """d F(X) / d X for X (B, N, D), by jacrev; returns (B, N, D, N, D). Any kind of attention."""
    X = check_input(X, weights)
    single = lambda x: attention_forward(x.unsqueeze(0), weights).squeeze(0)  # noqa: E731
    return torch.func.vmap(torch.func.jacrev(single))(X)
