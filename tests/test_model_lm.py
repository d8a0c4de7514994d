"""The repository's language model as a certify Model (`from_torch(CharTransformer)`): the map from the embedding
sum X = embedding(ids) + position[:N] to the logits, with causal DP or tied L2 attention. The imported model
reproduces the torch logits, its certified local constants are never below attained ones, and the causal / L2
enclosures contain the exact values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from certify._errors import InvalidInputError
from certify.cli import main
from certify.experiments import CharTransformer, LMConfig
from certify.interval import Interval
from certify.model import (Attention, L2Attention, Model, attained_lipschitz, certify_model, forward, from_torch,
                           language_model_input)
from certify.model._enclosure import attention_jacobian, enclose

ATTENTIONS = ("dp", "l2-tied", "contractive-l2")
N, D, VOCAB = 5, 8, 7


def language_model(attention: str, layer_norm: str = "pre", seed: int = 0, layers: int = 2) -> CharTransformer:
    config = LMConfig(VOCAB, attention, layers=layers, D=D, H=2, context=6, ff=16, layer_norm=layer_norm)
    return CharTransformer(config, seed=seed).eval()


def ids(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (N,), generator=torch.Generator().manual_seed(seed))


def jacobian_norm(model: Model, x: torch.Tensor, norm: str) -> float:
    J = torch.func.jacrev(lambda v: forward(model, v.reshape(x.shape)).reshape(-1))(x.reshape(-1))
    return float(J.abs().sum(1).max() if norm == "inf" else torch.linalg.matrix_norm(J, 2))


@pytest.mark.parametrize("layer_norm", ["pre", "post"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_import_reproduces_the_logits(attention, layer_norm):
    lm = language_model(attention, layer_norm)
    sequence = ids(1)
    model = from_torch(lm, (N, D))
    X = language_model_input(lm, sequence)
    kinds = {type(b).__name__ for b in _walk(model.blocks)}
    assert ("Attention" if attention == "dp" else "L2Attention") in kinds
    with torch.no_grad():
        expected32 = lm(sequence[None])[0]
        got32 = forward(model, X, torch.float32)[0]
    assert float((got32 - expected32).abs().max()) <= 1e-5
    lm64 = lm.double()
    model64 = from_torch(lm64, (N, D))
    with torch.no_grad():
        expected64 = lm64(sequence[None])[0]
    got64 = forward(model64, language_model_input(lm64, sequence))[0]
    assert float((got64 - expected64).abs().max()) <= 1e-12


def _walk(blocks: tuple) -> list:
    out = []
    for block in blocks:
        out.append(block)
        out.extend(_walk(getattr(block, "inner", ())))
    return out


def test_attention_is_causal_in_the_imported_model():
    """Changing the last token changes no earlier logit (and the blocks say causal)."""
    lm = language_model("l2-tied")
    model = from_torch(lm, (N, D))
    assert all(b.causal for b in _walk(model.blocks) if isinstance(b, (Attention, L2Attention)))
    X = language_model_input(lm, ids(2))
    Y = X.copy()
    Y[-1] += 1.0
    a, b = forward(model, X)[0], forward(model, Y)[0]
    assert torch.equal(a[:-1], b[:-1]) and not torch.equal(a[-1], b[-1])


def test_untied_l2_is_refused_as_not_lipschitz():
    with pytest.raises(InvalidInputError, match="not Lipschitz"):
        from_torch(language_model("l2"), (N, D))


@pytest.mark.parametrize("shape", [None, (N,), (7, D), (N, D + 1), (0, D)])
def test_bad_input_shape_is_refused(shape):
    with pytest.raises(InvalidInputError, match="input_shape"):
        from_torch(language_model("dp"), shape)


def test_bad_ids_are_refused():
    lm = language_model("dp")
    with pytest.raises(InvalidInputError, match="ids"):
        language_model_input(lm, [0, VOCAB])
    with pytest.raises(InvalidInputError, match="ids"):
        language_model_input(lm, np.zeros((2, 3), dtype=int))


@pytest.mark.parametrize("attention", ["dp", "l2-tied"])
def test_causal_attention_jacobian_contains_autograd(attention):
    """The causal (prefix-assembled) Jacobian enclosure over a box contains autograd's Jacobian at points of the box,
    its blocks above the diagonal are exactly 0, and the interval forward contains the outputs."""
    lm = language_model(attention, seed=3)
    model = from_torch(lm, (N, D))
    block = next(b for b in _walk(model.blocks) if isinstance(b, (Attention, L2Attention)))
    X = language_model_input(lm, ids(4))
    box = Interval(X - 0.05, X + 0.05)
    J = attention_jacobian(block, box)
    out = enclose(block, box)
    upper = np.triu(np.ones((N, N)), 1).astype(bool)
    mask = np.kron(upper, np.ones((D, D), dtype=bool))
    assert np.all(J.lo[mask] == 0) and np.all(J.hi[mask] == 0)
    rng = np.random.default_rng(0)
    for _ in range(8):
        x = torch.tensor(X + rng.uniform(-0.05, 0.05, X.shape))
        single = Model((block,), (N, D))
        exact = torch.func.jacrev(lambda v: forward(single, v.reshape(N, D)).reshape(-1))(x.reshape(-1)).numpy()
        assert np.all(J.lo <= exact) and np.all(exact <= J.hi)
        y = forward(single, x)[0].numpy()
        assert np.all(out.lo <= y) and np.all(y <= out.hi)
    at_point = enclose(block, Interval(X, X.copy()))  # tight at a point: a wrong term cannot hide in the width
    y0 = forward(Model((block,), (N, D)), X)[0].numpy()
    assert np.all(at_point.lo <= y0) and np.all(y0 <= at_point.hi)
    assert np.max(at_point.hi - at_point.lo) < 1e-9


@pytest.mark.parametrize("norm", ["inf", "2"])
@pytest.mark.parametrize("layer_norm", ["pre", "post"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attained_never_exceeds_certified(attention, layer_norm, norm):
    lm = language_model(attention, layer_norm, seed=5)
    model = from_torch(lm, (N, D))
    X = language_model_input(lm, ids(6))
    eps = 1e-3
    certificate = certify_model(model, X, eps, norm)
    assert np.isfinite(certificate.value)
    x0 = torch.tensor(X)
    values = [jacobian_norm(model, x0, norm)]
    g = torch.Generator().manual_seed(7)
    for _ in range(6):
        d = torch.rand(x0.shape, generator=g, dtype=torch.float64) * 2 - 1
        values.append(jacobian_norm(model, x0 + eps * (d.sign() if norm == "inf" else d / d.norm()), norm))
    values.append(attained_lipschitz(model, X, eps, norm, restarts=2, steps=5).value)
    assert max(values) <= certificate.value
    assert certificate.prefixes[-1].value == certificate.value


@pytest.mark.parametrize("attention", ["dp", "l2-tied"])
def test_product_method_is_sound_on_causal_attention(attention):
    lm = language_model(attention, seed=8, layers=1)
    model = from_torch(lm, (N, D))
    X = language_model_input(lm, ids(9))
    for norm in ("inf", "2"):
        product = certify_model(model, X, 1e-4, norm, method="product")
        assert jacobian_norm(model, torch.tensor(X), norm) <= product.value < np.inf


def test_small_eps_is_tight():
    """As eps -> 0 the certified constant tends to ||J(x0)|| (first-order enclosure), causal L2 included."""
    lm = language_model("l2-tied", seed=10)
    model = from_torch(lm, (N, D))
    X = language_model_input(lm, ids(11))
    centre = jacobian_norm(model, torch.tensor(X), "inf")
    value = certify_model(model, X, 1e-7, "inf").value
    assert centre <= value <= 1.01 * centre


def test_cli_model_on_a_saved_language_model(tmp_path, capsys):
    lm = language_model("dp", seed=12)
    path, x_path, out = tmp_path / "lm.pt", tmp_path / "x.npy", tmp_path / "out.json"
    torch.save(lm, path)
    np.save(x_path, language_model_input(lm, ids(13)))
    code = main(["model", str(path), "--input", str(x_path), "--eps", "1e-4", "--norm", "2", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["attained"]["value"] <= result["certified"]["value"] < np.inf
    assert "certified" in capsys.readouterr().out
