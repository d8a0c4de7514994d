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

from .._domain import Ball
from .._errors import InvalidInputError
from .._result import Certificate
from ..attention import AttentionWeights, check_tokens
from ..jacobian import check_norm
from ._rounding import norm_2, round_up


def _augmented(W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return W if b is None else torch.cat([W, b[None, :]], dim=0)


def castin_bound(weights: AttentionWeights, N: int, radius: float, norm: str = "2") -> Certificate:
    """Certified Castin et al. bound on Lip_norm(F) with every token in the ball of radius R."""
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    domain = Ball(radius)
    if weights.kind != "dp":
        raise InvalidInputError(f"Castin et al.'s bound is for dot-product attention, got kind {weights.kind!r}")
    w = weights.to(torch.float64, "cpu")
    has_bias = w.b_Q is not None or w.b_K is not None
    R = math.sqrt(radius**2 + 1) if has_bias else radius
    squares = 0.0
    for h in range(w.H):
        b_Q = None if w.b_Q is None else w.b_Q[h]
        b_K = None if w.b_K is None else w.b_K[h]
        A = _augmented(w.W_Q[h], b_Q) @ _augmented(w.W_K[h], b_K).T / math.sqrt(w.d)
        squares += 3 * norm_2(w.W_V[h]) ** 2 * (norm_2(A) ** 2 * R**4 * (4 * N + 1) + N)
    value = norm_2(w.W_O) * math.sqrt(squares)
    if norm == "inf":
        value *= math.sqrt(N * w.D)
    return Certificate(
        value=round_up(value), kind="upper", certified=True, method="castin", scope=domain.scope, norm=norm,
        seconds=time.perf_counter() - start,
        message="Castin, Ablin & Peyre 2024 (MATH.md section 7)" + (", times sqrt(N D) for the inf-norm" if norm == "inf" else ""),
        details={"effective_radius": R},
    )
