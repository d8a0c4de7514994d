"""Closed-form Jacobian of dot-product multi-head attention (MATH.md section 2, with biases).

Head h, with q_i = W_Q^T x_i + b_Q, k_j = W_K^T x_j + b_K, v_j = W_V^T x_j + b_V, P = softmax(q k^T / sqrt(d))
and vbar_i = sum_k P_ik v_k. Writing C_i = V^T P^(i), i.e. C_i[:, l] = P_il (v_l - vbar_i):

    J^h_il = d f^h_i / d x_l = P_il W_V^T + (1/sqrt(d)) [ delta_il C_i K W_Q^T + C_i[:, l] q_i^T W_K^T ].

Value biases drop out (P^(i) 1 = 0), and so do key biases from C_i K (C_i 1 = 0): both are left out of those
differences, which is also what keeps them accurate (a value bias of 1 beside W_V^T x of 1e-155 used to leave
roundoff of 1e-16 in v_l - vbar_i, some 140 orders of magnitude above the true Jacobian). The scores keep b_K, so
that P is the forward pass's. Without biases and with W_V = I this is MATH.md's
J_ij = X^T P^(i) [E_ji X A^T + X A delta_ij] + P_ij I. The layer: J^F_il = sum_h W^O_h^T J^h_il.
"""

from __future__ import annotations

import math

import torch

from ..attention import AttentionWeights, check_input
from ..attention._dot_product import _heads


def dot_product_jacobian(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """J[b, i, :, l, :] = d F_i / d x_l for X (B, N, D); returns (B, N, D, N, D)."""
    X = check_input(X, weights)
    B, N, D = X.shape
    Q = _heads(X, weights.W_Q, weights.b_Q)  # (B, H, N, d)
    K = _heads(X, weights.W_K, weights.b_K)
    V = _heads(X, weights.W_V, None)  # b_V cancels in v_l - vbar_i (module docstring)
    P = torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(weights.d), dim=-1)  # (B, H, N, N)
    vbar = P @ V
    H, scale = weights.H, 1 / math.sqrt(weights.d)
    W_O = weights.W_O.reshape(H, weights.d, D)  # W_O[h] = W^O_h, F_i = sum_h W^O_h^T f^h_i
    # OC[b, i, l, :, h] = W^O_h^T P_il (v_l - vbar_i) / sqrt(d), the output image of C_i[:, l]
    OC = torch.einsum("bhil,bhila,haF->bilFh", scale * P, V[:, :, None, :, :] - vbar[:, :, :, None, :], W_O)
    query = (Q @ weights.W_K.transpose(1, 2)).permute(0, 2, 1, 3)  # (B, N, H, D): W^K_h q_i
    value_map = (weights.W_V @ W_O).transpose(1, 2)  # (H, D, D): W^O_h^T W^V_h^T
    # J[b, i, F, l, E] = sum_h P^h_il value_map[h, F, E]: a (N x H) @ (H x D) product for each (b, i, F), written
    # straight into J's layout; then the rank-H term OC_il (W^K q_i)^T for each (b, i) as one batched product.
    J = torch.matmul(P.permute(0, 2, 3, 1)[:, :, None], value_map.permute(1, 0, 2)[None, None])  # (B, N, D, N, D)
    J.view(B * N, D * N, D).baddbmm_(OC.permute(0, 1, 3, 2, 4).reshape(B * N, D * N, H),
                                     query.reshape(B * N, H, D))
    index = torch.arange(N, device=X.device)
    K_centred = K if weights.b_K is None else _heads(X, weights.W_K, None)  # b_K cancels in C_i K
    J[:, index, :, index, :] += torch.einsum("bilFh,bhlc,hEc->ibFE", OC, K_centred, weights.W_Q)
    return J
