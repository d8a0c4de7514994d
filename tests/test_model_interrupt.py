"""Progress and Ctrl-C in whole-model certification (`certify_model`, `certified_radius`, `certify model`).

Ctrl-C is injected as a KeyboardInterrupt raised by a block's bound function after k calls (no real signals). What
is kept must be certified: the bound of the longest completed prefix (equal to certifying that prefix alone, and
never reported as the whole model's), or the largest radius certified so far; the CLI exits 130 and says so."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest
import torch

from certify.cli import main
from certify.model import Model, ModelInterrupted, certified_radius, certify_model, forward
from certify.model import _certify, _jacobian_chain, _radius

from test_model_chain import tiny_model


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def interrupt_after(monkeypatch, module, name: str, calls: int) -> list[int]:
    """Replace module.name by a wrapper that raises KeyboardInterrupt on call number ``calls`` + 1."""
    original = getattr(module, name)
    count = [0]

    def wrapper(*args, **kwargs):
        if count[0] >= calls:
            raise KeyboardInterrupt
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return count


def model_and_input(seed: int = 0) -> tuple[Model, np.ndarray]:
    model = tiny_model(seed, N=3, D=6, classes=3)
    x0 = np.random.default_rng(seed).standard_normal(model.input_shape)
    return model, x0


def jacobian_norm(model: Model, x: np.ndarray, norm: str) -> float:
    x = torch.tensor(x)
    J = torch.func.jacrev(lambda v: forward(model, v.reshape(x.shape)).reshape(-1))(x.reshape(-1))
    return float(J.abs().sum(1).max() if norm == "inf" else torch.linalg.matrix_norm(J, 2))


def test_progress_is_called_once_per_block():
    model, x0 = model_and_input()
    for method in ("jacobian", "product"):
        seen: list[int] = []
        certify_model(model, x0, 1e-4, "inf", method=method, progress=seen.append)
        assert seen == list(range(len(model.blocks)))
    seen, steps = [], []
    radius = certified_radius(model, x0, "inf", progress=seen.append, on_step=lambda e, r: steps.append((e, r)))
    assert len(seen) == radius.calls * len(model.blocks) and len(steps) == radius.calls
    assert radius.value == max(r for _, r in steps) >= max(e for e, r in steps if r >= e) and not radius.interrupted


@pytest.mark.parametrize("method,module,name", [("jacobian", _jacobian_chain, "block_jacobian"),
                                                ("product", _certify, "analyse")])
@pytest.mark.parametrize("norm", ["inf", "2"])
def test_interrupt_keeps_the_longest_certified_prefix(monkeypatch, method, module, name, norm):
    model, x0 = model_and_input(1)
    eps = 1e-4
    count = interrupt_after(monkeypatch, module, name, 3)
    with pytest.raises(ModelInterrupted) as caught:
        certify_model(model, x0, eps, norm, method=method)
    assert count[0] == 3
    interrupt = caught.value
    assert isinstance(interrupt, KeyboardInterrupt) and interrupt.blocks == len(model.blocks)
    k = len(interrupt.prefixes)
    assert 1 <= k < len(model.blocks)
    monkeypatch.undo()
    prefix = Model(model.blocks[:k], model.input_shape)
    alone = certify_model(prefix, x0, eps, norm, method=method)
    assert interrupt.longest.value == pytest.approx(alone.value, rel=1e-12)
    assert jacobian_norm(prefix, x0, norm) <= interrupt.longest.value


def test_interrupt_before_any_block_keeps_nothing(monkeypatch):
    model, x0 = model_and_input(2)
    interrupt_after(monkeypatch, _jacobian_chain, "block_jacobian", 0)
    with pytest.raises(ModelInterrupted) as caught:
        certify_model(model, x0, 1e-4, "inf")
    assert caught.value.prefixes == () and caught.value.longest is None


@pytest.mark.parametrize("calls", [0, 2, 4])
def test_interrupted_radius_is_the_largest_certified_so_far(monkeypatch, calls):
    model, x0 = model_and_input(3)
    steps: list[tuple[float, float]] = []
    interrupt_after(monkeypatch, _radius, "model_enclosure", calls)
    radius = certified_radius(model, x0, "inf", on_step=lambda e, r: steps.append((e, r)))
    assert radius.interrupted and len(steps) == calls
    assert radius.value == max((r for _, r in steps), default=0.0)
    monkeypatch.undo()
    if radius.value > 0:  # certified: the margins stay positive on the ball (checked by the enclosure again)
        full = certified_radius(model, x0, "inf")
        assert radius.value <= full.value


def run_cli(capsys, tmp_path, *extra) -> tuple[int, str, str, dict]:
    model_path, x_path, out = tmp_path / "m.pt", tmp_path / "x.npy", tmp_path / "out.json"
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(6, 2, 12, dropout=0.0, batch_first=True).eval()
    torch.save(layer, model_path)
    np.save(x_path, np.random.default_rng(0).standard_normal((3, 6)))
    code = main(["model", str(model_path), "--input", str(x_path), "--eps", "1e-4", "--json", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err, json.loads(out.read_text())


def test_cli_interrupt_during_the_constant_reports_the_prefix(monkeypatch, capsys, tmp_path):
    interrupt_after(monkeypatch, _jacobian_chain, "block_jacobian", 3)
    code, out, err, document = run_cli(capsys, tmp_path)
    assert code == 130
    assert "longest completed prefix" in out and "interrupted" in err
    assert "certified   " not in out  # no whole-model bound is printed
    assert document["certified"] is None
    stage = document["interrupted"]
    assert stage["stage"] == "constant" and stage["prefix"]["blocks"] == len(stage["prefixes"]) >= 1
    assert stage["prefix"]["value"] == stage["prefixes"][-1]["value"]


def test_cli_interrupt_before_anything_was_certified(monkeypatch, capsys, tmp_path):
    interrupt_after(monkeypatch, _jacobian_chain, "block_jacobian", 0)
    code, out, err, document = run_cli(capsys, tmp_path)
    assert code == 130 and "interrupted before anything was certified" in out + err
    assert document["interrupted"]["prefix"] is None and document["certified"] is None


def test_cli_interrupt_during_the_radius_keeps_the_largest_certified(monkeypatch, capsys, tmp_path):
    interrupt_after(monkeypatch, _radius, "model_enclosure", 3)
    code, out, err, document = run_cli(capsys, tmp_path, "--radius", "--no-attained")
    assert code == 130 and "INTERRUPTED" in out
    assert document["interrupted"]["stage"] == "radius" and document["radius"]["interrupted"] is True
    assert document["certified"]["value"] > 0  # the constant was complete before the radius began


def test_cli_uninterrupted_json_says_so(capsys, tmp_path):
    code, _, _, document = run_cli(capsys, tmp_path, "--no-attained")
    assert code == 0 and document["interrupted"] is None


def test_cli_progress_on_a_terminal_and_quiet(monkeypatch, capsys, tmp_path):
    """A bar per block on a terminal (stderr carries its '\\r' redraws); none with --quiet."""
    monkeypatch.setattr(sys, "stderr", _Terminal())
    run_cli(capsys, tmp_path, "--no-attained")
    assert "block" in sys.stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", _Terminal())
    run_cli(capsys, tmp_path, "--no-attained", "--quiet")
    assert "block" not in sys.stderr.getvalue()
