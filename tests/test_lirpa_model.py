"""auto_LiRPA on whole models (certify.lirpa._model): the export computes `certify.model.forward`, CROWN margin
lower bounds hold at sampled and PGD-attacked points of the ball, the radius survives a PGD attack, errors are clear.

Every soundness check attacks `certify.model.forward` (not the exported module), so an export that computed another
function would fail here too. Bounds are float64 bound propagation, not outward-rounded: violations must stay below
TOL.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import certify.lirpa as lirpa
from certify import InvalidInputError, SolverError
from certify.experiments import train_digits_transformer
from certify.lirpa import _gelu, _model
from certify.model import (Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward, Gather,
                           LayerNorm, Linear, Model, Pool, Residual, forward, from_torch, pre_ln_block)

torch.set_num_threads(1)
F64 = torch.float64
TOL = 1e-9


def encoder(activation: str = "relu", norm_first: bool = True, N: int = 4, D: int = 6, seed: int = 0) -> Model:
    """A torch encoder layer (H = 2, hidden 10) imported as a Model acting on (N, D)."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, 2, 10, dropout=0.0, activation=activation, norm_first=norm_first,
                                             batch_first=True, dtype=F64).eval()
    return from_torch(layer, (N, D))


def every_block(seed: int = 1) -> Model:
    """Gather (with a repeated index), Linear, ClassToken, AddConstant, ChannelAffine, causal GELU attention without
    W_O, FeedForward, ReLU, mean pooling and a head: (3, 4) inputs, 5 logits. Sizes are distinct primes where free."""
    r = np.random.default_rng(seed)
    n = r.standard_normal
    index = np.array([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 10, 11], [0, 11, 5, 5]])  # 3 x 4 input, 4 tokens of 4
    D, H, d = 6, 2, 3
    attention = Attention(n((H, D, d)), n((H, D, d)), n((H, D, d)), n((H, d)), n((H, d)), n((H, d)), causal=True)
    blocks = (Gather(index), Linear(n((4, D)), n(D)), ClassToken(n(D)), AddConstant(0.1 * n((5, D))),
              ChannelAffine(1 + 0.1 * n(D), 0.1 * n(D)),
              *pre_ln_block(LayerNorm(1 + 0.1 * n(D), 0.1 * n(D), 1e-5), attention,
                            LayerNorm(1 + 0.1 * n(D), 0.1 * n(D), 1e-5),
                            FeedForward(n((D, 7)), n(7), "gelu", n((7, D)), n(D))),
              Residual((Activation("relu"), Linear(0.3 * n((D, D))))), Activation("gelu"), Pool("mean"),
              Linear(n((D, 5)), n(5)))
    return Model(blocks, (3, 4))


@pytest.fixture(scope="module")
def digits():
    """A small digits ViT (D = 12, H = 2, one layer, GELU), its Model and three correctly classified test images."""
    result = train_digits_transformer(D=12, H=2, layers=1, epochs=4)
    model = from_torch(result.model)
    images = result.test_images.to(F64)
    predicted = forward(model, images).reshape(len(images), -1).argmax(1)
    right = torch.nonzero(predicted == result.test_labels).reshape(-1)[:3]
    return model, images[right], result.test_labels[right]


def margins(model: Model, x: torch.Tensor, label: int) -> torch.Tensor:
    """f_label(x) - f_j(x) for j != label, for a batch x (B, *input_shape): (B, K - 1)."""
    logits = forward(model, x).reshape(x.shape[0], -1)
    others = [j for j in range(logits.shape[1]) if j != label]
    return logits[:, label:label + 1] - logits[:, others]


def project(delta: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    if norm == "inf":
        return delta.clamp(-eps, eps)
    norms = delta.flatten(1).norm(dim=1).clamp_min(1e-300)
    return delta * (eps / norms).clamp(max=1.0).view(-1, *[1] * (delta.ndim - 1))


def smallest_slack(model: Model, x0: torch.Tensor, eps: float, norm: str, label: int, lower: np.ndarray,
                   samples: int = 256, restarts: int = 8, steps: int = 25, seed: int = 0) -> float:
    """min over sampled points (vertices of the l_inf ball among them) and a PGD descent on min_j (m_j(x) - lower_j)
    of m_j(x) - lower_j: negative means the bound is violated."""
    generator = torch.Generator().manual_seed(seed)
    lower_t = torch.tensor(lower, dtype=F64)
    shape = (samples, *x0.shape)
    delta = torch.randn(shape, generator=generator, dtype=F64)
    if norm == "inf":
        delta = eps * torch.where(torch.rand(shape, generator=generator, dtype=F64) < 0.5, delta.sign(),
                                  2 * torch.rand(shape, generator=generator, dtype=F64) - 1)
    else:
        delta = eps * delta / delta.flatten(1).norm(dim=1).view(-1, *[1] * x0.ndim)
    slack = float((margins(model, x0 + delta, label) - lower_t).min())
    delta = project(eps * torch.randn((restarts, *x0.shape), generator=generator, dtype=F64), eps, norm)
    for _ in range(steps):
        delta.requires_grad_(True)
        gap = (margins(model, x0 + delta, label) - lower_t).min(dim=1).values
        slack = min(slack, float(gap.detach().min()))
        (grad,) = torch.autograd.grad(gap.sum(), delta)
        with torch.no_grad():
            if norm == "inf":
                step = grad.sign()
            else:
                step = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-300).view(-1, *[1] * x0.ndim)
            delta = project(delta - 0.2 * eps * step, eps, norm)
    return slack


