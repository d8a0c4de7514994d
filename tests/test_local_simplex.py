"""Row sums of the DP Jacobian with every softmax row on the simplex (certify/bounds/local/_simplex.py,
proofs/simplex_row_sums.py).

The linear-program bound (1) is checked against scipy's linprog (an upper bound, and tight); the row sums against
|J(X)| attained at random points and corners of random boxes, over hypothesis-drawn DP layers with biases; a 10%
smaller row sum must be caught by an attained value; the branch and bound that uses it stays above its lower bounds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import random_weights
from scipy.optimize import linprog

from certify._domain import EpsBall
from certify.adversarial import LOCAL_LOWER_SEARCH
from certify.bounds.local._enclosure import (dp_score_differences, jacobian_enclosure, numpy_weights,
                                             token_differences)
from certify.bounds.local._search import local_bound
from certify.bounds.local._simplex import (dp_inf_norm_bounds, dp_row_sums, dp_simplex_jacobian_enclosure,
                                           score_differences, simplex_centred_images, simplex_upper)
from certify.interval import Interval
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 7), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-300, 1.0, 1e6]))
def test_the_simplex_bound_is_the_linear_programs_maximum(K, seed, scale):
    """simplex_upper >= max {z . P : lo <= P <= hi, sum P = 1} (scipy linprog) and within 1e-9 of it."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 1.0 / K, K) * rng.integers(0, 2, K)
    hi = np.minimum(lo + rng.uniform(0, 1, K), 1.0)
    if hi.sum() < 1.0:  # make the program feasible
        hi[rng.integers(K)] = 1.0
    z = rng.standard_normal(K) * scale
    result = linprog(-z / scale, bounds=list(zip(lo, hi)), A_eq=np.ones((1, K)), b_eq=[1.0], method="highs")
    assert result.status == 0
    exact = -result.fun * scale
    bound = float(simplex_upper(lo, hi, z))
    assert bound >= exact - 1e-9 * scale * np.abs(z / scale).sum()
    assert bound <= exact + 1e-9 * scale * (1.0 + np.abs(z / scale).sum()) + 1e-300
    if scale == 1e-300:
        assert bound > 0 or exact <= 0  # no underflow to 0 above a positive maximum


