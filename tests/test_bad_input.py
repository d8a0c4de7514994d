"""Issue 16, bad input: each case gets `certify <command>: error: ...` and exit 2 (CLI) or a `CertifyError` (Python),
never a traceback and never a silent number. Also item 3: add_zero_attn is invisible in a state dict."""

from __future__ import annotations

import math

import pytest
import torch

from certify import (CertifyError, ContractiveL2MultiheadAttention, DotProductMultiheadAttention, L2MultiheadAttention,
                     certify_layer, save_layer)
from certify._domain import Ball, Global
from certify._errors import CheckpointError, InvalidInputError
from certify import load_layer
from certify.attention import AttentionWeights
from certify.cli import main
from certify.report import write_json

F64 = torch.float64


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_info:  # argparse
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expect_refusal(capsys, message, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert f"certify {argv[0]}: error: " in err and message in err, err
    assert "Traceback" not in err and "best certified" not in out


def mha_state(**options) -> dict:
    torch.manual_seed(0)
    return dict(torch.nn.MultiheadAttention(4, 2, batch_first=True, **options).state_dict())


MHA_FLAGS = ("--heads", 2, "--add-zero-attn", "no", "--tokens", 3, "--norm", "2", "--radius", 1, "--quiet",
             "--no-lower", "--method", "castin")


# Item 3: add_zero_attn leaves no trace in a state dict, so it must be stated.

def test_add_zero_attn_is_invisible_in_a_state_dict_so_the_cli_asks_for_it(capsys, tmp_path):
    state = mha_state(add_zero_attn=True)
    assert state.keys() == mha_state().keys()  # the same keys as a plain layer: nothing tells them apart
    torch.save(state, tmp_path / "zero.pt")
    base = ("layer", tmp_path / "zero.pt", "--heads", 2, "--tokens", 1, "--norm", "2", "--radius", 2, "--quiet",
            "--method", "bnb", "--time-budget", 1)
    expect_refusal(capsys, "records neither num_heads nor add_zero_attn", *base)
    expect_refusal(capsys, "--add-zero-attn no on the command line", *base)
    expect_refusal(capsys, "add_zero_attn=True is not supported", *base, "--add-zero-attn", "yes")
    with pytest.raises(CheckpointError, match="add_zero_attn=False in load_layer"):
        load_layer(tmp_path / "zero.pt", num_heads=2)


def test_state_dict_missing_both_statements_names_both(capsys, tmp_path):
    torch.save(mha_state(), tmp_path / "mha.pt")
    expect_refusal(capsys, "--heads H --add-zero-attn no on the command line", "layer", tmp_path / "mha.pt",
                   "--tokens", 3, "--norm", "2", "--radius", 1)


def test_explicit_add_zero_attn_no_certifies(capsys, tmp_path):
    torch.save(mha_state(), tmp_path / "mha.pt")
    code, out, err = run(capsys, "layer", tmp_path / "mha.pt", *MHA_FLAGS)
    assert code == 0, err
    assert "castin" in out and "yes" in out


def test_python_api_refuses_an_add_zero_attn_module():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, add_zero_attn=True)
    with pytest.raises(CheckpointError, match="add_zero_attn=True is not supported"):
        certify_layer(mha, 1, "2", radius=2.0, methods=["castin"], lower=False)


def test_add_zero_attn_flag_contradicting_a_certify_layer_is_refused(capsys, tmp_path):
    save_layer(L2MultiheadAttention(4, 2), tmp_path / "l2.pt")
    expect_refusal(capsys, "has no add_zero_attn option", "layer", tmp_path / "l2.pt", "--add-zero-attn", "yes",
                   "--tokens", 3, "--norm", "2", "--no-lower", "--method", "paper")
    expect_refusal(capsys, "H = 2 heads, not the 3 asked for", "layer", tmp_path / "l2.pt", "--heads", 3,
                   "--tokens", 3, "--norm", "2", "--no-lower", "--method", "paper")


# Bad input: torch.nn.MultiheadAttention state dicts.

def _set(key, value):
    def change(state):
        state[key] = value(state[key]) if callable(value) else value
        return state
    return change


