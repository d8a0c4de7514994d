"""The model's Jacobian enclosed as one product (certify_model(method="jacobian")), robustness radii and VNNLIB
answers from it: soundness against attained values, convergence as eps -> 0, and a dropped remainder caught."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify._errors import InvalidInputError
from certify.bounds.local._taylor import gram_norm2_upper
from certify.cli import main
from certify.model import (Linear, Model, Pool, certified_radius, certify_model, decide, forward, from_torch,
                           model_enclosure, model_output, pgd_counterexample, read_vnnlib, vnnlib_bounds,
                           write_vnnlib)
from certify.model import _jacobian_chain


def tiny_model(seed: int, N: int = 3, D: int = 6, H: int = 2, norm_first: bool = True, activation: str = "gelu",
               classes: int = 0, scale: float = 1.0) -> Model:
    """One torch encoder layer (biases, LayerNorm), optionally + mean pooling + a linear head; weights * scale."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, H, 2 * D, dropout=0.0, activation=activation, norm_first=norm_first,
                                             batch_first=True).eval()
    with torch.no_grad():
        for p in layer.parameters():
            if p.ndim == 2:
                p.mul_(scale)
    model = from_torch(layer, (N, D))
    if classes:
        rng = np.random.default_rng(seed)
        head = Linear(rng.standard_normal((D, classes)), rng.standard_normal(classes))
        model = Model(model.blocks + (Pool("mean"), head), (N, D))
    return model


def jacobian_norm(model: Model, x: torch.Tensor, norm: str) -> float:
    shape = x.shape
    J = torch.func.jacrev(lambda v: forward(model, v.reshape(shape)).reshape(-1))(x.reshape(-1))
    return float(J.abs().sum(1).max() if norm == "inf" else torch.linalg.matrix_norm(J, 2))


def ball_points(x0: torch.Tensor, eps: float, norm: str, count: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    points = []
    for _ in range(count):
        d = torch.rand(x0.shape, generator=g, dtype=torch.float64) * 2 - 1
        if norm == "inf":
            d = d.sign()
        else:
            d = d / d.norm()
        points.append(x0 + eps * d)
    return points


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), N=st.integers(2, 3), D=st.sampled_from([4, 6]), H=st.sampled_from([1, 2]),
       norm_first=st.booleans(), activation=st.sampled_from(["relu", "gelu"]),
       eps=st.sampled_from([1e-4, 1e-3, 1e-2, 1e-1]), norm=st.sampled_from(["inf", "2"]))
