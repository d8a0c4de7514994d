"""The factorised bound for tied L2 attention (MATH.md section 2):

    J^F = [I (x) G_1, ..., I (x) G_H] blockdiag(M^1, ..., M^H) [I (x) V_1^T; ...; I (x) V_H^T]

so, with c_p(N, d) = sup_Y ||M(Y)||_p (`universal_constant`),

    Lip_2(F)   <= ||[G_1 ... G_H]||_2   c_2(N, d)   ||[V_1 ... V_H]||_2,
    Lip_inf(F) <= ||[G_1 ... G_H]||_inf c_inf(N, d) max_h ||V_h^T||_inf,

with V_h = W^Q_h / d^{1/4} and G_h = W^O_h^T W^V_h^T V_h. (Row (i, F) of the left factor holds row F of every G_h;
row (h, j, a) of the right factor holds row a of V_h^T.)
"""

from __future__ import annotations

import time

import math

import numpy as np

from ..._domain import Global
from ..._result import Certificate
from ...attention import AttentionWeights, check_tokens
from ...jacobian import check_norm
from ._paper import require_global_lipschitz
from .._rounding import Scaled, chain_product, matrix_norms, power_of_two_scaled
from ._universal import universal_constant


def factorised_weight_factors(weights: AttentionWeights, norm: str) -> tuple[Scaled, Scaled]:
    """(left, right) = (||[G_1 ... G_H]||, ||[V_1 ... V_H]||) (inf: max_h ||V_h^T||_inf) as `Scaled` upper bounds
    (up to the margin of `_rounding`).

    With W = 2^k W_hat for each weight tensor, G_h = 2^(k_O + k_V + k_Q) d^{-1/4} W_hat^O_h^T W_hat^V_h^T
    W_hat^Q_h and V_h = 2^k_Q d^{-1/4} W_hat^Q_h; the product of the scaled factors is formed in float64 with
    its rounding error bounded in the Frobenius norm (`chain_product`), so cancellation and underflow stay covered.
    """
    H, D, d = weights.H, weights.D, weights.d
    Q, kq = power_of_two_scaled(weights.W_Q)
    V, kv = power_of_two_scaled(weights.W_V)
    O, ko = power_of_two_scaled(weights.W_O)
    O = O.reshape(H, d, D)  # O[h] = W^O_h
    G, errors = chain_product([O.swapaxes(1, 2), V.swapaxes(1, 2), Q])  # (H, D, d), per-head Frobenius bound
    left = np.concatenate(list(G), axis=1)  # D x (H d) = [G_1 ... G_H] (scaled)
    error = math.sqrt(float((errors**2).sum())) * (1.0 + 1e-12)
    root = Scaled.of(d**-0.25)
    if norm == "2":
        left_norm = float(matrix_norms(left, "2")) + error
        right = Scaled.of(float(matrix_norms(np.concatenate(list(Q), axis=1), "2")), kq)
    else:
        left_norm = float(matrix_norms(left, "inf")) + math.sqrt(H * d) * error
        right = Scaled.max(Scaled.of(float(n), kq) for n in matrix_norms(Q.swapaxes(1, 2), "inf"))
    return Scaled.of(left_norm, ko + kv + kq) * root, right * root


def factorised_bound(weights: AttentionWeights, N: int, norm: str) -> Certificate:
    """Certified factorised bound on Lip_norm(F) over R^{N x D} for tied L2 attention."""
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    require_global_lipschitz(weights)
    left, right = factorised_weight_factors(weights, norm)
    constant = universal_constant(N, weights.d, norm)
    value = (left * constant.value * right).round_up("the factorised bound")
    return Certificate(
        value=value, kind="upper", certified=True, method="factorised",
        scope=Global().scope, norm=norm, seconds=time.perf_counter() - start,
        message=f"||G|| c_{norm}(N, d) ||V|| (MATH.md section 2), c from the {constant.source}",
        details={"left": float(left), "right": float(right), "constant": constant.value,
                 "constant_source": constant.source},
    )
