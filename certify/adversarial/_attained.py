"""The reported value: ||J(X*)||_p recomputed at the stored witness X*, in float64 on the CPU.

Up to ``DENSE_LIMIT`` = N D coordinates this is the exact norm of the closed-form Jacobian (`certify.jacobian`):
largest singular value (LAPACK) or largest absolute row sum. Beyond it the 2-norm is the Rayleigh value
||J v|| / ||v|| after float64 power iteration (<= ||J||_2), and the inf-norm is the largest row sum over token
blocks computed one block at a time (exact, chunked). Either way the value is attained: ||J(X*)||_p >= value,
so it is a lower bound on the Lipschitz constant over any domain containing X*, up to float64 rounding of one
evaluation (relative error of order N D 2^-53).
"""

from __future__ import annotations

import torch

from ..attention import AttentionWeights, attention_forward
from ..jacobian import jacobian, jacobian_norm
from ._objectives import PowerIteration, row_block

DENSE_LIMIT = 2048


def attained_norm(X: torch.Tensor, weights: AttentionWeights, norm: str, iterations: int = 300) -> tuple[float, str]:
    """(value, how) for one input X (N, D): ||J(X)||_norm in float64 and how it was computed."""
    w = weights.to(torch.float64, "cpu")
    X = X.detach().to(device="cpu", dtype=torch.float64)[None]
    n = X.shape[1] * X.shape[2]
    if n <= DENSE_LIMIT:
        return float(jacobian_norm(jacobian(X, w), norm)[0]), "exact norm of the closed-form Jacobian, float64"
    if norm == "inf":
        value = max(float(row_block(X, w, t, False).abs().sum((-1, -2)).max()) for t in range(X.shape[1]))
        return value, "largest absolute row sum, row blocks by reverse mode, float64"
    power = PowerIteration(X.shape, torch.Generator().manual_seed(0), torch.float64, torch.device("cpu"))
    power.refine(X, w, iterations)
    with torch.no_grad():
        value = float(torch.func.jvp(lambda Z: attention_forward(Z, w), (X,), (power.v,))[1].norm())
    return value, f"||J v|| for a unit v after {iterations} float64 power iterations (<= ||J||_2)"
