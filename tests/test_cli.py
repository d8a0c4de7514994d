"""The `certify` command line: tables, JSON schema, and a precise message with exit code 2 for each bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch

from certify import DotProductMultiheadAttention, L2MultiheadAttention, UntiedL2MultiheadAttention, save_layer
from certify.cli import main


@pytest.fixture
def l2_checkpoint(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "l2.pt"
    save_layer(L2MultiheadAttention(4, 2), path)
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_schema(document: dict, norm: str) -> None:
    assert set(document) >= {"layer", "tokens", "norm", "domain", "results"}
    assert document["norm"] == norm
    for row in document["results"]:
        assert set(row) == {"method", "kind", "scope", "value", "certified", "seconds"}
        assert row["kind"] in ("upper", "lower") and isinstance(row["certified"], bool)
    uppers = [r["value"] for r in document["results"] if r["kind"] == "upper" and r["certified"]]
    lowers = [r["value"] for r in document["results"] if r["kind"] == "lower"]
    assert uppers and lowers
    assert max(lowers) <= min(uppers)


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_layer_prints_table_and_writes_json(capsys, tmp_path, l2_checkpoint, norm):
    out_file = tmp_path / "out.json"
    code, out, err = run(capsys, "layer", l2_checkpoint, "--tokens", 5, "--norm", norm, "--json", out_file, "--quiet",
                         "--time-budget", 2)
    assert code == 0, err
    for column in ("method", "kind", "scope", "value", "certified", "seconds"):
        assert column in out
    assert "best certified upper / best lower" in out
    document = json.loads(out_file.read_text())
    check_schema(document, norm)
    assert document["tokens"] == 5 and document["domain"] == "global"


def test_multihead_attention_state_dict_with_heads_and_radius(capsys, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "mha.pt"
    torch.save(torch.nn.MultiheadAttention(6, 3, batch_first=True).state_dict(), path)
    out_file = tmp_path / "mha.json"
    code, out, err = run(capsys, "layer", path, "--heads", 3, "--add-zero-attn", "no", "--tokens", 4, "--norm", "2",
                         "--radius", 1.5, "--json", out_file, "--quiet", "--time-budget", 2)
    assert code == 0, err
    document = json.loads(out_file.read_text())
    check_schema(document, "2")
    assert document["domain"] == "ball(R=1.5)" and document["layer"]["kind"] == "dp"


def expect_error(capsys, pattern, *argv):
    with pytest.raises(SystemExit) if argv and argv[0] == "argparse" else _no_exit():
        argv = argv[1:] if argv and argv[0] == "argparse" else argv
        code, out, err = run(capsys, *argv)
        assert code == 2, (out, err)
        assert pattern in err, err
        assert "best certified" not in out  # no number is printed on failure


class _no_exit:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_dot_product_without_domain_explains_theorem_3_1(capsys, tmp_path):
    path = tmp_path / "dp.pt"
    save_layer(DotProductMultiheadAttention(4, 2), path)
    expect_error(capsys, "Theorem 3.1", "layer", path, "--tokens", 4, "--norm", "2", "--quiet")


def test_untied_l2_global_is_refused(capsys, tmp_path):
    path = tmp_path / "untied.pt"
    save_layer(UntiedL2MultiheadAttention(4, 2), path)
    expect_error(capsys, "not Lipschitz", "layer", path, "--tokens", 4, "--norm", "inf", "--quiet")


def test_nan_weights_are_refused(capsys, tmp_path):
    layer = L2MultiheadAttention(4, 2)
    with torch.no_grad():
        layer.W_V[0, 0, 0] = math.nan
    path = tmp_path / "nan.pt"
    save_layer(layer, path)
    expect_error(capsys, "NaN or Inf", "layer", path, "--tokens", 4, "--norm", "2", "--quiet")


def test_unreadable_and_foreign_checkpoints(capsys, tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"\x00garbage")
    expect_error(capsys, "cannot read", "layer", tmp_path / "bad.pt", "--tokens", 4, "--norm", "2")
    torch.save({"w": torch.zeros(2)}, tmp_path / "foreign.pt")
    expect_error(capsys, "neither a certify layer", "layer", tmp_path / "foreign.pt", "--tokens", 4, "--norm", "2")
    expect_error(capsys, "does not exist", "layer", tmp_path / "nope.pt", "--tokens", 4, "--norm", "2")
    torch.save(torch.nn.MultiheadAttention(6, 3).state_dict(), tmp_path / "mha.pt")
    expect_error(capsys, "--heads", "layer", tmp_path / "mha.pt", "--tokens", 4, "--norm", "2", "--radius", 1)


def test_shape_mismatch_in_checkpoint(capsys, tmp_path, l2_checkpoint):
    payload = torch.load(l2_checkpoint, weights_only=True)
    payload["state_dict"]["W_V"] = torch.zeros(2, 4, 3)
    torch.save(payload, tmp_path / "shapes.pt")
    expect_error(capsys, "does not match", "layer", tmp_path / "shapes.pt", "--tokens", 4, "--norm", "2")


@pytest.mark.parametrize("argv, pattern", [
    (["--tokens", "4", "--norm", "3"], "invalid choice: '3'"),
    (["--tokens", "0", "--norm", "2"], "must be >= 1"),
    (["--tokens", "-2", "--norm", "2"], "must be >= 1"),
    (["--tokens", "4", "--norm", "2", "--radius", "-1"], "positive finite"),
    (["--tokens", "4", "--norm", "2", "--radius", "nan"], "positive finite"),
])
def test_argument_errors_exit_2(capsys, l2_checkpoint, argv, pattern):
    with pytest.raises(SystemExit) as exit_info:
        main(["layer", str(l2_checkpoint), *argv])
    assert exit_info.value.code == 2
    assert pattern in capsys.readouterr().err


def test_method_that_does_not_apply_is_refused(capsys, l2_checkpoint):
    expect_error(capsys, "do not apply", "layer", l2_checkpoint, "--tokens", 4, "--norm", "2", "--method", "castin",
                 "--quiet")


def test_demo_prints_both_tables_and_valid_json(capsys, tmp_path):
    out_file = tmp_path / "demo.json"
    code, out, err = run(capsys, "demo", "--json", out_file, "--quiet", "--time-budget", 2)
    assert code == 0, err
    assert "L2-MHA" in out and "DP-MHA" in out
    reports = json.loads(out_file.read_text())["reports"]
    assert {r["layer"]["kind"] for r in reports} == {"l2", "dp"}
    for report in reports:
        check_schema(report, report["norm"])


def test_branch_and_bound_methods_with_time_budget(capsys, tmp_path):
    """--method bnb: local on a ball (DP), global for a d = 1 L2 head; each certified and above its lower bound."""
    torch.manual_seed(0)
    save_layer(DotProductMultiheadAttention(2, 1, dtype=torch.float64), tmp_path / "dp.pt")
    save_layer(L2MultiheadAttention(1, 1, dtype=torch.float64), tmp_path / "l2.pt")
    for path, extra in ((tmp_path / "dp.pt", ["--radius", "1"]), (tmp_path / "l2.pt", [])):
        out_file = tmp_path / "bnb.json"
        code, out, err = run(capsys, "layer", path, "--tokens", 2, "--norm", "2", "--method", "bnb",
                             "--time-budget", 2, "--json", out_file, "--quiet", *extra)
        assert code == 0, err
        document = json.loads(out_file.read_text())
        check_schema(document, "2")
        assert [r["method"] for r in document["results"] if r["kind"] == "upper"] == ["bnb"]


def test_sdp_method_needs_the_two_norm_and_a_domain(capsys, l2_checkpoint):
    expect_error(capsys, "do not apply", "layer", l2_checkpoint, "--tokens", 3, "--norm", "inf", "--radius", 1,
                 "--method", "sdp", "--quiet")
    expect_error(capsys, "do not apply", "layer", l2_checkpoint, "--tokens", 3, "--norm", "2", "--method", "sdp",
                 "--quiet")
