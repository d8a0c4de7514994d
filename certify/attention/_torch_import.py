"""Import a `torch.nn.MultiheadAttention` used as self-attention into `DotProductMultiheadAttention`.

torch computes, for query = key = value = X (batch-first or not),
    q = X W_q^T + b_q,  k = X W_k^T + b_k,  v = X W_v^T + b_v  (W_q, W_k, W_v the thirds of in_proj_weight),
    head h uses columns h d:(h+1) d, scores q_h k_h^T / sqrt(d), output concat_h(...) W_out^T + b_out.
So W_Q[h] = W_q[h d:(h+1) d].T, and likewise for K and V, and W_O = W_out^T.
"""

from __future__ import annotations

import torch
from torch import nn

from .._errors import CheckpointError
from ._dot_product import DotProductMultiheadAttention


def _split_heads(W: torch.Tensor, H: int) -> torch.Tensor:
    """torch's (D, D) projection (out x in) -> (H, D, d) with W_h = W[h d:(h+1) d].T."""
    D = W.shape[1]
    return W.reshape(H, D // H, D).transpose(1, 2).contiguous()


def multihead_state_dict_to_module(state: dict[str, torch.Tensor], num_heads: int) -> DotProductMultiheadAttention:
    """Build a `DotProductMultiheadAttention` from a `torch.nn.MultiheadAttention` state dict."""
    if "in_proj_weight" in state:
        D = state["in_proj_weight"].shape[1]
        W_q, W_k, W_v = state["in_proj_weight"].chunk(3)
    elif {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= state.keys():
        W_q, W_k, W_v = state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"]
        D = W_q.shape[1]
        if W_k.shape != W_q.shape or W_v.shape != W_q.shape:
            raise CheckpointError("kdim/vdim differ from embed_dim: only self-attention (kdim = vdim = D) is supported")
    else:
        raise CheckpointError("not a torch.nn.MultiheadAttention state dict: no in_proj_weight or q/k/v_proj_weight")
    if "bias_k" in state or "bias_v" in state:
        raise CheckpointError("add_bias_kv=True is not supported: the extra key/value token changes the map")
    if num_heads < 1 or D % num_heads:
        raise CheckpointError(f"num_heads = {num_heads} must be >= 1 and divide embed_dim = {D}")
    dtype = W_q.dtype
    has_bias = "in_proj_bias" in state
    module = DotProductMultiheadAttention(D, num_heads, bias=True, dtype=dtype)
    d = D // num_heads
    with torch.no_grad():
        module.W_Q.copy_(_split_heads(W_q, num_heads))
        module.W_K.copy_(_split_heads(W_k, num_heads))
        module.W_V.copy_(_split_heads(W_v, num_heads))
        module.W_O.copy_(state["out_proj.weight"].T)
        if has_bias:
            b_q, b_k, b_v = state["in_proj_bias"].chunk(3)
            module.b_Q.copy_(b_q.reshape(num_heads, d))
            module.b_K.copy_(b_k.reshape(num_heads, d))
            module.b_V.copy_(b_v.reshape(num_heads, d))
        if "out_proj.bias" in state:
            module.b_O.copy_(state["out_proj.bias"])
    return module


def from_torch_multihead_attention(mha: nn.MultiheadAttention) -> DotProductMultiheadAttention:
    """The same map as ``mha(X, X, X, need_weights=False)[0]`` (batch-first), as a certifiable module.

    Refuses options that change the map beyond plain self-attention: add_bias_kv, add_zero_attn, kdim/vdim != D.
    Dropout is ignored (evaluation mode).
    """
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"expected torch.nn.MultiheadAttention, got {type(mha).__name__}")
    if mha.add_zero_attn:
        raise CheckpointError("add_zero_attn=True is not supported: the extra zero token changes the map")
    return multihead_state_dict_to_module(dict(mha.state_dict()), mha.num_heads)