def test_jacobian_method_is_sound(seed, N, D, H, norm_first, activation, eps, norm):
    """Every attained ||J(x)|| (centre, ball points), output and linear form at those points respects the enclosure."""
    model = tiny_model(seed, N, D, H, norm_first, activation, classes=3)
    x0 = torch.randn(N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    enclosure = model_enclosure(model, x0, eps, norm)
    value = enclosure.lipschitz(norm)
    A = np.random.default_rng(seed).standard_normal((4, 3))
    lower = enclosure.linear_lower(A)
    y0 = forward(model, x0)[0].numpy().reshape(-1)
    assert np.all(enclosure.point.lo.reshape(-1) <= y0) and np.all(y0 <= enclosure.point.hi.reshape(-1))
    for x in [x0] + ball_points(x0, eps, norm, 4, seed):
        assert jacobian_norm(model, x, norm) <= value
        y = forward(model, x)[0].numpy().reshape(-1)
        assert np.all(enclosure.box.lo.reshape(-1) <= y) and np.all(y <= enclosure.box.hi.reshape(-1))
        assert np.all(lower <= A @ y + 1e-12 * np.abs(A) @ np.abs(y))


def test_the_centre_stays_narrow_through_layers():
    """The enclosure of the model at x0 itself: the interval image alone widened about 100-fold per attention block
    (5e-3 after three digits-ViT layers); the mean-value form keeps it near the rounding error."""
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", norm_first=True,
                                             batch_first=True).eval()
    encoder = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).eval()
    model = from_torch(encoder, (4, 8))
    x0 = torch.randn(4, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    enclosure = model_enclosure(model, x0, 1e-6, "inf")
    y0 = forward(model, x0)[0].numpy().reshape(-1)
    assert np.all(enclosure.point.lo.reshape(-1) <= y0) and np.all(y0 <= enclosure.point.hi.reshape(-1))
    assert float(enclosure.point.rad.max()) < 1e-9  # 8.6e-11 (the interval image alone: 7.6e-8)


def test_jacobian_method_tends_to_the_centre_norm():
    model = tiny_model(1, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for norm in ("inf", "2"):
        exact = jacobian_norm(model, x0, norm)
        ratios = [certify_model(model, x0, eps, norm).value / exact for eps in (1e-3, 1e-5, 1e-7)]
        assert ratios[0] >= ratios[1] >= ratios[2] >= 1.0
        assert ratios[2] < 1.0 + 1e-4, ratios


def test_jacobian_method_beats_the_product_at_small_eps():
    model = tiny_model(2, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for norm in ("inf", "2"):
        chain = certify_model(model, x0, 1e-4, norm)
        product = certify_model(model, x0, 1e-4, norm, method="product")
        assert chain.method == "jacobian" and product.method == "product"
        assert chain.value < product.value


def test_a_dropped_remainder_is_caught(monkeypatch):
    """With Delta = 0 (no remainder for the Jacobian's movement) the same soundness check fails on a wide ball."""
    original = _jacobian_chain.block_jacobian

    def no_remainder(block, box, point, **prefix):
        A, delta, _ = original(block, box, point, **prefix)
        return A, 0.0 * delta, None

    monkeypatch.setattr(_jacobian_chain, "block_jacobian", no_remainder)
    broken = 0
    for seed in range(4):
        model = tiny_model(seed, classes=3, scale=2.0)
        x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        value = model_enclosure(model, x0, 0.3, "inf").lipschitz("inf")
        attained = max(jacobian_norm(model, x, "inf") for x in [x0] + ball_points(x0, 0.3, "inf", 16, seed))
        broken += attained > value
    assert broken >= 1


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), seed=st.integers(0, 10**6),
       exponent=st.sampled_from([-300, -20, 0, 20, 300]))
def test_gram_norm2_upper_bounds_the_2_norm(m, n, seed, exponent):
    C = np.random.default_rng(seed).standard_normal((m, n)) * 10.0**exponent
    exact = np.linalg.norm(C, 2)
    bound = gram_norm2_upper(C)
    assert exact <= bound <= exact * 1.01 + 1e-300


def test_certified_radius_is_not_broken_by_an_attack():
    model = tiny_model(3, classes=3)
    for seed in range(2):
        x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(10 + seed), dtype=torch.float64)
        for norm in ("inf", "2"):
            radius = certified_radius(model, x0, norm, steps=3)
            y0 = forward(model, x0)[0].numpy().reshape(-1)
            assert radius.label == int(np.argmax(y0)) and radius.kind == "certified" and radius.value > 0
            if norm == "inf":  # the attack: minimise every margin over the box of the radius
                x = x0.numpy().reshape(-1)
                for j in range(3):
                    if j == radius.label:
                        continue
                    A = (np.eye(3)[radius.label] - np.eye(3)[j])[None]  # unsafe: y_label - y_j <= 0
                    hit = pgd_counterexample(model, x - radius.value, x + radius.value, A, np.zeros(1))
                    assert hit is None
            for x in ball_points(x0, radius.value, norm, 8, seed):
                assert int(np.argmax(forward(model, x)[0].numpy().reshape(-1))) == radius.label
            wrong = (radius.label + 1) % 3
            assert certified_radius(model, x0, norm, label=wrong, steps=3).value == 0.0


