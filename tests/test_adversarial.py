"""certify.adversarial: exactness of the reduced objectives, the exact N = 2 constant, and soundness
(lower <= every certified upper bound of the same scope), MATH.md sections 2, 4, 5 and 7."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from hypothesis import given, settings, strategies as st

from certify import AttentionWeights
from certify._domain import Ball, EpsBall, Global
from certify._errors import InvalidInputError
from certify.adversarial import (
    LOCAL_LOWER_SEARCH, PowerIteration, attained_norm, cluster_norm, expand, lemma_starts, lower_bound,
    naive_lower_bound, natural_scale, project,
    query_output, round_multiplicities, row_block,
)
from certify.adversarial import _attained
from certify.attention import attention
from certify.bounds import METHODS, phi_inverse
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64
FAST = dict(restarts=6, steps=50)


def unit(D: int = 1) -> AttentionWeights:
    eye = torch.eye(D, dtype=F64)
    return AttentionWeights("l2", eye[None], eye[None], eye[None], eye)


def gaussian(kind: str, H: int, d: int, D: int, scale: float = 1.0, seed: int = 0, bias: bool = False):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=F64) * scale / math.sqrt(D)  # noqa: E731
    W_Q = draw(H, D, d)
    W_K = W_Q if kind == "l2" else draw(H, D, d)
    biases = dict(b_Q=draw(H, d), b_K=draw(H, d), b_V=draw(H, d), b_O=draw(D)) if bias else {}
    return AttentionWeights(kind, W_Q, W_K, draw(H, D, d), draw(H * d, D), **biases)


LAYERS = [unit(1), unit(3), gaussian("l2", 2, 3, 5, seed=1), gaussian("dp", 2, 2, 3, seed=2, bias=True),
          gaussian("l2-untied", 2, 2, 4, seed=3)]


def exact_n2() -> float:
    """max_g of ||M|| for N = 2, d = 1 (both norms): M = [[a, b], [b, a]], a = p + 2pq g^2, b = q (1 - 2 p g^2),
    p = 1 / (1 + e^{-g^2}); computed here by a 1-D high-precision maximisation, independent of the search."""
    mpmath.mp.dps = 30
    def f(g):
        p = 1 / (1 + mpmath.e ** (-g * g))
        return p + 2 * p * (1 - p) * g * g + (1 - p) * abs(1 - 2 * p * g * g)

    start = max((mpmath.mpf(k) / 200 for k in range(1, 1000)), key=f)
    return float(f(mpmath.findroot(lambda g: mpmath.diff(f, g), start)))


# ---- exactness of the objectives ---------------------------------------------------------------------------------

@pytest.mark.parametrize("weights", [LAYERS[0], LAYERS[1], LAYERS[2], gaussian("l2", 2, 2, 3, seed=4)])
@pytest.mark.parametrize("norm", ["2", "inf"])
def test_cluster_norm_equals_the_full_jacobian_norm(weights, norm):
    g = torch.Generator().manual_seed(1)
    c = torch.randn(3, 3, weights.D, generator=g, dtype=F64)
    m = torch.tensor([[1.0, 2.0, 4.0], [3.0, 1.0, 1.0], [2.0, 2.0, 2.0]], dtype=F64)
    reduced = cluster_norm(c, m, weights, norm)
    for b in range(3):
        X = expand(c[b], m[b])
        assert X.shape == (int(m[b].sum()), weights.D)
        full = jacobian_norm(jacobian(X[None], weights), norm)[0]
        assert float(reduced[b]) == pytest.approx(float(full), rel=1e-12, abs=1e-12)


def test_round_multiplicities_keeps_the_total_and_each_at_least_one():
    m = round_multiplicities(torch.tensor([[1.2, 5.7, 3.1], [1.0, 1.0, 8.0], [0.3, 0.3, 9.4]], dtype=F64), 10)
    assert m.sum(-1).tolist() == [10.0, 10.0, 10.0]
    assert (m >= 1).all() and torch.equal(m, m.round())
    assert m[1].tolist() == [1.0, 1.0, 8.0]


@pytest.mark.parametrize("weights", LAYERS, ids=lambda w: f"{w.kind}-H{w.H}-D{w.D}")
def test_query_output_and_row_block_match_the_layer_and_its_jacobian(weights):
    X = torch.randn(2, 4, weights.D, generator=torch.Generator().manual_seed(0), dtype=F64)
    F, J = attention(X, weights), jacobian(X, weights)
    for t in range(4):
        torch.testing.assert_close(query_output(X, weights, t), F[:, t], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(row_block(X, weights, t, False), J[:, t], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("weights", [LAYERS[2], LAYERS[3]], ids=["l2", "dp"])
def test_power_iteration_is_a_lower_bound_that_converges(weights):
    X = torch.randn(3, 6, weights.D, generator=torch.Generator().manual_seed(5), dtype=F64).requires_grad_(True)
    exact = jacobian_norm(jacobian(X.detach(), weights), "2")
    power = PowerIteration(X.shape, torch.Generator().manual_seed(0), F64, torch.device("cpu"))
    value = power.objective(X, weights, iterations=1)
    assert (value.detach() <= exact * (1 + 1e-12)).all()
    value = power.objective(X, weights, iterations=150)
    torch.testing.assert_close(value.detach(), exact, rtol=1e-5, atol=0)
    value.sum().backward()  # differentiable: the gradient is u v^T : dJ/dX
    assert torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0


def test_matrix_free_attained_norm_beyond_the_dense_limit(monkeypatch):
    weights, X = LAYERS[2], torch.randn(7, 5, generator=torch.Generator().manual_seed(2), dtype=F64)
    dense = {norm: attained_norm(X, weights, norm)[0] for norm in ("2", "inf")}
    monkeypatch.setattr(_attained, "DENSE_LIMIT", 4)
    monkeypatch.setattr(_attained, "DENSE_INF_ENTRIES", 0)
    for norm in ("2", "inf"):
        value, how = attained_norm(X, weights, norm)
        assert "closed-form" not in how
        assert value <= dense[norm] * (1 + 1e-12)
        assert value == pytest.approx(dense[norm], rel=1e-8)


# ---- the search ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["2", "inf"])
def test_n2_reaches_the_exact_constant(norm):
    exact = exact_n2()
    result = lower_bound(unit(1), 2, norm, restarts=16, steps=300)
    assert result.value == pytest.approx(exact, rel=1e-6)
    assert result.value <= exact * (1 + 1e-12)  # never above the true maximum
    from certify.symbolic import exact_constant_n2  # the proofs helper's enclosure

    lo, hi = exact_constant_n2(norm)
    assert lo <= exact <= hi
    assert abs(result.value - lo) <= 1e-6 * lo and result.value <= hi * (1 + 1e-12)


@pytest.mark.parametrize("weights,N,domain", [
    (unit(1), 6, Global()), (LAYERS[2], 4, Global()), (LAYERS[3], 4, Ball(2.0)),
    (LAYERS[2], 3, EpsBall(torch.ones(3, 5, dtype=F64), 0.3, "inf")),
    (LAYERS[3], 3, EpsBall(torch.ones(3, 3, dtype=F64), 0.5, "2")),
])
@pytest.mark.parametrize("norm", ["2", "inf"])
def test_value_is_attained_at_the_witness_inside_the_domain(weights, N, domain, norm):
    result = lower_bound(weights, N, norm, domain, **FAST)
    X = torch.tensor(result.details["witness"], dtype=F64)
    assert X.shape == (N, weights.D)
    assert result.kind == "lower" and not result.certified and result.scope == domain.scope
    # recomputed with the bias-free equivalent weights (`jacobian_equivalent`: the same J, other rounding)
    assert result.value == pytest.approx(float(jacobian_norm(jacobian(X[None], weights), norm)[0]), rel=1e-12, abs=0)
    assert result.value >= result.details["search_value"] * (1 - 1e-9)
    torch.testing.assert_close(project(X[None], domain)[0], X, rtol=0, atol=1e-12)
    if isinstance(domain, Ball):
        assert (X.norm(dim=-1) <= domain.radius * (1 + 1e-12)).all()


def test_large_inputs_use_the_matrix_free_two_norm_and_stay_below_the_bounds():
    weights, N = gaussian("l2", 2, 2, 4, seed=7), 17  # N D = 68 > DENSE_TWO_NORM
    result = lower_bound(weights, N, "2", restarts=4, steps=20, clusters=False)
    X = torch.tensor(result.details["witness"], dtype=F64)
    assert result.value == pytest.approx(float(jacobian_norm(jacobian(X[None], weights), "2")[0]), rel=1e-12)
    for name in ("paper", "factorised"):
        assert result.value <= METHODS[name].compute(weights, N, "2", Global()).value


def test_seeded_runs_are_reproducible_and_float32_is_recomputed_in_float64():
    options = dict(seed=3, restarts=4, steps=30, clusters=False)
    a = lower_bound(LAYERS[2], 3, "2", **options)
    b = lower_bound(LAYERS[2], 3, "2", **options)
    assert a.value == b.value and a.details["witness"] == b.details["witness"]
    c = lower_bound(LAYERS[2], 3, "2", dtype=torch.float32, **options)
    X = torch.tensor(c.details["witness"], dtype=F64)
    assert c.details["dtype"] == "float32"
    assert c.value == float(jacobian_norm(jacobian(X[None], LAYERS[2]), "2")[0])


def test_clusters_find_the_two_norm_maximiser_shape_at_n16():
    result = lower_bound(unit(1), 16, "2", restarts=8, steps=100)
    # a free search from random starts alone (the naive baseline, 3 s) stays below the clustered optimum
    assert result.value > 3.28
    assert result.details["phases"]["clusters"] > 3.28


def test_lemma_start_puts_the_other_tokens_at_the_lemma_distance():
    N = 9
    X = lemma_starts(unit(1), N, 3, torch.Generator().manual_seed(0))
    distance = (X[:, 1:, 0] - X[:, :1, 0]).abs()
    radius = math.sqrt(1 + phi_inverse(N - 1))
    assert torch.allclose(distance, torch.full_like(distance, radius), rtol=0.1)


def test_dp_lower_bound_grows_with_the_ball_radius():
    weights = gaussian("dp", 1, 2, 2, seed=0)
    small = lower_bound(weights, 6, "2", Ball(1.0), **FAST).value
    large = lower_bound(weights, 6, "2", Ball(16.0), **FAST).value
    assert large > 20 * small  # Theorem 3.1: quadratic growth in R (16^2 = 256 for the quadratic term)


def test_naive_baseline_is_attained_and_counts_evaluations():
    result = naive_lower_bound(unit(1), 4, "2", seconds=1.0)
    assert result.evaluations > 10 and result.rate > 0
    assert result.value == float(jacobian_norm(jacobian(result.witness[None], unit(1)), "2")[0])


@pytest.mark.parametrize("kwargs,match", [
    (dict(restarts=0), "restarts"), (dict(dtype=torch.int64), "dtype"),
    (dict(domain=EpsBall(torch.zeros(2, 1, dtype=F64), 0.1)), "centre"),
])
def test_bad_arguments_are_rejected(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        lower_bound(unit(1), 3, "2", **kwargs)
    with pytest.raises(InvalidInputError, match="norm"):
        lower_bound(unit(1), 3, "1")


# ---- soundness: lower <= every certified upper bound of the same scope ----------------------------------------------

@st.composite
def small_layers(draw):
    kind = draw(st.sampled_from(["l2", "dp"]))
    H, d = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    D = draw(st.integers(1, 3))
    weights = gaussian(kind, H, d, D, scale=draw(st.floats(0.3, 3.0)), seed=draw(st.integers(0, 2**20)),
                       bias=kind == "dp" and draw(st.booleans()))
    return weights, draw(st.integers(2, 5)), draw(st.sampled_from([0.5, 2.0]))


@settings(max_examples=12, deadline=None)
@given(small_layers(), st.sampled_from(["2", "inf"]))
def test_lower_bound_never_exceeds_a_certified_upper_bound(layer, norm):
    weights, N, radius = layer
    domain = Global() if weights.kind == "l2" else Ball(radius)
    result = lower_bound(weights, N, norm, domain, restarts=4, steps=40)
    uppers = [m.compute(weights, N, norm, domain, time_budget=0.5,
                        lower_search=LOCAL_LOWER_SEARCH)  # searching methods: a short budget
              for m in METHODS.values() if m.applies(weights, domain, N, norm)]
    assert uppers, "every small layer has a certified method"
    for upper in uppers:
        assert upper.certified and upper.kind == "upper"
        assert result.value <= upper.value, (upper.method, result.value, upper.value)


# ---- time budgets, sizing and devices (mechanisms, not timings) -----------------------------------------------------

class _FakeTime:
    """A perf_counter that advances a fixed step per call: every clock reading costs `step` seconds."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_every_step_checks_the_clock_and_the_search_reports_stopped_time(monkeypatch):
    from certify.adversarial import _search

    fake = _FakeTime(0.05)
    monkeypatch.setattr(_search, "time", fake)
    weights = gaussian("dp", 2, 2, 4, seed=1, bias=True)
    result = lower_bound(weights, 4, "2", Ball(2.0), restarts=4, steps=10_000, seconds=2.0)
    assert result.details["stopped"] == "time" and result.message.endswith("stopped: time")
    # 2 s of fake time at >= 0.05 s per reading: at most 40 readings, so only a few steps ran of 10_000 x phases
    assert sum(result.details["evaluations"].values()) <= 40 * 4
    X = torch.tensor(result.details["witness"], dtype=F64)
    assert result.value == pytest.approx(float(jacobian_norm(jacobian(X[None], weights), "2")[0]), rel=1e-12, abs=0)


