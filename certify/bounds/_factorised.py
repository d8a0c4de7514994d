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

import torch

from .._domain import Global
from .._result import Certificate
from ..attention import AttentionWeights, check_tokens
from ..jacobian import check_norm, l2_factors
from ._paper import require_global_lipschitz
from ._rounding import norm_2, norm_inf, round_up
from ._universal import universal_constant


def factorised_weight_factors(weights: AttentionWeights, norm: str) -> tuple[float, float]:
    """(left, right) weight norms of the factorisation, in float64 (not yet rounded up)."""
    G, V = l2_factors(weights.to(torch.float64, "cpu"))
    left = torch.cat(list(G), dim=1)  # D x (H d) = [G_1 ... G_H]
    if norm == "2":
        return norm_2(left), norm_2(torch.cat(list(V), dim=1))
    return norm_inf(left), max(norm_inf(V_h.T) for V_h in V)


def factorised_bound(weights: AttentionWeights, N: int, norm: str) -> Certificate:
    """Certified factorised bound on Lip_norm(F) over R^{N x D} for tied L2 attention."""
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    require_global_lipschitz(weights)
    left, right = factorised_weight_factors(weights, norm)
    constant = universal_constant(N, weights.d, norm)
    return Certificate(
        value=round_up(left * constant.value * right), kind="upper", certified=True, method="factorised",
        scope=Global().scope, norm=norm, seconds=time.perf_counter() - start,
        message=f"||G|| c_{norm}(N, d) ||V|| (MATH.md section 2), c from the {constant.source}",
        details={"left": left, "right": right, "constant": constant.value, "constant_source": constant.source},
    )