def pgd_margin(model: Model, x0: torch.Tensor, label: int, eps: float, norm: str, restarts: int = 8,
               steps: int = 30) -> float:
    """The smallest min_j m_j that PGD finds on the ball (a label flip if <= 0)."""
    return smallest_slack(model, x0, eps, norm, label, np.zeros(1), samples=64, restarts=restarts, steps=steps)


# ---------------------------------------------------------------------------------------------------- export


@pytest.mark.parametrize("activation,norm_first", [("relu", True), ("gelu", False)])
def test_export_matches_forward_on_encoders(activation, norm_first):
    model = encoder(activation, norm_first)
    x = torch.randn(3, *model.input_shape, generator=torch.Generator().manual_seed(2), dtype=F64)
    exported = lirpa.export_model(model)
    assert exported(x).shape == (3, 24)
    assert torch.allclose(exported(x), forward(model, x).reshape(3, -1), rtol=0, atol=1e-10)


def test_export_matches_forward_on_every_block():
    model = every_block()
    x = 3 * torch.randn(4, 3, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    out = lirpa.export_model(model)(x)
    assert out.shape == (4, 5)
    assert torch.allclose(out, forward(model, x).reshape(4, -1), rtol=0, atol=1e-10)


def test_export_matches_forward_on_the_digits_transformer(digits):
    model, images, _ = digits
    assert (lirpa.export_model(model)(images) - forward(model, images).reshape(len(images), -1)).abs().max() < 1e-10


def test_export_rejects_states_that_do_not_chain():
    bad = Model((Linear(np.ones((4, 3))), Linear(np.ones((2, 2)))), (2, 4))
    with pytest.raises(InvalidInputError, match="Linear expects states with 2 columns, gets 3"):
        lirpa.export_model(bad)
    with pytest.raises(InvalidInputError, match="Gather index 9 is outside the state of 8 entries"):
        lirpa.export_model(Model((Gather(np.array([[9]])),), (2, 4)))
    with pytest.raises(InvalidInputError, match="certify.model.Model"):
        lirpa.export_model(torch.nn.Linear(2, 2))


# ------------------------------------------------------------------------------------------------------ GELU


@pytest.mark.parametrize("scale", [1e-3, 0.3, 2.0, 20.0])
def test_gelu_relaxation_and_interval_enclose_gelu(scale):
    generator = torch.Generator().manual_seed(4)
    centre = 3 * scale * (2 * torch.rand(500, generator=generator, dtype=F64) - 1) - 0.75
    half = scale * torch.rand(500, generator=generator, dtype=F64)
    lower, upper = centre - half, centre + half
    lw, lb, uw, ub = _gelu.relaxation(lower, upper)
    low, high = _gelu.interval(lower, upper)
    x = lower[:, None] + (upper - lower)[:, None] * torch.linspace(0, 1, 4001, dtype=F64)
    x = torch.minimum(x, upper[:, None])
    f = _gelu.value(x)
    assert (lw[:, None] * x + lb[:, None] <= f + TOL).all()
    assert (f <= uw[:, None] * x + ub[:, None] + TOL).all()
    assert (low[:, None] <= f + TOL).all() and (f <= high[:, None] + TOL).all()
    # tight: the mean gap of each side is a small fraction of the function's variation (0.002 of width^2 at most)
    gap = (uw[:, None] * x + ub[:, None] - f).mean(1) + (f - lw[:, None] * x - lb[:, None]).mean(1)
    assert (gap <= 0.25 * (2 * half) ** 2 + 1e-12).all()


def test_gelu_minimum():
    assert _gelu.X_MIN == pytest.approx(-0.7517916, abs=1e-6)
    assert float(_gelu.derivative(torch.tensor(_gelu.X_MIN, dtype=F64))) == pytest.approx(0, abs=1e-15)
    assert _gelu.F_MIN <= float(_gelu.value(torch.linspace(-3, 2, 200001, dtype=F64)).min())
    near = _gelu.X_MIN + torch.linspace(-1e-4, 1e-4, 20001, dtype=F64)  # f varies by < 1e-16 between points
    assert _gelu.F_MIN <= float(_gelu.value(near).min()) <= _gelu.F_MIN + 2e-15


# ------------------------------------------------------------------------------------------------- soundness


@pytest.mark.parametrize("norm,eps", [("inf", 0.02), ("inf", 0.1), ("2", 0.05), ("2", 0.3)])
def test_crown_margins_hold_on_a_pre_ln_encoder(norm, eps):
    model = encoder("relu", True)
    x0 = torch.randn(model.input_shape, generator=torch.Generator().manual_seed(5), dtype=F64)
    label = int(forward(model, x0).reshape(-1).argmax())
    lower = lirpa.crown_margins(model, x0, eps, norm, label)
    assert lower.shape == (23,)
    true = margins(model, x0[None], label)[0].numpy()
    assert (lower <= true + TOL).all()
    assert smallest_slack(model, x0, eps, norm, label, lower) >= -TOL
    if eps <= 0.05:  # informative, not just sound: near the centre the bound is close to the margins
        assert np.abs(lower - true).max() < 0.5 * np.abs(true).min() + 0.5


def test_crown_and_ibp_margins_hold_on_every_block():
    model = every_block()
    x0 = torch.randn(3, 4, generator=torch.Generator().manual_seed(6), dtype=F64)
    for method, eps, norm in (("CROWN", 0.05, "inf"), ("CROWN", 0.1, "2"), ("IBP", 0.01, "inf")):
        lower = lirpa.crown_margins(model, x0, eps, norm, 2, method=method)
        assert np.isfinite(lower).all()
        assert smallest_slack(model, x0, eps, norm, 2, lower, steps=15) >= -TOL, (method, eps, norm)


@pytest.mark.parametrize("norm,eps", [("inf", 2e-3), ("2", 1e-2)])
def test_crown_margins_hold_on_the_digits_transformer(digits, norm, eps):
    model, images, labels = digits
    x0, label = images[0], int(labels[0])
    lower = lirpa.crown_margins(model, x0, eps, norm, label)
    assert lower.shape == (9,)
    assert smallest_slack(model, x0, eps, norm, label, lower, samples=128, restarts=4, steps=15) >= -TOL


def check_radius(model: Model, x0: torch.Tensor, norm: str, steps: int) -> float:
    """The radius (default label: the prediction) has positive CROWN margins and survives PGD; returns it."""
    label = int(forward(model, x0).reshape(-1).argmax())
    radius = lirpa.model_crown_radius(model, x0, norm, steps=steps)
    assert radius.method == "auto_LiRPA-CROWN" and radius.p == norm and not radius.certified
    assert radius.details["label"] == label and radius.value > 0 and radius.seconds > 0
    assert radius.details["calls"] >= steps + 2  # bracketed: one radius passed and one failed
    assert (lirpa.crown_margins(model, x0, radius.value, norm, label) > 0).all()
    assert pgd_margin(model, x0, label, radius.value, norm) > 0
    return radius.value


def test_radius_survives_pgd_on_the_digits_transformer(digits):
    model, images, labels = digits
    check_radius(model, images[1], "inf", steps=2)


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_radius_survives_pgd_on_a_pre_ln_encoder(norm):
    model = encoder("gelu", True, seed=3)
    x0 = torch.randn(model.input_shape, generator=torch.Generator().manual_seed(7), dtype=F64)
    radius = check_radius(model, x0, norm, steps=6)
    # the bisection is tight to 2^-6: CROWN fails somewhere below 1.02 r (the bracket's failing end)
    label = int(forward(model, x0).reshape(-1).argmax())
    assert not (lirpa.crown_margins(model, x0, 1.02 * radius, norm, label) > 0).all()


def test_radius_is_zero_when_the_label_is_not_predicted():
    model = encoder("relu", True)
    x0 = torch.randn(model.input_shape, generator=torch.Generator().manual_seed(5), dtype=F64)
    logits = forward(model, x0).reshape(-1)
    wrong = int(logits.argmin())
    radius = lirpa.model_crown_radius(model, x0, "2", label=wrong)
    assert radius.value == 0.0 and radius.details["misclassified"] and radius.details["label"] == wrong


# ---------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("case,match", [
    ({"x0": torch.zeros(3, 3)}, r"shape \(4, 6\)"),
    ({"x0": torch.zeros(2, 4, 6)}, "batch of 2"),
    ({"x0": torch.full((4, 6), float("nan"))}, "NaN"),
    ({"norm": "1"}, "norm must be 'inf' or '2'"),
    ({"eps": 0.0}, "eps must be a positive"),
    ({"eps": float("inf")}, "eps must be a positive"),
    ({"eps": -1e-3}, "eps must be a positive"),
    ({"label": 24}, r"label must be an integer in \[0, 24\)"),
    ({"label": -1}, "label must be an integer"),
    ({"label": 1.0}, "label must be an integer"),
    ({"method": "CROWN-Optimized"}, "method must be one of"),
    ({"model": "not a model"}, "certify.model.Model"),
])
def test_crown_margins_rejects_bad_input(case, match):
    model = encoder("relu", True)
    arguments = {"model": model, "x0": torch.zeros(4, 6, dtype=F64), "eps": 0.1, "norm": "inf", "label": 0,
                 **case}
    with pytest.raises(InvalidInputError, match=match):
        lirpa.crown_margins(**arguments)