def test_a_step_whose_estimated_cost_exceeds_the_deadline_never_starts():
    from tqdm import tqdm

    from certify.adversarial._search import _ascend, _Best, _Clock

    calls = []
    x = torch.zeros(3, requires_grad=True)
    clock = _Clock(1.0, tqdm(disable=True))
    _ascend([x], lambda: calls.append(1) or (x * 0).sum()[None], 100, 0.1, lambda: None, clock, 1.0,
            lambda v: None, _Best(), "free", estimate=5.0)
    assert calls == [] and clock.stopped == "time"
    clock = _Clock(1.0, tqdm(disable=True))
    _ascend([x], lambda: calls.append(1) or (x * x).sum()[None], 3, 0.1, lambda: None, clock, 1.0,
            lambda v: None, _Best(), "free", estimate=0.0)
    assert len(calls) == 4 and clock.stopped == "steps"


def test_the_batch_is_sized_from_the_measured_forward_pass(monkeypatch):
    from certify.adversarial import _search

    monkeypatch.setattr(_search, "_forward_seconds", lambda *args: 0.01)  # one forward pass: 10 ms
    weights = gaussian("dp", 2, 4, 8, seed=2)  # N D = 80 > DENSE_TWO_NORM: power iteration, 20 passes a step
    result = lower_bound(weights, 10, "2", Ball(1.0), restarts=24, steps=3, seconds=10.0)
    # STEP_SHARE * 10 s = 0.2 s per step = 2 restarts of 8 x 10 ms (and at least min(24, 2))
    assert result.details["free_restarts"] == 2
    unbudgeted = lower_bound(weights, 10, "2", Ball(1.0), restarts=24, steps=3)
    assert unbudgeted.details["free_restarts"] == 24


