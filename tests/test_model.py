"""Whole models (certify.model): importers reproduce torch and onnxruntime, errors name the node, certified local
Lipschitz constants are never below attained values, and the `certify model` command's errors and JSON."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from certify import InvalidInputError
from certify.experiments import DigitsTransformer
from certify.model import forward, from_onnx, from_torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class _NoCausal(torch.nn.Module):
    """TransformerEncoderLayer traced with is_causal fixed (the tracer otherwise passes it as a tensor)."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x, src_mask=None, is_causal=False)


def export(module: torch.nn.Module, x: torch.Tensor, path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
    return str(path)


def encoder_layer(norm_first: bool, activation: str, seed: int = 0, D: int = 12) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.TransformerEncoderLayer(D, 3, 2 * D, dropout=0.0, activation=activation, norm_first=norm_first,
                                            batch_first=True).eval()


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_torch_encoder_import(norm_first, activation):
    layer = encoder_layer(norm_first, activation)
    encoder = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(12), enable_nested_tensor=False).eval()
    x = torch.randn(3, 5, 12)
    for module in (layer, encoder):
        model = from_torch(module, (5, 12))
        with torch.no_grad():
            assert torch.allclose(forward(model, x, torch.float32), module(x), atol=1e-5)
            assert torch.allclose(forward(model, x.double()), module.double()(x.double()), atol=1e-12)
        module.float()


def test_torch_vision_import():
    torch.manual_seed(1)
    vit = DigitsTransformer(12, 3, 2).eval()
    x = torch.rand(4, 8, 8)
    with torch.no_grad():
        assert torch.allclose(forward(from_torch(vit), x, torch.float32)[:, 0], vit(x), atol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_onnx_encoder_matches_onnxruntime(tmp_path, norm_first, activation):
    x = torch.randn(1, 5, 12)
    path = export(_NoCausal(encoder_layer(norm_first, activation)), x, tmp_path / "enc.onnx")
    model, shape = from_onnx(path)
    reference = ort.InferenceSession(path).run(None, {"x": x.numpy()})[0]
    assert shape == (5, 12)
    out = forward(model, x[0], torch.float32).numpy().reshape(reference.shape)
    assert np.abs(out - reference).max() <= 1e-5


def test_onnx_vision_transformer_matches_onnxruntime(tmp_path):
    torch.manual_seed(2)
    vit = DigitsTransformer(12, 3, 2).eval()
    path = export(vit, torch.rand(1, 8, 8), tmp_path / "vit.onnx")
    model, shape = from_onnx(path)
    session = ort.InferenceSession(path)
    assert shape == (10,)
    for seed in range(3):
        x = torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(seed))
        reference = session.run(None, {"x": x.numpy()})[0]
        assert np.abs(forward(model, x[0], torch.float32).numpy().reshape(1, 10) - reference).max() <= 1e-5
    kinds = [type(b).__name__ for b in model.blocks]
    assert kinds.count("Residual") == 4 and "LayerNorm" in kinds


