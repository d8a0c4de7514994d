"""Bounds from weights (MATH.md sections 3-4): values against independent formulas, every known mistake caught,
and soundness against lower bounds (random and adversarial inputs) over random layers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
from hypothesis import given, settings, strategies as st

from certify import AttentionWeights, Ball, NotLipschitzError
from certify.adversarial import lower_bound, project
from certify.bounds import (
    METHODS, castin_bound, default_constant, dp_witness, factorised_bound, paper_bound, phi, phi_inverse,
    universal_constant,
)
from certify.jacobian import jacobian, jacobian_norm, l2_core_jacobian
from problems import F64, layers, random_inputs, random_weights, unit_l2


def lambert(n: float) -> float:
    """W_0(n / e) by scipy (independent of certify's mpmath evaluation)."""
    return float(scipy.special.lambertw(n / math.e).real)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100, 1023, 10**6])
def test_phi_inverse_is_rounded_up_and_correct(n):
    w = phi_inverse(n)
    assert phi(w) >= n * (1 - 1e-15)
    assert w == pytest.approx(lambert(n), rel=1e-14, abs=1e-300)
    assert w >= lambert(n) * (1 - 4e-16)


def test_phi_inverse_grows_like_log_n_minus_log_log_n():
    """W_0(n/e) = log n - log log n - 1 + o(1): the gap shrinks and the ratio tends to 1."""
    gaps = [abs(phi_inverse(n) - (math.log(n) - math.log(math.log(n)) - 1)) for n in (10**3, 10**6, 10**12, 10**100)]
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 0.03
    assert phi_inverse(10**100) / (math.log(10**100) - math.log(math.log(10**100))) == pytest.approx(1, abs=0.01)


@pytest.mark.parametrize("N", [2, 3, 10, 1000])
def test_paper_bound_uses_phi_inverse_of_N_minus_1(N):
    """Unit weights, D = H = 1: inf bound 4 W0((N-1)/e) + 1 and 2-norm bound sqrt(N)(4 W0((N-1)/e) + 1).
    The known mistake W0(N/e) gives a strictly larger (looser) number and fails the equality."""
    w = unit_l2()
    assert paper_bound(w, N, "inf").value == pytest.approx(4 * lambert(N - 1) + 1, rel=1e-8)
    assert paper_bound(w, N, "2").value == pytest.approx(math.sqrt(N) * (4 * lambert(N - 1) + 1), rel=1e-8)
    assert paper_bound(w, N, "inf").value < 4 * lambert(N) + 1


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_weight_factor_scales_like_t_squared_in_W_Q(norm):
    """F_t(X) = t F(t X) when W^Q -> t W^Q (and V scales by t through A), so Lip scales by t^2: the bound must too.
    A bound with ||W^Q||^2 in place of ||W^Q||^4 under the square root would scale by t and fail here."""
    w = random_weights("l2", 2, 2, seed=3)
    for t in (0.5, 3.0, 10.0):
        scaled = AttentionWeights("l2", t * w.W_Q, t * w.W_Q, w.W_V, w.W_O)
        for method in (paper_bound, factorised_bound):
            assert method(scaled, 6, norm).value == pytest.approx(t**2 * method(w, 6, norm).value, rel=1e-7)


def test_squared_W_Q_mistake_is_violated_by_attained_lower_bounds():
    """At large t the true constant (>= an attained lower bound) exceeds the ||W^Q||^2 form of the 2-norm bound."""
    w = unit_l2()
    t = 6.0
    scaled = AttentionWeights("l2", t * w.W_Q, t * w.W_Q, w.W_V, w.W_O)
    N = 4
    lower = lower_bound(scaled, N, "2", restarts=12, steps=150).value
    mistaken = math.sqrt(N) * (4 * lambert(N - 1) + 1) * t  # sqrt(||W_Q||^2 ||W_V||^2) ||W_O|| with ||W_Q|| = t
    assert lower > mistaken
    assert lower <= paper_bound(scaled, N, "2").value


def test_inf_constant_not_divided_by_sqrt_d():
    """MATH.md section 4: N = 5, D = 4, identity weights attain ||J||_inf ~ 2.26 > 1.94 (the mistaken constant)."""
    w = unit_l2(4)
    lower = lower_bound(w, 5, "inf", restarts=24, steps=300).value
    mistaken = (4 * lambert(4) + 1) / math.sqrt(4)
    assert lower > 2.2 > mistaken
    assert lower <= paper_bound(w, 5, "inf").value
    assert lower <= factorised_bound(w, 5, "inf").value