def test_vnnlib_answers_from_the_enclosure(tmp_path):
    model = tiny_model(4, classes=3)
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64).numpy().reshape(-1)
    label = int(np.argmax(model_output(model, x)))
    small, wide = tmp_path / "small.vnnlib", tmp_path / "wide.vnnlib"
    write_vnnlib(small, x - 1e-4, x + 1e-4, label, 3)
    write_vnnlib(wide, x - 50.0, x + 50.0, label, 3)
    search = lambda lo, hi, A, b: pgd_counterexample(model, lo, hi, A, b)  # noqa: E731
    forward64 = lambda v: model_output(model, v)  # noqa: E731
    assert decide(read_vnnlib(small, 18, 3), vnnlib_bounds(model), search, forward64).status == "verified"
    assert decide(read_vnnlib(wide, 18, 3), vnnlib_bounds(model), search, forward64).status in ("falsified",
                                                                                              "unknown")
    with pytest.raises(InvalidInputError, match="inputs"):
        vnnlib_bounds(model)(np.zeros(5), np.ones(5), np.eye(3))


def test_model_enclosure_rejects_bad_radii():
    model = tiny_model(0)
    x0 = np.zeros((3, 6))
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(InvalidInputError):
            model_enclosure(model, x0, eps, "inf")
    with pytest.raises(InvalidInputError, match="shape"):
        model_enclosure(model, x0, np.ones((2, 6)), "inf")
    with pytest.raises(InvalidInputError, match="2-norm"):
        model_enclosure(model, x0, 1e-3, "inf").lipschitz("2")
    with pytest.raises(InvalidInputError, match="method"):
        certify_model(model, x0, 1e-3, "inf", method="magic")


def _onnx_classifier(tmp_path):
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(6, 2, 12, dropout=0.0, batch_first=True, norm_first=True)
            self.head = torch.nn.Linear(6, 3)

        def forward(self, x):
            return self.head(self.layer(x).mean(1))

    net = Net().eval()
    x = torch.randn(1, 3, 6)
    path = str(tmp_path / "net.onnx")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), path, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"])
    np.save(tmp_path / "x.npy", x[0].numpy())
    return path, x[0].numpy().astype(np.float64)


