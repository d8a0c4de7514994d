"""Attention layers as graphs that auto_LiRPA 0.3 bounds well (MATH.md sections 1 and 8).

`LirpaAttention(weights)` computes the same map as `certify.attention.attention` on (B, N, D) inputs, but

- returns the output flattened to (B, N D) (row-major, token by token, as vec(F(X)) in MATH.md section 0);
- holds the weights as float64 parameters (auto_LiRPA needs the module to own at least one parameter);
- writes every head with plain matmul / softmax / sum operations that auto_LiRPA's ONNX tracer knows;
- writes the L2 logits as explicit pairwise differences, -||y_i - y_j||^2 with y = X V_h, which is much tighter
  under bound propagation than the expansion ||q||^2 - 2 q.k + ||k||^2 (the terms of the expansion are bounded
  independently and their dependency is lost).

Tied L2 head h, with V_h = W^Q_h / d^{1/4} and Y = X V_h: P = softmax(-||y_i - y_j||^2), f^h = (P Y)(V_h^T W^V_h).
Dot-product head h: P = softmax((X W^Q_h + b^Q_h)(X W^K_h + b^K_h)^T / sqrt(d)), f^h = P (X W^V_h + b^V_h).
Untied L2: P = softmax(-||q_i - k_j||^2 / sqrt(d)) with q = X W^Q_h, k = X W^K_h, f^h = P X W^V_h.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._errors import InvalidInputError
from ..attention import AttentionWeights, as_weights


def _parameter(tensor: torch.Tensor | None) -> nn.Parameter | None:
    return None if tensor is None else nn.Parameter(tensor.detach().to(torch.float64).clone(), requires_grad=False)


class LirpaAttention(nn.Module):
    """F(X) flattened, (B, N, D) -> (B, N D), in float64, traceable by auto_LiRPA."""

    def __init__(self, layer: nn.Module | AttentionWeights) -> None:
        super().__init__()
        weights = as_weights(layer).to(torch.float64, "cpu")
        self.kind, self.H, self.D, self.d = weights.kind, weights.H, weights.D, weights.d
        if weights.kind == "l2":
            scale = weights.d**0.25
            self.V = _parameter(weights.W_Q / scale)  # (H, D, d): y = x V_h
            self.value = _parameter(weights.W_Q.transpose(1, 2) @ weights.W_V / scale)  # V_h^T W^V_h, (H, d, d)
        else:
            self.W_Q, self.W_K, self.W_V = _parameter(weights.W_Q), _parameter(weights.W_K), _parameter(weights.W_V)
            self.b_Q, self.b_K, self.b_V = _parameter(weights.b_Q), _parameter(weights.b_K), _parameter(weights.b_V)
        self.W_O = _parameter(weights.W_O)
        self.b_O = _parameter(weights.b_O)

    def _head(self, X: torch.Tensor, h: int) -> torch.Tensor:
        if self.kind == "l2":
            Y = X.matmul(self.V[h])  # (B, N, d)
            difference = Y.unsqueeze(2) - Y.unsqueeze(1)  # [b, i, j] = y_i - y_j
            P = torch.softmax(-(difference * difference).sum(-1), dim=-1)
            return P.matmul(Y).matmul(self.value[h])
        scale = 1.0 / math.sqrt(self.d)
        Q = X.matmul(self.W_Q[h])
        K = X.matmul(self.W_K[h])
        values = X.matmul(self.W_V[h])
        if self.b_Q is not None:
            Q, K, values = Q + self.b_Q[h], K + self.b_K[h], values + self.b_V[h]
        if self.kind == "dp":
            P = torch.softmax(Q.matmul(K.transpose(1, 2)) * scale, dim=-1)
        else:
            difference = Q.unsqueeze(2) - K.unsqueeze(1)
            P = torch.softmax(-(difference * difference).sum(-1) * scale, dim=-1)
        return P.matmul(values)

    def attend(self, X: torch.Tensor) -> torch.Tensor:
        """F(X), (B, N, D) -> (B, N, D)."""
        heads = torch.cat([self._head(X, h) for h in range(self.H)], dim=-1)  # (B, N, H d)
        out = heads.matmul(self.W_O)
        return out if self.b_O is None else out + self.b_O

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.attend(X).reshape(X.shape[0], -1)


class LirpaClassifier(nn.Module):
    """The toy classifier of `certify.experiments` (embedding, attention, mean over tokens, linear) for auto_LiRPA:
    (B, N, D_in) -> logits (B, C), float64."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        for name in ("embedding", "attention", "head"):
            if not hasattr(model, name):
                raise InvalidInputError(f"expected a certify.experiments.ToyClassifier, got {type(model).__name__}")
        self.W_e = _parameter(model.embedding.weight.T)  # (D_in, D): token x -> x W_e
        self.attention = LirpaAttention(model.attention)
        self.W_c = _parameter(model.head.weight.T)  # (D, C)
        self.b_c = _parameter(model.head.bias)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        pooled = self.attention.attend(X.matmul(self.W_e)).mean(dim=1)
        return pooled.matmul(self.W_c) + self.b_c


def export_attention(layer: nn.Module | AttentionWeights) -> LirpaAttention:
    """Our DP / L2 modules, `AttentionWeights`, or a `torch.nn.MultiheadAttention` -> `LirpaAttention`."""
    if isinstance(layer, LirpaAttention):
        return layer
    try:
        return LirpaAttention(layer)
    except TypeError as error:
        raise InvalidInputError(str(error)) from None
