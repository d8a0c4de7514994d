"""The attention remainder along a prefix's directions (`_taylor.direction_remainder` and its product with a matrix,
`direction_remainder_times`, used by the model chain's `directional_bounds`; issue 17): sound against autodiff,
tight on a point box (a 10% smaller remainder is caught), and, in a whole model whose input has fewer coordinates
than the attention block's, sound end to end."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from problems import random_weights
from test_model_chain import ball_points as sample_ball
from test_model_chain import jacobian_norm

from certify.bounds.local._enclosure import numpy_weights
from certify.bounds.local._taylor import direction_remainder, direction_remainder_times
from certify.interval import Interval
from certify.jacobian import jacobian
from certify.model import Linear, Model, Pool, forward, from_torch, model_enclosure
from certify.model import _jacobian_chain

F64 = torch.float64


def directional_derivative(weights, X: torch.Tensor, v: torch.Tensor) -> np.ndarray:
    """dJ(X)[v] (N, D, N, D) by forward-mode autodiff through the closed-form Jacobian."""
    return torch.func.jvp(lambda Y: jacobian(Y[None], weights)[0], (X,), (v,))[1].numpy()


@st.composite
def layers_and_boxes(draw):
    kind = draw(st.sampled_from(["dp", "l2"]))
    D = draw(st.integers(1, 4))
    weights = random_weights(kind, draw(st.integers(1, 2)), draw(st.integers(1, 2)), D=D,
                             scale=draw(st.floats(0.3, 2.0)), seed=draw(st.integers(0, 2**31 - 1)),
                             bias=kind == "dp" and draw(st.booleans()))
    N, K = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    centre = rng.standard_normal((N, D))
    half = draw(st.sampled_from([1e-3, 1e-2, 1e-1]))
    G = rng.standard_normal((N, D, K))
    G_rad = rng.uniform(0, 0.1, (N, D, K)) * draw(st.sampled_from([0.0, 1.0]))
    spread = rng.uniform(0, half, (N, D)) * draw(st.sampled_from([0.0, 1.0]))
    return weights, centre, half, Interval(G - G_rad, G + G_rad), spread, rng


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers_and_boxes(), st.sampled_from(["inf", "2"]))
def test_direction_remainder_bounds_sampled_directional_derivatives(problem, norm):
    """|sum_j delta_j dJ(xi)[g_j] + dJ(xi)[u]| <= T at random xi in the box, g_j in the interval directions, delta
    in the radii and u in the spread (the vertices of delta and u, where the bound is tightest)."""
    weights, centre, half, directions, spread, rng = problem
    N, D, K = directions.shape
    box = Interval(centre - half, centre + half)
    radii = rng.uniform(0.1, 1.0, K) if norm == "inf" else np.array([rng.uniform(0.1, 1.0)])
    right = rng.standard_normal((N * D, 2))
    T = direction_remainder(box, numpy_weights(weights), directions, radii, norm, spread=spread)
    same, T_right = direction_remainder_times(box, numpy_weights(weights), directions, radii, norm, right, spread)
    assert T is not None and np.all(T >= 0) and np.array_equal(T, same)
    for _ in range(6):
        xi = torch.tensor(rng.uniform(box.lo, box.hi))
        g = rng.uniform(directions.lo, directions.hi)
        if norm == "inf":
            delta = radii * rng.choice([-1.0, 1.0], K)
        else:
            delta = rng.standard_normal(K)
            delta *= radii[0] / np.linalg.norm(delta)
        u = spread * rng.choice([-1.0, 1.0], (N, D))
        v = torch.tensor(np.einsum("ndk,k->nd", g, delta) + u)
        derivative = directional_derivative(weights, xi, v)
        value = np.abs(derivative)
        assert np.all(value <= T * (1 + 1e-9) + 1e-12), float(np.max(value - T))
        product = np.abs(derivative.reshape(N * D, N * D) @ right)
        assert np.all(product <= T_right * (1 + 1e-9) + 1e-12), float(np.max(product - T_right))


@settings(max_examples=15, deadline=None)
@given(layers_and_boxes())
def test_direction_remainder_is_tight_on_a_point_box(problem):
    """On the point box [c, c] with one exact direction g and radius 1, T = |dJ(c)[g]| up to rounding, so a
    remainder 10% too small is exceeded by the derivative itself."""
    weights, centre, _, directions, _, _ = problem
    g = directions.mid[..., :1]
    T = direction_remainder(Interval(centre, centre.copy()), numpy_weights(weights), Interval(g, g.copy()),
                            np.ones(1), "inf")
    derivative = directional_derivative(weights, torch.tensor(centre), torch.tensor(g[..., 0]))
    exact = np.abs(derivative)
    assert np.all(exact <= T * (1 + 1e-9) + 1e-12)
    top = np.unravel_index(np.argmax(exact), exact.shape)
    if exact[top] > 1e-6:
        assert exact[top] > 0.9 * T[top]
        assert np.allclose(T, exact, rtol=1e-6, atol=1e-9 * (1 + exact.max()))
    n = exact.shape[0] * exact.shape[1]
    right = np.random.default_rng(0).standard_normal((n, 3))
    _, T_right = direction_remainder_times(Interval(centre, centre.copy()), numpy_weights(weights),
                                           Interval(g, g.copy()), np.ones(1), "inf", right)
    product = np.abs(derivative.reshape(n, n) @ right)  # the product, not |dJ[g]| |right|: cancellations kept
    assert np.allclose(T_right, product, rtol=1e-6, atol=1e-9 * (1 + product.max()))


def embedded_model(seed: int, N: int = 3, K: int = 2, D: int = 8, H: int = 2, scale: float = 1.0) -> Model:
    """Tokens of K features embedded linearly into D (a patch embedding), one pre-LN encoder layer, mean pooling
    and a 3-class head: the model's input has N K coordinates, the attention block's N D >= 4 N K, so the chain
    bounds the attention's remainder along the prefix's directions."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, H, 2 * D, dropout=0.0, activation="gelu", norm_first=True,
                                             batch_first=True).eval()
    with torch.no_grad():
        for p in layer.parameters():
            if p.ndim == 2:
                p.mul_(scale)
    rng = np.random.default_rng(seed)
    encoder = from_torch(layer, (N, D))
    embed = Linear(rng.standard_normal((K, D)), 0.1 * rng.standard_normal(D))
    head = Linear(rng.standard_normal((D, 3)), rng.standard_normal(3))
    return Model((embed,) + encoder.blocks + (Pool("mean"), head), (N, K))


