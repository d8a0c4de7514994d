"""Coordinate slopes of the DP Jacobian from its building blocks (certify/bounds/local/_slopes.py, issue 15).

The slope S must bound sum_m h_m |dJ/dX_m| everywhere on the box: checked against the exact derivative at the
centre (autograd through the closed-form Jacobian), against sampled differences J(X) - J(X0) over the box, and
through the Taylor bound against attained norms; a 10% smaller S must be caught by a vertex that attains it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import biased_dp_problems, random_weights

from certify._domain import EpsBall
from certify.bounds.local._diagonal_kernel import diagonal_slope_by_arrays
from certify.bounds.local._enclosure import const, numpy_weights
from certify.bounds.local._slopes import _diagonal_slope, dp_slopes, integral_slopes
from certify.bounds.local._taylor import taylor_bound
from certify.interval import Interval
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


def exact_slope(weights, X0: torch.Tensor) -> np.ndarray:
    """sum_m |dJ/dX_m (X0)| (unit h), by autograd through the closed-form Jacobian: (N, D, N, D)."""
    N, D = X0.shape
    G = torch.autograd.functional.jacobian(lambda X: jacobian(X[None], weights)[0], X0)
    return G.abs().sum((-1, -2)).numpy()


def biased_dp_layers():
    return biased_dp_problems(max_H=2)


@settings(max_examples=30)
@given(biased_dp_layers(), st.booleans())
def test_slopes_bound_the_exact_derivative_at_the_centre(problem, exact_diagonal):
    """On a box of half-width 1e-9, S / 1e-9 >= sum_m |dJ/dX_m (X0)| entrywise (the box barely moves J')."""
    weights, X0 = problem
    x0, eps = X0.numpy(), 1e-9
    S = dp_slopes(Interval(x0 - eps, x0 + eps), x0, numpy_weights(weights), exact_diagonal=exact_diagonal) / eps
    exact = exact_slope(weights, X0)
    assert np.all(S >= exact * (1 - 1e-6) - 1e-9 * (1 + exact.max()))


@settings(max_examples=20)
@given(biased_dp_layers(), st.sampled_from([1e-3, 1e-2, 1e-1, 0.5]), st.booleans())
def test_sampled_differences_stay_inside_the_slopes(problem, eps, exact_diagonal):
    """|J(X) - J(X0)| <= S for X at random points and vertices of the box X0 +- eps (mean-value theorem)."""
    weights, X0 = problem
    x0 = X0.numpy()
    S = dp_slopes(Interval(x0 - eps, x0 + eps), x0, numpy_weights(weights), exact_diagonal=exact_diagonal)
    g = torch.Generator().manual_seed(0)
    points = torch.cat([X0 + eps * (2 * torch.rand(16, *X0.shape, generator=g, dtype=F64) - 1),
                        X0 + eps * torch.sign(torch.randn(16, *X0.shape, generator=g, dtype=F64))])
    J0 = jacobian(X0[None], weights)[0].numpy()
    J = jacobian(points, weights).numpy()
    assert np.all(np.abs(J - J0) <= S + 1e-12 * (1 + np.abs(J0).max()))


@settings(max_examples=15)
@given(biased_dp_layers(), st.sampled_from([1e-3, 1e-2, 1e-1]), st.sampled_from(["2", "inf"]))
def test_the_slopes_taylor_bound_is_above_every_attained_norm(problem, eps, norm):
    weights, X0 = problem
    cert = taylor_bound(weights, X0.shape[0], norm, EpsBall(X0, eps, "inf"), seeds="slopes")
    g = torch.Generator().manual_seed(1)
    points = torch.cat([X0[None], X0 + eps * torch.sign(torch.randn(16, *X0.shape, generator=g, dtype=F64))])
    attained = jacobian_norm(jacobian(points, weights), norm).max().item()
    assert cert.value >= attained * (1 - 1e-12)
    assert cert.details["seeds"] == "slopes"


def _integral(box: Interval, centre: np.ndarray, w, max_steps: int = 8) -> np.ndarray:
    return integral_slopes(box, centre, w, max_steps=max_steps)[0]


@settings(max_examples=20)
@given(biased_dp_layers(), st.sampled_from([1e-2, 1e-1, 0.5]), st.sampled_from([2, 4, 8]),
       st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_the_integral_form_bounds_sampled_differences(problem, eps, max_steps, share, seed):
    """|J(X) - J(X0)| <= S for X in a box about X0 (X0 off its middle: `share` of eps on one side), S from K nested
    boxes (`integral_slopes`); at random points and vertices."""
    weights, X0 = problem
    x0 = X0.numpy()
    g = torch.Generator().manual_seed(seed)
    below = eps * torch.rand(X0.shape, generator=g, dtype=F64).numpy() * share
    above = eps - below
    box = Interval(x0 - below, x0 + above)
    S, steps = integral_slopes(box, x0, numpy_weights(weights), max_steps=max_steps)
    assert steps == max_steps
    fractions = torch.cat([torch.rand(16, *X0.shape, generator=g, dtype=F64),
                           (torch.randn(16, *X0.shape, generator=g, dtype=F64) > 0).to(F64)])
    points = torch.from_numpy(box.lo) + fractions * torch.from_numpy(box.hi - box.lo)
    J0 = jacobian(X0[None], weights)[0].numpy()
    J = jacobian(points, weights).numpy()
    assert np.all(np.abs(J - J0) <= S + 1e-12 * (1 + np.abs(J0).max()))


def test_the_integral_form_is_the_slope_at_one_step_and_never_worse():
    weights = random_weights("dp", 2, 2, scale=2.0, seed=11, bias=True)
    X0 = torch.randn(4, weights.D, generator=torch.Generator().manual_seed(3), dtype=F64)
    x0, w = X0.numpy(), numpy_weights(weights)
    box = Interval(x0 - 0.2, x0 + 0.2)
    single = dp_slopes(box, x0, w, exact_diagonal=False)
    one_step = _integral(box, x0, w, max_steps=1)
    assert np.all(one_step >= single) and np.allclose(one_step, single, rtol=1e-14, atol=0)
    refined = _integral(box, x0, w, max_steps=8)
    assert np.all(refined <= one_step)
    # where the box moves the softmax, the average over nested boxes is well below the whole box's slope
    assert refined.sum((2, 3)).max() < 0.8 * single.sum((2, 3)).max()


def test_the_integral_form_stops_at_its_time_budget():
    weights = random_weights("dp", 1, 2, seed=4, bias=True)
    x0 = np.random.default_rng(0).standard_normal((3, weights.D))
    box, w = Interval(x0 - 0.1, x0 + 0.1), numpy_weights(weights)
    assert integral_slopes(box, x0, w, max_steps=16, time_budget=0.0)[1] == 1  # the first pass always runs
    assert integral_slopes(box, x0, w, max_steps=16, time_budget=60.0)[1] == 16


def _caught(scale: float, slopes=dp_slopes) -> bool:
    """Whether a vertex X0 + eps sign(dJ_a/dX (X0)) leaves J_a(X0) +- scale S_a for one of the entries a where S is
    closest to the exact slope (there S_a is within a few percent of what that vertex attains, to first order)."""
    weights = random_weights("dp", 1, 2, scale=2.0, seed=5, bias=True)
    X0 = torch.randn(3, weights.D, generator=torch.Generator().manual_seed(7), dtype=F64)
    x0, eps = X0.numpy(), 1e-5
    S = slopes(Interval(x0 - eps, x0 + eps), x0, numpy_weights(weights)) * scale
    n = X0.numel()
    G = torch.autograd.functional.jacobian(lambda X: jacobian(X[None], weights)[0].reshape(n * n), X0).reshape(n * n, n)
    exact = G.abs().sum(1).numpy() * eps
    J0 = jacobian(X0[None], weights)[0].reshape(n * n).numpy()
    closeness = np.where(exact > 1e-3 * exact.max(), S.reshape(n * n) / np.maximum(exact, 1e-300), np.inf)
    for entry in np.argsort(closeness)[:10]:
        for sign in (1.0, -1.0):
            X = X0 + sign * eps * torch.sign(G[entry]).reshape(X0.shape)
            change = abs(float(jacobian(X[None], weights)[0].reshape(n * n)[entry]) - J0[entry])
            if change > S.reshape(n * n)[entry]:
                return True
    return False


@pytest.mark.parametrize("slopes", [dp_slopes, _integral], ids=["one box", "nested boxes"])
def test_a_ten_percent_too_small_slope_is_caught(slopes):
    assert not _caught(1.0, slopes)
    assert _caught(0.9, slopes)


def test_the_slopes_bound_tends_to_the_norm_at_the_centre():
    weights, N = random_weights("dp", 2, 2, scale=1.5, seed=3, bias=True), 4
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(2), dtype=F64)
    excess = [taylor_bound(weights, N, "2", EpsBall(X0, eps, "inf"), seeds="slopes").details["ratio"] - 1
              for eps in (1e-3, 1e-4, 1e-5, 1e-7)]
    assert all(e >= 0 for e in excess)
    assert excess[-1] <= 1e-3
    assert excess[1] <= excess[0] / 5 and excess[2] <= excess[1] / 5


def test_a_centre_outside_the_box_is_refused():
    weights = random_weights("dp", 1, 2, seed=0)
    x0 = np.zeros((3, weights.D))
    with pytest.raises(ValueError, match="centre"):
        dp_slopes(Interval(x0, x0 + 1), x0 - 1, numpy_weights(weights))


@settings(max_examples=20)
@given(biased_dp_layers(), st.sampled_from([1e-2, 1e-1, 0.5, 2.0]))
def test_the_building_blocks_enclose_their_values_over_the_box(problem, eps):
    """P, W_Q (k_l - kbar_i), W_O^T (v_l - vbar_i), W_K q_i and A_i at sampled points and vertices of the box lie in
    `head_blocks`' enclosures (the mean-value scores included)."""
    from certify.bounds.local._slopes import head_blocks

    weights, X0 = problem
    x0, nw = X0.numpy(), numpy_weights(weights)
    box = Interval(x0 - eps, x0 + eps)
    h = np.full(x0.shape, eps)
    rng = np.random.default_rng(0)
    points = np.concatenate([x0 + eps * rng.uniform(-1, 1, (16, *x0.shape)),
                             x0 + eps * np.sign(rng.normal(size=(16, *x0.shape)))])
    for head in range(nw.H):
        P, k_tilde, v_tilde, b, _, _, A = head_blocks(box, x0, h, nw, head)
        for X in points:
            q = X @ nw.W_Q[head] + (0 if nw.b_Q is None else nw.b_Q[head])
            k, v = X @ nw.W_K[head], X @ nw.W_V[head]
            scores = q @ k.T / np.sqrt(nw.d)
            p = np.exp(scores - scores.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            kt = (k[None] - (p @ k)[:, None]) @ nw.W_Q[head].T
            vt = (v[None] - (p @ v)[:, None]) @ nw.W_O[head]
            values = {"P": (P, p), "k~": (k_tilde, kt), "v~": (v_tilde, vt), "b": (b, q @ nw.W_K[head].T),
                      "A": (A, np.einsum("il,ilr,ilF->irF", p, kt, vt))}
            for name, (enclosure, value) in values.items():
                slack = 1e-12 * (1 + np.abs(value).max())
                assert np.all(enclosure.lo - slack <= value) and np.all(value <= enclosure.hi + slack), name


@settings(max_examples=25, deadline=None)
@given(biased_dp_layers(), st.sampled_from([1e-3, 1e-2, 0.3]), st.integers(0, 2**31 - 1), st.booleans())
def test_weighted_slopes_bound_directional_derivatives_over_the_box(problem, eps, seed, exact_diagonal):
    """dp_slopes(..., weights=q): |dJ(xi)[v]| <= S entrywise for xi at the box's vertices and random points and v
    with |v| <= q (the signs of q, and random), and S is linear in q: S(q) at q = the half-widths is the plain S."""
    weights, X0 = problem
    x0 = X0.numpy()
    rng = np.random.default_rng(seed)
    box = Interval(x0 - eps, x0 + eps)
    nw = numpy_weights(weights)
    q = rng.uniform(0, 2 * eps, x0.shape) * rng.choice([0.0, 1.0], x0.shape, p=[0.2, 0.8])
    S = dp_slopes(box, x0, nw, exact_diagonal=exact_diagonal, weights=q)
    for _ in range(4):
        xi = x0 + eps * rng.choice([-1.0, 1.0], x0.shape) * rng.uniform(0, 1) ** 0.2
        v = q * rng.choice([-1.0, 1.0], x0.shape) * (rng.uniform(0, 1, x0.shape) if rng.uniform() < 0.3 else 1.0)
        derivative = torch.func.jvp(lambda Y: jacobian(Y[None], weights)[0], (torch.from_numpy(xi),),
                                    (torch.from_numpy(v),))[1].numpy()
        assert np.all(np.abs(derivative) <= S + 1e-12 * (1 + np.abs(derivative).max()))
    plain = dp_slopes(box, x0, nw, exact_diagonal=exact_diagonal)
    same = dp_slopes(box, x0, nw, exact_diagonal=exact_diagonal, weights=np.full(x0.shape, eps))
    assert np.allclose(same, plain, rtol=1e-9, atol=0)
    double = dp_slopes(box, x0, nw, exact_diagonal=exact_diagonal, weights=2 * q)
    assert np.allclose(double, 2 * S, rtol=1e-9, atol=1e-300)


def test_weighted_slopes_reject_bad_weights():
    weights = random_weights("dp", 1, 2, D=3, seed=0)
    x0 = np.zeros((2, 3))
    box = Interval(x0 - 0.1, x0 + 0.1)
    for bad in (np.ones((3, 2)), -np.ones((2, 3)), np.full((2, 3), np.nan)):
        with pytest.raises(ValueError):
            dp_slopes(box, x0, numpy_weights(weights), weights=bad)


def _random_blocks(seed: int, N: int, D: int, width: float, scale: float = 1.0):
    rng = np.random.default_rng(seed)

    def interval(*shape, w=width):
        centre, radius = scale * rng.normal(size=shape), scale * w * rng.random(shape)
        return Interval(centre - radius, centre + radius)

    P_hi = rng.random((N, N))
    P = Interval(P_hi * rng.random((N, N)), P_hi)
    h = rng.random((N, D)) * (rng.random((N, D)) < 0.8)  # some zero weights
    return P, interval(N, N, D), interval(N, N, D), interval(N, D), interval(N, D, D), interval(D, D, w=0.0), \
        interval(D, D, w=1e-3), const(0.25), h


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.sampled_from([0.0, 1e-3, 0.3, 2.0]), st.integers(0, 2**31 - 1))
def test_the_compiled_diagonal_slope_matches_whole_array_intervals(N, D, width, seed):
    """The compiled S_A (`_diagonal_kernel`) equals the whole-array interval form to rounding (a wrong index, a
    dropped term or the t = i term taken like the others would move it by far more than 1e-11)."""
    P, k, v, b, A, M, W, sigma, h = _random_blocks(seed, N, D, width)
    compiled = _diagonal_slope(P, k, v, b, A, M, W, sigma, h, np.zeros((N, N)), exact=True)
    reference = diagonal_slope_by_arrays(P, k, v, b, A, M, W, sigma, h)
    assert np.all(compiled >= reference * (1 - 1e-12))
    assert np.all(compiled <= reference * (1 + 1e-11) + 1e-300)


def _diagonal_slope_in_rationals(P, k, v, b, A, M, W, sigma, h) -> np.ndarray:
    """S_A of point blocks (lo = hi) in exact rational arithmetic (`fractions`), rounded to the nearest float."""
    from fractions import Fraction as Q

    N, D = h.shape
    q = {name: np.vectorize(Q, otypes=[object])(x.lo) for name, x in
         dict(P=P, k=k, v=v, b=b, A=A, M=M, W=W).items()}
    sig = Q(float(sigma.lo))
    out = np.empty((N, D, D))
    for i in range(N):
        for r in range(D):
            for F in range(D):
                total = Q(0)
                for t in range(N):
                    for s in range(D):
                        inner = (sig * q["b"][i, s] * (q["k"][i, t, r] * q["v"][i, t, F] - q["A"][i, r, F])
                                 + q["M"][s, r] * q["v"][i, t, F] + q["k"][i, t, r] * q["W"][s, F])
                        derivative = q["P"][i, t] * inner
                        if t == i:
                            derivative += sig * sum(q["P"][i, l] * q["k"][i, l, s] * q["k"][i, l, r] * q["v"][i, l, F]
                                                    for l in range(N))
                        total += Q(float(h[t, s])) * abs(derivative)
                out[i, r, F] = float(total)
    return out


@pytest.mark.parametrize("scale", [1.0, 1e-110, 1e-160])
def test_the_compiled_diagonal_slope_is_above_the_exact_rational_value(scale):
    """On point blocks the compiled S_A is above the exact value computed in rationals, also where every term
    underflows (scale 1e-110: products of 1e-330; 1e-160: of 1e-480): underflow never drops a term."""
    P, k, v, b, A, M, W, sigma, h = _random_blocks(4, 2, 3, 0.0, scale=scale)
    P, W = Interval(P.hi, P.hi), Interval(W.lo, W.lo)
    exact = _diagonal_slope_in_rationals(P, k, v, b, A, M, W, sigma, h)
    compiled = _diagonal_slope(P, k, v, b, A, M, W, sigma, h, np.zeros((2, 2)), exact=True)
    assert np.all(compiled >= exact) and np.all(compiled > 0)
    if scale == 1.0:
        assert np.all(compiled <= exact * (1 + 1e-12))


def test_the_compiled_diagonal_slope_refuses_huge_ends():
    """An end above 1e75 (where a product could overflow into NaN) gives +inf, never a finite number."""
    P, k, v, b, A, M, W, sigma, h = _random_blocks(3, 3, 4, 0.1)
    huge = Interval(A.lo, np.where(np.arange(A.hi.size).reshape(A.hi.shape) == 5, 1e80, A.hi))
    assert np.all(_diagonal_slope(P, k, v, b, huge, M, W, sigma, h, np.zeros((3, 3)), exact=True) == np.inf)
    assert np.all(np.isfinite(_diagonal_slope(P, k, v, b, A, M, W, sigma, h, np.zeros((3, 3)), exact=True)))
