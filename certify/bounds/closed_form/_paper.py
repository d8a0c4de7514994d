"""Theorem 3.2 of Kim et al. (2021): the closed-form Lipschitz bounds of tied L2 multi-head attention.

With phi^{-1}(N-1) = W_0((N-1)/e) (MATH.md section 4):

    Lip_inf(F) <= (4 phi^{-1}(N-1) + 1/sqrt(d)) ||W^O^T||_inf max_h( ||W^Q_h||_inf ||W^Q_h^T||_inf ) max_h ||W^V_h^T||_inf
    Lip_2(F)   <= (sqrt(N)/sqrt(d)) (4 phi^{-1}(N-1) + 1) sqrt( sum_h ||W^Q_h||_2^4 ||W^V_h||_2^2 ) ||W^O||_2

(the W^Q factors enter to the power 4 under the square root: scaling W^Q by t scales the constant by t^2).
"""

from __future__ import annotations

import math
import time

import torch

from ..._domain import Global
from ..._errors import NotLipschitzError
from ..._result import Certificate
from ...attention import AttentionWeights, check_tokens
from ...jacobian import check_norm
from ._lambert import phi_inverse
from .._rounding import Scaled, matrix_norms, power_of_two_scaled

THEOREM_3_1 = (
    "dot-product attention is not Lipschitz on R^(N x D) (Theorem 3.1, MATH.md section 3): its Jacobian grows "
    "without bound as the inputs grow. Ask for a bounded domain instead, e.g. every token in a ball (--radius R)."
)
UNTIED = (
    "L2 attention with untied W^K != W^Q is not Lipschitz (MATH.md section 1; proofs/untied_l2_not_lipschitz.py: "
    "with D = 1, logits -(a x_i - b x_j)^2, x_i = t and two tokens at (a/b) t +- |a - b| t / (2b), d f_i/d x_i "
    "grows without bound in t); only tied L2 attention has a global bound. Ask for a bounded domain instead."
)


def require_global_lipschitz(weights: AttentionWeights) -> None:
    """Raise `NotLipschitzError` unless the layer is tied L2 attention (the only kind with a global bound)."""
    if weights.kind == "dp":
        raise NotLipschitzError(THEOREM_3_1)
    if weights.kind == "l2-untied":
        raise NotLipschitzError(UNTIED)


def _matrix_norm(matrix: torch.Tensor, norm: str) -> torch.Tensor:
    """Differentiable ||matrix||_p over the last two axes (batched)."""
    if norm == "2":
        return torch.linalg.matrix_norm(matrix, ord=2)
    return matrix.abs().sum(-1).amax(-1)


def paper_weight_factor(weights: AttentionWeights, norm: str) -> torch.Tensor:
    """The weight-dependent factor of Theorem 3.2 (differentiable), in the layer's dtype."""
    W_Q, W_V = weights.W_Q, weights.W_V
    if norm == "inf":
        return (
            _matrix_norm(weights.W_O.T, "inf")
            * (_matrix_norm(W_Q, "inf") * _matrix_norm(W_Q.transpose(1, 2), "inf")).max()
            * _matrix_norm(W_V.transpose(1, 2), "inf").max()
        )
    return (_matrix_norm(W_Q, "2") ** 4 * _matrix_norm(W_V, "2") ** 2).sum().sqrt() * _matrix_norm(weights.W_O, "2")


def paper_constant(N: int, d: int, norm: str) -> float:
    """The N- and d-dependent factor: 4 phi^{-1}(N-1) + 1/sqrt(d) (inf) or sqrt(N/d) (4 phi^{-1}(N-1) + 1) (2)."""
    w = phi_inverse(N - 1)
    return 4 * w + 1 / math.sqrt(d) if norm == "inf" else math.sqrt(N) / math.sqrt(d) * (4 * w + 1)


def paper_bound_tensor(weights: AttentionWeights, N: int, norm: str = "inf") -> torch.Tensor:
    """B(W) = paper_constant * paper_weight_factor as a differentiable tensor (for contractive layers).

    Not outward-rounded: use `paper_bound` for a certified number.
    """
    return paper_constant(N, weights.d, norm) * paper_weight_factor(weights, norm)


def scaled_weight_factor(weights: AttentionWeights, norm: str) -> Scaled:
    """The weight factor of Theorem 3.2 as a `Scaled` upper bound (up to the margin), from power-of-two scaled
    weights, so that ||W^Q||^4 of tiny or huge weights neither underflows nor overflows (`_rounding`)."""
    Q, kq = power_of_two_scaled(weights.W_Q)
    V, kv = power_of_two_scaled(weights.W_V)
    O, ko = power_of_two_scaled(weights.W_O)
    if norm == "inf":
        q = matrix_norms(Q, "inf")
        qt = matrix_norms(Q.swapaxes(1, 2), "inf")
        query = Scaled.max(Scaled.of(float(a), kq) * Scaled.of(float(b), kq) for a, b in zip(q, qt))
        value = Scaled.max(Scaled.of(float(a), kv) for a in matrix_norms(V.swapaxes(1, 2), "inf"))
        return Scaled.of(float(matrix_norms(O.T, "inf")), ko) * query * value
    heads = Scaled.sum(Scaled.of(float(q), kq) ** 4 * Scaled.of(float(v), kv) ** 2
                       for q, v in zip(matrix_norms(Q, "2"), matrix_norms(V, "2")))
    return heads.sqrt() * Scaled.of(float(matrix_norms(O, "2")), ko)


def paper_bound(weights: AttentionWeights, N: int, norm: str) -> Certificate:
    """Certified Theorem 3.2 bound on Lip_norm(F) over R^{N x D} for tied L2 attention."""
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    require_global_lipschitz(weights)
    factor = scaled_weight_factor(weights, norm)
    value = (factor * paper_constant(N, weights.d, norm)).round_up("the Theorem 3.2 bound")
    return Certificate(
        value=value, kind="upper", certified=True, method="paper", scope=Global().scope, norm=norm,
        seconds=time.perf_counter() - start,
        message="Theorem 3.2 (Kim et al. 2021), MATH.md section 4; float64 on power-of-two scaled weights with a "
                "1e-9 relative margin",
        details={"phi_inverse": phi_inverse(N - 1), "weight_factor": float(factor)},
    )