def spy_on(monkeypatch, name: str, calls: list[bool] | None = None) -> list[bool]:
    """Record in ``calls`` (a new list if None), per call of `_jacobian_chain.<name>`, whether it gave a bound."""
    calls = [] if calls is None else calls
    original = getattr(_jacobian_chain, name)

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_jacobian_chain, name, spy)
    return calls


def spy_on_directions(monkeypatch) -> list[bool]:
    """Record, per unmasked attention block, whether `directional_bounds` gave a bound."""
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)  # on every attention block, whatever its Delta
    return spy_on(monkeypatch, "directional_bounds")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), eps=st.sampled_from([1e-3, 1e-2, 1e-1]), norm=st.sampled_from(["inf", "2"]),
       scale=st.sampled_from([1.0, 2.0]))
def test_model_with_directions_is_sound(monkeypatch, seed, eps, norm, scale):
    """Attained ||J(x)|| at the centre and at ball points stays below the chain's bound, outputs inside its box,
    with the directional remainder in use (on every attention block: DIRECTIONS_FROM = 0)."""
    monkeypatch.undo()
    calls = spy_on_directions(monkeypatch)
    model = embedded_model(seed, scale=scale)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(seed), dtype=F64)
    enclosure = model_enclosure(model, x0, eps, norm)
    assert calls and all(calls)
    value = enclosure.lipschitz(norm)
    for x in [x0] + sample_ball(x0, eps, norm, 6, seed):
        assert jacobian_norm(model, x, norm) <= value
        y = forward(model, x)[0].numpy().reshape(-1)
        assert np.all(enclosure.box.lo.reshape(-1) <= y) and np.all(y <= enclosure.box.hi.reshape(-1))


def attention_deviation(monkeypatch, scale_T: float, seed: int, eps: float) -> tuple[np.ndarray, ...]:
    """(max over sampled x in the ball of |J_f(y(x)) - A|, Delta', max of |(J_f(y(x)) - A) c|, P) for the attention
    block f of `embedded_model`, y(x) = LayerNorm(embed(x)) its input, (Delta', P) from `directional_bounds` with
    c its ``right``, and `direction_remainder_times` scaled by ``scale_T``."""
    from certify.model._enclosure import attention_point_jacobian
    from certify.model._forward import apply_block

    seen = []
    original_bounds, original_T = _jacobian_chain.directional_bounds, _jacobian_chain.direction_remainder_times

    def spy(block, prefix, domain, A, right=None):
        out = original_bounds(block, prefix, domain, A, right)
        seen.append((block, A, right, out))
        return out

    def scaled(*args, **kwargs):
        out = original_T(*args, **kwargs)
        return out if out is None else (scale_T * out[0], None if out[1] is None else scale_T * out[1])

    monkeypatch.setattr(_jacobian_chain, "directional_bounds", spy)
    monkeypatch.setattr(_jacobian_chain, "direction_remainder_times", scaled)
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    model = embedded_model(seed)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(seed), dtype=F64)
    model_enclosure(model, x0, eps, "inf")
    block, A, right, out = seen[0]
    embed, (norm, attention) = model.blocks[0], model.blocks[1].inner
    assert attention is block and out is not None and right is not None
    delta, product = out
    deviation, product_deviation = np.zeros_like(A), np.zeros_like(product)
    for x in [x0] + sample_ball(x0, eps, "inf", 24, seed):
        y = apply_block(norm, apply_block(embed, x[None]))[0].numpy()
        E = attention_point_jacobian(block, y) - A
        deviation = np.maximum(deviation, np.abs(E))
        product_deviation = np.maximum(product_deviation, np.abs(E @ right))
    return deviation, delta, product_deviation, product


