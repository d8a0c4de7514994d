"""certify.symbolic: the lambdified oracle against the torch closed forms, the exact N = 2 constant against the
bounds and lower bounds, the bound expressions against certify.bounds, and the exact zero tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from certify.attention import AttentionWeights
from certify.bounds import factorised_bound, paper_bound, phi_inverse
from certify.jacobian import jacobian, jacobian_norm, l2_core_jacobian
from certify.symbolic import (BoundExpression, core_jacobian_function, differentiate, exact_constant_n2,
                              factorised_bound_expr, generalise_exponentials, jacobian_function, matrices_equal,
                              oracle_jacobian, paper_bound_expr, softmax_rows, symbolic_input, symbolic_weights,
                              universal_constant_bound_expr, weight_norms)

SHAPES = [(2, 1, 1), (3, 2, 1), (3, 2, 2), (4, 2, 1), (2, 4, 2)]  # (N, D, H); compiled oracles are cached


def random_weights(kind: str, D: int, H: int, seed: int, biases: bool = False, scale: float = 1.0) -> AttentionWeights:
    g = torch.Generator().manual_seed(seed)
    d = D // H
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    W_Q = scale * r(H, D, d)
    W_K = W_Q if kind == "l2" else r(H, D, d)
    extra = {}
    if biases:
        extra["b_O"] = r(D)
        if kind == "dp":
            extra.update(b_Q=r(H, d), b_K=r(H, d), b_V=r(H, d))
    return AttentionWeights(kind, W_Q, W_K, r(H, D, d), r(H * d, D), **extra)


@settings(max_examples=12)
@given(kind=st.sampled_from(["dp", "l2", "l2-untied"]), shape=st.sampled_from(SHAPES),
       seed=st.integers(0, 10_000), biases=st.booleans(), spread=st.sampled_from([0.1, 1.0, 3.0]))
def test_oracle_matches_torch_closed_forms(kind: str, shape: tuple[int, int, int], seed: int, biases: bool,
                                           spread: float) -> None:
    N, D, H = shape
    weights = random_weights(kind, D, H, seed, biases)
    X = spread * torch.randn(2, N, D, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    expected = oracle_jacobian(X, weights)
    actual = jacobian(X, weights).numpy()
    assert actual.shape == expected.shape == (2, N, D, N, D)
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-10 * (1 + np.abs(expected).max()))


def test_oracle_catches_a_wrong_jacobian() -> None:
    weights = random_weights("l2", 2, 1, seed=3)
    X = torch.randn(1, 3, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    wrong = jacobian(X, weights).numpy().copy()
    wrong[0, 1, :, 1, :] *= 1.01  # one diagonal block off by 1 %
    assert np.abs(wrong - oracle_jacobian(X, weights)).max() > 1e-4


def test_two_oracle_routes_agree() -> None:
    """Whole-map differentiation and per-head attention-matrix differentiation give the same Jacobian."""
    weights = random_weights("dp", 2, 1, seed=5, biases=True)
    X = np.random.default_rng(6).standard_normal((2, 2))
    arrays = {k: getattr(weights, k).numpy() for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
    full = jacobian_function("dp", 2, 2, 1, 2, True)(X, **arrays)
    np.testing.assert_allclose(full, oracle_jacobian(X, weights).reshape(4, 4), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("N, d", [(2, 1), (3, 2), (4, 1)])
def test_core_oracle_matches_torch(N: int, d: int) -> None:
    Y = torch.randn(3, N, d, generator=torch.Generator().manual_seed(N + d), dtype=torch.float64)
    expected = np.stack([core_jacobian_function(N, d)(y) for y in Y.numpy()])
    np.testing.assert_allclose(l2_core_jacobian(Y).numpy().reshape(3, N * d, N * d), expected, atol=1e-12)


def test_oracle_rejects_mismatched_input() -> None:
    with pytest.raises(ValueError, match="D = 2"):
        oracle_jacobian(np.zeros((3, 3)), random_weights("l2", 2, 1, seed=0))


# ---- the exact constant for N = 2, D = H = 1, unit weights ----

def unit_layer(t: float = 1.0) -> AttentionWeights:
    one = torch.ones(1, 1, 1, dtype=torch.float64)
    return AttentionWeights("l2", t * one, t * one, one, torch.ones(1, 1, dtype=torch.float64))


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_exact_constant_is_a_tight_enclosure_of_the_closed_form(norm: str) -> None:
    lo, hi = exact_constant_n2(norm)
    assert 0 < hi - lo < 1e-12
    u = brentq(lambda v: 4 * v * math.tanh(v) - 3, 0.5, 1.5, xtol=1e-15)
    assert lo - 1e-12 <= 2 * u - 3 / (8 * u) <= hi + 1e-12
    assert 1.6016 < lo < 1.6017


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_exact_constant_against_torch_jacobian_and_bounds(norm: str) -> None:
    lo, hi = exact_constant_n2(norm)
    u = brentq(lambda v: 4 * v * math.tanh(v) - 3, 0.5, 1.5, xtol=1e-15)  # the maximiser gap is sqrt(2 u*)
    gaps = torch.cat([torch.linspace(0, 6, 3001, dtype=torch.float64), torch.tensor([math.sqrt(2 * u)])])
    X = torch.stack([torch.zeros_like(gaps), gaps], dim=1)[:, :, None]
    norms = jacobian_norm(jacobian(X, unit_layer()), norm)
    assert norms.max().item() <= hi  # the grid gives lower bounds
    assert norms[-1].item() == pytest.approx(lo, abs=1e-12)  # attained at the maximiser
    for certificate in (paper_bound(unit_layer(), 2, norm), factorised_bound(unit_layer(), 2, norm)):
        assert certificate.value >= lo


def test_exact_constant_scales_like_t_squared() -> None:
    lo, hi = exact_constant_n2("2")
    t = 3.0
    g = math.sqrt(2 * 0.99017913988439279) / t
    X = torch.tensor([[[0.0], [g]]], dtype=torch.float64)
    value = jacobian_norm(jacobian(X, unit_layer(t)), "2").item()
    assert t ** 2 * lo - 1e-9 <= value <= t ** 2 * hi + 1e-9


def test_exact_constant_rejects_unknown_norm() -> None:
    with pytest.raises(ValueError, match="norm must be one of"):
        exact_constant_n2("1")


# ---- bound expressions ----

@pytest.mark.parametrize("norm", ["2", "inf"])
@pytest.mark.parametrize("N, D, H", [(2, 1, 1), (5, 4, 2), (7, 6, 3)])
def test_paper_bound_expression_matches_certify_bounds(norm: str, N: int, D: int, H: int) -> None:
    weights = random_weights("l2", D, H, seed=N + D + H)
    value = float(paper_bound_expr(norm, H).evaluate(weight_norms(weights, norm), N, D // H))
    certified = paper_bound(weights, N, norm).value
    assert value <= certified <= value * (1 + 1e-7)


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_paper_bound_holds_on_random_inputs_and_wrong_variant_fails(norm: str) -> None:
    """The Theorem 3.2 expression bounds ||J|| at random inputs for every W_Q scale; the ||W^Q||^2 variant fails."""
    right, wrong = paper_bound_expr(norm, 1), paper_bound_expr(norm, 1, q_power=1 if norm == "inf" else 2)
    violated = False
    for t in (0.5, 1.0, 4.0):
        weights = unit_layer(t)
        gaps = torch.linspace(0, 6 / t, 601, dtype=torch.float64)
        X = torch.stack([torch.zeros_like(gaps), gaps], dim=1)[:, :, None]
        observed = jacobian_norm(jacobian(X, weights), norm).max().item()
        values = weight_norms(weights, norm)
        assert observed <= float(right.evaluate(values, 2, 1))
        violated |= observed > float(wrong.evaluate(values, 2, 1))
    assert violated


def test_bound_expressions_latex_and_errors() -> None:
    assert r"\|W^{Q}_{1}\|_{2}" in paper_bound_expr("2").latex()
    assert r"\|W^{O T}\|_{\infty}" in paper_bound_expr("inf").latex()
    assert "c_{2}(N, d)" in factorised_bound_expr("2").latex()
    expression = factorised_bound_expr("inf", universal_constant_bound_expr("inf"))
    assert isinstance(expression, BoundExpression)
    w0 = phi_inverse(4)
    assert float(expression.evaluate({"G": 2.0, "V": 0.5}, 5, 4)) == pytest.approx(1 + 4 * 2 * w0, rel=1e-7)
    with pytest.raises(ValueError, match="missing norm values"):
        expression.evaluate({"G": 1.0}, 5, 4)
    with pytest.raises(ValueError, match="norm must be"):
        paper_bound_expr("1")


def test_weight_norms_match_factorised_bound_details() -> None:
    weights = random_weights("l2", 4, 2, seed=11)
    for norm in ("2", "inf"):
        details = factorised_bound(weights, 3, norm).details
        values = weight_norms(weights, norm)
        assert values["G"] == pytest.approx(details["left"], rel=1e-12)
        assert values["V"] == pytest.approx(details["right"], rel=1e-12)


# ---- exact zero tests ----

def test_matrices_equal_proves_true_and_rejects_false_identities() -> None:
    X = symbolic_input(2, 1)
    P = softmax_rows(sp.Matrix(2, 2, lambda i, j: -(X[i, 0] - X[j, 0]) ** 2))
    derivative = differentiate(P * X, X)
    # d(P_11 x_1 + P_12 x_2)/dx_1 by hand, with P_12 = q, s = (x_1 - x_2)^2
    q = P[0, 1]
    by_hand = (1 - q) + q * (1 - q) * (-2 * (X[0, 0] - X[1, 0])) * (X[0, 0] - X[1, 0]) * -1
    assert matrices_equal(sp.Matrix([derivative[0, 0]]), sp.Matrix([by_hand]))
    assert not matrices_equal(sp.Matrix([derivative[0, 0]]), sp.Matrix([by_hand + q / 100]))


def test_generalise_exponentials_keeps_powers_consistent() -> None:
    s = sp.Symbol("s", real=True)
    expr = sp.exp(s) ** 2 - sp.exp(2 * s) + sp.exp(-(1 - s) ** 2) - sp.exp(-(s - 1) ** 2)
    generalised, mapping = generalise_exponentials(expr)
    assert sp.simplify(generalised) == 0
    assert all(v.func is sp.exp for v in mapping.values())


def test_symbolic_weights_validate_sizes() -> None:
    with pytest.raises(ValueError, match="D must be a positive integer"):
        symbolic_weights("l2", 0)
    with pytest.raises(ValueError, match="kind must be one of"):
        symbolic_weights("relu", 2)
