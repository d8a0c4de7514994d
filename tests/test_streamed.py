"""The matrix-free local bound for large DP layers (certify/bounds/local/_streamed.py, issue 15 item 6).

Checked against exact values from autograd through the closed-form Jacobian on small layers: the streamed sums
of |J(X0)| contain the exact row, column and block sums (and are tight), the separable slope sums dominate the
exact first-order slope at the centre, the certified bound dominates attained norms at the centre, at vertices
and at random points of the ball, tends to ||J(X0)||_inf as eps -> 0, and a dropped remainder is caught.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from problems import random_weights
from test_local_slopes import biased_dp_layers, exact_slope

import certify
from certify._domain import Ball, EpsBall
from certify.attention import as_weights
from certify._errors import InvalidInputError
from certify.bounds.local import _streamed
from certify.bounds.local._enclosure import numpy_weights
from certify.interval import Interval
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


def dense(weights, X: torch.Tensor) -> np.ndarray:
    N, D = X.shape
    return jacobian(X[None], weights)[0].reshape(N * D, N * D).numpy()


def centre(weights, X0: torch.Tensor, key_chunk: int = 2) -> _streamed.MagnitudeSums:
    nw = numpy_weights(weights)
    x0 = X0.numpy()
    parts = _streamed.head_parts(Interval(x0, x0), nw, query_chunk=2)
    return _streamed.centre_sums(parts, nw, X0.shape[0], key_chunk)


@settings(max_examples=25, deadline=None)
@given(biased_dp_layers(), st.integers(1, 3))
def test_centre_sums_contain_and_nearly_equal_the_exact_sums(problem, key_chunk):
    weights, X0 = problem
    N, D = X0.shape
    J = np.abs(dense(weights, X0))
    sums = centre(weights, X0, key_chunk)
    rows, columns = J.sum(1).reshape(N, D), J.sum(0).reshape(N, D)
    blocks = np.sqrt((J.reshape(N, D, N, D) ** 2).sum((1, 3)))
    scale = 1e-9 * (1 + J.max())
    reference = 1e-13 * (1 + J.max())  # the autograd reference's own rounding (entries of J cancel)
    assert np.all(sums.rows >= rows - reference) and np.all(sums.rows <= rows * (1 + 1e-9) + scale)
    assert np.all(sums.columns >= columns - reference) and np.all(sums.columns <= columns * (1 + 1e-9) + scale)
    assert np.all(sums.blocks >= blocks - reference)
    assert sums.norm2() >= np.linalg.norm(dense(weights, X0), 2) * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(biased_dp_layers())
def test_slope_sums_dominate_the_exact_slope_at_the_centre(problem):
    """On a box of half-width 1e-9, R_S / 1e-9 and C_S / 1e-9 bound the row and column sums of
    sum_m |dJ/dX_m (X0)| (the exact first-order slope)."""
    weights, X0 = problem
    N, D = X0.shape
    x0, eps = X0.numpy(), 1e-9
    R_S, C_S = _streamed.slope_sums(Interval(x0 - eps, x0 + eps), numpy_weights(weights), eps, query_chunk=3)
    exact = exact_slope(weights, X0)  # (N, D, N, D): [i, F, l, E]
    rows, columns = exact.sum((2, 3)), exact.sum((0, 1))
    slack = 1e-6 * (1 + exact.max())
    assert np.all(R_S / eps >= rows * (1 - 1e-6) - slack)
    assert np.all(C_S / eps >= columns * (1 - 1e-6) - slack)


def ball_points(X0: torch.Tensor, eps: float, norm: str, generator: torch.Generator, count: int = 6):
    """Vertices of the box (inf) or points of the sphere (2), and random interior points."""
    for _ in range(count):
        direction = torch.randn(X0.shape, generator=generator, dtype=F64)
        if norm == "inf":
            yield X0 + eps * direction.sign()
        else:
            yield X0 + eps * direction / direction.norm()
        yield X0 + eps * (2 * torch.rand(X0.shape, generator=generator, dtype=F64) - 1) / (1 if norm == "inf" else
                                                                                      X0.numel() ** 0.5)


@settings(max_examples=30, deadline=None)
@given(biased_dp_layers(), st.sampled_from([1e-4, 1e-2, 0.1, 0.5]), st.sampled_from(["inf", "2"]),
       st.sampled_from([None, 60.0]))
def test_certified_bound_dominates_attained_norms(problem, eps, norm, time_budget):
    """With a time budget the slope sums are averaged over nested boxes (16 here: the layers are tiny)."""
    weights, X0 = problem
    certificate = _streamed.streamed_bound(weights, X0.shape[0], norm, EpsBall(X0, eps, norm),
                                           time_budget=time_budget)
    assert certificate.details["steps"] == (1 if time_budget is None else 16)
    generator = torch.Generator().manual_seed(0)
    attained = [float(jacobian_norm(jacobian(X[None], weights), norm)[0])
                for X in [X0, *ball_points(X0, eps, norm, generator)]]
    assert certificate.certified and certificate.kind == "upper"
    assert max(attained) <= certificate.value
    assert certificate.details["lower"] <= certificate.value


def test_bound_tends_to_the_centre_norm():
    weights = random_weights("dp", 2, 3, D=4, scale=1.5, seed=3, bias=True)
    X0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    exact = float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])
    ratios = [_streamed.streamed_bound(weights, 5, "inf", EpsBall(X0, eps, "inf")).value / exact
              for eps in (1e-2, 1e-4, 1e-6, 1e-9)]
    assert all(later <= earlier for earlier, later in zip(ratios, ratios[1:]))
    assert 1.0 <= ratios[-1] <= 1 + 1e-6


def test_nested_boxes_tighten_the_slope_sums():
    """Nested boxes never lose against one box, tighten where the slopes grow, and equal it where they do not (a tiny
    box: each box's sums, reweighted by eta / eta_t, are the same; a missing reweighting halves them)."""
    weights = random_weights("dp", 2, 3, D=4, scale=1.5, seed=3, bias=True)
    X0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    x0, w = X0.numpy(), numpy_weights(weights)
    for eps in (1e-9, 0.1):
        box = Interval(x0 - eps, x0 + eps)
        single = _streamed.slope_sums(box, w, eps, 2)
        nested, steps = _streamed.nested_slope_sums(box, x0, w, eps, 2, 60.0, time.perf_counter())
        assert steps == 16
        for a, b in zip(nested, single):
            assert np.all(a <= b * (1 + 1e-12))
            if eps == 1e-9:
                assert np.allclose(a, b, rtol=1e-6)
    one = _streamed.streamed_bound(weights, 5, "inf", EpsBall(X0, 0.1, "inf"))
    nested = _streamed.streamed_bound(weights, 5, "inf", EpsBall(X0, 0.1, "inf"), time_budget=60.0)
    assert nested.details["remainder"] < 0.7 * one.details["remainder"]


def test_a_dropped_remainder_is_caught(monkeypatch):
    """Without the slope sums the 'bound' is ||J(X0)||: a vertex of the ball exceeds it."""
    weights = random_weights("dp", 2, 3, D=4, scale=1.5, seed=3, bias=True)
    X0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    eps = 0.3

    def attained() -> float:
        points = ball_points(X0, eps, "inf", torch.Generator().manual_seed(0), count=40)
        return max(float(jacobian_norm(jacobian(X[None], weights), "inf")[0]) for X in points)

    assert attained() <= _streamed.streamed_bound(weights, 5, "inf", EpsBall(X0, eps, "inf")).value
    monkeypatch.setattr(_streamed, "slope_sums", lambda box, w, eta, chunk: (np.zeros(box.shape),) * 2)
    assert attained() > _streamed.streamed_bound(weights, 5, "inf", EpsBall(X0, eps, "inf")).value


def test_refusals():
    weights = random_weights("dp", 1, 2, D=3, seed=0)
    X0 = torch.zeros(3, 3, dtype=F64)
    with pytest.raises(InvalidInputError, match="EpsBall"):
        _streamed.streamed_bound(weights, 3, "inf", Ball(1.0))
    with pytest.raises(InvalidInputError, match="dot-product"):
        _streamed.streamed_bound(random_weights("l2", 1, 2, D=3, seed=0), 3, "inf", EpsBall(X0, 0.1, "inf"))
    with pytest.raises(InvalidInputError, match="time budget"):
        _streamed.streamed_bound(weights, 3, "inf", EpsBall(X0, 0.1, "inf"), time_budget=1e-9)


def test_certify_layer_uses_it_where_the_taylor_form_does_not_fit(monkeypatch):
    """With the Taylor form's memory limit below this layer's need, `streamed` applies (a default method) and
    `taylor` does not; a budget too small puts it in Report.skipped, and naming it alone raises."""
    from certify.bounds import METHODS, _registry

    layer = torch.nn.MultiheadAttention(16, 2, batch_first=True).double()
    X0 = torch.nn.functional.layer_norm(torch.randn(32, 16, generator=torch.Generator().manual_seed(0),
                                                    dtype=F64), (16,))
    weights, domain = as_weights(layer), EpsBall(X0, 1e-3, "inf")
    assert METHODS["taylor"].applies(weights, domain, 32, "inf") and not METHODS["streamed"].applies(weights, domain, 32)
    monkeypatch.setattr(_registry, "MEMORY_LIMIT", 1024)
    assert METHODS["streamed"].default and METHODS["streamed"].applies(weights, domain, 32, "inf")
    assert not METHODS["taylor"].applies(weights, domain, 32, "inf")
    report = certify.certify_layer(layer, center=X0, eps=1e-3, norm="inf", lower=False, time_budget=60,
                                   methods=["castin", "streamed"])
    streamed = report.certificates[1]
    exact = float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])
    assert streamed.method == "streamed" and exact <= streamed.value <= 1.5 * exact
    report = certify.certify_layer(layer, center=X0, eps=1e-3, norm="inf", lower=False, time_budget=1e-6,
                                   methods=["castin", "streamed"])
    assert [c.method for c in report.certificates] == ["castin"]
    assert any(line.startswith("streamed:") and "time budget" in line for line in report.skipped)
    with pytest.raises(InvalidInputError, match="time budget"):
        certify.certify_layer(layer, center=X0, eps=1e-3, norm="inf", lower=False, time_budget=1e-6,
                              methods="streamed")
