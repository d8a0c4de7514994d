"""Models from torch modules: `torch.nn.TransformerEncoderLayer` / `TransformerEncoder` (norm_first or not, ReLU or
GELU), the repository's digits vision transformer (`certify.experiments.DigitsTransformer`) and its character-level
language model (`certify.experiments.CharTransformer`).

The language model reads character ids, which are discrete: the certified function is the map from the embedding
sum X = embedding(ids) + position[:N] (N x D, `language_model_input`) to the logits (N x vocab), with causal
attention. DP attention becomes `Attention(causal=True)` with its biases; tied L2 and contractive L2 (tied L2 with
W^O scaled by gamma / B(W), as the layer computes it) become `L2Attention(causal=True)`; untied L2 is refused (not
Lipschitz, MATH.md section 1).

Dropout is ignored (eval mode). Weights are copied to float64; the torch layout y = x W^T + b becomes
`Linear(weight=W^T)` (rows of the state are tokens).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .._errors import InvalidInputError
from ..attention import AttentionWeights
from ._blocks import (AddConstant, Attention, ClassToken, FeedForward, Gather, L2Attention, LayerNorm, Linear, Model,
                      Pool, post_ln_block, pre_ln_block)


def _np(tensor: torch.Tensor | None) -> np.ndarray | None:
    return None if tensor is None else tensor.detach().to("cpu", torch.float64).numpy().copy()


def attention_from_mha(mha: nn.MultiheadAttention) -> Attention:
    """`Attention` from a self-attention `torch.nn.MultiheadAttention` (packed or separate projections)."""
    if mha.bias_k is not None or mha.add_zero_attn:
        raise InvalidInputError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
    if not mha._qkv_same_embed_dim:
        raise InvalidInputError("nn.MultiheadAttention with kdim / vdim != embed_dim is not self-attention")
    D, H = mha.embed_dim, mha.num_heads
    d = D // H
    W = _np(mha.in_proj_weight)  # (3D, D): rows [W_q; W_k; W_v], y = x W^T
    b = _np(mha.in_proj_bias) if mha.in_proj_bias is not None else None

    def heads(part: int) -> tuple[np.ndarray, np.ndarray | None]:
        block = W[part * D:(part + 1) * D].T  # (D, D): columns = output features
        weights = block.reshape(D, H, d).transpose(1, 0, 2)
        bias = None if b is None else b[part * D:(part + 1) * D].reshape(H, d)
        return weights, bias

    (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = heads(0), heads(1), heads(2)
    return Attention(W_Q, W_K, W_V, b_Q, b_K, b_V, _np(mha.out_proj.weight).T, _np(mha.out_proj.bias),
                     scale=1.0 / np.sqrt(d))


def layer_norm(norm: nn.LayerNorm) -> LayerNorm:
    if len(norm.normalized_shape) != 1:
        raise InvalidInputError(f"LayerNorm over {tuple(norm.normalized_shape)}: only the last dimension is supported")
    D = norm.normalized_shape[0]
    gamma = _np(norm.weight) if norm.weight is not None else np.ones(D)
    beta = _np(norm.bias) if norm.bias is not None else np.zeros(D)
    return LayerNorm(gamma, beta, norm.eps)


def linear(module: nn.Linear) -> Linear:
    return Linear(_np(module.weight).T, _np(module.bias))


def _activation_name(layer: nn.TransformerEncoderLayer) -> str:
    code = getattr(layer, "activation_relu_or_gelu", 0)
    if code == 1:
        return "relu"
    if code == 2:
        return "gelu"
    act = layer.activation
    if act is torch.nn.functional.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is torch.nn.functional.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise InvalidInputError(f"TransformerEncoderLayer activation {act!r}: only relu and gelu (exact) are supported")


def encoder_layer_blocks(layer: nn.TransformerEncoderLayer) -> tuple:
    """The blocks of one encoder layer: pre-LN (norm_first=True) or post-LN."""
    attention = attention_from_mha(layer.self_attn)
    ff = FeedForward(_np(layer.linear1.weight).T, _np(layer.linear1.bias), _activation_name(layer),
                     _np(layer.linear2.weight).T, _np(layer.linear2.bias))
    norm1, norm2 = layer_norm(layer.norm1), layer_norm(layer.norm2)
    if layer.norm_first:
        return pre_ln_block(norm1, attention, norm2, ff)
    return post_ln_block(attention, norm1, ff, norm2)


def _feed_forward(sequential: nn.Sequential) -> FeedForward:
    if (len(sequential) != 3 or not isinstance(sequential[0], nn.Linear) or not isinstance(sequential[2], nn.Linear)
            or not isinstance(sequential[1], (nn.ReLU, nn.GELU))
            or (isinstance(sequential[1], nn.GELU) and sequential[1].approximate != "none")):
        raise InvalidInputError(f"feed-forward must be Linear, ReLU or GELU, Linear; got {sequential}")
    kind = "relu" if isinstance(sequential[1], nn.ReLU) else "gelu"
    return FeedForward(_np(sequential[0].weight).T, _np(sequential[0].bias), kind, _np(sequential[2].weight).T,
                       _np(sequential[2].bias))


def _digits_model(model: nn.Module) -> Model:
    from ..experiments._vision import PATCH, SIDE  # the patch layout of the model being imported

    grid = np.arange(SIDE * SIDE).reshape(SIDE // PATCH, PATCH, SIDE // PATCH, PATCH).transpose(0, 2, 1, 3)
    blocks: list = [Gather(grid.reshape((SIDE // PATCH) ** 2, PATCH * PATCH)), linear(model.embed),
                    ClassToken(_np(model.cls).reshape(-1)), AddConstant(_np(model.position)[0])]
    for block in model.blocks:
        blocks.extend(pre_ln_block(layer_norm(block.norm_attention), attention_from_mha(block.attention),
                                   layer_norm(block.norm_ff), _feed_forward(block.ff)))
    blocks += [layer_norm(model.norm), Pool("cls"), linear(model.head)]
    return Model(tuple(blocks), (SIDE, SIDE))


def attention_from_weights(weights: AttentionWeights, causal: bool) -> Attention | L2Attention:
    """The block of a certify attention layer's `AttentionWeights` (MATH.md section 1): "dp" -> `Attention` (logits
    scaled by 1/sqrt(d), with biases), tied "l2" -> `L2Attention`; "l2-untied" is refused (not Lipschitz)."""
    if weights.kind == "l2-untied":
        raise InvalidInputError("untied L2 attention (W^K != W^Q) is not Lipschitz (MATH.md section 1: its Jacobian "
                                "grows without bound), so no whole-model certificate exists for it; use tied L2 "
                                "(attention 'l2-tied' or 'contractive-l2')")
    W_O, b_O = _np(weights.W_O), _np(weights.b_O)
    if weights.kind == "l2":
        return L2Attention(_np(weights.W_Q), _np(weights.W_V), W_O, b_O, causal=causal)
    return Attention(_np(weights.W_Q), _np(weights.W_K), _np(weights.W_V), _np(weights.b_Q), _np(weights.b_K),
                     _np(weights.b_V), W_O, b_O, scale=1.0 / np.sqrt(weights.d), causal=causal)


def _language_model(model: nn.Module, input_shape: tuple[int, ...] | None) -> Model:
    """X = embedding(ids) + position[:N] (N x D) -> logits (N x vocab): the blocks (causal attention), the final
    LayerNorm (pre-LN) and the read-out."""
    config = model.config
    if input_shape is None or len(input_shape) != 2:
        raise InvalidInputError("a language model needs input_shape = (N, D): its input is the embedding sum "
                                "X = embedding(ids) + position[:N]")
    N, D = (int(n) for n in input_shape)
    if D != config.D or not 1 <= N <= config.context:
        raise InvalidInputError(f"input_shape {tuple(input_shape)} must be (N, {config.D}) with 1 <= N <= "
                                f"{config.context} (the model's context)")
    blocks: list = []
    for block in model.blocks:
        attention = attention_from_weights(block.attention.attention_weights(), causal=True)
        ff = _feed_forward(block.ff)
        norm1, norm2 = layer_norm(block.ln1), layer_norm(block.ln2)
        if block.layer_norm == "pre":
            blocks.extend(pre_ln_block(norm1, attention, norm2, ff))
        else:
            blocks.extend(post_ln_block(attention, norm1, ff, norm2))
    if isinstance(model.final_norm, nn.LayerNorm):
        blocks.append(layer_norm(model.final_norm))
    blocks.append(linear(model.readout))
    return Model(tuple(blocks), (N, D))


def language_model_input(model: nn.Module, ids: torch.Tensor | np.ndarray) -> np.ndarray:
    """X = embedding(ids) + position[:N] in float64, (N, D), for character ids (N,) of a `CharTransformer`: the
    input of `from_torch(model, (N, D))` (the ids are discrete and not part of the certified function)."""
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    if ids.ndim != 1 or not 1 <= ids.shape[0] <= model.config.context:
        raise InvalidInputError(f"ids must be one sequence of 1 to {model.config.context} ids, got {tuple(ids.shape)}")
    if int(ids.min()) < 0 or int(ids.max()) >= model.config.vocab_size:
        raise InvalidInputError(f"ids must lie in [0, {model.config.vocab_size})")
    with torch.no_grad():
        X = model.embedding.weight.double()[ids] + model.position.double()[: ids.shape[0]]
    return X.numpy()


def from_torch(module: nn.Module, input_shape: tuple[int, ...] | None = None) -> Model:
    """A `Model` from a torch module.

    Args:
        module: `nn.TransformerEncoderLayer`, `nn.TransformerEncoder` (batch_first or not: the model acts on one
            sequence (N, D)), `certify.experiments.DigitsTransformer`, or `certify.experiments.CharTransformer`
            (the model of X = embedding(ids) + position[:N] -> logits (N, vocab); module docstring).
        input_shape: (N, D) for the encoder modules and the language model (the sequence length is not recorded
            in them).
    """
    from ..experiments import CharTransformer, DigitsTransformer

    if isinstance(module, DigitsTransformer):
        return _digits_model(module)
    if isinstance(module, CharTransformer):
        return _language_model(module, input_shape)
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
        if input_shape is None or len(input_shape) != 2:
            raise InvalidInputError("a transformer encoder needs input_shape = (N, D)")
        layers = [module] if isinstance(module, nn.TransformerEncoderLayer) else list(module.layers)
        blocks: list = []
        for layer in layers:
            blocks.extend(encoder_layer_blocks(layer))
        if isinstance(module, nn.TransformerEncoder) and module.norm is not None:
            blocks.append(layer_norm(module.norm))
        D = layers[0].self_attn.embed_dim
        if input_shape[1] != D:
            raise InvalidInputError(f"input_shape {tuple(input_shape)} does not match the model's D = {D}")
        return Model(tuple(blocks), tuple(input_shape))
    raise InvalidInputError(f"cannot import {type(module).__name__}: supported are nn.TransformerEncoderLayer, "
                            "nn.TransformerEncoder, certify.experiments.DigitsTransformer and "
                            "certify.experiments.CharTransformer (or export to ONNX)")
