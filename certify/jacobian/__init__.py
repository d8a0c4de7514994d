"""Closed-form Jacobians of attention (MATH.md section 2), their factorisation, and operator norms."""

import torch as _torch

from ..attention import AttentionWeights
from ._autodiff import autodiff_jacobian as autodiff_jacobian
from ._dot_product import dot_product_jacobian as dot_product_jacobian
from ._l2 import l2_core_jacobian as l2_core_jacobian, l2_factors as l2_factors, l2_jacobian as l2_jacobian
from ._norm import check_norm as check_norm, flatten_jacobian as flatten_jacobian, jacobian_norm as jacobian_norm


def jacobian(X: _torch.Tensor, weights: AttentionWeights) -> _torch.Tensor:
    """J[b, i, :, j, :] = d F_i / d x_j, (B, N, D, N, D): closed form for DP and tied L2, autodiff for untied L2."""
    if weights.kind == "dp":
        return dot_product_jacobian(X, weights)
    if weights.kind == "l2":
        return l2_jacobian(X, weights)
    return autodiff_jacobian(X, weights)
