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


MHA_KEYS: frozenset[str] = frozenset({"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                       "in_proj_bias", "out_proj.weight", "out_proj.bias", "bias_k", "bias_v"})


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def check_multihead_state_dict(state: dict, num_heads: int) -> tuple[int, torch.dtype]:
    """Validate a `torch.nn.MultiheadAttention` self-attention state dict; return (D, dtype).

    Every entry must be a tensor of the one dtype float32 or float64 (no complex, integer or bool weights, no
    mixed dtypes: a silent cast would certify other weights), with embed_dim D = out_proj.weight.shape[0]:
    out_proj.weight (D, D), out_proj.bias (D,), in_proj_weight (3 D, D) or q/k/v_proj_weight (D, D) each,
    in_proj_bias (3 D,); num_heads must divide D. bias_k / bias_v (add_bias_kv=True) are refused.
    """
    from ._weights import DTYPE_NAMES, DTYPES

    not_tensors = [f"{k!r} ({type(v).__name__})" for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise CheckpointError(f"state dict entries must be tensors; not tensors: {', '.join(not_tensors)}")
    unknown = sorted(map(str, state.keys() - MHA_KEYS))
    if unknown:
        raise CheckpointError(f"unexpected keys {unknown} for a torch.nn.MultiheadAttention state dict "
                              f"(expected some of {sorted(MHA_KEYS)})")
    if "bias_k" in state or "bias_v" in state:
        raise CheckpointError("add_bias_kv=True is not supported: the extra key/value token changes the map")
    dtypes = {v.dtype for v in state.values()}
    if len(dtypes) != 1:
        raise CheckpointError(f"all tensors of the state dict must share one dtype, got "
                              f"{sorted(str(t).replace('torch.', '') for t in dtypes)}")
    dtype = dtypes.pop()
    if dtype not in DTYPES:
        raise CheckpointError(f"the state dict has dtype {str(dtype).replace('torch.', '')}; certify accepts real "
                              f"floating-point weights, {' or '.join(DTYPE_NAMES)}")
    W_out = state["out_proj.weight"]
    if W_out.ndim != 2 or W_out.shape[0] != W_out.shape[1] or W_out.shape[0] < 1:
        raise CheckpointError(f"out_proj.weight must be a square (D, D) matrix, got shape {_shape(W_out)}")
    D = W_out.shape[0]
    expected = {"out_proj.bias": (D,), "in_proj_bias": (3 * D,)}
    if "in_proj_weight" in state:
        separate = {"q_proj_weight", "k_proj_weight", "v_proj_weight"} & state.keys()
        if separate:
            raise CheckpointError(f"both in_proj_weight and {sorted(separate)}: a state dict has one or the other")
        expected["in_proj_weight"] = (3 * D, D)
    elif {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= state.keys():
        if any(state[k].ndim == 2 and state[k].shape[0] == D and state[k].shape[1] != D
               for k in ("k_proj_weight", "v_proj_weight")):
            raise CheckpointError("kdim/vdim differ from embed_dim: only self-attention (kdim = vdim = D) is supported")
        expected.update(q_proj_weight=(D, D), k_proj_weight=(D, D), v_proj_weight=(D, D))
    else:
        raise CheckpointError("not a torch.nn.MultiheadAttention state dict: no in_proj_weight or q/k/v_proj_weight")
    for key, shape in expected.items():
        if key in state and _shape(state[key]) != shape:
            raise CheckpointError(f"{key} must have shape {shape} for embed_dim D = {D} (from out_proj.weight), "
                                  f"got {_shape(state[key])}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 or D % num_heads:
        raise CheckpointError(f"num_heads = {num_heads} must be >= 1 and divide embed_dim = {D}")
    return D, dtype


def multihead_state_dict_to_module(state: dict[str, torch.Tensor], num_heads: int) -> DotProductMultiheadAttention:
    """Build a `DotProductMultiheadAttention` from a `torch.nn.MultiheadAttention` state dict.

    The state dict cannot record ``add_zero_attn``: the caller must know it was off (`load_layer` asks for it).
    """
    D, dtype = check_multihead_state_dict(state, num_heads)
    if "in_proj_weight" in state:
        W_q, W_k, W_v = state["in_proj_weight"].chunk(3)
    else:
        W_q, W_k, W_v = state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"]
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
