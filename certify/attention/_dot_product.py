"""Dot-product multi-head attention (DP-MHA), MATH.md section 1.

Head h:  f^h(X) = softmax( (X W^Q_h + b^Q_h)(X W^K_h + b^K_h)^T / sqrt(d) ) (X W^V_h + b^V_h),
layer:   F(X) = [f^1(X), ..., f^H(X)] W^O + b^O.

Not Lipschitz on R^{N x D} (Theorem 3.1, MATH.md section 3): certify it on a bounded domain only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._weights import AttentionWeights, check_input


def _heads(X: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """X (B, N, D), W (H, D, d) -> X W_h + b_h as (B, H, N, d)."""
    out = torch.einsum("bnD,hDe->bhne", X, W)
    return out if b is None else out + b[None, :, None, :]


def combine_heads(heads: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """(B, H, N, d) head outputs -> concat_h f^h @ W_O + b_O, shape (B, N, D)."""
    B, H, N, d = heads.shape
    out = heads.transpose(1, 2).reshape(B, N, H * d) @ weights.W_O
    return out if weights.b_O is None else out + weights.b_O


def dot_product_scores(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """Attention matrices P^h = softmax(Q_h K_h^T / sqrt(d)), shape (B, H, N, N)."""
    Q = _heads(X, weights.W_Q, weights.b_Q)
    K = _heads(X, weights.W_K, weights.b_K)
    return torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(weights.d), dim=-1)


def dot_product_attention(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """F(X) for dot-product attention; X (B, N, D) -> (B, N, D)."""
    return dot_product_forward(check_input(X, weights), weights)


def dot_product_forward(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """`dot_product_attention` without input validation (for vmap / jacrev and inner loops)."""
    P = dot_product_scores(X, weights)
    return combine_heads(P @ _heads(X, weights.W_V, weights.b_V), weights)


def _init(H: int, D: int, d: int, generator: torch.Generator | None, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(H, D, d, generator=generator, dtype=dtype) / math.sqrt(D)


class DotProductMultiheadAttention(nn.Module):
    """Batch-first dot-product multi-head attention, (B, N, D) -> (B, N, D), with optional biases.

    Parameters have the shapes of `AttentionWeights`. `torch.nn.MultiheadAttention` self-attention imports
    with `from_torch_multihead_attention`.
    """

    def __init__(self, D: int, H: int, bias: bool = True, dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        if D % H:
            raise ValueError(f"D = {D} must be divisible by H = {H}")
        d = D // H
        self.D, self.H = D, H
        self.W_Q = nn.Parameter(_init(H, D, d, generator, dtype))
        self.W_K = nn.Parameter(_init(H, D, d, generator, dtype))
        self.W_V = nn.Parameter(_init(H, D, d, generator, dtype))
        self.W_O = nn.Parameter(torch.randn(D, D, generator=generator, dtype=dtype) / math.sqrt(D))
        zeros = (lambda *s: nn.Parameter(torch.zeros(*s, dtype=dtype))) if bias else (lambda *s: None)
        self.b_Q, self.b_K, self.b_V, self.b_O = zeros(H, d), zeros(H, d), zeros(H, d), zeros(D)

    def attention_weights(self) -> AttentionWeights:
        return AttentionWeights("dp", self.W_Q, self.W_K, self.W_V, self.W_O, self.b_Q, self.b_K, self.b_V, self.b_O)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return dot_product_attention(X, self.attention_weights())
