"""L2 multi-head attention (MATH.md section 1), tied and untied.

Tied (Lipschitz, Theorem 3.2): with A_h = W^Q_h W^Q_h^T / sqrt(d),
    P^h_ij = softmax_j( -||x_i^T W^Q_h - x_j^T W^Q_h||_2^2 / sqrt(d) ),   f^h(X) = P^h X A_h W^V_h.
Writing V_h = W^Q_h / d^{1/4} and Y_h = X V_h (the projected points), P^h_ij = softmax_j(-||y_i - y_j||^2) and
f^h = P^h Y_h (V_h^T W^V_h): X enters only through Y_h.

Untied (W^K != W^Q; NOT Lipschitz, MATH.md section 1):
    P^h_ij = softmax_j( -||x_i^T W^Q_h - x_j^T W^K_h||_2^2 / sqrt(d) ),   f^h(X) = P^h X W^V_h.

Logits are computed as explicit pairwise differences (not ||q||^2 - 2 q.k + ||k||^2), which keeps them exact
at 0 on the diagonal and accurate for nearby tokens.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._dot_product import _heads, _init, combine_heads
from ._weights import AttentionWeights, check_input


def l2_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """P_ij = softmax_j(-||q_i - k_j||^2) for (..., N, d) inputs, shape (..., N, N)."""
    difference = queries.unsqueeze(-2) - keys.unsqueeze(-3)
    return torch.softmax(-(difference * difference).sum(-1), dim=-1)


def projected_points(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """Y_h = X V_h with V_h = W^Q_h / d^{1/4}; shape (B, H, N, d)."""
    return _heads(X, weights.W_Q, None) / weights.d**0.25


def l2_attention(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """F(X) for tied or untied L2 attention; X (B, N, D) -> (B, N, D)."""
    return l2_forward(check_input(X, weights), weights)


def l2_forward(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """`l2_attention` without input validation (for vmap / jacrev and inner loops)."""
    scale = weights.d**0.25
    if weights.kind == "l2":
        Y = projected_points(X, weights)
        P = l2_scores(Y, Y)
        values = (P @ Y) @ (weights.W_Q.transpose(1, 2) @ weights.W_V / scale)
    elif weights.kind == "l2-untied":
        P = l2_scores(_heads(X, weights.W_Q, None) / scale, _heads(X, weights.W_K, None) / scale)
        values = P @ _heads(X, weights.W_V, None)
    else:
        raise ValueError(f"l2_attention needs kind 'l2' or 'l2-untied', got {weights.kind!r}")
    return combine_heads(values, weights)


class L2MultiheadAttention(nn.Module):
    """Batch-first L2 multi-head attention with tied W^Q = W^K, (B, N, D) -> (B, N, D)."""

    def __init__(self, D: int, H: int, bias: bool = False, dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        if D % H:
            raise ValueError(f"D = {D} must be divisible by H = {H}")
        d = D // H
        self.D, self.H = D, H
        self.W_Q = nn.Parameter(_init(H, D, d, generator, dtype))
        self.W_V = nn.Parameter(_init(H, D, d, generator, dtype))
        self.W_O = nn.Parameter(torch.randn(D, D, generator=generator, dtype=dtype) / math.sqrt(D))
        self.b_O = nn.Parameter(torch.zeros(D, dtype=dtype)) if bias else None

    def attention_weights(self) -> AttentionWeights:
        return AttentionWeights("l2", self.W_Q, self.W_Q, self.W_V, self.W_O, b_O=self.b_O)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return l2_attention(X, self.attention_weights())


class UntiedL2MultiheadAttention(L2MultiheadAttention):
    """L2 attention with separate W^K. Not Lipschitz (MATH.md section 1): `certify` refuses a global bound."""

    def __init__(self, D: int, H: int, bias: bool = False, dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None) -> None:
        super().__init__(D, H, bias, dtype, generator)
        self.W_K = nn.Parameter(_init(H, D, D // H, generator, dtype))

    def attention_weights(self) -> AttentionWeights:
        return AttentionWeights("l2-untied", self.W_Q, self.W_K, self.W_V, self.W_O, b_O=self.b_O)