def test_model_crown_radius_rejects_bad_input():
    model = encoder("relu", True)
    x0 = torch.zeros(4, 6, dtype=F64)
    for kwargs, match in (({"norm": "fro"}, "norm must be"), ({"label": 99}, "label must be"),
                          ({"start": 0.0}, "start must be"), ({"steps": -1}, "steps must be")):
        with pytest.raises(InvalidInputError, match=match):
            lirpa.model_crown_radius(model, x0, **{"norm": "2", **kwargs})
    one_output = Model((Pool("mean"), Linear(np.ones((6, 1)))), (4, 6))
    with pytest.raises(InvalidInputError, match="at least two classes"):
        lirpa.crown_margins(one_output, x0, 0.1, "2", 0)
    with pytest.raises(InvalidInputError, match="at least two classes"):
        lirpa.model_crown_radius(one_output, x0, "2")


def test_overflow_on_a_wide_ball_is_an_error_for_margins_and_a_failed_test_for_radii():
    """At eps = 1 the logits' bounds reach 1e6 and auto_LiRPA's softmax overflows (inf / inf): its margin bounds are
    NaN. crown_margins says so; the radius search counts the eps as not proved and goes on below it."""
    model = encoder("relu", True)
    x0 = torch.randn(model.input_shape, generator=torch.Generator().manual_seed(5), dtype=F64)
    label = int(forward(model, x0).reshape(-1).argmax())
    with pytest.raises(SolverError, match="NaN margin bounds .* overflowed"):
        lirpa.crown_margins(model, x0, 1.0, "inf", label)
    radius = lirpa.model_crown_radius(model, x0, "inf", start=1.0, steps=0)
    assert 0 < radius.value < 1.0
    assert (lirpa.crown_margins(model, x0, radius.value, "inf", label) > 0).all()