@given(st.integers(1, 8), st.integers(1, 3), st.floats(0.01, 5.0), st.integers(0, 10**6))
def test_default_universal_constant_bounds_core_jacobian(N, d, scale, seed):
    Y = torch.randn(16, N, d, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale
    M = l2_core_jacobian(Y)
    for norm in ("2", "inf"):
        assert jacobian_norm(M, norm).max() <= default_constant(N, d, norm)
        assert jacobian_norm(M, norm).max() <= universal_constant(N, d, norm).value


def test_universal_constant_at_N_equal_1_is_exact():
    assert universal_constant(1, 3, "2").value == 1.0
    assert jacobian_norm(l2_core_jacobian(torch.zeros(1, 1, 3, dtype=F64)), "2").item() == 1.0


@given(layers(kinds=("l2",), max_N=4), st.sampled_from(["2", "inf"]), st.floats(0.1, 4.0))
def test_l2_bounds_dominate_random_inputs(layer, norm, scale):
    weights, N = layer
    values = jacobian_norm(jacobian(random_inputs(weights, N, batch=16, scale=scale), weights), norm)
    assert values.max() <= factorised_bound(weights, N, norm).value
    assert values.max() <= paper_bound(weights, N, norm).value


@given(layers(kinds=("l2",), max_H=2, max_d=2, max_N=4), st.sampled_from(["2", "inf"]))
def test_l2_bounds_dominate_adversarial_lower_bounds(layer, norm):
    weights, N = layer
    lower = lower_bound(weights, N, norm, restarts=6, steps=40).value
    for method in ("paper", "factorised"):
        assert lower <= METHODS[method].compute(weights, N, norm, None).value


@given(layers(kinds=("dp",), max_N=4), st.sampled_from(["2", "inf"]), st.floats(0.3, 3.0))
def test_castin_bound_dominates_dp_inputs_in_the_ball(layer, norm, radius):
    weights, N = layer
    domain = Ball(radius)
    X = project(random_inputs(weights, N, batch=16, scale=3 * radius), domain)
    certified = castin_bound(weights, N, radius, norm).value
    assert jacobian_norm(jacobian(X, weights), norm).max() <= certified
    assert lower_bound(weights, N, norm, domain, restarts=6, steps=40).value <= certified


def test_dp_and_untied_refuse_global_bounds_with_the_reason():
    with pytest.raises(NotLipschitzError, match="Theorem 3.1"):
        paper_bound(random_weights("dp", 1, 2), 4, "2")
    with pytest.raises(NotLipschitzError, match="untied"):
        factorised_bound(random_weights("l2-untied", 1, 2), 4, "inf")


def test_dp_witness_grows_quadratically():
    weights = random_weights("dp", 2, 2, seed=7)
    witness = dp_witness(weights, N=5, scales=(1, 2, 4, 8, 16, 32), norm="2")
    assert all(b > a for a, b in zip(witness.norms, witness.norms[1:]))
    assert witness.growth > 100  # 32^2 = 1024 for the quadratic term
    # and each value is attained: recompute one independently
    X = 32 * witness.X0
    assert jacobian_norm(jacobian(X, weights), "2").item() == pytest.approx(witness.norms[-1], rel=1e-12)


def test_dp_witness_matches_theorem_3_1_formula_in_one_dimension():
    """D = 1, x_0 = 0: d f_0 / d x_0 = 1/N + a Var(x) (population variance, x_0 included), a = w^Q w^K / sqrt(d)."""
    a_q, a_k = 1.3, 0.7
    one = lambda v: torch.tensor([[[v]]], dtype=F64)  # noqa: E731
    weights = AttentionWeights("dp", one(a_q), one(a_k), one(1.0), torch.ones(1, 1, dtype=F64))
    X = torch.tensor([[0.0], [2.0], [-1.0], [5.0]], dtype=F64)
    entry = jacobian(X, weights)[0, 0, 0, 0, 0].item()
    assert entry == pytest.approx(1 / 4 + a_q * a_k * float(np.var(X.numpy())), rel=1e-12)


@settings(max_examples=12, deadline=None)
@given(N=st.integers(2, 3), extra=st.integers(0, 3), H=st.integers(1, 2), scale=st.floats(0.3, 3.0),
       seed=st.integers(0, 2**31 - 1), norm=st.sampled_from(["2", "inf"]))
def test_wide_l2_heads_stay_below_the_reduced_constant(N, extra, H, scale, seed, norm):
    """Heads wider than N (d >= N): the factorised bound (the 2-norm through the dimension reduction of
    `closed_form/_dimension_reduction.py`) is above adversarial lower bounds and random inputs."""
    weights = random_weights("l2", H, N + extra, scale=scale, seed=seed)
    bound = factorised_bound(weights, N, norm).value
    assert lower_bound(weights, N, norm, restarts=6, steps=40).value <= bound
    values = jacobian_norm(jacobian(random_inputs(weights, N, batch=16, scale=scale), weights), norm)
    assert values.max() <= bound
