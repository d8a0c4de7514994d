"""Closed-form Jacobians (MATH.md section 2) against jacrev, finite differences and the formulas in x-variables;
the factorisation J = [I (x) G] blockdiag(M) [I (x) V^T] and the invariances of M."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from certify.jacobian import (
    autodiff_jacobian, flatten_jacobian, jacobian, jacobian_norm, l2_core_jacobian, l2_factors,
)
from problems import F64, layers, random_inputs, random_weights


@given(layers(kinds=("dp", "l2"), max_H=3, max_d=3, max_N=6), st.floats(0.05, 3.0), st.integers(0, 1000))
def test_closed_form_matches_jacrev(layer, scale, seed):
    weights, N = layer
    X = random_inputs(weights, N, batch=3, scale=scale, seed=seed)
    closed, reference = jacobian(X, weights), autodiff_jacobian(X, weights)
    assert closed.shape == (3, N, weights.D, N, weights.D)
    assert (closed - reference).abs().max() <= 1e-10 * max(1.0, reference.abs().max())


def test_closed_form_matches_finite_differences():
    weights = random_weights("dp", 2, 3, seed=4, bias=True)
    X = random_inputs(weights, 4, batch=1, seed=5)[0]
    J = flatten_jacobian(jacobian(X, weights))[0]
    step = 1e-6
    from certify.attention import attention

    for k in range(0, X.numel(), 5):
        E = torch.zeros(X.numel(), dtype=F64)
        E[k] = step
        difference = (attention(X + E.view_as(X), weights) - attention(X - E.view_as(X), weights)) / (2 * step)
        torch.testing.assert_close(difference.flatten(), J[:, k], rtol=1e-6, atol=1e-7)


def test_l2_jacobian_matches_x_variable_formulas():
    """MATH.md section 2: J_ij = P_ij A + 2 P_ij A (x_j - xbar_i)(x_i - x_j)^T A, J_ii = P_ii A + 2 A Cov A,
    for one head with W_V = W_O = I (so d = D)."""
    D, N = 3, 5
    g = torch.Generator().manual_seed(0)
    W_Q = torch.randn(1, D, D, generator=g, dtype=F64)
    eye = torch.eye(D, dtype=F64)
    from certify import AttentionWeights

    weights = AttentionWeights("l2", W_Q, W_Q, eye[None], eye)
    X = torch.randn(N, D, generator=g, dtype=F64)
    A = W_Q[0] @ W_Q[0].T / math.sqrt(D)
    Q = X @ W_Q[0]
    P = torch.softmax(-((Q[:, None] - Q[None]) ** 2).sum(-1) / math.sqrt(D), dim=1)
    xbar = P @ X
    J = jacobian(X, weights)[0]
    for i in range(N):
        cov = sum(P[i, k] * torch.outer(X[k] - xbar[i], X[k] - xbar[i]) for k in range(N))
        for j in range(N):
            if i == j:
                expected = P[i, i] * A + 2 * A @ cov @ A
            else:
                expected = P[i, j] * A + 2 * P[i, j] * A @ torch.outer(X[j] - xbar[i], X[i] - X[j]) @ A
            torch.testing.assert_close(J[i, :, j, :], expected, rtol=1e-12, atol=1e-12)


def test_dp_jacobian_matches_math_md_formula_without_bias():
    """MATH.md section 2 with W_V = I: J_ij = X^T P^(i) [E_ji X A^T + X A delta_ij] + P_ij I."""
    D, N = 2, 4
    g = torch.Generator().manual_seed(1)
    W_Q, W_K = torch.randn(1, D, D, generator=g, dtype=F64), torch.randn(1, D, D, generator=g, dtype=F64)
    eye = torch.eye(D, dtype=F64)
    from certify import AttentionWeights

    weights = AttentionWeights("dp", W_Q, W_K, eye[None], eye)
    X = torch.randn(N, D, generator=g, dtype=F64)
    A = W_K[0] @ W_Q[0].T / math.sqrt(D)
    P = torch.softmax(X @ A.T @ X.T, dim=1)
    J = jacobian(X, weights)[0]
    for i in range(N):
        P_i = torch.diag(P[i]) - torch.outer(P[i], P[i])
        for j in range(N):
            E = torch.zeros(N, N, dtype=F64)
            E[j, i] = 1
            expected = X.T @ P_i @ (E @ X @ A.T + X @ A * (i == j)) + P[i, j] * eye
            torch.testing.assert_close(J[i, :, j, :], expected, rtol=1e-12, atol=1e-12)


def _ybar(Y: torch.Tensor) -> torch.Tensor:
    P = torch.softmax(-((Y[:, None] - Y[None]) ** 2).sum(-1), dim=1)
    return P @ Y


@given(st.integers(1, 6), st.integers(1, 3), st.floats(0.1, 4.0), st.integers(0, 10**6))
def test_core_jacobian_is_the_derivative_of_ybar(N, d, scale, seed):
    Y = torch.randn(N, d, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale
    M = l2_core_jacobian(Y)[0]
    torch.testing.assert_close(M, torch.func.jacrev(_ybar)(Y), rtol=1e-10, atol=1e-12)


@given(st.integers(2, 5), st.integers(1, 3), st.integers(0, 10**6))
def test_core_jacobian_invariances(N, d, seed):
    g = torch.Generator().manual_seed(seed)
    Y = torch.randn(N, d, generator=g, dtype=F64)
    M = l2_core_jacobian(Y)[0]
    shift = torch.randn(d, generator=g, dtype=F64) * 5
    torch.testing.assert_close(l2_core_jacobian(Y + shift)[0], M, rtol=1e-9, atol=1e-10)  # translation
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    rotated = l2_core_jacobian(Y @ Q.T)[0]  # y -> Q y gives M_ij -> Q M_ij Q^T
    torch.testing.assert_close(rotated, torch.einsum("ab,ibjc,dc->iajd", Q, M, Q), rtol=1e-9, atol=1e-10)
    perm = torch.randperm(N, generator=g)
    torch.testing.assert_close(l2_core_jacobian(Y[perm])[0], M[perm][:, :, perm], rtol=1e-9, atol=1e-10)


@given(layers(kinds=("l2",), max_H=3), st.integers(0, 1000))
def test_factorisation_reassembles_the_jacobian(layer, seed):
    """J^F = [I (x) G_1 ... I (x) G_H] blockdiag(M^h) [I (x) V_1^T; ...] built as explicit matrices."""
    weights, N = layer
    X = random_inputs(weights, N, batch=1, seed=seed)
    G, V = l2_factors(weights)
    eye_N = torch.eye(N, dtype=F64)
    left = torch.cat([torch.kron(eye_N, G[h].contiguous()) for h in range(weights.H)], dim=1)
    right = torch.cat([torch.kron(eye_N, V[h].T.contiguous()) for h in range(weights.H)], dim=0)
    n = N * weights.d
    middle = torch.zeros(weights.H * n, weights.H * n, dtype=F64)
    for h in range(weights.H):
        Y = X[0] @ weights.W_Q[h] / weights.d**0.25
        middle[h * n:(h + 1) * n, h * n:(h + 1) * n] = l2_core_jacobian(Y)[0].reshape(n, n)
    torch.testing.assert_close(left @ middle @ right, flatten_jacobian(autodiff_jacobian(X, weights))[0],
                               rtol=1e-10, atol=1e-12)


def test_jacobian_norm_matches_numpy():
    J = torch.randn(3, 4, 2, 4, 2, dtype=F64)
    flat = J.reshape(3, 8, 8).numpy()
    np.testing.assert_allclose(jacobian_norm(J, "2").numpy(), [np.linalg.norm(m, 2) for m in flat], rtol=1e-12)
    np.testing.assert_allclose(jacobian_norm(J, "inf").numpy(), [np.linalg.norm(m, np.inf) for m in flat], rtol=1e-12)
    with pytest.raises(ValueError, match="norm must be"):
        jacobian_norm(J, "1")


@pytest.mark.parametrize("scale", [1e-155, 1e-100, 1.0])
def test_value_and_key_biases_leave_the_dp_jacobian_exactly_alone(scale):
    """J does not depend on b_V or b_K (they cancel in v_l - vbar_i and C_i K); with W_V tiny beside b_V the closed
    form must still give the bias-free J to rounding, not the bias's roundoff (1e-16 beside a J of 1e-155 before)."""
    import dataclasses

    weights = random_weights("dp", 2, 2, scale=1.0, seed=4, bias=True)
    weights = dataclasses.replace(weights, W_V=weights.W_V * scale, b_V=torch.ones_like(weights.b_V),
                                  b_K=3 * torch.ones_like(weights.b_K))
    unbiased = dataclasses.replace(weights, b_V=None, b_K=None)
    X = torch.randn(2, 3, weights.D, generator=torch.Generator().manual_seed(1), dtype=F64)
    J, reference = jacobian(X, weights), jacobian(X, unbiased)
    assert reference.abs().max() > 0
    assert torch.allclose(J, reference, rtol=1e-10, atol=0.0)
