"""Closed-form Jacobian of dot-product multi-head attention (MATH.md section 2, with biases).

Head h, with q_i = W_Q^T x_i + b_Q, k_j = W_K^T x_j + b_K, v_j = W_V^T x_j + b_V, P = softmax(q k^T / sqrt(d))
and vbar_i = sum_k P_ik v_k. Writing C_i = V^T P^(i), i.e. C_i[:, l] = P_il (v_l - vbar_i):

    J^h_il = d f^h_i / d x_l = P_il W_V^T + (1/sqrt(d)) [ delta_il C_i K W_Q^T + C_i[:, l] q_i^T W_K^T ].

Value biases drop out (P^(i) 1 = 0). Without biases and with W_V = I this is MATH.md's
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
    V = _heads(X, weights.W_V, weights.b_V)
    P = torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(weights.d), dim=-1)  # (B, H, N, N)
    vbar = P @ V
    J = X.new_zeros(B, N, D, N, D)
    eye = torch.eye(N, dtype=X.dtype, device=X.device)
    for h in range(weights.H):
        W_Oh = weights.W_O_head(h)  # (d, D): F_i = sum_h W_Oh^T f^h_i
        # C[b, i, l, :] = P_il (v_l - vbar_i), mapped to the output: OC = W_Oh^T C
        C = P[:, h, :, :, None] * (V[:, h, None, :, :] - vbar[:, h, :, None, :])  # (B, N, N, d)
        OC = C @ W_Oh  # (B, N, N, D)
        value_term = torch.einsum("bil,aF,Ea->biFlE", P[:, h], W_Oh, weights.W_V[h])
        diagonal = torch.einsum("bilF,blc,Ec->biFE", OC, K[:, h], weights.W_Q[h]) / math.sqrt(weights.d)
        cross = torch.einsum("bilF,bic,Ec->biFlE", OC, Q[:, h], weights.W_K[h]) / math.sqrt(weights.d)
        J += value_term + cross + torch.einsum("biFE,il->biFlE", diagonal, eye)
    return J