def test_inf_norm_rows_are_capped_at_large_width_and_stay_attained(monkeypatch):
    from certify.adversarial import _search

    monkeypatch.setattr(_search, "_forward_seconds", lambda *args: 0.01)
    weights = gaussian("dp", 2, 4, 8, seed=2)
    result = lower_bound(weights, 5, "inf", Ball(1.0), restarts=4, steps=3, seconds=1.0)
    assert result.details["rows"] == 1  # 0.05 s per step / (4 passes x 10 ms)
    X = torch.tensor(result.details["witness"], dtype=F64)
    assert result.value <= float(jacobian_norm(jacobian(X[None], weights), "inf")[0]) * (1 + 1e-12)


def test_time_limited_attained_norm_is_a_lower_bound_and_a_warm_start_is_exact(monkeypatch):
    weights = gaussian("dp", 2, 2, 4, seed=3, bias=True)
    X = torch.randn(6, 4, generator=torch.Generator().manual_seed(4), dtype=F64)
    J = jacobian(X[None], weights)[0].reshape(24, 24)
    exact = float(torch.linalg.matrix_norm(J, ord=2))
    monkeypatch.setattr(_attained, "DENSE_TIMED_LIMIT", 4)
    monkeypatch.setattr(_attained, "DENSE_INF_ENTRIES", 0)
    value, how = attained_norm(X, weights, "2", seconds=1e-9)
    assert "after 0 float64 power iterations" in how and 0 < value <= exact * (1 + 1e-12)
    top = torch.linalg.svd(J)[2][0].reshape(6, 4)
    warm, how = attained_norm(X, weights, "2", seconds=1e-9, v0=top)
    assert "warm start" in how and warm == pytest.approx(exact, rel=1e-12)
    rows, how = attained_norm(X, weights, "inf", seconds=1e-9)
    assert "4 of 24 rows" in how  # one chunk: the first min(D, ROW_CHUNK) rows
    assert rows == pytest.approx(float(J[:4].abs().sum(1).max()), rel=1e-12)
    monkeypatch.setattr(_attained, "ROW_CHUNK", 3)  # chunks smaller than a block: the limit is checked inside it
    rows, how = attained_norm(X, weights, "inf", seconds=1e-9)
    assert "3 of 24 rows" in how and rows == pytest.approx(float(J[:3].abs().sum(1).max()), rel=1e-12)
    monkeypatch.setattr(_attained, "DENSE_LIMIT", 4)
    rows, how = attained_norm(X, weights, "inf", seconds=None)  # no limit: every row, chunks of D
    assert "row blocks" in how and rows == pytest.approx(float(J.abs().sum(1).max()), rel=1e-12)