def test_cli_model_radius_and_vnnlib(tmp_path, capsys):
    path, x = _onnx_classifier(tmp_path)
    out = tmp_path / "out.json"
    assert main(["model", path, "--input", str(tmp_path / "x.npy"), "--eps", "1e-3", "--radius", "--no-attained",
                 "--nested", "1", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["certified"]["method"] == "jacobian" and data["radius"]["value"] > 0 and data["nested"] == 1
    assert main(["model", path, "--input", str(tmp_path / "x.npy"), "--eps", "1e-3", "--nested", "-1",
                 "--quiet"]) == 2
    from certify.model import from_onnx

    model = from_onnx(path)[0]
    label = int(np.argmax(model_output(model, x.reshape(-1))))
    prop = tmp_path / "p.vnnlib"
    write_vnnlib(prop, x.reshape(-1) - 1e-5, x.reshape(-1) + 1e-5, label, 3)
    out2 = tmp_path / "v.json"
    assert main(["model", path, "--vnnlib", str(prop), "--json", str(out2), "--quiet"]) == 0
    assert json.loads(out2.read_text())["vnnlib"]["status"] == "verified"
    assert main(["model", path, "--quiet"]) == 2
    assert "--vnnlib" in capsys.readouterr().err


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_certified_scale_reaches_the_exact_radius_of_a_linear_model(norm):
    """On a linear model y = x M + b (J = M exactly, no error) the margin a^T y stays positive exactly up to
    a^T y(x0) / ||a^T M||_q (q dual to the norm): the radius from one enclosure on a larger ball
    (`certified_scale`) is at most that and within 1e-9 of it; from a smaller ball it is the whole ball."""
    rng = np.random.default_rng(0)
    M, b = rng.standard_normal((4, 3)), rng.standard_normal(3)
    model = Model((Linear(M, b),), (1, 4))
    x0 = rng.standard_normal((1, 4))
    y0 = x0[0] @ M + b
    label = int(np.argmax(y0))
    A = np.array([np.eye(3)[label] - np.eye(3)[j] for j in range(3) if j != label])
    rows = A @ M.T  # a^T M per margin (float64: the 1e-12 slack below covers its rounding)
    duals = np.abs(rows).sum(1) if norm == "inf" else np.sqrt(np.square(rows).sum(1))
    exact_radius = float(np.min((A @ y0) / duals))
    big = model_enclosure(model, x0, 10 * exact_radius, norm)
    radius = big.certified_scale(A) * 10 * exact_radius
    assert radius <= exact_radius * (1 + 1e-12) and radius >= exact_radius * (1 - 1e-9)
    assert model_enclosure(model, x0, 0.5 * exact_radius, norm).certified_scale(A) == 1.0


def test_largest_radius_uses_partly_certified_balls():
    """A ball certified in part raises the lower end: the search returns only values given by radius_at, reaches
    the true radius 0.3 within the tolerance, and with fewer calls than the pass / fail bisection."""
    from certify._bisection import largest_certified, largest_radius

    given = []

    def radius_at(e: float) -> float:
        value = e if e <= 0.3 else max(0.0, 0.3 - 0.05 * (e - 0.3))
        given.append(value)
        return value

    r, calls = largest_radius(radius_at, start=0.01, steps=20, tolerance=1e-3)
    assert r in given and 0.3 * (1 - 1e-3) <= r <= 0.3
    r_bool, calls_bool = largest_certified(lambda e: e <= 0.3, start=0.01, steps=20)
    assert calls < calls_bool and r >= r_bool * (1 - 1e-3)
    assert largest_radius(lambda e: 0.0, start=1.0) == (0.0, 30)


def attention_block(seed: int, N: int, D: int, H: int, d: int):
    """A DP attention block with all four biases (random, moderately scaled weights)."""
    from certify.model import Attention

    rng = np.random.default_rng(seed)
    W = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[-2])  # noqa: E731
    return Attention(W(H, D, d), W(H, D, d), W(H, D, d), rng.standard_normal((H, d)), rng.standard_normal((H, d)),
                     rng.standard_normal((H, d)), W(H * d, D), rng.standard_normal(D))


@pytest.mark.parametrize("seed", range(4))
def test_attention_delta_with_the_exact_diagonal_bounds_the_movement(monkeypatch, seed):
    """`block_jacobian` on an attention block: |J(y) - A| <= Delta at the box's vertices and random points, with the
    exact diagonal slope in use; Delta is entrywise at most the separable-only Delta (EXACT_DIAGONAL_MAX = 0), and
    half of it is broken at some sampled point (the check has teeth)."""
    from certify.interval import Interval
    from certify.model._enclosure import attention_point_jacobian

    calls = []
    original = _jacobian_chain.attention_jacobian

    def spy(block, box, exact_diagonal=False):
        calls.append(exact_diagonal)
        return original(block, box, exact_diagonal)

    monkeypatch.setattr(_jacobian_chain, "attention_jacobian", spy)
    N, D = 3, 4
    block = attention_block(seed, N, D, H=2, d=2)
    rng = np.random.default_rng(seed)
    centre, eps = rng.standard_normal((N, D)), 0.05
    box = Interval(centre - eps, centre + eps)
    A, delta, _ = _jacobian_chain.block_jacobian(block, box, Interval(centre, centre.copy()))
    assert True in calls
    monkeypatch.setattr(_jacobian_chain, "EXACT_DIAGONAL_MAX", 0)
    _, separable, _ = _jacobian_chain.block_jacobian(block, box, Interval(centre, centre.copy()))
    assert np.all(delta <= separable) and np.any(delta < separable)
    deviation = np.zeros_like(A)
    points = [centre + eps * rng.choice([-1.0, 1.0], size=(N, D)) for _ in range(64)]
    points += [centre + eps * rng.uniform(-1, 1, size=(N, D)) for _ in range(64)]
    for y in points:
        deviation = np.maximum(deviation, np.abs(attention_point_jacobian(block, y) - A))
    assert np.all(deviation <= delta)
    assert np.any(deviation > 0.5 * delta)


def test_the_2_norm_takes_the_solver_free_relaxation(monkeypatch):
    """The model's 2-norm bound with `certify.sdp.scaled_bound` on its interval Jacobian is never above the bound
    without it, smaller on some wide balls, and stays above the attained norms (also checked by the soundness test)."""
    smaller = 0
    for seed in range(4):
        model = tiny_model(seed, 3, 6, 2, classes=3)
        x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        enclosure = model_enclosure(model, x0, 0.1, "2")
        value = enclosure.lipschitz("2")
        monkeypatch.setattr(_jacobian_chain, "SCALED_SIDES_MAX", 0)
        plain = enclosure.lipschitz("2")
        monkeypatch.undo()
        assert value <= plain
        smaller += value < plain * (1 - 1e-3)
        for x in [x0] + ball_points(x0, 0.1, "2", 4, seed):
            assert jacobian_norm(model, x, "2") <= value
    assert smaller >= 1


def test_nested_radius_integrates_the_slopes_of_the_smaller_balls():
    """`nested_radius` on hand-made balls: slope per unit 1 up to radius 1 and 2 beyond (balls of radius 1 and 2),
    margin 2 at x0: the margin bound 2 - int_0^R sigma vanishes at R = 1.5 (1 + 2 (R - 1) = 2), where either ball
    alone gives 1 (2 / 2, and the small ball ends at 1). The per-unit slope of a larger ball is used inside a
    smaller one where it is smaller; a ball certified whole gives its radius; no margin at x0, nothing."""
    from certify.model._radius import BallMargins, nested_radius

    small = BallMargins(1.0, np.array([2.0]), np.array([1.0]), False)
    large = BallMargins(2.0, np.array([2.0]), np.array([4.0]), False)
    both = nested_radius([large, small])
    assert 1.5 * (1 - 1e-12) <= both <= 1.5
    assert nested_radius([large]) <= 1.0 and nested_radius([small]) <= 1.0
    assert nested_radius([large]) >= 1.0 * (1 - 1e-12)
    steep = BallMargins(1.0, np.array([1.5]), np.array([3.0]), False)  # per unit 3 inside, the large ball's 1 wins
    flat = BallMargins(2.0, np.array([1.5]), np.array([2.0]), False)
    assert 1.5 * (1 - 1e-12) <= nested_radius([steep, flat]) <= 1.5
    two_rows = BallMargins(2.0, np.array([2.0, 0.5]), np.array([4.0, 2.0]), False)  # the second row: 0.5 / 1
    assert nested_radius([two_rows]) <= 0.5
    assert nested_radius([BallMargins(0.5, np.array([-1.0]), np.array([0.0]), True)]) == 0.5
    assert nested_radius([BallMargins(0.5, np.array([-1.0]), np.array([0.0]), False)]) == 0.0
    assert nested_radius([BallMargins(0.5, np.array([1.0]), np.array([np.nan]), False)]) == 0.0
    assert nested_radius([]) == 0.0


def test_step_integral_of_the_smallest_slope_by_hand():
    """`_nested.step_integral`, the one integral behind the nested margins and boxes: balls of radius 1, 2, 4 with
    slopes per unit (3, 1), (1, 5), (2, inf) give sigma = (1, 1), (1, 5), (2, inf) on the shells (0, 1], (1, 2],
    (2, 4]; so the integral to 3 is (1 + 1 + 2, 1 + 5 + inf) and to 1.5 is (1.5, 3.5), each within rounding above.
    A zero-width shell adds nothing even where its slope is infinite (0 * inf), NaN slopes read as infinite, and
    `nested_spread` keeps the smaller of its own spread and this integral."""
    from certify.model._jacobian_chain import StateSlopes, nested_spread
    from certify.model._nested import step_integral

    radii = np.array([1.0, 2.0, 4.0])
    per_unit = np.array([[3.0, 1.0], [1.0, 5.0], [2.0, np.inf]])
    at3 = step_integral(radii, per_unit, 3.0)
    assert 4.0 <= at3[0] <= 4.0 * (1 + 1e-12) and at3[1] == np.inf
    at = step_integral(radii, per_unit, 1.5)
    assert np.all(at >= [1.5, 3.5]) and np.all(at <= np.array([1.5, 3.5]) * (1 + 1e-12))
    assert np.all(step_integral(radii, per_unit, 0.0) == 0.0)
    repeated = step_integral(np.array([1.0, 1.0, 2.0]), np.array([[np.inf], [np.nan], [1.0]]), 2.0)
    assert 2.0 <= repeated[0] <= 2.0 * (1 + 1e-12)  # (0, 1]: min(inf, NaN -> inf, 1) = 1; (1, 1]: empty
    record: dict = {}
    inner = (StateSlopes(1.0, {(0, -1): np.array([1.0, 4.0])}), StateSlopes(1.0, {(0, -1): np.array([np.inf, 0.5])}))
    spread = nested_spread(np.array([10.0, 1.0]), 2.0, (0, -1), inner, record)
    assert 6.0 <= spread[0] <= 6.0 * (1 + 1e-12)  # 1 * 1 + 1 * 5 (its own slope 10 / 2 on (1, 2])
    assert spread[1] == 1.0 and np.all(record[(0, -1)] >= [5.0, 0.5])  # its own spread was already smaller


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_nested_radius_is_sound_and_beats_each_ball_alone(norm):
    """On a small transformer whose enclosure loosens super-linearly with eps, the radius from the balls of a
    search together is at least 10% above the best any one of them certifies (`certified_scale`; measured 1.18x
    (inf) and 1.69x (2): the test fails if the smaller balls' slopes are not used), and neither sampled points nor
    an attack inside it changes the label."""
    from certify.model._radius import BallMargins, margin_rows, nested_radius

    model = tiny_model(2, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    label = int(np.argmax(forward(model, x0)[0].numpy().reshape(-1)))
    A = margin_rows(3, label)
    balls, single = [], 0.0
    for eps in np.geomspace(1e-4, 0.3, 14):
        enclosure = model_enclosure(model, x0, float(eps), norm)
        balls.append(BallMargins(float(eps), *enclosure.margin_slopes(A), bool(np.all(enclosure.linear_lower(A) > 0))))
        single = max(single, enclosure.certified_scale(A) * float(eps))
    radius = nested_radius(balls)
    assert radius > 1.1 * single
    for x in ball_points(x0, radius, norm, 16, 3):
        assert int(np.argmax(forward(model, x)[0].numpy().reshape(-1))) == label
    if norm == "inf":
        x = x0.numpy().reshape(-1)
        for j in range(3):
            if j != label:
                A_j = (np.eye(3)[label] - np.eye(3)[j])[None]
                assert pgd_counterexample(model, x - radius, x + radius, A_j, np.zeros(1)) is None


def test_vnnlib_bounds_refine_with_the_scaled_boxes(tmp_path):
    """A box property just past what one enclosure proves (radius 0.019: margin bound -0.12 alone) is verified
    with the enclosures of the boxes scaled by 2^(-1/2) and 1/2 (+0.11), and an attack finds nothing in it."""
    from certify.model._radius import margin_rows

    model = tiny_model(2, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    x = x0.numpy().reshape(-1)
    label = int(np.argmax(model_output(model, x)))
    prop = tmp_path / "p.vnnlib"
    write_vnnlib(prop, x - 0.019, x + 0.019, label, 3)
    search = lambda lo, hi, A, b: pgd_counterexample(model, lo, hi, A, b)  # noqa: E731
    forward64 = lambda v: model_output(model, v)  # noqa: E731
    parsed = read_vnnlib(prop, 18, 3)
    assert decide(parsed, vnnlib_bounds(model, nested=False), search, forward64).status == "unknown"
    assert decide(parsed, vnnlib_bounds(model), search, forward64).status == "verified"
    A = margin_rows(3, label)
    for j in range(2):
        assert pgd_counterexample(model, x - 0.019, x + 0.019, A[j:j + 1], np.zeros(1)) is None


@pytest.mark.parametrize("norm,eps,factor", [("inf", 0.03, 0.5), ("2", 0.045, 0.9)])
def test_nested_boxes_are_sound_and_tighter(norm, eps, factor):
    """The chain on a ball with the slopes of the balls of radius eps/8, eps/4, eps/2 about the same point
    (`nested_spread`): its boxes hold the outputs of sampled ball points, its constant stays above the attained
    one and is below `factor` times the chain's alone (measured 387 -> 113 (inf), 13.9 -> 11.6 (2)). Smaller
    balls' slopes of zero leave only the outer half of each segment: the output box at most halves."""
    from certify.model import attained_lipschitz
    from certify.model._jacobian_chain import StateSlopes

    model = tiny_model(2, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    plain = model_enclosure(model, x0, eps, norm)
    inner = []
    for t in (0.125, 0.25, 0.5):
        inner.append(model_enclosure(model, x0, eps * t, norm, smaller=tuple(inner)).slopes)
    nested = model_enclosure(model, x0, eps, norm, smaller=tuple(inner))
    assert nested.lipschitz(norm) < factor * plain.lipschitz(norm)
    assert attained_lipschitz(model, x0, eps, norm, restarts=4, steps=10).value <= nested.lipschitz(norm)
    outputs = [forward(model, x)[0].numpy().reshape(-1) for x in ball_points(x0, eps, norm, 24, 1)]
    box = nested.box.reshape(-1)
    assert all(np.all(box.lo <= y) and np.all(y <= box.hi) for y in outputs)
    zeros = StateSlopes(eps / 2, {key: np.zeros_like(v) for key, v in inner[-1].per_unit.items()})
    broken = model_enclosure(model, x0, eps, norm, smaller=(zeros,)).box
    assert np.all(broken.rad <= 0.5 * nested.box.rad + 1e-12)  # only the outer half of each segment counted


def test_certify_model_nested_takes_the_smaller_balls_first():
    """certify_model(..., nested=3) is the chain narrowed by the balls eps 2^(-1), 2^(-2/3), 2^(-1/3) enclosed in
    that order (as by hand in `test_nested_boxes_are_sound_and_tighter`), its progress called by every chain; bad
    levels are refused."""
    model = tiny_model(2, classes=3)
    x0 = torch.randn(3, 6, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    seen: list[int] = []
    nested = certify_model(model, x0, 0.03, "inf", nested=3, progress=seen.append)
    plain = certify_model(model, x0, 0.03, "inf")
    assert nested.value < 0.5 * plain.value and len(seen) == 4 * len(model.blocks)
    inner = []
    for t in (0.5, 2 ** (-2 / 3), 2 ** (-1 / 3)):
        inner.append(model_enclosure(model, x0, 0.03 * t, "inf", smaller=tuple(inner)).slopes)
    assert nested.value == model_enclosure(model, x0, 0.03, "inf", smaller=tuple(inner)).lipschitz("inf")
    for bad in (-1, 9, 1.5, True):
        with pytest.raises(InvalidInputError, match="nested"):
            certify_model(model, x0, 0.03, "inf", nested=bad)
