"""Contractive L2 multi-head attention (MATH.md sections 1 and 6): F_c(X) = gamma F(X) / B(W), the F of the
invertible block X + F_c(X).

B(W) is the paper's Theorem 3.2 bound (inf-norm by default, as in the paper) for sequences of up to
``max_tokens`` tokens; phi^{-1}(N-1) increases with N, so the bound for ``max_tokens`` holds for every shorter
sequence. Gradients flow through B during training. `attention_weights()` returns plain tied L2 weights with
W^O scaled by gamma / B(W), so every certifier applies to the contractive layer as it is.
"""

from __future__ import annotations

import dataclasses

import torch

from ..attention import AttentionWeights, L2MultiheadAttention, l2_attention
from ..bounds import paper_bound_tensor


class ContractiveL2MultiheadAttention(L2MultiheadAttention):
    def __init__(self, D: int, H: int, max_tokens: int, gamma: float = 0.9, norm: str = "inf",
                 dtype: torch.dtype = torch.float32, generator: torch.Generator | None = None) -> None:
        super().__init__(D, H, bias=False, dtype=dtype, generator=generator)
        if not 0 < gamma < 1:
            raise ValueError(f"gamma must lie in (0, 1) for a contraction, got {gamma}")
        if norm not in ("2", "inf"):
            raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
        self.max_tokens, self.gamma, self.norm = max_tokens, gamma, norm

    def lipschitz_bound(self) -> torch.Tensor:
        """B(W): the differentiable Theorem 3.2 bound of the unscaled layer (not outward-rounded)."""
        return paper_bound_tensor(super().attention_weights(), self.max_tokens, self.norm)

    def attention_weights(self) -> AttentionWeights:
        weights = super().attention_weights()
        return dataclasses.replace(weights, W_O=weights.W_O * (self.gamma / self.lipschitz_bound()))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.shape[-2] > self.max_tokens:
            raise ValueError(f"this layer is contractive for N <= {self.max_tokens}, got N = {X.shape[-2]}")
        return l2_attention(X, self.attention_weights())