def test_the_simplex_bound_is_sound_at_random_simplex_points_and_handles_inf():
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(5), size=400)  # points of the simplex
    lo, hi = P.min(axis=0), P.max(axis=0)
    z = rng.standard_normal((30, 5))
    bound = simplex_upper(lo, hi, z)  # (30,)
    assert np.all((P @ z.T).max(axis=0) <= bound)
    assert simplex_upper(lo, np.array([1.0, np.inf, 1.0, 1.0, 1.0]), z[0]) == math.inf
    assert simplex_upper(lo, hi, np.array([0.0, np.nan, 0.0, 0.0, 0.0])) == math.inf
    assert simplex_upper(np.zeros(3), np.ones(3), np.array([-np.inf, 1.0, 2.0])) == math.inf


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 5), F=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_the_centred_images_contain_every_weighted_difference(N, F, seed):
    """simplex_centred_images(P, Y) contains sum_k P_ik (y_l - y_k) for softmax rows P in the box and y_l in Y_l;
    (P from the hull of 200 points of the simplex per row, y from a random box)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(N) * 0.5, size=(200, N))  # (samples, N_i, N_k), rows on the simplex
    P_box = Interval(P.min(axis=0), P.max(axis=0))
    lo = rng.standard_normal((N, F))
    Y_box = Interval(lo, lo + rng.uniform(0, 2, (N, F)))
    y = Y_box.lo + rng.uniform(0, 1, (200, N, F)) * (Y_box.hi - Y_box.lo)
    exact = np.einsum("sik,slkF->silF", P, y[:, :, None, :] - y[:, None, :, :])  # (samples, N_i, N_l, F)
    enclosure = simplex_centred_images(P_box, Y_box)
    assert enclosure.shape == (N, N, F)
    slack = 1e-12 * (1.0 + np.abs(exact).max())
    assert np.all(enclosure.lo - slack <= exact) and np.all(exact <= enclosure.hi + slack)


@st.composite
def dp_layers(draw):
    """(weights, N, box): DP layers with q/k/v/out biases, H in 1..2, d in 1..2, D = H d or one more, N in 1..4, and
    a random box of widths up to 2 around random tokens."""
    H = draw(st.integers(1, 2))
    d = draw(st.integers(1, 2))
    D = H * d + draw(st.integers(0, 1))
    scale = draw(st.floats(0.3, 3.0))
    seed = draw(st.integers(0, 2**31 - 1))
    N = draw(st.integers(1, 4))
    width = draw(st.sampled_from([1e-6, 1e-2, 0.3, 2.0]))
    weights = random_weights("dp", H, d, D=D, scale=scale, seed=seed, bias=True)
    rng = np.random.default_rng(seed)
    lo = rng.standard_normal((N, D)) * 1.5
    hi = lo + width * rng.uniform(0.2, 1, lo.shape)
    return weights, N, Interval(lo, hi)


def _points(box: Interval, seed: int, count: int = 200) -> np.ndarray:
    """Random points and random corners of the box (corners are where wide-box row sums peak)."""
    rng = np.random.default_rng(seed)
    lo, hi = box.lo, box.hi
    inside = lo + rng.uniform(0, 1, (count, *lo.shape)) * (hi - lo)
    corners = np.where(rng.integers(0, 2, (count, *lo.shape)) == 1, hi, lo)
    return np.concatenate([inside, corners])


def _row_sums(points: np.ndarray, weights) -> np.ndarray:
    """(count, N, D): sum_{l, E} |J_il[F, E](X)| from the closed-form Jacobian (certify.jacobian)."""
    J = jacobian(torch.from_numpy(points), weights).numpy()  # (count, N, D, N, D)
    return np.abs(J).sum(axis=(-2, -1))


@settings(max_examples=40, deadline=None)
@given(layer=dp_layers(), seed=st.integers(0, 10_000))
def test_the_row_sums_are_above_every_attained_row_sum(layer, seed):
    weights, N, box = layer
    bound = dp_row_sums(box, numpy_weights(weights))
    attained = _row_sums(_points(box, seed), weights)
    assert bound.shape == (N, weights.D)
    assert np.all(attained <= bound[None])
    assert np.all(np.isfinite(bound))


@settings(max_examples=40, deadline=None)
@given(layer=dp_layers(), seed=st.integers(0, 10_000))
def test_the_simplex_enclosure_contains_every_attained_jacobian(layer, seed):
    """J(X) at random points and corners lies in the entrywise enclosure (up to the float error of J(X) itself)."""
    weights, N, box = layer
    w = numpy_weights(weights)
    enclosure = dp_simplex_jacobian_enclosure(box, w)
    J = jacobian(torch.from_numpy(_points(box, seed, 100)), weights).numpy()  # (count, N, D, N, D)
    slack = 1e-13 * (1.0 + np.abs(J).max())  # J's own rounding error (tests/test_local_bounds.py, _assert_encloses)
    assert enclosure.shape == J.shape[1:]
    assert np.all(enclosure.lo - slack <= J) and np.all(J <= enclosure.hi + slack)
    assert np.all(np.isfinite(enclosure.lo)) and np.all(np.isfinite(enclosure.hi))


def test_the_simplex_enclosure_is_much_narrower_on_wide_boxes_and_tight_on_small_ones():
    weights = random_weights("dp", 2, 4, scale=2.0, seed=0, bias=True)
    w = numpy_weights(weights)
    X0 = np.random.default_rng(0).standard_normal((6, 8))
    wide = Interval(X0 - 0.5, X0 + 0.5)
    plain, simplex = jacobian_enclosure(wide, w), dp_simplex_jacobian_enclosure(wide, w)
    assert np.max(simplex.hi - simplex.lo) < np.max(plain.hi - plain.lo) / 3
    small = Interval(X0 - 1e-9, X0 + 1e-9)
    at_X0 = jacobian(torch.from_numpy(X0)[None], weights).numpy()[0]
    narrow = dp_simplex_jacobian_enclosure(small, w)
    assert np.max(narrow.hi - narrow.lo) < 1e-6 * (1.0 + np.max(np.abs(at_X0)))
    assert np.all(narrow.lo - 1e-12 <= at_X0) and np.all(at_X0 <= narrow.hi + 1e-12)


@settings(max_examples=30, deadline=None)
@given(layer=dp_layers(), seed=st.integers(0, 10_000))
def test_the_score_differences_contain_every_attained_difference(layer, seed):
    weights, N, box = layer
    w = numpy_weights(weights)
    points = _points(box, seed, 100)
    for h in range(weights.H):
        L, _, _ = score_differences(box, token_differences(box), w, h)
        for X in points[:: 10]:
            point = Interval(X, X)
            _, _, exact = dp_score_differences(point, token_differences(point), w, h)
            # the attained difference lies in `exact` (a rounding-wide enclosure): it must meet L
            assert np.all(L.lo <= exact.hi) and np.all(exact.lo <= L.hi)


def test_the_row_sums_are_tight_on_small_boxes_and_a_ten_percent_cut_is_caught():
    """At eps = 1e-7 the bound is within 60% of ||J(X0)||_inf (the triangle inequality over heads is its only slack
    there); with one head the row sums tend to the exact |J| row sums, so 0.9 times them is left by X0 itself."""
    weights = random_weights("dp", 1, 3, scale=2.0, seed=5, bias=True)
    X0 = np.random.default_rng(1).standard_normal((4, 3))
    box = Interval(X0 - 1e-7, X0 + 1e-7)
    bound = dp_row_sums(box, numpy_weights(weights))
    exact = _row_sums(X0[None], weights)[0]
    assert np.all(exact <= bound) and np.all(bound <= exact * (1 + 1e-4))
    assert np.any(exact > 0.9 * bound)
    two_heads = random_weights("dp", 2, 2, scale=2.0, seed=5, bias=True)
    X0 = np.random.default_rng(2).standard_normal((4, 4))
    bound = dp_inf_norm_bounds(Interval(X0[None] - 1e-7, X0[None] + 1e-7), numpy_weights(two_heads))[0]
    exact = float(jacobian_norm(jacobian(torch.from_numpy(X0)[None], two_heads), "inf")[0])
    assert exact <= bound <= 1.6 * exact


def test_wide_boxes_are_much_tighter_than_the_interval_enclosure():
    """The reason for the module: on a box of width 1 the interval enclosure's row sums treat the softmax weights as
    independent; the simplex row sums keep sum_l P_il = 1 and are several times smaller."""
    weights = random_weights("dp", 2, 4, scale=2.0, seed=0, bias=True)
    X0 = np.random.default_rng(0).standard_normal((6, 8))
    box = Interval(X0[None] - 0.5, X0[None] + 0.5)
    w = numpy_weights(weights)
    enclosure = jacobian_enclosure(box, w)
    magnitude = enclosure.mag.reshape(6 * 8, 6 * 8)
    interval_row_sum = magnitude.sum(axis=1).max()
    simplex = dp_inf_norm_bounds(box, w)[0]
    attained = _row_sums(_points(Interval(box.lo[0], box.hi[0]), 0), weights).max()
    assert attained <= simplex < interval_row_sum / 3


def test_the_rows_and_the_enclosure_reject_l2_layers():
    with pytest.raises(ValueError, match="DP layers"):
        dp_row_sums(Interval(np.zeros((2, 2)), np.ones((2, 2))), numpy_weights(random_weights("l2", 1, 2)))
    with pytest.raises(ValueError, match="DP layers"):
        dp_simplex_jacobian_enclosure(Interval(np.zeros((2, 2)), np.ones((2, 2))), numpy_weights(random_weights("l2", 1, 2)))


@pytest.mark.parametrize("eps", [0.05, 0.5])
def test_the_branch_and_bound_with_the_row_sums_stays_above_its_lower_bounds(eps):
    weights, N = random_weights("dp", 2, 2, scale=2.0, seed=3, bias=True), 4
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(0), dtype=F64)
    cert = local_bound(weights, N, "inf", EpsBall(X0, eps, "inf"), time_budget=3.0, lower_search=LOCAL_LOWER_SEARCH)
    assert cert.certified
    points = torch.from_numpy(_points(Interval(X0.numpy() - eps, X0.numpy() + eps), 0))
    attained = float(jacobian_norm(jacobian(points, weights), "inf").max())
    assert max(attained, cert.details["lower"]) <= cert.value


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_tiny_weights_never_certify_zero(norm):
    """Weights of 1e-300 give a Jacobian of about 1e-600, below the smallest float: the certificate must stay
    positive (the structured bound underflowed to 0.0 here and is now discarded below 2^-900)."""
    weights = random_weights("dp", 2, 2, seed=3, bias=True)
    weights = dataclasses.replace(weights, W_Q=weights.W_Q * 1e-300, W_K=weights.W_K * 1e-300,
                                  W_V=weights.W_V * 1e-300, W_O=weights.W_O * 1e-300)
    X0 = np.random.default_rng(0).standard_normal((3, 4))
    assert np.all(dp_row_sums(Interval(X0 - 0.1, X0 + 0.1), numpy_weights(weights)) > 0)
    cert = local_bound(weights, 3, norm, EpsBall(torch.from_numpy(X0), 0.1, "inf"), time_budget=2.0,
                       lower_search=LOCAL_LOWER_SEARCH, quiet=True)
    assert cert.certified and cert.value > 0
