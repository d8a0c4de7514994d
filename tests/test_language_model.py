"""The character-level language model (MATH.md section 6): causal attention, PTB loading, bits per character,
the LayerNorm radius used to certify DP layers, per-layer certification, and the `certify experiment` CLI."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch

from certify import CertifyError
from certify.attention import attention
from certify.cli import main
from certify.experiments import (
    LMConfig,
    CharTransformer,
    causal_attention,
    certify_model,
    default_data_dir,
    evaluate_bpc,
    input_radius,
    load_ptb,
    tiny_corpus,
    train_language_model,
)
from certify.experiments._language_model import attention_inputs, make_attention

SMALL = dict(D=8, H=2, context=12, ff=16)


from problems import F64, random_weights  # shared reference layers (tests/problems.py)


@pytest.mark.parametrize("kind", ["dp", "l2", "l2-untied"])
def test_causal_row_i_is_the_layer_on_the_prefix(kind):
    weights = random_weights(kind, H=2, d=3, seed=5, scale=1.5, bias=True)
    X = torch.randn(3, 7, weights.D, generator=torch.Generator().manual_seed(0), dtype=F64) * 2
    out = causal_attention(X, weights)
    for i in range(7):
        assert torch.allclose(out[:, i], attention(X[:, : i + 1], weights)[:, i], rtol=1e-10, atol=1e-12)


def test_model_attention_layers_are_the_requested_variants():
    kinds = {}
    for name in ("dp", "l2", "l2-tied", "contractive-l2"):
        layer = make_attention(LMConfig(10, name, **SMALL))
        kinds[name] = (type(layer).__name__, layer.attention_weights().kind)
    assert kinds == {
        "dp": ("DotProductMultiheadAttention", "dp"),
        "l2": ("UntiedL2MultiheadAttention", "l2-untied"),
        "l2-tied": ("L2MultiheadAttention", "l2"),
        "contractive-l2": ("ContractiveL2MultiheadAttention", "l2"),
    }
    with pytest.raises(CertifyError, match="attention must be one of"):
        LMConfig(10, "softmax")


def test_missing_data_fails_with_a_clear_message(tmp_path):
    with pytest.raises(CertifyError, match=r"ptb\.valid\.txt, ptb\.test\.txt missing in .*--data DIR"):
        load_ptb(tmp_path)
    assert main(["experiment", "lm", "--attention", "dp", "--minutes", "0.01", "--data", str(tmp_path)]) == 2


def test_ptb_loading_splits_and_encodes(tmp_path):
    (tmp_path / "ptb.valid.txt").write_text("ab c\n" * 20)  # 100 characters
    (tmp_path / "ptb.test.txt").write_text(" cd\n")
    corpus = load_ptb(tmp_path)
    assert corpus.vocabulary == ("\n", "_", "a", "b", "c", "d")
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (90, 10, 4)
    assert corpus.decode(corpus.train[:5]) == "ab_c\n" and corpus.decode(corpus.test) == "_cd\n"
    # unigram entropy of the train split by hand: 18 each of a, b, _, c, \n
    assert corpus.unigram_bits() == pytest.approx(math.log2(5), abs=1e-12)
    # the bigram baseline recomputed by counting character pairs in plain Python (add-0.1 smoothing, 6 symbols);
    # the text is periodic, so it predicts the validation text almost perfectly
    valid = corpus.valid
    assert len(valid) == 10
    expected = 0.0
    for a, b in zip(corpus.decode(valid)[:-1], corpus.decode(valid)[1:]):
        train = corpus.decode(corpus.train)
        n_ab = sum(1 for x, y in zip(train[:-1], train[1:]) if (x, y) == (a, b))
        n_a = sum(1 for x in train[:-1] if x == a)
        expected -= math.log2((n_ab + 0.1) / (n_a + 0.1 * 6))
    assert corpus.bigram_bits() == pytest.approx(expected / 9, rel=1e-12)
    assert corpus.bigram_bits() < 0.1


def test_default_data_dir_is_next_to_the_repository():
    repository = pathlib.Path(__file__).resolve().parent.parent
    assert default_data_dir() == repository.parent / "shared" / "data" / "ptb"


def test_uniform_model_scores_log2_vocabulary():
    corpus = tiny_corpus()
    model = CharTransformer(LMConfig(corpus.vocab_size, "dp", 1, **SMALL))
    with torch.no_grad():
        model.readout.weight.zero_()
        model.readout.bias.zero_()
    assert evaluate_bpc(model, corpus.test) == pytest.approx(math.log2(corpus.vocab_size), rel=1e-6)


@pytest.mark.parametrize("layer_norm", ["pre", "post"])
def test_input_radius_bounds_every_attention_input(layer_norm):
    config = LMConfig(30, "dp", 3, layer_norm=layer_norm, **SMALL)
    model = CharTransformer(config, seed=1)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():  # trained-looking LayerNorms: scales and shifts away from (1, 0)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(torch.randn(config.D, generator=generator) * 2)
                module.bias.copy_(torch.randn(config.D, generator=generator))
    ids = torch.randint(0, 30, (64, config.context), generator=generator)
    inputs = attention_inputs(model, ids)
    assert len(inputs) == 3
    for layer, X in enumerate(inputs):
        largest = float(X.norm(dim=-1).max())
        radius = input_radius(model, layer)
        assert largest <= radius
        assert largest >= 0.3 * radius  # the radius is not absurdly loose for LayerNorm outputs


def test_training_reduces_loss_on_the_tiny_corpus():
    corpus = tiny_corpus()
    config = LMConfig(corpus.vocab_size, "l2-tied", 1, **SMALL)
    result = train_language_model(config, corpus, minutes=1, max_steps=60, learning_rate=3e-3, log_every=10,
                                  eval_every=30)
    assert result.steps == 60 and not result.diverged
    assert [p["step"] for p in result.curve] == [10, 20, 30, 40, 50, 60]
    assert "valid_bpc" in result.curve[2] and "valid_bpc" not in result.curve[0]
    assert result.curve[-1]["train_bpc"] < result.curve[0]["train_bpc"] - 0.5


def test_certify_model_bounds_every_layer():
    corpus = tiny_corpus()
    rows = {}
    for name in ("dp", "l2", "l2-tied", "contractive-l2"):
        model = CharTransformer(LMConfig(corpus.vocab_size, name, 2, **SMALL), seed=3)
        rows[name] = certify_model(model, text=corpus.test)
        assert [(r["layer"], r["norm"]) for r in rows[name]] == [(0, "inf"), (0, "2"), (1, "inf"), (1, "2")]
        for r in rows[name]:
            if r["upper"] is not None and r["lower"] is not None:
                assert r["lower"] <= r["upper"]
            if r["norm"] == "inf":
                assert r["data_lower"] > 0
    assert all(r["domain"].startswith("ball(R=") and r["upper_method"] == "castin" for r in rows["dp"])
    assert all(r["domain"] == "global" for r in rows["l2-tied"] + rows["contractive-l2"])
    assert all(r["upper"] < 1 for r in rows["contractive-l2"])  # gamma = 0.9 times the certified / Theorem 3.2
    assert all(r["upper"] is None and "no certified method" in r["error"] for r in rows["l2"])


def test_cli_lm_and_stability_write_json(tmp_path, capsys):
    common = ["--tiny", "--d-model", "8", "--heads", "2", "--context", "12", "--ff", "16", "--max-steps", "6",
              "--quiet"]
    lm_json, stability_json = tmp_path / "lm.json", tmp_path / "stability.json"
    assert main(["experiment", "lm", "--attention", "dp", "contractive-l2", "--layers", "2", "--minutes", "1",
                 "--json", str(lm_json), *common]) == 0
    runs = json.loads(lm_json.read_text())["runs"]
    assert [(r["attention"], r["layers"], r["steps"]) for r in runs] == [("dp", 2, 6), ("contractive-l2", 2, 6)]
    assert all(math.isfinite(r["test_bpc"]) and len(r["certificates"]) == 4 for r in runs)
    assert main(["experiment", "stability", "--depths", "1", "2", "--attention", "dp", "l2-tied", "--minutes", "1",
                 "--json", str(stability_json), *common]) == 0
    rows = json.loads(stability_json.read_text())["runs"]
    assert [(r["layers"], r["attention"]) for r in rows] == [(1, "dp"), (1, "l2-tied"), (2, "dp"), (2, "l2-tied")]
    assert all(r["curve"] and not r["diverged"] for r in rows)
    out = capsys.readouterr().out
    assert "test bpc" in out and "< bigram" in out
    assert all(r["bigram_bits"] < r["unigram_bits"] for r in rows)