def test_directional_bounds_bound_the_attention_jacobian_movement(monkeypatch):
    """|J_f(y(x)) - A| <= Delta' and |(J_f(y(x)) - A) c| <= P at sampled x (the theorem of `directional_bounds`);
    with the directional remainder dropped (only |J_f(c) - A| left) both fail at some sampled x."""
    for seed in range(3):
        deviation, delta, product_deviation, product = attention_deviation(monkeypatch, 1.0, seed, 1e-2)
        assert np.all(deviation <= delta) and np.all(product_deviation <= product)
        monkeypatch.undo()
    broken, broken_product = 0, 0
    for seed in range(3):
        deviation, delta, product_deviation, product = attention_deviation(monkeypatch, 0.0, seed, 1e-2)
        broken += bool(np.any(deviation > delta))
        broken_product += bool(np.any(product_deviation > product))
        monkeypatch.undo()
    assert broken >= 1 and broken_product >= 1


def test_directions_tighten_the_model_bound(monkeypatch):
    """On the embedded model the directional remainder gives a smaller certified bound than the coordinate
    slopes alone (DIRECTIONS_MAX = 0 turns it off), and both stay above the attained value."""
    model = embedded_model(1)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    eps = 1e-3
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    with_directions = model_enclosure(model, x0, eps, "inf").lipschitz("inf")
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_MAX", 0)
    without = model_enclosure(model, x0, eps, "inf").lipschitz("inf")
    attained = max(jacobian_norm(model, x, "inf") for x in [x0] + sample_ball(x0, eps, "inf", 16, 1))
    assert attained <= with_directions < without


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), eps=st.sampled_from([1e-3, 1e-2, 1e-1]), norm=st.sampled_from(["inf", "2"]))
def test_linear_images_on_the_set_contain_sampled_images(monkeypatch, seed, eps, norm):
    """The LayerNorms' centred inputs y C and the feed-forward pre-activations y W1 + b1 of sampled inputs lie in
    `linear_image_on_set` (the prefix's first-order form, narrower than the image of the box)."""
    from certify.model._forward import apply_block

    monkeypatch.undo()
    seen = []
    original = _jacobian_chain.linear_image_on_set

    def spy(prefix, domain, M, b=None):
        out = original(prefix, domain, M, b)
        seen.append((M, b, out))
        return out

    monkeypatch.setattr(_jacobian_chain, "linear_image_on_set", spy)
    model = embedded_model(seed)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(seed), dtype=F64)
    model_enclosure(model, x0, eps, norm)
    embed, first, second = model.blocks[:3]
    assert len(seen) == 3  # LayerNorm 1, LayerNorm 2, the feed-forward block
    for x in [x0] + sample_ball(x0, eps, norm, 8, seed):
        y1 = apply_block(embed, x[None])
        y2 = y1 + apply_block(first.inner[1], apply_block(first.inner[0], y1))
        y3 = apply_block(second.inner[0], y2)
        for y, (M, b, image) in zip((y1, y2, y3), seen):
            value = y[0].numpy() @ M + (0.0 if b is None else b)
            assert np.all(image.lo <= value + 1e-12) and np.all(value <= image.hi + 1e-12)


