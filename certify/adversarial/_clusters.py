"""Clustered inputs: K distinct tokens c_1..c_K repeated m_1..m_K times (sum m_a = N), for tied L2 attention.

Self-attention is permutation equivariant, so at such an input the Jacobian has the form

    J = (S (x) I_D) C (S^T (x) I_D) + blockdiag_i(Delta_{a(i)}),

with S the N x K cluster indicator. The cluster-constant vectors range(S (x) I) and their orthogonal complement are
invariant under J and J^T, so the singular values of J are those of the K D x K D reduced matrix

    R = (diag(m)^{1/2} (x) I) C (diag(m)^{1/2} (x) I) + blockdiag_a(Delta_a)

together with those of Delta_a for every cluster with m_a >= 2. For tied L2 (MATH.md section 2), with
Y = c V_h, p~_ab = softmax_b(-||y_a - y_b||^2 + log m_b) (the weight of a whole cluster) and ybar_a = sum_b p~_ab y_b:

    C_ab    = sum_h G_h (p~_ab / m_b) [I + 2 (y_b - ybar_a)(y_a - y_b)^T] V_h^T,
    Delta_a = sum_h G_h 2 Cov_{p~_a}(y) V_h^T.

Row (a, alpha) of J has absolute sum sum_b m_b |C_ab[alpha]|_1 - |C_aa[alpha]|_1 + |C_aa[alpha] + Delta_a[alpha]|_1.
These formulas are exact for integer multiplicities and smooth in real m > 0, which the search uses as a relaxation
before rounding m to integers; a reported value always comes from the expanded input (`expand`).
"""

from __future__ import annotations

import torch

from ..attention import AttentionWeights
from ..jacobian import l2_factors


def cluster_blocks(c: torch.Tensor, m: torch.Tensor, weights: AttentionWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, Delta) for cluster points c (B, K, D) with multiplicities m (B, K): C (B, K, D, K, D), Delta (B, K, D, D)."""
    G, V = l2_factors(weights)
    B, K, D = c.shape
    C = c.new_zeros(B, K, D, K, D)
    Delta = c.new_zeros(B, K, D, D)
    eye = torch.eye(weights.d, dtype=c.dtype, device=c.device)
    for h in range(weights.H):
        Y = c @ V[h]  # (B, K, d)
        difference = Y[:, :, None, :] - Y[:, None, :, :]  # [a, b] = y_a - y_b
        p = torch.softmax(-(difference * difference).sum(-1) + m.log()[:, None, :], dim=-1)  # (B, K, K)
        ybar = p @ Y
        from_mean = Y[:, None, :, :] - ybar[:, :, None, :]  # [a, b] = y_b - ybar_a
        core = (p / m[:, None, :])[..., None, None] * (eye + 2 * from_mean[..., :, None] * difference[..., None, :])
        covariance = torch.einsum("bak,bake,bakf->baef", p, from_mean, from_mean)
        C = C + torch.einsum("Fe,bxyef,Ef->bxFyE", G[h], core, V[h])
        Delta = Delta + 2 * torch.einsum("Fe,baef,Ef->baFE", G[h], covariance, V[h])
    return C, Delta


def cluster_norm(c: torch.Tensor, m: torch.Tensor, weights: AttentionWeights, norm: str) -> torch.Tensor:
    """||J(expand(c, m))||_norm from the reduced blocks, (B,); differentiable in c and (for the relaxation) m."""
    C, Delta = cluster_blocks(c, m, weights)
    B, K, D = c.shape
    index = torch.arange(K, device=c.device)
    if norm == "inf":
        rows = (m[:, None, None, :, None] * C.abs()).sum((-1, -2))  # (B, K, D)
        own = C[:, index, :, index, :].transpose(0, 1)  # (B, K, D, D) = C_aa
        rows = rows - own.abs().sum(-1) + (own + Delta).abs().sum(-1)
        return rows.flatten(1).amax(-1)
    root = m.sqrt()
    R = root[:, :, None, None, None] * C * root[:, None, None, :, None]
    R = R.clone()
    R[:, index, :, index, :] += Delta.transpose(0, 1)
    value = torch.linalg.matrix_norm(R.reshape(B, K * D, K * D), ord=2)
    inner = torch.linalg.matrix_norm(Delta, ord=2)  # (B, K), counts where m_a >= 2
    inner = torch.where(m >= 2 - 1e-9, inner, torch.zeros_like(inner))
    return torch.maximum(value, inner.amax(-1))


def expand(c: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The input with token c_a repeated m_a times (m integer), c (K, D) -> (N, D)."""
    counts = m.round().long()
    return torch.repeat_interleave(c, counts, dim=0)


def round_multiplicities(m: torch.Tensor, N: int) -> torch.Tensor:
    """Integer multiplicities >= 1 summing to N, closest to real m (B, K) by the largest-remainder rule."""
    K = m.shape[-1]
    scaled = (m.clamp_min(1) - 1) * (N - K) / (m.clamp_min(1) - 1).sum(-1, keepdim=True).clamp_min(1e-300)
    base = scaled.floor()
    left = (N - K - base.sum(-1)).long()
    order = torch.argsort(scaled - base, dim=-1, descending=True)
    rank = torch.argsort(order, dim=-1)
    return 1 + base + (rank < left[:, None]).to(m.dtype)
