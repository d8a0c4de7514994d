"""Closed-form Jacobian of tied L2 multi-head attention through its factorisation (MATH.md section 2).

With V_h = W^Q_h / d^{1/4}, the projected points y_k = V_h^T x_k, P_ij = softmax_j(-||y_i - y_j||^2) and
ybar_i = sum_k P_ik y_k, the core Jacobian M(Y) = d ybar / d Y has blocks

    M_ij(Y) = P_ij I_d + 2 delta_ij Cov_{P_i}(y) + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T,
    Cov_{P_i}(y) = sum_k P_ik (y_k - ybar_i)(y_k - ybar_i)^T,

and the layer Jacobian is J^F_ij = sum_h G_h M^h_ij(Y_h) V_h^T with G_h = W^O_h^T W^V_h^T V_h, that is

    J^F = [I (x) G_1, ..., I (x) G_H] blockdiag(M^1, ..., M^H) [I (x) V_1^T; ...; I (x) V_H^T].

In the original variables this is MATH.md's J_ij = P_ij A + 2 P_ij A (x_j - xbar_i)(x_i - x_j)^T A (j != i) and
J_ii = P_ii A + 2 A Cov_{P_i}(x) A, times W^O_h^T W^V_h^T on the left.
"""

from __future__ import annotations

import torch

from ..attention import AttentionWeights, check_input, l2_scores, projected_points


def l2_core_jacobian(Y: torch.Tensor) -> torch.Tensor:
    """M(Y) for projected points Y of shape (B, N, d) (or (N, d)); returns (B, N, d, N, d)."""
    if Y.ndim == 2:
        Y = Y.unsqueeze(0)
    if Y.ndim != 3:
        raise ValueError(f"Y must have shape (B, N, d), got {tuple(Y.shape)}")
    return core_blocks(Y).permute(0, 1, 3, 2, 4)


def core_blocks(Y: torch.Tensor) -> torch.Tensor:
    """M(Y) as blocks: [b, i, j] = M_ij, shape (B, N, N, d, d)."""
    B, N, d = Y.shape
    P = l2_scores(Y, Y)  # (B, N, N)
    ybar = P @ Y  # (B, N, d)
    from_mean = Y[:, None, :, :] - ybar[:, :, None, :]  # [b, i, j] = y_j - ybar_i
    from_token = Y[:, :, None, :] - Y[:, None, :, :]  # [b, i, j] = y_i - y_j
    M = 2 * P[..., None, None] * from_mean[..., :, None] * from_token[..., None, :]  # (B, N, N, d, d)
    covariance = torch.einsum("bik,bika,bikc->biac", P, from_mean, from_mean)
    eye_d = torch.eye(d, dtype=Y.dtype, device=Y.device)
    M = M + P[..., None, None] * eye_d
    index = torch.arange(N, device=Y.device)
    M[:, index, index] += 2 * covariance
    return M


def l2_factors(weights: AttentionWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, V), each (H, D, d): V_h = W^Q_h / d^{1/4} and G_h = W^O_h^T W^V_h^T V_h."""
    if weights.kind != "l2":
        raise ValueError(f"the factorisation needs tied L2 weights (kind 'l2'), got {weights.kind!r}")
    V = weights.W_Q / weights.d**0.25
    W_O = weights.W_O.reshape(weights.H, weights.d, weights.D)  # W_O[h] = W^O_h
    G = W_O.transpose(1, 2) @ weights.W_V.transpose(1, 2) @ V
    return G, V


def l2_jacobian(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """J[b, i, :, j, :] = d F_i / d x_j for tied L2 attention, X (B, N, D); returns (B, N, D, N, D).

    Assembled block by block without forming M: with a^h_ij = 2 P^h_ij G_h (y_j - ybar_i) and
    b^h_ij = V_h (y_i - y_j),

        J_ij = sum_h P^h_ij G_h V_h^T + [a^1_ij ... a^H_ij][b^1_ij ... b^H_ij]^T + 2 delta_ij sum_h G_h Cov^h_i V_h^T,

    one matrix product for the first term and one batched rank-H product for the second: the cost is that of
    writing J, O(N^2 D^2), whatever H.
    """
    X = check_input(X, weights)
    G, V = l2_factors(weights)
    Y = projected_points(X, weights)  # (B, H, N, d)
    B, N, D, H = X.shape[0], X.shape[1], weights.D, weights.H
    P = l2_scores(Y, Y)  # (B, H, N, N)
    ybar = P @ Y
    from_mean = Y[:, :, None, :, :] - ybar[:, :, :, None, :]  # [b, h, i, j] = y_j - ybar_i
    from_token = Y[:, :, :, None, :] - Y[:, :, None, :, :]  # [b, h, i, j] = y_i - y_j
    a = torch.einsum("bhij,bhija,hFa->bijFh", 2 * P, from_mean, G)  # (B, N, N, D, H)
    b = torch.einsum("bhija,hEa->bijhE", from_token, V)  # (B, N, N, H, D)
    GV = (G @ V.transpose(1, 2)).reshape(H, D * D)
    blocks = (P.permute(0, 2, 3, 1) @ GV).reshape(B * N * N, D, D)  # [b, i, j] = J_ij
    blocks.baddbmm_(a.reshape(-1, D, H), b.reshape(-1, H, D))
    blocks = blocks.reshape(B, N, N, D, D)
    covariance = torch.einsum("bhik,bhika,bhikc->bhiac", P, from_mean, from_mean)
    index = torch.arange(N, device=X.device)
    blocks[:, index, index] += 2 * torch.einsum("hFa,bhiac,hEc->biFE", G, covariance, V)
    return blocks.permute(0, 1, 3, 2, 4).contiguous()
