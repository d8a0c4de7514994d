"""Operator norms of Jacobians on vec(X), row-major (token by token), MATH.md section 0.

||J||_2 is the largest singular value; ||J||_inf is the largest absolute row sum. These are evaluations at given
inputs (lower bounds on the Lipschitz constant), not certified upper bounds.
"""

from __future__ import annotations

import torch

NORMS = ("2", "inf")


def check_norm(norm: str) -> str:
    from .._errors import InvalidInputError

    if norm not in NORMS:
        raise InvalidInputError(f"norm must be '2' or 'inf', got {norm!r}")
    return norm


def flatten_jacobian(J: torch.Tensor) -> torch.Tensor:
    """(B, N, D, N, D) -> (B, N D, N D)."""
    B, N, D = J.shape[:3]
    return J.reshape(B, N * D, N * D)


def jacobian_norm(J: torch.Tensor, norm: str) -> torch.Tensor:
    """||J_b||_p for each b, J of shape (B, N, D, N, D) or (B, n, n); returns (B,)."""
    check_norm(norm)
    matrix = flatten_jacobian(J) if J.ndim == 5 else J
    if norm == "2":
        return torch.linalg.matrix_norm(matrix, ord=2)
    return matrix.abs().sum(-1).amax(-1)
