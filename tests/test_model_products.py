"""Products |(J_f(x) - A) c| of the model chain's LayerNorm and feed-forward blocks (`layer_norm_product`,
`feed_forward_product`; issue 17): sound against autodiff at sampled inputs of the box, and tighter than Delta |c|
where c's rows share a common part (the LayerNorm's centring removes it exactly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from certify.interval import Interval
from certify.model import FeedForward, LayerNorm
from certify.model._forward import apply_block
from certify.model._jacobian_chain import block_jacobian


def block_jacobian_at(block, x: np.ndarray) -> np.ndarray:
    """The exact Jacobian (R C', R C) of a row-wise block at the state x (R, C), by autodiff in float64."""
    f = lambda t: apply_block(block, t[None])[0]  # noqa: E731
    return torch.func.jacrev(f)(torch.tensor(x)).reshape(-1, x.size).numpy()


@st.composite
def blocks_and_boxes(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    R, C, q = draw(st.integers(1, 3)), draw(st.integers(2, 6)), draw(st.integers(1, 3))
    if draw(st.booleans()):
        block = LayerNorm(rng.uniform(0.5, 2.0, C), rng.standard_normal(C), draw(st.sampled_from([1e-5, 1e-2])))
    else:
        hidden = draw(st.integers(1, 8))
        block = FeedForward(rng.standard_normal((C, hidden)), rng.standard_normal(hidden),
                            draw(st.sampled_from(["relu", "gelu"])), rng.standard_normal((hidden, C)), None)
    centre = rng.standard_normal((R, C)) * draw(st.sampled_from([0.1, 1.0, 3.0]))
    half = draw(st.sampled_from([1e-3, 1e-2, 1e-1]))
    common = rng.standard_normal((R, 1, q)) * draw(st.sampled_from([0.0, 10.0]))  # a part shared by a row's entries
    c = (rng.standard_normal((R, C, q)) + common).reshape(R * C, q)
    return block, Interval(centre - half, centre + half), c, rng


def product_and_delta(block, box: Interval, c: np.ndarray):
    """(A, Delta, P) from `block_jacobian` with a prefix whose Jacobian midpoint is c."""
    class Prefix:  # only W.mid is read for the product
        W = Interval(c, c.copy())

    point = Interval(box.mid, box.mid.copy())
    A, delta, product = block_jacobian(block, box, point, prefix=Prefix())
    assert product is not None and np.array_equal(product.right, c)
    return A, delta, product.bound


@settings(max_examples=40, deadline=None)
@given(blocks_and_boxes())
def test_products_bound_sampled_jacobian_movements(problem):
    """|(J(x) - A) c| <= P at the centre, the corners and random points of the box."""
    block, box, c, rng = problem
    A, _, P = product_and_delta(block, box, c)
    points = [box.mid] + [rng.uniform(box.lo, box.hi) for _ in range(6)]
    points += [np.where(rng.random(box.shape) < 0.5, box.lo, box.hi) for _ in range(4)]
    for x in points:
        value = np.abs((block_jacobian_at(block, x) - A) @ c)
        assert np.all(value <= P * (1 + 1e-9) + 1e-12), float(np.max(value - P))


def test_layer_norm_product_removes_the_common_part():
    """With c's rows sharing a large common part, the LayerNorm product stays small (the centring cancels it
    exactly) while Delta |c| grows with it; the product still bounds the sampled movement."""
    rng = np.random.default_rng(0)
    R, C, q = 2, 6, 3
    block = LayerNorm(rng.uniform(0.5, 2.0, C), rng.standard_normal(C), 1e-5)
    centre = rng.standard_normal((R, C))
    box = Interval(centre - 1e-2, centre + 1e-2)
    base = rng.standard_normal((R, C, q))
    small = product_and_delta(block, box, base.reshape(R * C, q))[2]
    A, delta, P = product_and_delta(block, box, (base + 1e3).reshape(R * C, q))
    magnitude = delta @ np.abs((base + 1e3).reshape(R * C, q))
    assert P.max() < 2 * small.max() + 1e-9 and P.max() < 1e-2 * magnitude.max()
    for x in [rng.uniform(box.lo, box.hi) for _ in range(8)]:
        assert np.all(np.abs((block_jacobian_at(block, x) - A) @ (base + 1e3).reshape(R * C, q)) <= P)


@pytest.mark.parametrize("case", ["dominant", "cancelling"])
def test_centring_slack_covers_the_float_centring(case):
    """Around the tightest enclosure of x C_float (C_float = fl(I - 11^T/D), D = 48, its diagonal 1 - fl(1/D)
    rounded too), the widening contains the exact centred x - mean(x): one coordinate far above the others, and
    coordinates close to their mean (the centred values cancel)."""
    from fractions import Fraction

    from certify.model._enclosure import _widen_centring

    D = 48
    C = np.eye(D) - 1.0 / D
    x = np.zeros((1, D))
    if case == "dominant":
        x[0, 5], x[0, :5] = 1.0e8, 1e-3 * np.arange(1, 6)
    else:
        x[0] = 1.0e8 + np.arange(D) * 1e-7
    exact = [Fraction(v) - sum(Fraction(t) for t in x[0]) / D for v in x[0]]
    float_product = [sum(Fraction(x[0, i]) * Fraction(C[i, k]) for i in range(D)) for k in range(D)]
    tight = Interval(np.array([[np.nextafter(float(v), -np.inf) for v in float_product]]),
                     np.array([[np.nextafter(float(v), np.inf) for v in float_product]]))
    lo, hi = _widen_centring(tight, np.abs(x), -1)
    assert all(Fraction(lo[0, k]) <= exact[k] <= Fraction(hi[0, k]) for k in range(D))
