"""The projected ascent on eps-balls (certify/adversarial/_eps_ball.py) and the eps-ball lower bound (issue 15,
item 5): every point it reports lies in the ball, its value is attained there, at least the centre's norm, and
never above a certified upper bound; its time budget holds."""

from __future__ import annotations

import time

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import random_weights

from certify._domain import EpsBall
from certify.adversarial import lower_bound
from certify.adversarial._eps_ball import eps_ball_ascent
from certify.bounds.local._taylor import taylor_bound
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


@st.composite
def problems(draw):
    kind = draw(st.sampled_from(["dp", "l2"]))
    H, d = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    weights = random_weights(kind, H, d, scale=draw(st.floats(0.5, 3.0)), seed=draw(st.integers(0, 2**31 - 1)),
                             bias=kind == "dp")
    N = draw(st.integers(2, 4))
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))),
                     dtype=F64)
    domain = EpsBall(X0, draw(st.sampled_from([1e-3, 1e-2, 1e-1, 0.5])), draw(st.sampled_from(["inf", "2"])))
    return weights, domain, draw(st.sampled_from(["2", "inf"]))


@settings(max_examples=20)
@given(problems())
def test_the_ascent_stays_in_the_ball_and_below_the_certified_bound(problem):
    weights, domain, norm = problem
    value, X = eps_ball_ascent(weights, domain, norm, seconds=0.3)
    delta = X - domain.center
    size = delta.abs().max() if domain.p == "inf" else delta.norm()
    assert float(size) <= domain.eps
    attained = float(jacobian_norm(jacobian(X[None], weights), norm)[0])
    assert value <= attained * (1 + 1e-9)  # the value is attained at X (||J v|| <= ||J||_2)
    centre = float(jacobian_norm(jacobian(domain.center[None], weights), norm)[0])
    assert value >= centre * (0.99 if norm == "2" else 1 - 1e-12)
    upper = taylor_bound(weights, domain.center.shape[0], norm, domain).value
    assert value <= upper * (1 + 1e-12)


def test_the_eps_ball_lower_bound_is_at_least_the_centre_and_keeps_its_budget():
    weights = random_weights("dp", 2, 2, scale=2.0, seed=3, bias=True)
    X0 = torch.randn(5, weights.D, generator=torch.Generator().manual_seed(1), dtype=F64)
    for norm in ("2", "inf"):
        domain = EpsBall(X0, 1e-2, "inf")
        began = time.perf_counter()
        cert = lower_bound(weights, 5, norm, domain, seconds=2.0)
        assert time.perf_counter() - began <= 2.0 * 1.2 + 0.5
        centre = float(jacobian_norm(jacobian(X0[None], weights), norm)[0])
        assert cert.value >= centre * (1 - 1e-12)
        witness = torch.tensor(cert.details["witness"], dtype=F64)
        assert float((witness - X0).abs().max()) <= 1e-2


def test_the_ascent_beats_the_centre_on_a_trained_like_layer():
    """On a layer with scale 2 the norm grows away from X0: the ascent must find more than the centre's norm."""
    weights = random_weights("dp", 2, 2, scale=2.0, seed=3, bias=True)
    X0 = torch.randn(5, weights.D, generator=torch.Generator().manual_seed(1), dtype=F64)
    for norm in ("2", "inf"):
        domain = EpsBall(X0, 1e-1, "inf")
        value, _ = eps_ball_ascent(weights, domain, norm, seconds=1.0)
        centre = float(jacobian_norm(jacobian(X0[None], weights), norm)[0])
        assert value > centre * 1.01
