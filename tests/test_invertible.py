"""The invertible residual block X + F(X) (MATH.md sections 1 and 6): certified contraction, fixed-point inverse
with a-priori / a-posteriori error bounds, and the X + 0.5 DP(X) non-injectivity example."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from certify import ContractiveL2MultiheadAttention, NotLipschitzError
from certify.adversarial import lower_bound
from certify.attention import attention
from certify.bounds import factorised_bound, paper_bound
from certify.invertible import (
    InvertibleResidualBlock,
    contraction_certificate,
    dp_non_injective_pair,
    invert,
    predicted_iterations,
    sequence_norm,
)


from problems import F64, random_weights  # shared reference layers (tests/problems.py)


def scaled_to(weights, N: int, norm: str, target: float):
    """Tied L2 weights with W_O rescaled so that the best certified Lip_norm is about ``target`` (< 1)."""
    best = min(paper_bound(weights, N, norm).value, factorised_bound(weights, N, norm).value)
    return dataclasses.replace(weights, W_O=weights.W_O * (target / best))


def measured(X: torch.Tensor, X_true: torch.Tensor, norm: str) -> float:
    diff = (X - X_true).flatten(1)
    return float(diff.abs().max(1).values.max() if norm == "inf" else diff.norm(dim=1).max())


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_inverse_reaches_1e_6_within_predicted_iterations(norm):
    N, tol = 7, 1e-6
    weights = scaled_to(random_weights("l2", H=2, d=3, seed=3, scale=2.0), N, norm, 0.9)
    X_true = torch.randn(3, N, weights.D, generator=torch.Generator().manual_seed(1), dtype=F64) * 2
    Y = X_true + attention(X_true, weights)
    result = invert(weights, Y, tolerance=tol, norm=norm)
    L = contraction_certificate(weights, N, norm).value
    assert 0.85 < L < 1 and result.lipschitz == L
    # k* recomputed here from its definition: the first k with L^k / (1 - L) ||X_1 - X_0|| <= tol
    first = measured(Y - attention(Y, weights), Y, norm)
    k_star = next(k for k in range(10_000) if L**k / (1 - L) * first <= tol)
    assert result.predicted_iterations == k_star
    assert result.converged and result.error_bound <= tol
    assert 1 <= result.iterations <= k_star
    assert measured(result.X, X_true, norm) <= tol
    assert [s.k for s in result.steps] == list(range(1, result.iterations + 1))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**20), H=st.integers(1, 2), d=st.integers(1, 3), N=st.integers(2, 6),
       target=st.floats(0.3, 0.97), norm=st.sampled_from(["inf", "2"]), spread=st.floats(0.5, 5.0))
def test_measured_error_never_exceeds_the_bounds(seed, H, d, N, target, norm, spread):
    weights = scaled_to(random_weights("l2", H, d, seed=seed, scale=2.0), N, norm, target)
    X_true = torch.randn(2, N, weights.D, generator=torch.Generator().manual_seed(seed), dtype=F64) * spread
    Y = X_true + attention(X_true, weights)
    result = invert(weights, Y, tolerance=1e-12, norm=norm, max_iterations=60)
    X = Y  # the iteration X_{k+1} = Y - F(X_k), redone here, independently of `invert`
    for step in result.steps:
        X = Y - attention(X, weights)
        error = measured(X, X_true, norm)
        slack = 1e-12 * (1 + float(Y.abs().max()))  # float64 rounding of F and of Y = g(X_true)
        assert error <= step.a_priori + slack, (step, error)
        assert error <= step.a_posteriori + slack, (step, error)
        assert step.a_posteriori <= step.a_priori * (1 + 1e-9) + slack  # contraction: steps shrink by L
    assert torch.equal(X, result.X)


def test_contractive_layer_is_certified_below_gamma_and_above_an_attained_lower_bound():
    generator = torch.Generator().manual_seed(0)
    layer = ContractiveL2MultiheadAttention(6, 2, max_tokens=5, gamma=0.9, dtype=F64, generator=generator)
    block = InvertibleResidualBlock(layer)
    for norm in ("inf", "2"):
        certificate = block.lipschitz_certificate(5, norm)
        assert certificate.certified and certificate.scope == "global" and certificate.value < 1
        if norm == "inf":  # the layer divides by the Theorem 3.2 inf-norm bound: gamma (1 + rounding margin)
            assert certificate.value <= 0.9 * (1 + 1e-6)
        attained = lower_bound(layer.attention_weights(), 5, norm, restarts=6, steps=60)
        assert attained.value <= certificate.value
    X = torch.randn(4, 5, 6, generator=generator, dtype=F64) * 3
    result = block.inverse(block(X).detach(), tolerance=1e-9)
    assert result.converged and measured(result.X, X, "inf") <= 1e-9


def test_bi_lipschitz_contractive_block_separates_inputs():
    layer = ContractiveL2MultiheadAttention(4, 1, max_tokens=3, dtype=F64, generator=torch.Generator().manual_seed(2))
    L = contraction_certificate(layer, 3, "2").value
    X = torch.randn(200, 3, 4, generator=torch.Generator().manual_seed(3), dtype=F64) * 4
    X2 = X + torch.randn(200, 3, 4, generator=torch.Generator().manual_seed(4), dtype=F64)
    with torch.no_grad():
        gap = sequence_norm(X + layer(X) - X2 - layer(X2), "2")
    assert bool((gap >= (1 - L) * sequence_norm(X - X2, "2") * (1 - 1e-12)).all())


def test_refuses_layers_without_a_certified_contraction():
    big = scaled_to(random_weights("l2", 1, 2, seed=0), 4, "inf", 0.5)
    big = dataclasses.replace(big, W_O=big.W_O * 3)  # certified bound 1.5
    with pytest.raises(NotLipschitzError, match="not certified invertible"):
        invert(big, torch.zeros(1, 4, 2, dtype=F64))
    with pytest.raises(NotLipschitzError, match="not Lipschitz"):
        contraction_certificate(random_weights("dp", 1, 2), 4, "inf")
    with pytest.raises(NotLipschitzError, match="not Lipschitz"):
        contraction_certificate(random_weights("l2-untied", 1, 2), 4, "inf")


def test_predicted_iterations_formula_and_errors():
    assert predicted_iterations(0.5, 1.0, 1e-3) == 11  # 0.5^11 / 0.5 = 9.8e-4 <= 1e-3 < 0.5^10 / 0.5
    assert predicted_iterations(0.9, 1.0, 1e-6) == math.ceil(math.log(1e-7) / math.log(0.9))
    assert predicted_iterations(0.9, 0.0, 1e-6) == 0
    for bad in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="Lipschitz bound"):
            predicted_iterations(bad, 1.0, 1e-6)
    with pytest.raises(ValueError, match="tolerance"):
        predicted_iterations(0.5, 1.0, 0.0)


def test_x_plus_half_dp_is_not_injective():
    """MATH.md section 6: W^K = -W^Q, D = 1, N = 2; two different inputs, one output of X + 0.5 DP(X)."""
    pair = dp_non_injective_pair()
    w = pair.weights
    assert (w.D, w.H, w.d) == (1, 1, 1) and torch.equal(w.W_K, -w.W_Q) and pair.X1.shape == (2, 1)
    g = lambda X: X + 0.5 * attention(X, w)[0]  # noqa: E731
    Y1, Y2 = g(pair.X1), g(pair.X2)
    # by hand: row 1 of P is uniform at x_1 = 0, so g(0, 3) = (3/4, 3 + 3 / (2 (1 + e^9)))
    expected = torch.tensor([[0.75], [3 + 1.5 / (1 + math.exp(9))]], dtype=F64)
    assert torch.allclose(Y1, expected, rtol=0, atol=1e-14)
    assert float((pair.X1 - pair.X2).abs().max()) > 0.9  # X2 is about (-0.9587, 3.4795)
    assert float((Y1 - Y2).abs().max()) < 1e-13
    # no contraction certificate can exist for this layer (it is dot-product attention)
    with pytest.raises(NotLipschitzError):
        contraction_certificate(w, 2, "inf")
