"""Attention modules (MATH.md section 1): dot-product, L2 (tied and untied). The contractive L2 layer, which
divides by a certified bound, lives in `certify.invertible`; saving and loading in `certify._checkpoint`."""

from ._dot_product import (
    DotProductMultiheadAttention as DotProductMultiheadAttention,
    combine_heads as combine_heads,
    dot_product_attention as dot_product_attention,
    dot_product_forward as dot_product_forward,
    dot_product_scores as dot_product_scores,
)
from ._l2 import (
    L2MultiheadAttention as L2MultiheadAttention,
    UntiedL2MultiheadAttention as UntiedL2MultiheadAttention,
    l2_attention as l2_attention,
    l2_forward as l2_forward,
    l2_scores as l2_scores,
    projected_points as projected_points,
)
from ._torch_import import from_torch_multihead_attention as from_torch_multihead_attention
from ._weights import AttentionWeights as AttentionWeights, check_input as check_input, check_tokens as check_tokens
from ._weights import jacobian_equivalent as jacobian_equivalent

import torch as _torch


def attention(X: _torch.Tensor, weights: AttentionWeights) -> _torch.Tensor:
    """F(X) for any kind of attention weights; X (B, N, D) or (N, D) -> (B, N, D)."""
    return attention_forward(check_input(X, weights), weights)


def attention_forward(X: _torch.Tensor, weights: AttentionWeights) -> _torch.Tensor:
    """`attention` without input validation (X already (B, N, D) and finite): for vmap, jacrev, inner loops."""
    return dot_product_forward(X, weights) if weights.kind == "dp" else l2_forward(X, weights)


def as_weights(layer: "_torch.nn.Module | AttentionWeights") -> AttentionWeights:
    """The `AttentionWeights` of a layer: certify's modules, a torch.nn.MultiheadAttention, or weights as they are."""
    if isinstance(layer, AttentionWeights):
        return layer
    if isinstance(layer, _torch.nn.MultiheadAttention):
        layer = from_torch_multihead_attention(layer)
    if hasattr(layer, "attention_weights"):
        return layer.attention_weights()
    raise TypeError(f"cannot certify a {type(layer).__name__}: expected an attention module or AttentionWeights")