def test_movement_times_bounds_the_residual_blocks_movement(monkeypatch):
    """`_movement_times` of the first residual block g = attention o LayerNorm: |(J_g(y(x)) - A_g) V| <= its bound at
    sampled x, with V the embedding's matrix (the prefix's Jacobian, exact here) and A_g = fl(A_2 A_1)."""
    from certify.model._forward import apply_block

    seen = []
    original = _jacobian_chain._movement_times

    def spy(steps, W, delta):
        out = original(steps, W, delta)
        seen.append((steps, W, out))
        return out

    monkeypatch.setattr(_jacobian_chain, "_movement_times", spy)
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    for seed in range(3):
        seen.clear()
        model = embedded_model(seed, scale=2.0)
        x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(seed), dtype=F64)
        model_enclosure(model, x0, 1e-2, "inf")
        (A1, _, _), (A2, _, product) = seen[0][0]
        W, bound = seen[0][1], seen[0][2]
        assert product is not None  # the attention block's product was used
        embed, (norm, attention) = model.blocks[0], model.blocks[1].inner
        A_g = A2 @ A1
        for x in [x0] + sample_ball(x0, 1e-2, "inf", 12, seed):
            y = apply_block(embed, x[None])[0]
            inner = lambda t: apply_block(attention, apply_block(norm, t[None]))[0]  # noqa: E731
            J_g = torch.func.jacrev(inner)(y).reshape(y.numel(), y.numel()).numpy()
            assert np.all(np.abs((J_g - A_g) @ W.mid) <= bound * (1 + 1e-9) + 1e-12)


def test_a_dropped_movement_product_is_caught(monkeypatch):
    """With `_movement_times` returning 0 (the blocks' movement times the prefix's Jacobian dropped from the error)
    the whole-model soundness check fails on a wide ball."""
    monkeypatch.setattr(_jacobian_chain, "_movement_times", lambda steps, W, delta: np.zeros((delta.shape[0],
                                                                                               W.shape[1])))
    broken = 0
    for seed in range(4):
        model = embedded_model(seed, scale=2.0)
        x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(seed), dtype=F64)
        value = model_enclosure(model, x0, 0.1, "inf").lipschitz("inf")
        attained = max(jacobian_norm(model, x, "inf") for x in [x0] + sample_ball(x0, 0.1, "inf", 16, seed))
        broken += attained > value
    assert broken >= 1


def test_split_directions_bound_the_movement_and_tighten(monkeypatch):
    """The DP block's directions split into their midpoints and the rest (`_split_directions`: the rest by the
    weighted coordinate slopes) are in use on the embedded model, bound |J_f(y(x)) - A| at sampled x, and give a
    smaller whole-model bound than the interval directions (`direction_remainder_times` on [m - q, m + q])."""
    calls: list[bool] = []
    for seed in range(3):
        spy_on(monkeypatch, "_split_directions", calls)
        deviation, delta, product_deviation, product = attention_deviation(monkeypatch, 1.0, seed, 1e-2)
        assert np.all(deviation <= delta) and np.all(product_deviation <= product)
        monkeypatch.undo()
    assert calls and all(calls)
    model = embedded_model(1)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    split = model_enclosure(model, x0, 1e-2, "inf").lipschitz("inf")
    def interval_directions(box, c, w, directions, radii, norm, right, u, chunk, workers, *score_sets):
        return direction_remainder_times(box, w, directions, radii, norm, right, spread=u, chunk=chunk,
                                         workers=workers)

    monkeypatch.setattr(_jacobian_chain, "_split_directions", interval_directions)
    interval_only = model_enclosure(model, x0, 1e-2, "inf").lipschitz("inf")
    attained = max(jacobian_norm(model, x, "inf") for x in [x0] + sample_ball(x0, 1e-2, "inf", 16, 1))
    assert attained <= split < 0.9 * interval_only  # 40.6 against 48.4 when written


def test_score_sets_tighten_the_model_bound(monkeypatch):
    """The score differences over the set the prefix reaches (`_score_set`, passed by `directional_bounds` to the
    forward passes and the weighted slopes) give a smaller certified bound than the box's alone, above the attained
    value (dropping them: `_split_directions` called without its last two arguments)."""
    model = embedded_model(1)
    x0 = torch.randn(3, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    eps = 1e-2
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    calls = spy_on(monkeypatch, "_split_directions")
    with_sets = model_enclosure(model, x0, eps, "inf").lipschitz("inf")
    assert calls and all(calls)
    monkeypatch.undo()
    monkeypatch.setattr(_jacobian_chain, "DIRECTIONS_FROM", 0.0)
    original = _jacobian_chain._split_directions
    monkeypatch.setattr(_jacobian_chain, "_split_directions", lambda *args: original(*args[:10]))
    without = model_enclosure(model, x0, eps, "inf").lipschitz("inf")
    attained = max(jacobian_norm(model, x, "inf") for x in [x0] + sample_ball(x0, eps, "inf", 16, 1))
    assert attained <= with_sets < 0.9 * without  # 32.0 against 40.6 when written
    monkeypatch.setattr(_jacobian_chain, "_split_directions", original)  # sets over the memory limit: skipped
    monkeypatch.setattr(_jacobian_chain, "score_set_bytes", lambda N, d, n0: _jacobian_chain.TAYLOR_MEMORY_LIMIT + 1)
    assert model_enclosure(model, x0, eps, "inf").lipschitz("inf") == without
