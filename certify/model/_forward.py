"""The forward pass of a `Model` in torch (float32 or float64, batched, differentiable for `attained_lipschitz`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .._errors import InvalidInputError
from ._blocks import (Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward, Gather, L2Attention,
                      LayerNorm, Linear, Model, Pool, Residual)


def _t(array: np.ndarray | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if array is None else torch.tensor(array, dtype=like.dtype, device=like.device)


def activation(kind: str, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) if kind == "relu" else torch.nn.functional.gelu(x)


def attention(block: Attention, S: torch.Tensor) -> torch.Tensor:
    """[P_1 V_1, ..., P_H V_H] W^O + b^O with P_h = softmax(scale Q_h K_h^T), S of shape (B, N, D)."""
    Q = torch.einsum("bnD,hDd->bhnd", S, _t(block.W_Q, S))
    K = torch.einsum("bnD,hDd->bhnd", S, _t(block.W_K, S))
    V = torch.einsum("bnD,hDd->bhnd", S, _t(block.W_V, S))
    for name, tensor in (("b_Q", Q), ("b_K", K), ("b_V", V)):
        bias = getattr(block, name)
        if bias is not None:
            tensor.add_(_t(bias, S)[None, :, None, :])
    logits = block.scale * Q @ K.transpose(-1, -2)
    if block.causal:
        logits = _causal_mask(logits)
    out = torch.softmax(logits, dim=-1) @ V  # (B, H, N, d)
    out = out.transpose(1, 2).reshape(S.shape[0], S.shape[1], block.H * block.d)
    if block.W_O is not None:
        out = out @ _t(block.W_O, S)
    if block.b_O is not None:
        out = out + _t(block.b_O, S)
    return out


def _causal_mask(logits: torch.Tensor) -> torch.Tensor:
    """logits (..., N, N) with -inf above the diagonal (token i attends to j <= i)."""
    N = logits.shape[-1]
    mask = torch.ones(N, N, dtype=torch.bool, device=logits.device).triu(1)
    return logits.masked_fill(mask, -math.inf)


def l2_attention(block: L2Attention, S: torch.Tensor) -> torch.Tensor:
    """[P_1 S A_1 W^V_1, ..., P_H S A_H W^V_H] W^O + b^O, P_h = softmax(-||y_i - y_j||^2 / sqrt(d)), Y_h = S W^Q_h,
    A_h = W^Q_h W^Q_h^T / sqrt(d) (logits as explicit pairwise differences), S of shape (B, N, D)."""
    W_Q = _t(block.W_Q, S)
    Y = torch.einsum("bnD,hDd->bhnd", S, W_Q)
    difference = Y.unsqueeze(-2) - Y.unsqueeze(-3)  # [b, h, i, j] = y_i - y_j
    logits = -(difference * difference).sum(-1) / math.sqrt(block.d)
    if block.causal:
        logits = _causal_mask(logits)
    values = torch.einsum("bhnd,hEd,hEe->bhne", Y, W_Q, _t(block.W_V, S)) / math.sqrt(block.d)  # S A_h W^V_h
    out = torch.softmax(logits, dim=-1) @ values
    out = out.transpose(1, 2).reshape(S.shape[0], S.shape[1], block.H * block.d)
    if block.W_O is not None:
        out = out @ _t(block.W_O, S)
    return out if block.b_O is None else out + _t(block.b_O, S)


def apply_block(block: object, S: torch.Tensor) -> torch.Tensor:
    """One block on a batch of states S (B, R, C)."""
    if isinstance(block, Gather):
        index = torch.tensor(block.index, device=S.device)
        return S.reshape(S.shape[0], -1)[:, index]
    if isinstance(block, Linear):
        out = S @ _t(block.weight, S)
        return out if block.bias is None else out + _t(block.bias, S)
    if isinstance(block, ClassToken):
        token = _t(block.token, S).expand(S.shape[0], 1, -1)
        return torch.cat([token, S], dim=1)
    if isinstance(block, AddConstant):
        return S + _t(block.value, S)
    if isinstance(block, LayerNorm):
        return torch.nn.functional.layer_norm(S, (S.shape[-1],), _t(block.gamma, S), _t(block.beta, S), block.eps)
    if isinstance(block, ChannelAffine):
        return S * _t(block.scale, S) + _t(block.shift, S)
    if isinstance(block, Activation):
        return activation(block.kind, S)
    if isinstance(block, Attention):
        return attention(block, S)
    if isinstance(block, L2Attention):
        return l2_attention(block, S)
    if isinstance(block, FeedForward):
        hidden = S @ _t(block.W1, S)
        if block.b1 is not None:
            hidden = hidden + _t(block.b1, S)
        out = activation(block.activation, hidden) @ _t(block.W2, S)
        return out if block.b2 is None else out + _t(block.b2, S)
    if isinstance(block, Residual):
        return S + forward_blocks(block.inner, S)
    if isinstance(block, Pool):
        return S.mean(dim=1, keepdim=True) if block.kind == "mean" else S[:, :1]
    raise InvalidInputError(f"not a model block: {type(block).__name__}")


def forward_blocks(blocks: tuple, S: torch.Tensor) -> torch.Tensor:
    for block in blocks:
        S = apply_block(block, S)
    return S


def as_state(model: Model, x: torch.Tensor | np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Inputs of shape input_shape or (B, *input_shape) as a batch of 2-D states (B, R, C); checks shape and NaN."""
    x = torch.as_tensor(np.asarray(x) if isinstance(x, np.ndarray) else x)
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise InvalidInputError(f"the input must hold real numbers, got dtype {x.dtype}")
    shape = tuple(x.shape)
    if shape == model.input_shape:
        x = x[None]
    elif shape[1:] != model.input_shape:
        raise InvalidInputError(f"the input must have shape {model.input_shape} (or a batch of them), got {shape}")
    if not torch.isfinite(x).all():
        raise InvalidInputError("the input has NaN or Inf entries")
    return x.to(dtype).reshape(x.shape[0], *model.state_shape)


def forward(model: Model, x: torch.Tensor | np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The model's output states (B, R', C') for inputs of shape (B, *input_shape) (or one input: B = 1)."""
    return forward_blocks(model.blocks, as_state(model, x, dtype))
