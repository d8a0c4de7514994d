"""eps-balls around a real input through the front door: `certify_layer(center=X0, eps=...)`, `domain=EpsBall(...)`
and `certify layer --center X0_FILE --eps E` (issue 15, item 1)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

import certify
from certify import EpsBall, InvalidInputError
from certify.cli import main


def autodiff_norm(mha: torch.nn.MultiheadAttention, X: torch.Tensor, norm: str) -> float:
    """||J(X)||_norm of the torch module itself (autograd in float64, not certify's closed form)."""
    module = mha.double()

    def f(x):
        return module(x[None], x[None], x[None], need_weights=False)[0][0].reshape(-1)

    J = torch.autograd.functional.jacobian(f, X.double()).reshape(X.numel(), X.numel())
    return float(torch.linalg.matrix_norm(J, ord=2 if norm == "2" else math.inf))


def sample_ball(X0: torch.Tensor, eps: float, p: str, count: int, generator: torch.Generator) -> torch.Tensor:
    delta = 2 * torch.rand(count, *X0.shape, generator=generator, dtype=torch.float64) - 1
    if p == "2":
        delta = delta / delta.flatten(1).norm(dim=1)[:, None, None]
    return X0.double() + eps * delta


@pytest.fixture(scope="module")
def biased_mha():
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(6, 2, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_bias.normal_(0, 0.5)
        mha.out_proj.bias.normal_(0, 0.5)
    return mha


@pytest.mark.parametrize("eps_norm", ["inf", "2"])
@pytest.mark.parametrize("norm", ["2", "inf"])
def test_eps_ball_certificates_cover_attained_values(biased_mha, norm, eps_norm):
    generator = torch.Generator().manual_seed(1)
    X0 = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    eps = 0.05
    report = certify.certify_layer(biased_mha, norm=norm, center=X0, eps=eps, eps_norm=eps_norm, time_budget=2)
    assert report.tokens == 4 and report.domain == EpsBall(X0, eps, eps_norm).scope
    uppers = [c for c in report.certificates if c.kind == "upper" and c.certified]
    assert {c.method for c in uppers} >= {"castin", "bnb"}
    attained = [autodiff_norm(biased_mha, X, norm) for X in [X0, *sample_ball(X0, eps, eps_norm, 6, generator)]]
    assert report.best_lower() is not None
    for c in uppers:
        assert c.value >= max(attained), (c.method, c.value, max(attained))
        assert c.value >= report.best_lower().value


def test_domain_argument_and_numpy_centre_agree(biased_mha):
    X0 = np.random.default_rng(0).normal(size=(3, 6))
    by_domain = certify.certify_layer(biased_mha, norm="inf", domain=EpsBall(torch.from_numpy(X0), 0.1),
                                      methods="castin", lower=False)
    by_centre = certify.certify_layer(biased_mha, norm="inf", center=X0, eps=0.1, methods=["castin"], lower=False)
    assert by_domain.best_upper().value == by_centre.best_upper().value
    assert by_domain.tokens == by_centre.tokens == 3


@pytest.mark.parametrize("p", ["inf", "2"])
def test_enclosing_ball_contains_the_eps_ball(p):
    generator = torch.Generator().manual_seed(2)
    X0 = torch.randn(5, 7, generator=generator, dtype=torch.float64) * 10
    ball = EpsBall(X0, 0.3, p).enclosing_ball()
    corners = X0 + 0.3 * torch.sign(torch.randn(200, 5, 7, generator=generator, dtype=torch.float64))
    if p == "2":
        corners = sample_ball(X0, 0.3, "2", 200, generator)
    assert float(corners.norm(dim=-1).max()) <= ball.radius
    assert ball.radius <= float(X0.norm(dim=-1).max()) + 0.3 * (math.sqrt(7) if p == "inf" else 1) + 1e-9


@pytest.mark.parametrize("arguments, pattern", [
    ({"center": "X0", "eps": None}, "needs both center"),
    ({"center": None, "eps": 0.1}, "needs both center"),
    ({"center": "narrow", "eps": 0.1}, r"shape \(N, D\) with D = 6"),
    ({"center": "complex", "eps": 0.1}, "real numbers"),
    ({"center": "bool", "eps": 0.1}, "real numbers"),
    ({"center": "nan", "eps": 0.1}, "NaN or Inf"),
    ({"center": "X0", "eps": 0.1, "tokens": 5}, "does not match"),
    ({"center": "X0", "eps": 0.0}, "eps must be a positive"),
    ({"center": "X0", "eps": 0.1, "eps_norm": "1"}, "'2' or 'inf'"),
    ({"center": "X0", "eps": 0.1, "radius": 1.0}, "at most one"),
    ({"center": "list", "eps": 0.1}, "torch.Tensor or numpy array"),
    ({"tokens": None}, "sequence length"),
])
def test_bad_centres_get_clear_errors(biased_mha, arguments, pattern):
    X0 = torch.randn(4, 6, dtype=torch.float64)
    centres = {"X0": X0, "narrow": X0[:, :5], "complex": X0.to(torch.complex128), "bool": X0 > 0,
               "nan": X0 * math.nan, "list": X0.tolist(), None: None}
    arguments = dict(arguments)
    if "center" in arguments:
        arguments["center"] = centres[arguments["center"]]
    with pytest.raises(InvalidInputError, match=pattern):
        certify.certify_layer(biased_mha, norm="2", lower=False, **arguments)


def test_cli_centre_files(capsys, tmp_path, biased_mha):
    torch.save(biased_mha.float().state_dict(), tmp_path / "mha.pt")
    biased_mha.double()
    X0 = torch.randn(3, 6)
    np.save(tmp_path / "x0.npy", X0.numpy())
    torch.save(X0, tmp_path / "x0.pt")
    for name in ("x0.npy", "x0.pt"):
        code = main(["layer", str(tmp_path / "mha.pt"), "--heads", "2", "--add-zero-attn", "no", "--norm", "2",
                     "--center", str(tmp_path / name), "--eps", "0.01", "--eps-norm", "2", "--time-budget", "1", "--quiet",
                     "--json", str(tmp_path / "out.json")])
        assert code == 0
        document = json.loads((tmp_path / "out.json").read_text())
        assert document["tokens"] == 3 and document["domain"] == "eps-ball(l2, eps=0.01)"
        uppers = [r["value"] for r in document["results"] if r["kind"] == "upper" and r["certified"]]
        assert min(uppers) >= max(r["value"] for r in document["results"] if r["kind"] == "lower")
    capsys.readouterr()


@pytest.mark.parametrize("extra, pattern", [
    (["--center", "x0.npy"], "needs both --center"),
    (["--eps", "0.1", "--tokens", "3"], "needs both --center"),
    (["--center", "x0.npy", "--eps", "0.1", "--radius", "2"], "either --radius or --center"),
    (["--center", "missing.npy", "--eps", "0.1"], "could not be read"),
    (["--center", "x0.txt", "--eps", "0.1"], "expected a .npy or .pt"),
    (["--center", "dict.pt", "--eps", "0.1"], "one tensor"),
    (["--center", "wide.npy", "--eps", "0.1"], r"shape \(N, D\)"),
    ([], "give --tokens"),
])
def test_cli_bad_centres_exit_2(capsys, tmp_path, biased_mha, extra, pattern, monkeypatch):
    torch.save(biased_mha.float().state_dict(), tmp_path / "mha.pt")
    biased_mha.double()
    np.save(tmp_path / "x0.npy", np.zeros((3, 6)))
    np.save(tmp_path / "wide.npy", np.zeros((3, 7)))
    (tmp_path / "x0.txt").write_text("0 0 0")
    torch.save({"X0": torch.zeros(3, 6)}, tmp_path / "dict.pt")
    monkeypatch.chdir(tmp_path)
    code = main(["layer", "mha.pt", "--heads", "2", "--add-zero-attn", "no", "--norm", "2", "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("certify layer: error:") and re.search(pattern, err), err
