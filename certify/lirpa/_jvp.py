"""J(X) t from the closed-form Jacobians, as a module auto_LiRPA can bound over an eps-ball of X (MATH.md 2, 8).

auto_LiRPA 0.3 has no Jacobian bounding. `AttentionJVP` computes, for inputs X (perturbed) and directions T (not
perturbed), vec(J(X) vec(T)) with the Jacobian's closed forms written as one pass over the softmax:

- every head has logits s_ij(X), values w_j(X), P = softmax(s) and f_i = sum_j P_ij w_j; along T the logits
  move by ds_ij (linear in X for fixed T) and the values by dw_j, and

      (J t)^h_i = sum_j P_ij dw_j + sum_j P_ij (ds_ij - dsbar_i)(w_j - w_i),     dsbar_i = sum_k P_ik ds_ik,

  the derivative of the softmax, P^(i) ds_i, applied to the values (the w_i term vanishes since
  sum_j P_ij (ds_ij - dsbar_i) = 0, and keeps the product small and exactly 0 at j = i);
- tied L2 (section 2, factorised): y = X V_h, u = T V_h, s_ij = -||y_i - y_j||^2, ds_ij = -2 (y_i - y_j).(u_i - u_j),
  w = y and dw = u, then times V_h^T W^V_h; this is the core Jacobian M(Y) applied to u: sum_j P_ij u_j +
  2 Cov_i u_i + 2 sum_j P_ij (y_j - ybar_i)(y_i - y_j)^T u_j;
- dot product: q = X W^Q + b^Q, k = X W^K + b^K, w = X W^V + b^V, ds_ij = (dq_i.k_j + q_i.dk_j)/sqrt(d) with
  dq = T W^Q, dk = T W^K, and dw = T W^V (section 2, with biases);
- the layer: sum over heads of the head outputs times W^O_h.

With T = e_m, a basis direction of vec(X), the output is column m of J(X). `jacobian_directions` puts the N D basis
directions in the batch dimension (the same X repeated), so one bounding call encloses a chunk of columns.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import AttentionWeights, as_weights
from ._export import _parameter


def _softmax_jvp(P: torch.Tensor, ds: torch.Tensor, w_diff: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
    """sum_j P_ij dw_j + sum_j P_ij (ds_ij - dsbar_i) (w_j - w_i); P, ds (B, N, N), w_diff[b,i,j] = w_j - w_i."""
    dsbar = (P * ds).sum(-1, keepdim=True)
    centred = P * (ds - dsbar)  # (B, N, N)
    return P.matmul(dw) + (centred.unsqueeze(-1) * w_diff).sum(2)


class AttentionJVP(nn.Module):
    """(X, T) -> vec(J(X) vec(T)), both (B, N, D) -> (B, N D), float64, traceable by auto_LiRPA."""

    def __init__(self, layer: nn.Module | AttentionWeights) -> None:
        super().__init__()
        weights = as_weights(layer).to(torch.float64, "cpu")
        if weights.kind not in ("dp", "l2"):
            raise ValueError(f"the Jacobian module covers kinds 'dp' and 'l2', got {weights.kind!r}")
        self.kind, self.H, self.D, self.d = weights.kind, weights.H, weights.D, weights.d
        if weights.kind == "l2":
            scale = weights.d**0.25
            self.V = _parameter(weights.W_Q / scale)
            self.value = _parameter(weights.W_Q.transpose(1, 2) @ weights.W_V / scale)
        else:
            self.W_Q, self.W_K, self.W_V = _parameter(weights.W_Q), _parameter(weights.W_K), _parameter(weights.W_V)
            self.b_Q, self.b_K, self.b_V = _parameter(weights.b_Q), _parameter(weights.b_K), _parameter(weights.b_V)
        self.W_O = _parameter(weights.W_O)

    def _head(self, X: torch.Tensor, T: torch.Tensor, h: int) -> torch.Tensor:
        if self.kind == "l2":
            Y, U = X.matmul(self.V[h]), T.matmul(self.V[h])
            y_diff = Y.unsqueeze(2) - Y.unsqueeze(1)  # [b, i, j] = y_i - y_j
            u_diff = U.unsqueeze(2) - U.unsqueeze(1)
            P = torch.softmax(-(y_diff * y_diff).sum(-1), dim=-1)
            ds = -2.0 * (y_diff * u_diff).sum(-1)
            return _softmax_jvp(P, ds, -y_diff, U).matmul(self.value[h])
        scale = 1.0 / math.sqrt(self.d)
        Q, K, W = X.matmul(self.W_Q[h]), X.matmul(self.W_K[h]), X.matmul(self.W_V[h])
        if self.b_Q is not None:
            Q, K, W = Q + self.b_Q[h], K + self.b_K[h], W + self.b_V[h]
        dQ, dK, dW = T.matmul(self.W_Q[h]), T.matmul(self.W_K[h]), T.matmul(self.W_V[h])
        P = torch.softmax(Q.matmul(K.transpose(1, 2)) * scale, dim=-1)
        ds = (dQ.matmul(K.transpose(1, 2)) + Q.matmul(dK.transpose(1, 2))) * scale
        w_diff = W.unsqueeze(1) - W.unsqueeze(2)  # [b, i, j] = w_j - w_i
        return _softmax_jvp(P, ds, w_diff, dW)

    def forward(self, X: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
        heads = torch.cat([self._head(X, T, h) for h in range(self.H)], dim=-1)
        return heads.matmul(self.W_O).reshape(X.shape[0], -1)


def jacobian_directions(N: int, D: int, columns: range | list[int] | None = None) -> torch.Tensor:
    """Basis directions e_m of vec(X) (row-major) as a batch (len(columns), N, D), float64."""
    columns = range(N * D) if columns is None else columns
    T = torch.zeros(len(columns), N * D, dtype=torch.float64)
    T[torch.arange(len(columns)), torch.as_tensor(list(columns))] = 1.0
    return T.reshape(-1, N, D)