class _MeanPoolMLP(torch.nn.Module):
    """Decomposed LayerNorm, BatchNorm1d, ReLU and mean pooling: the other supported operators."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        mean = h.mean(-1, keepdim=True)
        centred = h - mean
        h = centred / torch.sqrt((centred ** 2).mean(-1, keepdim=True) + 1e-5) * 1.5 + 0.1
        h = torch.relu(h).mean(1)
        return self.out(self.bn(h))


def test_onnx_decomposed_layer_norm_batch_norm_mean_pool(tmp_path):
    torch.manual_seed(3)
    module = _MeanPoolMLP().eval()
    module.bn.running_mean.uniform_(-1, 1)
    module.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 4, 6)
    path = export(module, x, tmp_path / "mlp.onnx")
    model, _ = from_onnx(path)
    reference = ort.InferenceSession(path).run(None, {"x": x.numpy()})[0]
    assert np.abs(forward(model, x[0], torch.float32).numpy().reshape(reference.shape) - reference).max() <= 1e-5
    kinds = {type(b).__name__ for b in model.blocks}
    assert {"LayerNorm", "Pool"} <= kinds


def test_unsupported_node_is_named(tmp_path):
    class Tanh(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x @ torch.ones(4, 4))

    path = export(Tanh(), torch.randn(1, 3, 4), tmp_path / "tanh.onnx")
    with pytest.raises(InvalidInputError, match=r"op Tanh.*not supported"):
        from_onnx(path)


def test_unreadable_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a graph")
    with pytest.raises(InvalidInputError, match="could not be read"):
        from_onnx(bad)


# -- certified local Lipschitz constants ------------------------------------------------------------------------

from certify.model import attained_lipschitz, certify_model  # noqa: E402


@pytest.mark.parametrize("method", ["jacobian", "product"])
@pytest.mark.parametrize("norm", ["inf", "2"])
@pytest.mark.parametrize("seed", range(5))
def test_attained_never_exceeds_certified(seed, norm, method):
    """Soundness on tiny encoders (pre- and post-LN, ReLU and GELU): attained <= certified on the eps-ball."""
    norm_first, activation = bool(seed % 2), ("relu", "gelu")[seed // 2 % 2]
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(6, 2, 8, dropout=0.0, activation=activation, norm_first=norm_first,
                                             batch_first=True).eval()
    model = from_torch(layer, (3, 6))
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(100 + seed))
    for eps in ((1e-3, 3e-2)[seed % 2],):
        certified = certify_model(model, x0, eps, norm, method=method)
        attained = attained_lipschitz(model, x0, eps, norm, restarts=2, steps=5, seed=seed)
        assert certified.label == "certified" and attained.label == "estimate" and certified.method == method
        assert attained.value <= certified.value, (seed, norm, eps, attained.value, certified.value)
        assert len(certified.factors if method == "product" else certified.prefixes) == len(model.blocks)


def test_small_eps_is_tight_on_a_tiny_encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", norm_first=True,
                                             batch_first=True).eval()
    model = from_torch(layer, (4, 8))
    x0 = torch.randn(4, 8)
    for norm in ("inf", "2"):
        ratio = certify_model(model, x0, 1e-3, norm).value / attained_lipschitz(model, x0, 1e-3, norm).value
        assert 1.0 <= ratio < 10.0


def test_certify_model_rejects_bad_arguments():
    model = from_torch(encoder_layer(True, "relu"), (5, 12))
    with pytest.raises(InvalidInputError, match="shape"):
        certify_model(model, torch.zeros(4, 12), 1e-3, "inf")
    with pytest.raises(InvalidInputError, match="NaN"):
        certify_model(model, torch.full((5, 12), float("nan")), 1e-3, "inf")
    with pytest.raises(InvalidInputError, match="eps"):
        certify_model(model, torch.zeros(5, 12), -1.0, "inf")
    with pytest.raises(InvalidInputError, match="norm"):
        certify_model(model, torch.zeros(5, 12), 1e-3, "1")


# -- the command line -------------------------------------------------------------------------------------------

from certify.cli import main  # noqa: E402


def test_cli_model_json(tmp_path, capsys):
    x = torch.randn(1, 5, 12)
    path = export(_NoCausal(encoder_layer(True, "relu")), x, tmp_path / "enc.onnx")
    np.save(tmp_path / "x.npy", x[0].numpy())
    out = tmp_path / "out.json"
    assert main(["model", path, "--input", str(tmp_path / "x.npy"), "--eps", "1e-3", "--norm", "inf",
                 "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["certified"]["label"] == "certified" and data["attained"]["label"] == "estimate"
    assert data["attained"]["value"] <= data["certified"]["value"]


@pytest.mark.parametrize("case", ["unreadable", "shape", "nan", "suffix"])
def test_cli_model_errors(tmp_path, capsys, case):
    x = torch.randn(1, 5, 12)
    path = export(_NoCausal(encoder_layer(True, "relu")), x, tmp_path / "enc.onnx")
    inp = tmp_path / "x.npy"
    np.save(inp, {"shape": np.zeros((4, 12)), "nan": np.full((5, 12), np.nan)}.get(case, x[0].numpy()))
    if case == "unreadable":
        (tmp_path / "bad.onnx").write_bytes(b"junk")
        path = str(tmp_path / "bad.onnx")
    if case == "suffix":
        path = str(tmp_path / "model.txt")
    assert main(["model", path, "--input", str(inp), "--eps", "1e-3", "--norm", "2", "--quiet"]) == 2
    assert "certify model: error:" in capsys.readouterr().err
