"""Numeric Jacobians generated from the symbolic definitions (`lambdify`): an oracle independent of the torch code.

Nothing here uses the closed forms of MATH.md section 2. Two routes, both compiled with common-subexpression
elimination and cached per shape:

- `jacobian_function`: SymPy differentiates the whole map F (`attention`). Exact but slow to build (about 10 s
  for N = 3, D = 2); for the smallest shapes.
- `oracle_jacobian`: SymPy differentiates each head's attention matrix P(X) from its definition (logits, softmax),
  and the product rule d(P V)_i/dx_j = sum_k v_k (dP_ik/dx_j)^T + P_ij dv_j/dx_j with the (linear) values
  v_k is assembled in numpy, then F_i = sum_h W^O_h^T f^h_i. Fast enough for N <= 4, D <= 4.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import sympy as sp

from ._jacobians import differentiate
from ._maps import (attention, core_map, head_scale, softmax_rows, squared_distance_logits, symbol_matrix,
                    symbolic_input, symbolic_weights)

_WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")


@functools.lru_cache(maxsize=64)
def jacobian_function(kind: str, N: int, D: int, H: int = 1, d: int | None = None,
                      biases: bool = False) -> Callable[..., np.ndarray]:
    """f(X, W_Q, W_K, W_V, W_O[, b_Q, b_K, b_V, b_O]) -> (N D, N D) Jacobian of F, float64 numpy.

    Arrays have the `AttentionWeights` shapes: X (N, D), W_Q/W_K/W_V (H, D, d), W_O (H d, D), b_Q/b_K/b_V (H, d),
    b_O (D,). For tied L2, W_K is ignored. Biases are DP-only except b_O.
    """
    weights = symbolic_weights(kind, D, H, d, biases)
    X = symbolic_input(N, D)
    J = differentiate(attention(X, weights), X)
    args = [list(X)]
    for name in _WEIGHT_NAMES:
        value = getattr(weights, name)
        if value is None:
            continue
        if isinstance(value, tuple):
            args.append([s for m in value for s in m])
        else:
            args.append(list(value))
    compiled = sp.lambdify(args, J, modules="numpy", cse=True)
    names = [n for n in _WEIGHT_NAMES if getattr(weights, n) is not None]

    def evaluate(X_value: np.ndarray, **arrays: np.ndarray) -> np.ndarray:
        values = [np.asarray(X_value, dtype=np.float64).reshape(-1).tolist()]
        for name in names:
            values.append(np.asarray(arrays[name], dtype=np.float64).reshape(-1).tolist())
        return np.asarray(compiled(*values), dtype=np.float64)

    evaluate.argument_names = names  # type: ignore[attr-defined]
    return evaluate


@functools.lru_cache(maxsize=64)
def attention_matrix_function(kind: str, N: int, D: int, d: int,
                              biases: bool = False) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """f(X, W_Q, W_K[, b_Q, b_K]) -> (P, dP): one head's attention matrix P (N, N) and dP[i, k, j, c] =
    d P_ik / d x_jc (N, N, N, D), from SymPy differentiation of the definition.

    DP: P = softmax((X W_Q + 1 b_Q^T)(X W_K + 1 b_K^T)^T / sqrt(d)); L2 (tied: pass W_K = W_Q) and untied L2:
    P_ij = softmax_j(-||x_i^T W_Q - x_j^T W_K||^2 / sqrt(d)).
    """
    X = symbolic_input(N, D)
    W_Q, W_K = symbol_matrix("q", D, d), symbol_matrix("k", D, d)
    b_Q, b_K = symbol_matrix("bq", d, 1), symbol_matrix("bk", d, 1)
    Q, K = X * W_Q, X * W_K
    if kind == "dp":
        if biases:
            Q, K = Q + sp.ones(N, 1) * b_Q.T, K + sp.ones(N, 1) * b_K.T
        P = softmax_rows(Q * K.T / head_scale(d))
    else:
        P = softmax_rows(squared_distance_logits(Q, K, head_scale(d)))
    dP = differentiate(P, X)  # (N N) x (N D), row i N + k, column j D + c
    args = [list(X), list(W_Q), list(W_K)] + ([list(b_Q), list(b_K)] if biases and kind == "dp" else [])
    compiled = sp.lambdify(args, [P, dP], modules="numpy", cse=True)

    def evaluate(X_value: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = [np.asarray(a, dtype=np.float64).reshape(-1).tolist() for a in (X_value, *arrays)]
        P_value, dP_value = compiled(*values)
        return np.asarray(P_value, dtype=np.float64), np.asarray(dP_value, dtype=np.float64).reshape(N, N, N, D)

    return evaluate


def _array(value: object) -> np.ndarray:
    """A float64 numpy copy of a tensor or array."""
    return np.asarray(value.detach().cpu().double() if hasattr(value, "detach") else value, dtype=np.float64)


def oracle_jacobian(X: object, weights: object) -> np.ndarray:
    """Jacobian of F at X for `certify.attention.AttentionWeights`, (B, N, D, N, D), from the symbolic oracle.

    X is a (B, N, D) or (N, D) tensor or array; `weights` may also hold numpy arrays. Per head, with values v_k = W^V^T x_k + b_V (DP),
    (A W^V)^T x_k with A = W^Q W^Q^T / sqrt(d) (tied L2) or W^V^T x_k (untied L2):
        J^h_ij = sum_k v_k (dP_ik / dx_j)^T + P_ij (dv / dx),    J^F_ij = sum_h W^O_h^T J^h_ij,
    with dP from `attention_matrix_function` (SymPy differentiation of the definition).
    """
    X_array = _array(X)
    if X_array.ndim == 2:
        X_array = X_array[None]
    B, N, D = X_array.shape
    H, D_w, d = tuple(weights.W_Q.shape)
    if D != D_w:
        raise ValueError(f"X must have D = {D_w} columns to match the weights, got shape {X_array.shape}")
    w = {k: _array(getattr(weights, k)) for k in _WEIGHT_NAMES if getattr(weights, k) is not None}
    dp_bias = weights.kind == "dp" and any(k in w for k in ("b_Q", "b_K"))
    f = attention_matrix_function(weights.kind, N, D, d, dp_bias)
    out = np.zeros((B, N, D, N, D))
    for b in range(B):
        x = X_array[b]
        for h in range(H):
            W_K = w["W_Q"][h] if weights.kind == "l2" else w["W_K"][h]
            extra = [w.get("b_Q", np.zeros((H, d)))[h], w.get("b_K", np.zeros((H, d)))[h]] if dp_bias else []
            P, dP = f(x, w["W_Q"][h], W_K, *extra)
            if weights.kind == "l2":
                value_map = w["W_Q"][h] @ w["W_Q"][h].T / np.sqrt(d) @ w["W_V"][h]  # D x d
            else:
                value_map = w["W_V"][h]
            values = x @ value_map  # N x d, row k = v_k^T (b_V is constant and drops out of the derivative ...
            if weights.kind == "dp" and "b_V" in w:  # ... except through dP: sum_k b_V dP_ik/dx_j)
                values = values + w["b_V"][h]
            J_h = np.einsum("ka,ikjc->iajc", values, dP)
            J_h += np.einsum("ij,ca->iajc", P, value_map)
            out[b] += np.einsum("ad,idjc->iajc", w["W_O"][h * d:(h + 1) * d].T, J_h)
    return out


@functools.lru_cache(maxsize=64)
def core_jacobian_function(N: int, d: int) -> Callable[[np.ndarray], np.ndarray]:
    """f(Y) -> M(Y), (N d, N d): the Jacobian of g(Y) = P Y, P_ij = softmax_j(-||y_i - y_j||^2), by differentiation."""
    Y = symbolic_input(N, d, "y")
    compiled = sp.lambdify([list(Y)], differentiate(core_map(Y), Y), modules="numpy", cse=True)
    return lambda Y_value: np.asarray(compiled(np.asarray(Y_value, dtype=np.float64).reshape(-1).tolist()),
                                      dtype=np.float64)