@pytest.mark.parametrize("change, message", [
    (_set("out_proj.weight", torch.zeros(4, 5)), "out_proj.weight must be a square (D, D) matrix, got shape (4, 5)"),
    (_set("in_proj_weight", torch.zeros(13, 4)),
     "in_proj_weight must have shape (12, 4) for embed_dim D = 4 (from out_proj.weight), got (13, 4)"),
    (_set("in_proj_bias", torch.zeros(11)), "in_proj_bias must have shape (12,) for embed_dim D = 4"),
    (_set("in_proj_weight", lambda W: W.unsqueeze(-1)), "in_proj_weight must have shape (12, 4) for embed_dim D = 4 "
                                                        "(from out_proj.weight), got (12, 4, 1)"),
    (_set("in_proj_bias", "not a tensor"), "state dict entries must be tensors; not tensors: 'in_proj_bias' (str)"),
    (_set("in_proj_bias", [0.0] * 12), "not tensors: 'in_proj_bias' (list)"),
    (lambda s: {k: v.to(torch.complex64) for k, v in s.items()},
     "the state dict has dtype complex64; certify accepts real floating-point weights, float32 or float64"),
    (lambda s: {k: (10 * v).to(torch.int64) for k, v in s.items()}, "the state dict has dtype int64; certify accepts"),
    (lambda s: {k: v > 0 for k, v in s.items()}, "the state dict has dtype bool; certify accepts"),
    (_set("in_proj_weight", lambda W: W.to(torch.complex64)), "share one dtype, got ['complex64', 'float32']"),
    (_set("out_proj.weight", lambda W: W.double()), "share one dtype, got ['float32', 'float64']"),
    (_set("encoder.weight", torch.zeros(2)), "unexpected keys ['encoder.weight']"),
])
def test_malformed_multihead_state_dicts_are_refused(capsys, tmp_path, change, message):
    torch.save(change(mha_state()), tmp_path / "bad.pt")
    expect_refusal(capsys, message, "layer", tmp_path / "bad.pt", *MHA_FLAGS)


def test_bias_kv_state_dict_is_refused(capsys, tmp_path):
    torch.save(mha_state(add_bias_kv=True), tmp_path / "kv.pt")
    expect_refusal(capsys, "add_bias_kv=True is not supported", "layer", tmp_path / "kv.pt", *MHA_FLAGS)


# Bad input: certify-format checkpoints.

def _certify_checkpoint(tmp_path, layer, change):
    save_layer(layer, tmp_path / "good.pt")
    payload = torch.load(tmp_path / "good.pt", weights_only=True)
    change(payload)
    torch.save(payload, tmp_path / "bad.pt")
    return tmp_path / "bad.pt"


@pytest.mark.parametrize("make, change, message", [
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(D=5),
     "config needs integers D >= 1 and H >= 1 with H dividing D, got D = 5, H = 2"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(H=0), "got D = 4, H = 0"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(H=True), "got D = 4, H = True"),
    (lambda: ContractiveL2MultiheadAttention(4, 2, max_tokens=8), lambda p: p["config"].update(gamma=1.5),
     "config gamma must lie in (0, 1) for a contraction, got 1.5"),
    (lambda: ContractiveL2MultiheadAttention(4, 2, max_tokens=8), lambda p: p["config"].update(max_tokens=0),
     "config max_tokens must be an integer >= 1, got 0"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p.pop("config"), "has no config dict (got NoneType)"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(dtype="bogus"),
     "config dtype must be one of ['float32', 'float64'], got 'bogus'"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(dtype="Tensor"),
     "config dtype must be one of ['float32', 'float64'], got 'Tensor'"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["config"].update(extra=1), "config for L2MultiheadAttention must"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["state_dict"].update(W_V=p["state_dict"]["W_V"].double()),
     "state_dict entry 'W_V' has dtype float64 but the config says float32"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p["state_dict"].update(W_V=1.0),
     "state_dict entry 'W_V' is a float, not a tensor"),
    (lambda: L2MultiheadAttention(4, 2), lambda p: p.update(version=2), "has format version 2"),
])
def test_malformed_certify_checkpoints_are_refused(capsys, tmp_path, make, change, message):
    torch.manual_seed(0)
    path = _certify_checkpoint(tmp_path, make(), change)
    expect_refusal(capsys, message, "layer", path, "--tokens", 3, "--norm", "2", "--quiet", "--no-lower",
                   "--method", "paper")


# Bad input: weights, memory, methods, JSON.

@pytest.mark.parametrize("dtype", [torch.complex128, torch.int64, torch.bool, torch.float16])
def test_attention_weights_refuse_non_float_dtypes(dtype):
    W = torch.ones(1, 2, 2, dtype=dtype)
    with pytest.raises(InvalidInputError, match=f"W_Q has dtype {str(dtype)[6:]}; weights must be real floating "
                                                 "point, float32 or float64"):
        AttentionWeights("dp", W, W, W, torch.ones(2, 2, dtype=dtype))


def test_nan_in_tied_query_weights_says_nan_not_untied(capsys, tmp_path):
    W_Q = torch.ones(1, 2, 2, dtype=F64)
    W_Q[0, 0, 0] = math.nan
    with pytest.raises(InvalidInputError, match="W_Q has NaN or Inf entries"):
        AttentionWeights("l2", W_Q, W_Q, torch.ones(1, 2, 2, dtype=F64), torch.ones(2, 2, dtype=F64))
    layer = L2MultiheadAttention(4, 2)
    with torch.no_grad():
        layer.W_Q[0, 0, 0] = math.nan
    save_layer(layer, tmp_path / "nan.pt")
    expect_refusal(capsys, "W_Q has NaN or Inf entries", "layer", tmp_path / "nan.pt", "--tokens", 3, "--norm", "2",
                   "--quiet")


