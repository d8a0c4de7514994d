"""Attention modules against independent loop implementations of MATH.md section 1, import of
torch.nn.MultiheadAttention, contractive layers, checkpoints and input validation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

from certify import (
    AttentionWeights, CheckpointError, ContractiveL2MultiheadAttention, DotProductMultiheadAttention,
    InvalidInputError, L2MultiheadAttention, UntiedL2MultiheadAttention, from_torch_multihead_attention,
    load_layer, save_layer,
)
from certify.attention import attention
from certify.bounds import paper_bound
from problems import F64, layers, random_inputs, random_weights


def reference_attention(X: torch.Tensor, w: AttentionWeights) -> torch.Tensor:
    """MATH.md section 1 written token by token, head by head (no shared code with certify.attention)."""
    B, N, D = X.shape
    out = torch.zeros(B, N, D, dtype=X.dtype)
    for b in range(B):
        heads = []
        for h in range(w.H):
            zero = torch.zeros(w.d, dtype=X.dtype)
            bq, bk, bv = (zero if t is None else t[h] for t in (w.b_Q, w.b_K, w.b_V))
            f = torch.zeros(N, w.d, dtype=X.dtype)
            for i in range(N):
                if w.kind == "dp":
                    logits = torch.stack([(X[b, i] @ w.W_Q[h] + bq) @ (X[b, j] @ w.W_K[h] + bk) for j in range(N)])
                    logits = logits / math.sqrt(w.d)
                else:
                    logits = torch.stack([-((X[b, i] @ w.W_Q[h] - X[b, j] @ w.W_K[h]) ** 2).sum() for j in range(N)])
                    logits = logits / math.sqrt(w.d)
                p = torch.softmax(logits, 0)
                for j in range(N):
                    if w.kind == "dp":
                        value = X[b, j] @ w.W_V[h] + bv
                    elif w.kind == "l2":
                        A = w.W_Q[h] @ w.W_Q[h].T / math.sqrt(w.d)
                        value = X[b, j] @ A @ w.W_V[h]
                    else:
                        value = X[b, j] @ w.W_V[h]
                    f[i] += p[j] * value
            heads.append(f)
        out[b] = torch.cat(heads, dim=1) @ w.W_O + (0 if w.b_O is None else w.b_O)
    return out


@given(layers(kinds=("dp", "l2", "l2-untied")), st.floats(0.1, 3.0))
def test_attention_matches_definition(layer, scale):
    weights, N = layer
    X = random_inputs(weights, N, batch=2, scale=scale)
    torch.testing.assert_close(attention(X, weights), reference_attention(X, weights), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [DotProductMultiheadAttention, L2MultiheadAttention, UntiedL2MultiheadAttention])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_modules_are_batch_first_and_keep_dtype(cls, dtype):
    layer = cls(10, 5, dtype=dtype)  # D = 10, H = 5, d = 2
    X = torch.randn(3, 7, 10, dtype=dtype)
    Y = layer(X)
    assert Y.shape == (3, 7, 10) and Y.dtype == dtype
    torch.testing.assert_close(layer(X[1:2]), Y[1:2])  # batch elements are independent


def _trained_like_mha(dtype=torch.float32, **kwargs) -> torch.nn.MultiheadAttention:
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(12, 3, batch_first=True, dtype=dtype, **kwargs).eval()
    with torch.no_grad():
        for parameter in mha.parameters():
            parameter.normal_(0, 0.3)  # non-zero biases, like a trained layer
    return mha


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_torch_multihead_attention_imports_with_same_outputs(dtype, tolerance):
    mha = _trained_like_mha(dtype)
    ours = from_torch_multihead_attention(mha)
    X = torch.randn(4, 11, 12, dtype=dtype)
    expected = mha(X, X, X, need_weights=False)[0]
    assert (ours(X) - expected).abs().max() <= tolerance


def test_torch_multihead_attention_without_bias_and_not_batch_first():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(6, 2, bias=False).eval()
    ours = from_torch_multihead_attention(mha)
    X = torch.randn(5, 6)  # unbatched (N, D)
    torch.testing.assert_close(ours(X)[0], mha(X, X, X, need_weights=False)[0], rtol=1e-6, atol=1e-6)


def test_separate_projection_weights_import():
    mha = _trained_like_mha()
    state = dict(mha.state_dict())
    q, k, v = state.pop("in_proj_weight").chunk(3)
    state.update(q_proj_weight=q, k_proj_weight=k, v_proj_weight=v)
    from certify.attention._torch_import import multihead_state_dict_to_module

    X = torch.randn(2, 5, 12)
    torch.testing.assert_close(multihead_state_dict_to_module(state, 3)(X), mha(X, X, X, need_weights=False)[0],
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("option", [dict(add_zero_attn=True), dict(add_bias_kv=True)])
def test_unsupported_multihead_options_are_refused(option):
    with pytest.raises(CheckpointError, match="not supported"):
        from_torch_multihead_attention(_trained_like_mha(**option))


def test_contractive_layer_is_certified_contractive_and_differentiable():
    torch.manual_seed(0)
    layer = ContractiveL2MultiheadAttention(8, 2, max_tokens=16, gamma=0.9, dtype=F64)
    certified = paper_bound(layer.attention_weights(), 16, "inf").value
    assert 0.9 <= certified <= 0.9 * (1 + 1e-8)  # gamma F / B has paper bound exactly gamma
    loss = layer(torch.randn(2, 16, 8, dtype=F64)).square().sum()
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
    with pytest.raises(ValueError, match="N <= 16"):
        layer(torch.randn(1, 17, 8, dtype=F64))


@pytest.mark.parametrize("make", [
    lambda: DotProductMultiheadAttention(6, 3, dtype=F64),
    lambda: L2MultiheadAttention(6, 2, bias=True),
    lambda: UntiedL2MultiheadAttention(4, 1),
    lambda: ContractiveL2MultiheadAttention(4, 2, max_tokens=9, gamma=0.5),
])
def test_checkpoint_round_trip(make, tmp_path):
    torch.manual_seed(1)
    layer = make()
    save_layer(layer, tmp_path / "layer.pt")
    loaded = load_layer(tmp_path / "layer.pt")
    assert type(loaded) is type(layer)
    X = torch.randn(2, 5, layer.D, dtype=layer.W_Q.dtype)
    torch.testing.assert_close(loaded(X), layer(X), rtol=0, atol=0)


def test_bad_checkpoints_are_refused_with_reasons(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_layer(tmp_path / "missing.pt")
    (tmp_path / "garbage.pt").write_bytes(b"this is not a torch file")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_layer(tmp_path / "garbage.pt")
    torch.save({"encoder.weight": torch.zeros(2, 2)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="neither a certify layer"):
        load_layer(tmp_path / "foreign.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="not a dict"):
        load_layer(tmp_path / "list.pt")
    torch.save(_trained_like_mha().state_dict(), tmp_path / "mha.pt")
    with pytest.raises(CheckpointError, match="num_heads"):
        load_layer(tmp_path / "mha.pt")
    with pytest.raises(CheckpointError, match="add_zero_attn"):
        load_layer(tmp_path / "mha.pt", num_heads=3)
    assert isinstance(load_layer(tmp_path / "mha.pt", num_heads=3, add_zero_attn=False), DotProductMultiheadAttention)


def test_invalid_weights_are_refused_with_expected_and_actual():
    good = random_weights("dp", 2, 3)
    with pytest.raises(InvalidInputError, match=r"W_V must have shape \(2, 6, 3\).*got \(2, 6, 4\)"):
        AttentionWeights("dp", good.W_Q, good.W_K, torch.zeros(2, 6, 4, dtype=F64), good.W_O)
    with pytest.raises(InvalidInputError, match="W_O must have shape"):
        AttentionWeights("dp", good.W_Q, good.W_K, good.W_V, good.W_O[:5])
    for bad in (math.nan, math.inf):
        W_V = good.W_V.clone()
        W_V[0, 0, 0] = bad
        with pytest.raises(InvalidInputError, match="NaN or Inf"):
            AttentionWeights("dp", good.W_Q, good.W_K, W_V, good.W_O)
    with pytest.raises(InvalidInputError, match="tied"):
        AttentionWeights("l2", good.W_Q, good.W_K, good.W_V, good.W_O)
    with pytest.raises(InvalidInputError, match="one dtype"):
        AttentionWeights("dp", good.W_Q, good.W_K, good.W_V.float(), good.W_O)
    with pytest.raises(InvalidInputError, match="kind"):
        AttentionWeights("linear", good.W_Q, good.W_K, good.W_V, good.W_O)


def test_invalid_inputs_are_refused():
    weights = random_weights("l2", 1, 3)
    with pytest.raises(InvalidInputError, match="N must be at least 1"):
        attention(torch.zeros(1, 0, 3, dtype=F64), weights)
    with pytest.raises(InvalidInputError, match="D = 4 features per token but the weights expect D = 3"):
        attention(torch.zeros(1, 2, 4, dtype=F64), weights)
    with pytest.raises(InvalidInputError, match="NaN or Inf"):
        attention(torch.full((1, 2, 3), math.nan, dtype=F64), weights)
    with pytest.raises(InvalidInputError, match=r"shape \(B, N, D\)"):
        attention(torch.zeros(3, dtype=F64), weights)
