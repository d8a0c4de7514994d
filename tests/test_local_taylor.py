"""The Taylor form of J about a centre (certify/bounds/local/_taylor.py, proofs/taylor_remainder.py).

Every certified number is checked against ||J(X)|| attained in its domain (the centre, random points, box corners,
a projected ascent inside the ball); the bound must tend to ||J(X0)|| as eps -> 0; a remainder shrunk by 10% must be
caught by an attained value.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import random_weights

from certify._domain import Ball, EpsBall
from certify._errors import CertifyError
from certify.adversarial import LOCAL_LOWER_SEARCH
from certify.bounds import METHODS
from certify.bounds.local._enclosure import numpy_weights
from certify.bounds.local._taylor import check_memory, taylor_bound, taylor_enclosure
from certify.interval import Interval
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


@st.composite
def biased_layers(draw):
    """(weights, N): DP with q/k/v/out biases or tied L2, H in 1..2, D in 2..6 (d = D / H), N in 1..5."""
    kind = draw(st.sampled_from(["dp", "l2"]))
    H = draw(st.integers(1, 2))
    d = draw(st.integers(1, 6 // H))
    D = H * d
    if D < 2:
        d, D = 2 // H, 2
    scale = draw(st.floats(0.3, 2.5))
    seed = draw(st.integers(0, 2**31 - 1))
    N = draw(st.integers(1, 5))
    return random_weights(kind, H, d, scale=scale, seed=seed, bias=kind == "dp"), N


def _ball_points(X0: torch.Tensor, eps: float, p: str, count: int, seed: int) -> torch.Tensor:
    """The centre, random points of the ball and (l_inf) random corners, or (l_2) random points on the sphere."""
    g = torch.Generator().manual_seed(seed)
    delta = torch.rand(count, *X0.shape, generator=g, dtype=F64) * 2 - 1
    if p == "inf":
        corners = torch.randint(0, 2, (count, *X0.shape), generator=g).to(F64) * 2 - 1
    else:
        corners = delta / delta.flatten(1).norm(dim=1)[:, None, None]
        delta = corners * torch.rand(count, 1, 1, generator=g, dtype=F64)
    return torch.cat([X0[None], X0 + eps * delta, X0 + eps * corners])


def _ascent(weights, X0: torch.Tensor, eps: float, p: str, norm: str, steps: int = 25) -> float:
    """A short projected ascent of ||J(X)||_norm inside the ball from 8 random starts; the best value attained."""
    g = torch.Generator().manual_seed(1)
    X = (X0 + eps * (torch.rand(8, *X0.shape, generator=g, dtype=F64) * 2 - 1)).requires_grad_(True)
    best = 0.0
    for _ in range(steps):
        values = jacobian_norm(jacobian(X, weights), norm)
        best = max(best, float(values.detach().max()))
        (grad,) = torch.autograd.grad(values.sum(), X)
        with torch.no_grad():
            delta = X + 0.2 * eps * grad.sign() - X0
            if p == "inf":
                delta = delta.clamp(-eps, eps)
            else:
                delta = delta * torch.clamp(eps / delta.flatten(1).norm(dim=1), max=1.0)[:, None, None]
            X.copy_(X0 + delta)
    return max(best, float(jacobian_norm(jacobian(X.detach(), weights), norm).max()))


@settings(max_examples=15, deadline=None)
@given(layer=biased_layers(), eps=st.floats(1e-4, 0.5), p=st.sampled_from(["inf", "2"]),
       norm=st.sampled_from(["2", "inf"]), seeds=st.sampled_from(["directional", "coordinates", "auto"]),
       seed=st.integers(0, 10_000))
def test_taylor_bound_is_above_every_attained_value(layer, eps, p, norm, seeds, seed):
    weights, N = layer
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(seed), dtype=F64)
    cert = taylor_bound(weights, N, norm, EpsBall(X0, eps, p), seeds=seeds)
    assert cert.certified and cert.kind == "upper" and cert.method == "taylor"
    attained = float(jacobian_norm(jacobian(_ball_points(X0, eps, p, 100, seed), weights), norm).max())
    attained = max(attained, _ascent(weights, X0, eps, p, norm))
    assert attained <= cert.value
    assert cert.details["lower"] <= cert.details["at_centre"] and cert.details["lower"] <= cert.value


@settings(max_examples=15, deadline=None)
@given(layer=biased_layers(), seed=st.integers(0, 10_000), width=st.sampled_from([1e-3, 0.05, 0.3]))
def test_the_taylor_form_encloses_the_jacobian_on_random_boxes(layer, seed, width):
    """J(X) in J(X0) + T for points X of a random box and a centre X0 anywhere in it (not only its midpoint)."""
    weights, N = layer
    rng = np.random.default_rng(seed)
    lo = rng.standard_normal((N, weights.D))
    hi = lo + width * rng.uniform(0, 1, lo.shape)
    X0 = lo + rng.uniform(0, 1, lo.shape) * (hi - lo)
    points = lo + rng.uniform(0, 1, (60, *lo.shape)) * (hi - lo)
    points = np.concatenate([points, np.where(rng.integers(0, 2, (20, *lo.shape)) == 1, hi, lo), X0[None]])
    J = jacobian(torch.from_numpy(points), weights).numpy()
    for seeds in ("directional", "coordinates") + (("layered", "slopes") if weights.kind == "dp" else ()):
        form = taylor_enclosure(Interval(lo, hi), X0, numpy_weights(weights), seeds=seeds)
        summed = form.at_centre + form.remainder
        slack = 1e-13 * (1.0 + np.abs(J).max())
        for enclosure in (summed, form.direct):
            assert np.all(J >= enclosure.lo - slack) and np.all(J <= enclosure.hi + slack)


def test_small_dp_layers_take_the_slopes_and_the_unit_tangents():
    """At N D <= COORDINATES_MAX a DP layer's default remainder is the intersection of the slopes' and the unit
    tangents' (both enclose J(X) - J(X0)): never above the tangents alone, and on a biased D = 16, N = 6 layer at
    eps = 1e-2, where the tangents' interval enclosures widen, far below them (6.13 against 33.2 when written);
    every bound stays above the values attained in the ball."""
    weights, N = random_weights("dp", 2, 8, scale=1.0, seed=1, bias=True), 6
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(0), dtype=F64)
    for eps in (1e-3, 1e-2):
        domain = EpsBall(X0, eps, "inf")
        both = taylor_bound(weights, N, "2", domain)
        tangents = taylor_bound(weights, N, "2", domain, seeds="coordinates")
        assert both.details["seeds"] == "slopes" and both.value <= tangents.value
        attained = float(jacobian_norm(jacobian(_ball_points(X0, eps, "inf", 100, 0), weights), "2").max())
        assert max(attained, _ascent(weights, X0, eps, "inf", "2")) <= both.value
    excess = (both.value - both.details["lower"]) / (tangents.value - tangents.details["lower"])
    assert excess < 0.7


@pytest.mark.parametrize("kind", ["dp", "l2"])
@pytest.mark.parametrize("norm", ["2", "inf"])
@pytest.mark.parametrize("seeds", ["directional", "coordinates"])
def test_the_bound_tends_to_the_norm_at_the_centre(kind, norm, seeds):
    """ratio(eps) = bound / ||J(X0)|| decreases to 1: <= 1 + 1e-3 at eps = 1e-7, and the excess ratio - 1 shrinks
    about linearly (by >= 5x per factor 10 in eps)."""
    weights, N = random_weights(kind, 2, 2, scale=1.5, seed=3, bias=kind == "dp"), 4
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(2), dtype=F64)
    excess = []
    for eps in (1e-3, 1e-4, 1e-5, 1e-7):
        cert = taylor_bound(weights, N, norm, EpsBall(X0, eps, "inf"), seeds=seeds)
        excess.append(cert.details["ratio"] - 1.0)
    assert all(e >= 0 for e in excess)
    assert excess[-1] <= 1e-3
    assert excess[1] <= excess[0] / 5 and excess[2] <= excess[1] / 5


def _caught(kind: str, scale: float) -> bool:
    """Whether an attained entry J_ab(X), X in the eps-ball, leaves J(X0) + scale T for an entry (a, b) of large |T|.

    With the exact-slope seeds, T_ab is within a few percent of eps sum_m |d J_ab / d X_m (X0)| at small eps, which
    the vertex X = X0 + eps sign(d J_ab / d X (X0)) attains to first order; so scale = 0.9 must be caught there."""
    weights, N = random_weights(kind, 1, 2, scale=2.0, seed=5, bias=kind == "dp"), 3
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(7), dtype=F64)
    x0, n, eps = X0.numpy(), N * weights.D, 1e-4
    form = taylor_enclosure(Interval(x0 - eps, x0 + eps), x0, numpy_weights(weights), seeds="coordinates",
                            remainder_scale=scale)
    enclosure = form.at_centre + form.remainder
    lo, hi = enclosure.lo.reshape(n, n), enclosure.hi.reshape(n, n)
    width = (form.remainder.hi - form.remainder.lo).reshape(n * n)
    G = torch.autograd.functional.jacobian(lambda X: jacobian(X[None], weights)[0].reshape(n * n), X0).reshape(n * n, n)
    for entry in np.argsort(-width)[:10]:
        for sign in (1.0, -1.0):
            X = X0 + sign * eps * torch.sign(G[entry]).reshape(X0.shape)
            value = float(jacobian(X[None], weights)[0].reshape(n * n)[entry])
            if not lo.reshape(-1)[entry] <= value <= hi.reshape(-1)[entry]:
                return True
    return False


@pytest.mark.parametrize("kind", ["dp", "l2"])
def test_a_ten_percent_too_small_remainder_is_caught(kind):
    """The honest remainder holds at the vertices that attain it; the same remainder times 0.9 is left by them."""
    assert not _caught(kind, 1.0)
    assert _caught(kind, 0.9)


def test_registered_and_used_by_the_branch_and_bound(monkeypatch):
    weights, N = random_weights("dp", 2, 3, seed=1, bias=True), 4
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(0), dtype=F64)
    domain = EpsBall(X0, 1e-2, "inf")
    method = METHODS["taylor"]
    assert method.applies(weights, domain, N, "2") and not method.applies(weights, Ball(1.0), N, "inf")
    scaled = method.compute(weights, N, "2", domain)
    # the branch and bound's root box takes the unit tangents (intersected with one pass of the slopes, without the
    # nested boxes of the taylor method) and no solver-free relaxation: at most the tangents' form alone
    monkeypatch.setattr("certify.bounds.local._taylor.SCALED_MAX", 0)
    cert = taylor_bound(weights, N, "2", domain, seeds="coordinates")
    assert scaled.value <= cert.value
    from certify.bounds.local._search import local_bound

    without = local_bound(weights, N, "2", domain, time_budget=2.0, max_boxes=1, taylor=False,
                          lower_search=LOCAL_LOWER_SEARCH)
    with_taylor = local_bound(weights, N, "2", domain, time_budget=2.0, max_boxes=1, lower_search=LOCAL_LOWER_SEARCH)
    assert with_taylor.value <= without.value and with_taylor.value <= cert.value * (1 + 1e-12)
    # the root box alone: the Taylor form is tighter here (the plain enclosure is already cut by `_simplex`'s)
    assert with_taylor.value < 0.9 * without.value


def test_ball_domain_is_sound():
    weights, N = random_weights("l2", 1, 2, seed=4), 3
    cert = taylor_bound(weights, N, "2", Ball(0.5))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(500, N, 2, generator=g, dtype=F64)
    X = X / X.norm(dim=-1, keepdim=True) * 0.5 * torch.rand(500, N, 1, generator=g, dtype=F64)
    assert float(jacobian_norm(jacobian(X, weights), "2").max()) <= cert.value


def test_bad_input_is_rejected():
    weights, N = random_weights("dp", 1, 2, seed=0), 2
    with pytest.raises(CertifyError, match=r"shape \(N, D\) = \(2, 2\)"):
        taylor_bound(weights, N, "2", EpsBall(torch.zeros(3, 2, dtype=F64), 0.1))
    with pytest.raises(CertifyError, match="Ball"):
        from certify._domain import Global

        taylor_bound(weights, N, "2", Global())
    with pytest.raises(CertifyError, match="seeds"):
        taylor_bound(weights, N, "2", EpsBall(torch.zeros(2, 2, dtype=F64), 0.1), seeds="random")
    with pytest.raises(CertifyError, match=r"\(N, D, N, D\) = \(128, 768, 128, 768\)"):
        check_memory(128, 768)
    box = Interval(np.zeros((2, 2)), np.ones((2, 2)))
    with pytest.raises(CertifyError, match="centre must lie in the box"):
        taylor_enclosure(box, np.full((2, 2), 2.0), numpy_weights(weights))


def test_the_nonnegative_norm_bound_survives_overflow_and_underflow():
    """R^T R x overflowed for entries near 1e200 (the demo's warnings): the bound must stay a finite upper bound, and
    subnormal entries must not turn it into 0."""
    from certify.bounds.local._taylor import nonnegative_norm2_upper

    R = np.abs(np.random.default_rng(0).normal(size=(30, 30)))
    exact = np.linalg.norm(R, 2)
    for scale in (1e200, 1e-310):
        value = nonnegative_norm2_upper(R * scale)
        assert exact * scale <= value <= exact * scale * (1 + 1e-6)
    assert nonnegative_norm2_upper(R * 1e307) == np.inf or nonnegative_norm2_upper(R * 1e307) >= exact * 1e307


@settings(max_examples=15)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1e-200, 1.0, 1e150]), st.integers(1, 40))
def test_the_large_size_centre_norm_is_a_tight_upper_bound(seed, scale, rank):
    """Above GRAM_EIGH_MAX the centre's 2-norm comes from the Gram matrix and a Cholesky check at a power-iteration
    guess (no eigensolver), below it at LAPACK's estimate: >= the exact norm, within 1% and 1e-9 of it."""
    import certify.bounds.local._taylor as taylor

    rng = np.random.default_rng(seed)
    C = scale * (rng.normal(size=(60, rank)) @ rng.normal(size=(rank, 60)))
    exact = np.linalg.norm(C, 2)
    assert exact <= taylor.gram_norm2_upper(C) <= exact * (1 + 1e-9) + 1e-300
    original = taylor.GRAM_EIGH_MAX
    try:
        taylor.GRAM_EIGH_MAX = 10
        value = taylor.gram_norm2_upper(C)
    finally:
        taylor.GRAM_EIGH_MAX = original
    assert exact <= value <= exact * 1.01 + 1e-300


def test_the_slopes_taylor_bound_without_dense_norms_is_above_the_attained(monkeypatch):
    """The large-size path (no dense eigenvalue problem, no direct enclosure) on a small layer, forced."""
    import certify.bounds.local._taylor as taylor

    monkeypatch.setattr(taylor, "DENSE_NORM_MAX", 4)
    weights = random_weights("dp", 2, 2, scale=1.5, seed=3, bias=True)
    X0 = torch.randn(6, weights.D, generator=torch.Generator().manual_seed(2), dtype=F64)
    for norm in ("2", "inf"):
        cert = taylor_bound(weights, 6, norm, EpsBall(X0, 1e-2, "inf"), seeds="slopes")
        points = X0 + 1e-2 * torch.sign(torch.randn(16, *X0.shape, generator=torch.Generator().manual_seed(0),
                                                    dtype=F64))
        attained = jacobian_norm(jacobian(torch.cat([X0[None], points]), weights), norm).max().item()
        assert cert.value >= attained