def test_low_rank_scale_and_directions_match_the_dense_computations():
    from certify.adversarial._starts import directions

    weights = gaussian("dp", 3, 2, 5, seed=5)
    dense = max(float(torch.linalg.matrix_norm(weights.W_Q[h] @ weights.W_K[h].T, ord=2)) / math.sqrt(2)
                for h in range(3))
    assert natural_scale(weights) == pytest.approx(1 / math.sqrt(dense), rel=1e-12)
    found = directions(weights)
    for h in range(3):
        A = weights.W_Q[h] @ weights.W_K[h].T
        values = torch.linalg.eigvalsh((A + A.T) / 2)
        for u, target in ((found[2 * h], values[-1]), (found[2 * h + 1], values[0])):
            assert float(u.norm()) == pytest.approx(1.0, rel=1e-12)
            assert float(u @ A @ u) == pytest.approx(float(target), rel=1e-10, abs=1e-12)


def test_starts_and_the_eps_ball_centre_are_tried_exactly():
    weights = gaussian("dp", 2, 2, 4, seed=6, bias=True)
    X0 = torch.randn(3, 4, generator=torch.Generator().manual_seed(7), dtype=F64)
    at_centre = float(jacobian_norm(jacobian(X0[None], weights), "2")[0])
    result = lower_bound(weights, 3, "2", EpsBall(X0, 1e-6, "inf"), restarts=2, steps=0, polish=0)
    assert result.value >= at_centre * (1 - 1e-9)
    good = lower_bound(weights, 3, "2", Ball(3.0), restarts=8, steps=200, seed=1)
    witness = torch.tensor(good.details["witness"], dtype=F64)
    again = lower_bound(weights, 3, "2", Ball(3.0), restarts=2, steps=0, polish=0, starts=witness, seed=9)
    assert again.value >= good.value * (1 - 1e-9)
    with pytest.raises(InvalidInputError, match="starts"):
        lower_bound(weights, 3, "2", Ball(3.0), starts=torch.zeros(2, 5, dtype=F64))


