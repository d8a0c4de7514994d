"""Row sums of the DP Jacobian through one scalar per row (certify/bounds/local/_row_functional.py, issue 15).

The interval derivative of phi_a = sum_b s_ab J_ab must contain the exact gradient (autograd through the
closed-form Jacobian) at every point of its box, for any signs; the row bounds must stay above every sampled row
sum in the box and above the inf-norms attained by the eps-ball ascent; a 10% smaller slope must be caught.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import biased_dp_problems, random_weights

from certify._domain import EpsBall
from certify.adversarial._eps_ball import eps_ball_ascent
from certify.bounds.local import _row_functional
from certify.bounds.local._enclosure import jacobian_enclosure, numpy_weights
from certify.bounds.local._row_functional import row_derivatives, row_functional_sums
from certify.bounds.local._slopes import integral_slopes
from certify.bounds.local._taylor import taylor_bound
from certify.interval import Interval, intersect
from certify.jacobian import jacobian

F64 = torch.float64


def biased_dp_layers():
    return biased_dp_problems(max_H=3)


def phi_gradient(weights, X: torch.Tensor, signs: np.ndarray) -> np.ndarray:
    """[i, F, t, r] = d/dX_tr sum_{l, E} signs[i, F, l, E] J[i, F, l, E](X), by autograd."""
    N, D = X.shape
    s = torch.from_numpy(signs)
    G = torch.autograd.functional.jacobian(lambda Y: (s * jacobian(Y[None], weights)[0]).sum((-1, -2)), X)
    return G.numpy()


@settings(max_examples=30)
@given(biased_dp_layers(), st.sampled_from([0.0, 1e-2, 0.3]), st.integers(0, 2**31 - 1))
def test_the_interval_derivative_contains_the_exact_gradient_everywhere_in_the_box(problem, eps, seed):
    weights, X0 = problem
    N, D = X0.shape
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 0.0, 1.0], size=(N, D, N, D))
    x0 = X0.numpy()
    box = Interval(x0 - eps, x0 + eps)
    derivative = row_derivatives(box, x0, numpy_weights(weights), signs)
    for X in [X0, X0 + eps * torch.sign(torch.randn(N, D, generator=torch.Generator().manual_seed(seed), dtype=F64)),
              X0 + eps * (2 * torch.rand(N, D, generator=torch.Generator().manual_seed(seed + 1), dtype=F64) - 1)]:
        G = phi_gradient(weights, X, signs)
        slack = 1e-10 * (1 + np.abs(G).max())
        assert np.all(derivative.lo - slack <= G) and np.all(G <= derivative.hi + slack)


def _rows(weights, X0: torch.Tensor, eps: float, max_steps: int = 4) -> np.ndarray:
    x0, w = X0.numpy(), numpy_weights(weights)
    box = Interval(x0 - eps, x0 + eps)
    S, _ = integral_slopes(box, x0, w, max_steps=max_steps)
    at_centre = jacobian_enclosure(Interval(x0, x0), w)
    cut = intersect(at_centre + Interval(-S, S), jacobian_enclosure(box, w))
    return row_functional_sums(box, x0, w, at_centre, cut, max_steps=max_steps)[0]


@settings(max_examples=20)
@given(biased_dp_layers(), st.sampled_from([1e-3, 1e-2, 1e-1, 0.5]), st.integers(0, 2**31 - 1))
def test_every_sampled_row_sum_stays_below_its_row_bound(problem, eps, seed):
    weights, X0 = problem
    rows = _rows(weights, X0, eps)
    g = torch.Generator().manual_seed(seed)
    points = torch.cat([X0[None], X0 + eps * torch.sign(torch.randn(24, *X0.shape, generator=g, dtype=F64)),
                        X0 + eps * (2 * torch.rand(8, *X0.shape, generator=g, dtype=F64) - 1)])
    n = X0.numel()
    sums = jacobian(points, weights).reshape(-1, n, n).abs().sum(-1).max(0).values.numpy()
    assert np.all(sums <= rows * (1 + 1e-12) + 1e-300)


@settings(max_examples=10, deadline=None)
@given(biased_dp_layers(), st.sampled_from([1e-2, 1e-1]))
def test_the_taylor_inf_bound_stays_above_the_eps_ball_ascent(problem, eps):
    """The certified inf-norm (now the smaller of the entrywise and the row-functional row sums) against the best
    point of the ascent that targets the largest row sums."""
    weights, X0 = problem
    domain = EpsBall(X0, eps, "inf")
    cert = taylor_bound(weights, X0.shape[0], "inf", domain, seeds="slopes", time_budget=30.0)
    attained, _ = eps_ball_ascent(weights, domain, "inf", seconds=1.0)
    assert cert.value >= attained * (1 - 1e-12)
    assert cert.details["row_steps"] >= 1


def test_the_row_functionals_tighten_a_trained_like_layer_at_small_eps():
    """Where most entries keep their sign over the box, the row bound is below the entrywise one (the sum over a
    row taken before the magnitudes), and it tends to ||J(X0)||_inf as eps -> 0."""
    weights = random_weights("dp", 2, 4, scale=1.5, seed=3, bias=True)
    X0 = torch.randn(6, weights.D, generator=torch.Generator().manual_seed(2), dtype=F64)
    x0, w = X0.numpy(), numpy_weights(weights)
    exact = jacobian(X0[None], weights)[0].reshape(X0.numel(), -1).abs().sum(-1).max().item()
    for eps in [1e-4, 1e-3]:
        box = Interval(x0 - eps, x0 + eps)
        S, _ = integral_slopes(box, x0, w, max_steps=1)
        at_centre = jacobian_enclosure(Interval(x0, x0), w)
        cut = intersect(at_centre + Interval(-S, S), jacobian_enclosure(box, w))
        rows = row_functional_sums(box, x0, w, at_centre, cut)[0].max()
        entrywise = cut.mag.reshape(X0.numel(), -1).sum(-1).max()
        assert exact <= rows < entrywise
    assert rows - exact < 0.5 * (entrywise - exact)


def test_a_ten_percent_smaller_slope_is_caught(monkeypatch):
    """Shrinking the derivative's magnitude by 10% puts the row bound below a row sum attained at the vertex that
    follows the sign of the row's gradient (where the first-order slope is attained up to O(eps^2))."""
    weights = random_weights("dp", 1, 2, scale=2.0, seed=5, bias=True)
    X0 = torch.randn(3, weights.D, generator=torch.Generator().manual_seed(7), dtype=F64)
    eps, n = 1e-5, X0.numel()
    J0 = jacobian(X0[None], weights)[0]
    signs = torch.sign(J0).numpy()
    G = phi_gradient(weights, X0, signs).reshape(n, n)
    a = int(J0.reshape(n, n).abs().sum(1).argmax())
    X = X0 + eps * torch.from_numpy(np.sign(G[a])).reshape(X0.shape)
    attained = jacobian(X[None], weights)[0].reshape(n, n)[a].abs().sum().item()
    assert _rows(weights, X0, eps, max_steps=1)[a] >= attained
    original = row_derivatives

    def shrunk(*args):
        d = original(*args)
        return Interval(0.9 * d.lo, 0.9 * d.hi)

    monkeypatch.setattr(_row_functional, "row_derivatives", shrunk)
    assert _rows(weights, X0, eps, max_steps=1)[a] < attained