def test_ten_million_tokens_are_refused_with_the_estimate_before_allocating(capsys, tmp_path):
    save_layer(DotProductMultiheadAttention(4, 2), tmp_path / "dp.pt")
    # N D > 512, so no dense Jacobians: one box (2 N D) and the N x N bounds on P, 8.0e14 bytes = 728 TiB
    expect_refusal(capsys, "bnb needs at least 728 TiB", "layer", tmp_path / "dp.pt", "--tokens", 10_000_000,
                   "--norm", "2", "--radius", 1, "--quiet", "--no-lower", "--method", "bnb")
    expect_refusal(capsys, "adversarial lower bound needs at least", "layer", tmp_path / "dp.pt", "--tokens",
                   10_000_000, "--norm", "2", "--radius", 1, "--quiet", "--method", "castin")
    code, out, err = run(capsys, "layer", tmp_path / "dp.pt", "--tokens", 10_000_000, "--norm", "2", "--radius", 1,
                         "--quiet", "--no-lower", "--method", "castin")  # the closed form is matrix-free in N
    assert code == 0, err
    assert "castin" in out


def test_memory_floors_by_hand():
    from certify._footprint import check_memory, lower_bound_floor_bytes, method_floor_bytes

    torch.manual_seed(0)
    dp = DotProductMultiheadAttention(4, 2, dtype=F64).attention_weights()
    l2 = L2MultiheadAttention(4, 2, dtype=F64).attention_weights()
    # N D = 4000: (N D)^2 = 1.6e7 > 2^22, so 2 restarts; H N^2 = 2e6 entries (times d = 2 for L2), 8 bytes each
    assert lower_bound_floor_bytes(dp, 1000) == 2 * 2 * 1000**2 * 8
    assert lower_bound_floor_bytes(l2, 1000) == 2 * 2 * 1000**2 * 2 * 8
    assert lower_bound_floor_bytes(dp, 2) == 24 * 2 * 4 * 8  # small N: all 24 restarts at once
    assert method_floor_bytes("bnb", dp, 10, Ball(1.0)) == 64 * 40**2 * 8
    # above DENSE_LOWER_COORDINATES = 512 (N D) no dense Jacobians are sampled: the floor is one box (2 N D floats)
    # and the N x N bounds on P
    assert method_floor_bytes("bnb", dp, 128, Ball(1.0)) == 64 * 512**2 * 8
    assert method_floor_bytes("bnb", dp, 129, Ball(1.0)) == (2 * 129 * 4 + 129**2) * 8
    assert method_floor_bytes("bnb", l2, 3, Global()) == 0 and method_floor_bytes("paper", l2, 10**9, Global()) == 0
    check_memory(["bnb"], dp, 10, Ball(1.0), None, available=64 * 40**2 * 8)
    with pytest.raises(InvalidInputError, match="bnb needs at least 800 KiB"):
        check_memory(["bnb"], dp, 10, Ball(1.0), None, available=64 * 40**2 * 8 - 1)


def test_methods_may_be_one_string():
    torch.manual_seed(0)
    report = certify_layer(L2MultiheadAttention(4, 2), 3, "2", methods="paper", lower=False)
    assert [c.method for c in report.certificates] == ["paper"]
    with pytest.raises(InvalidInputError, match=r"unknown method\(s\) \['pape'\]"):
        certify_layer(L2MultiheadAttention(4, 2), 3, "2", methods="pape", lower=False)


def test_json_into_a_missing_directory_is_refused_and_nothing_is_created(capsys, tmp_path):
    save_layer(L2MultiheadAttention(4, 2), tmp_path / "l2.pt")
    target = tmp_path / "missing" / "deeper" / "out.json"
    expect_refusal(capsys, "directory", "layer", tmp_path / "l2.pt", "--tokens", 3, "--norm", "2", "--quiet",
                   "--no-lower", "--method", "paper", "--json", target)
    _, _, err = run(capsys, "layer", tmp_path / "l2.pt", "--tokens", 3, "--norm", "2", "--json", target)
    assert f"does not exist (create it first; certify does not create directories)" in err
    expect_refusal(capsys, "it is a directory", "layer", tmp_path / "l2.pt", "--tokens", 3, "--norm", "2",
                   "--json", tmp_path)
    with pytest.raises(CertifyError, match="does not exist"):
        write_json(target, {"a": 1})
    assert not (tmp_path / "missing").exists()
