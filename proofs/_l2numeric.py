"""Numeric helpers for the bound-chain proofs: tied L2 multi-head attention in numpy (float64), the closed-form
head Jacobians (proved in `jacobian_l2`), and a deterministic set of test instances, including inputs pushed
towards a large ||J|| by a short random hill-climb."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layer:
    """Tied L2 multi-head attention weights: W_Q, W_V (H, D, d), W_O (H d, D)."""

    W_Q: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray

    @property
    def H(self) -> int:
        return self.W_Q.shape[0]

    @property
    def D(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d(self) -> int:
        return self.W_Q.shape[2]


@dataclasses.dataclass(frozen=True)
class Head:
    """Quantities of one head at X: P (N, N), A (D, D), xbar (N, D), blocks J (N, D, N, D) of f = P X A."""

    P: np.ndarray
    A: np.ndarray
    xbar: np.ndarray
    J: np.ndarray


def head(X: np.ndarray, W: np.ndarray) -> Head:
    """Closed-form Jacobian of f = P X A, A = W W^T / sqrt(d), P_ij = softmax_j(-||(x_i - x_j)^T W||^2 / sqrt(d))."""
    N, D = X.shape
    d = W.shape[1]
    Y = X @ W
    logits = -((Y[:, None, :] - Y[None, :, :]) ** 2).sum(-1) / np.sqrt(d)
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    A = W @ W.T / np.sqrt(d)
    xbar = P @ X
    J = np.zeros((N, D, N, D))
    for i in range(N):
        for j in range(N):
            if i == j:
                C = ((X - xbar[i]).T * P[i]) @ (X - xbar[i])
                J[i, :, i, :] = P[i, i] * A + 2 * A @ C @ A
            else:
                J[i, :, j, :] = P[i, j] * A + 2 * P[i, j] * A @ np.outer(X[j] - xbar[i], X[i] - X[j]) @ A
    return Head(P, A, xbar, J)


def layer_jacobian(X: np.ndarray, layer: Layer) -> np.ndarray:
    """J^F (N D, N D), J^F_ij = sum_h W_O_h^T W_V^hT J^h_ij."""
    N, D = X.shape
    total = np.zeros((N, D, N, D))
    for h in range(layer.H):
        left = layer.W_O[h * layer.d:(h + 1) * layer.d].T @ layer.W_V[h].T
        total += np.einsum("ab,ibjc->iajc", left, head(X, layer.W_Q[h]).J)
    return total.reshape(N * D, N * D)


def op_norm(M: np.ndarray, norm: str) -> float:
    return float(np.linalg.norm(M, 2)) if norm == "2" else float(np.abs(M).sum(axis=1).max())


def hill_climb(X: np.ndarray, objective: Callable[[np.ndarray], float], rng: np.random.Generator,
               steps: int = 60) -> np.ndarray:
    """Random-perturbation ascent on `objective` (keeps improvements, shrinks the step otherwise)."""
    best, value, step = X, objective(X), 0.3 * (np.abs(X).max() + 1e-3)
    for _ in range(steps):
        candidate = best + step * rng.standard_normal(X.shape)
        candidate_value = objective(candidate)
        if candidate_value > value:
            best, value = candidate, candidate_value
        else:
            step *= 0.9
    return best


SHAPES = ((2, 1, 1), (3, 1, 1), (3, 2, 1), (3, 2, 2), (4, 2, 2), (4, 4, 2), (5, 4, 4), (6, 2, 1))
SCALES = (0.3, 1.0, 3.0, 10.0)


def instances(norm: str, count: int = 64, seed: int = 0, climb: int = 24) -> Iterator[tuple[np.ndarray, Layer, str]]:
    """Deterministic (X, layer, label) test cases for `norm`: every shape and W_Q scale t in SCALES, random or
    two-cluster inputs at the scale 1/t, the first `climb` pushed up in ||J||_norm by `hill_climb`; plus the exact
    maximiser of the N = 2, D = H = 1 unit layer (scaled by t)."""
    rng = np.random.default_rng(seed)
    from certify.symbolic import maximiser_enclosure

    u_star = float(maximiser_enclosure()[0])
    for t in SCALES:  # exact maximiser: gap g with g^2 = 2 u*, for W_Q = t (gap g / t)
        layer = Layer(np.full((1, 1, 1), t), np.ones((1, 1, 1)), np.ones((1, 1)))
        yield np.array([[0.0], [np.sqrt(2 * u_star) / t]]), layer, f"N=2 unit layer, W_Q={t}, exact maximiser"
    for k in range(count):
        N, D, H = SHAPES[k % len(SHAPES)]
        t = SCALES[(k // len(SHAPES)) % len(SCALES)]
        d = D // H
        layer = Layer(t * rng.standard_normal((H, D, d)) / np.sqrt(D), rng.standard_normal((H, D, d)) / np.sqrt(D),
                      rng.standard_normal((H * d, D)) / np.sqrt(D))
        if k % 2:
            X = rng.standard_normal((N, D)) / t
        else:  # two clusters
            X = (rng.standard_normal((1, D)) * np.where(np.arange(N)[:, None] % 2, 1.0, -1.0)
                 + 0.1 * rng.standard_normal((N, D))) / t
        label = f"N={N}, D={D}, H={H}, W_Q scale {t}"
        if k < climb:
            X = hill_climb(X, lambda Z, layer=layer: op_norm(layer_jacobian(Z, layer), norm), rng)
            label += ", hill-climbed"
        yield X, layer, label


def oracle_step(step: object, cases: int = 3, seed: int = 1) -> None:
    """Check `layer_jacobian` (numpy transcription of the closed form) against the lambdified SymPy derivative of
    the definition (`certify.symbolic.oracle_jacobian`) on `cases` random layers: |difference| <= 1e-9 (1 + |J|)."""
    from types import SimpleNamespace

    from certify.symbolic import oracle_jacobian

    rng = np.random.default_rng(seed)
    for N, D, H in ((2, 1, 1), (3, 2, 1), (3, 2, 2))[:cases]:
        d = D // H
        layer = Layer(rng.standard_normal((H, D, d)), rng.standard_normal((H, D, d)), rng.standard_normal((H * d, D)))
        X = rng.standard_normal((N, D))
        weights = SimpleNamespace(kind="l2", W_Q=layer.W_Q, W_K=layer.W_Q, W_V=layer.W_V, W_O=layer.W_O,
                                  b_Q=None, b_K=None, b_V=None, b_O=None)
        J = layer_jacobian(X, layer)
        J_oracle = oracle_jacobian(X, weights).reshape(N * D, N * D)
        gap = float(np.abs(J - J_oracle).max())
        step.check(gap, 1e-9 * (1 + float(np.abs(J_oracle).max())), f"oracle N={N}, D={D}, H={H}")


def core_blocks(Y: np.ndarray) -> np.ndarray:
    """The L2 core Jacobian M(Y) as blocks (N, d, N, d): `head` with W = d^{1/4} I (so A = I and the logits are
    -||y_i - y_j||^2, MATH.md section 2), the one numpy closed form of the proofs."""
    d = Y.shape[1]
    return head(Y, d ** 0.25 * np.eye(d)).J