def test_unsupported_operation_is_named(monkeypatch):
    """Without our custom op auto_LiRPA cannot convert the GELU node: the error names it (from auto_LiRPA's log)."""
    monkeypatch.setattr(_model, "CUSTOM_OPS", {})
    with pytest.raises(SolverError, match="tracing the model.*cannot bound: custom::Gelu"):
        lirpa.crown_margins(encoder("gelu", True), torch.zeros(4, 6, dtype=F64), 0.1, "inf", 0)


@pytest.mark.parametrize("raised,match", [
    (RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate"), "out of memory"),
    (MemoryError(), "out of memory"),
    (AssertionError(), r"AssertionError in BoundGelu\(/\d+\)\.bound_relax \(auto_LiRPA/operators/fake.py:\d+: "),
])
def test_failures_inside_auto_lirpa_are_one_clear_error(monkeypatch, raised, match):
    def bound_relax(self, x):
        raise raised

    # a frame "inside auto_LiRPA", as the real failures are, so that the error names its node
    bound_relax.__code__ = bound_relax.__code__.replace(co_filename="/site-packages/auto_LiRPA/operators/fake.py")
    monkeypatch.setattr(_gelu.BoundGelu, "bound_relax", bound_relax)
    with pytest.raises(SolverError, match=f"bounding the margins at eps = 0.1, norm inf \\(CROWN\\): .*{match}"):
        lirpa.crown_margins(encoder("gelu", True), torch.zeros(4, 6, dtype=F64), 0.1, "inf", 0)
