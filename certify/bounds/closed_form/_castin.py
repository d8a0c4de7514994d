"""Castin, Ablin & Peyre (ICML 2024) local bound for dot-product attention on a ball (MATH.md section 7).

For one head with every token in ||x_i||_2 <= R and A = W^Q W^K^T / sqrt(d):

    Lip_2(f) <= sqrt(3) ||W^V||_2 ( ||A||_2^2 R^4 (4N + 1) + N )^{1/2}.

Biases: append a constant coordinate 1 to every token, x' = [x; 1], so q = W'^T x' with W' = [W^Q; b^Q^T] (same
for K) and ||x'|| <= R' = sqrt(R^2 + 1). The Jacobian in x is a submatrix of the Jacobian in x', so the bound for
(A', R') holds; value biases drop out of the Jacobian. Multi-head: J^F = [W^O_1^T ... W^O_H^T][J^1; ...; J^H], so
Lip_2(F) <= ||W^O||_2 sqrt(sum_h Lip_2(f^h)^2). For the inf-norm on vec(X) (n = N D coordinates),
||J||_inf <= sqrt(n) ||J||_2.
"""

from __future__ import annotations

import math
import time

import torch

from ..._domain import Ball
from ..._errors import InvalidInputError
from ..._result import Certificate
from ...attention import AttentionWeights, check_tokens
from ...jacobian import check_norm
from .._rounding import Scaled, chain_product, matrix_norms, power_of_two_scaled, scaled_norm


def _augmented(W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """[W; b^T] per head: (H, D, d) -> (H, D + 1, d) (or W itself without a bias)."""
    return W if b is None else torch.cat([W, b[:, None, :]], dim=1)


def castin_bound(weights: AttentionWeights, N: int, radius: float, norm: str = "2") -> Certificate:
    """Certified Castin et al. bound on Lip_norm(F) with every token in the ball of radius R.

    Evaluated on power-of-two scaled weights in `Scaled` arithmetic (`_rounding`): no product of norms can
    underflow to 0 or overflow; a bound beyond the float64 range is refused with InvalidInputError.
    """
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    domain = Ball(radius)
    if weights.kind != "dp":
        raise InvalidInputError(f"Castin et al.'s bound is for dot-product attention, got kind {weights.kind!r}")
    has_bias = weights.b_Q is not None or weights.b_K is not None
    R = Scaled.of(radius)
    if has_bias:
        R = (R**2 + 1.0).sqrt()
    Q, kq = power_of_two_scaled(_augmented(weights.W_Q, weights.b_Q))
    K, kk = power_of_two_scaled(_augmented(weights.W_K, weights.b_K))
    V, kv = power_of_two_scaled(weights.W_V)
    A, errors = chain_product([Q, K.swapaxes(1, 2)])  # 2^-(kq + kk) [W^Q; b^Q^T][W^K; b^K^T]^T per head
    A_norms = matrix_norms(A, "2") + errors
    inverse_root_d = 1.0 / math.sqrt(weights.d)
    squares = Scaled.sum(
        Scaled.of(float(v), kv) ** 2 * 3.0
        * ((Scaled.of(float(a), kq + kk) * inverse_root_d) ** 2 * R**4 * float(4 * N + 1) + float(N))
        for a, v in zip(A_norms, matrix_norms(V, "2"))
    )
    value = scaled_norm(weights.W_O, "2") * squares.sqrt()
    if norm == "inf":
        value = value * math.sqrt(N * weights.D)
    return Certificate(
        value=value.round_up("the Castin et al. bound"), kind="upper", certified=True, method="castin",
        scope=domain.scope, norm=norm, seconds=time.perf_counter() - start,
        message="Castin, Ablin & Peyre 2024 (MATH.md section 7)" + (", times sqrt(N D) for the inf-norm" if norm == "inf" else ""),
        details={"effective_radius": float(R)},
    )