def test_the_default_device_follows_cuda_availability_and_cpu_runs(monkeypatch):
    from certify.adversarial import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device().type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device().type == "cuda"
    weights = gaussian("dp", 2, 2, 4, seed=8)
    result = lower_bound(weights, 3, "2", Ball(1.0), device="cpu", dtype=torch.float32, **FAST)
    assert result.details["device"] == "cpu" and result.details["dtype"] == "float32"
    X = torch.tensor(result.details["witness"], dtype=F64)
    assert result.value == pytest.approx(float(jacobian_norm(jacobian(X[None], weights), "2")[0]), rel=1e-12, abs=0)


def test_weights_that_require_grad_are_searched_detached():
    layer = torch.nn.MultiheadAttention(4, 2, bias=True, batch_first=True).double()
    from certify.attention import as_weights

    weights = as_weights(layer)
    assert weights.W_Q.requires_grad
    result = lower_bound(weights, 3, "2", Ball(1.0), restarts=2, steps=3)
    assert math.isfinite(result.value) and result.value > 0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), N=st.integers(3, 6), bias=st.booleans(), radius=st.sampled_from([2.0, 8.0]))
def test_rank_one_starts_split_each_query_between_the_two_far_tokens(seed, N, bias, radius):
    """`rank_one_starts` (DP, Ball): every start lies in the ball; where the two special tokens can outscore the
    queries (cos phi in (-1, 1)), every query puts most of its attention on them, and they lie on opposite sides
    of the value map's direction (their difference is at least R in norm): the configuration the structured
    bound's rank-one term describes. Its ||J|| stays below the certified structured bound on the ball."""
    from problems import random_weights

    from certify.adversarial._starts import rank_one_starts
    from certify.attention._dot_product import dot_product_scores
    from certify.bounds.local._domain import initial_box
    from certify.bounds.local._enclosure import numpy_weights
    from certify.bounds.local._structured import dp_structured_bound, structured_constants
    from certify.interval import Interval

    weights = random_weights("dp", 2, 2, D=4, scale=1.5, seed=seed, bias=bias)
    domain = Ball(radius)
    X = rank_one_starts(weights, N, domain, 6 * weights.H, torch.Generator().manual_seed(seed))
    assert X.shape == (6 * weights.H, N, weights.D)
    assert torch.all(X.norm(dim=-1) <= radius * (1 + 1e-12))
    P = dot_product_scores(X, weights)  # (B, H, N, N), already softmaxed
    split = 0
    for k in range(X.shape[0]):
        h = k % weights.H
        if P[k, h, 2:, :2].sum(-1).min() > 0.9:
            split += 1
            assert (X[k, 0] - X[k, 1]).norm() >= radius * 0.5
    assert split >= 1
    box = initial_box(domain, N, weights.D)
    bound = dp_structured_bound(Interval(box.lo[None], box.hi[None]), numpy_weights(weights),
                                structured_constants(numpy_weights(weights)), radius)[0]
    assert jacobian_norm(jacobian(X, weights), "2").max().item() <= bound
