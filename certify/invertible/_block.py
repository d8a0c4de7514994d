"""The invertible residual block g(X) = X + F(X) with F a contractive L2 multi-head attention (MATH.md section 1).

If Lip_p(F) <= L < 1 on vec(X) in the p-norm, g is a bi-Lipschitz bijection of R^{N x D} (Banach), and the inverse
of Y is the unique fixed point X* of T(X) = Y - F(X), which is an L-contraction. Starting from X_0 = Y, the iterates
X_{k+1} = T(X_k) satisfy

    a priori:      ||X_k - X*|| <= L^k / (1 - L) * ||X_1 - X_0||
    a posteriori:  ||X_k - X*|| <= L / (1 - L) * ||X_k - X_{k-1}||

so the a-priori bound gives the number of steps for a tolerance before iterating:
k* = min{k : L^k / (1 - L) ||X_1 - X_0|| <= tol}. `invert` stops as soon as either bound is <= tol (at k* at the
latest) and reports both bounds at every step.

L must be a certified upper bound in the norm used for the error: `contraction_certificate` takes the best
certified global bound that `certify_layer` proves for the layer's `attention_weights()` (Theorem 3.2, or the
factorised bound of MATH.md section 2) for sequences of N tokens. For a batch, norms are taken per sequence and the
maximum over the batch is reported (both bounds hold sequence by sequence, hence for the maxima).

The bounds are exact-arithmetic statements about the iteration. Evaluating F in floating point adds a perturbation
delta of the order of the unit roundoff times ||F(X)|| per step, which moves the limit by at most delta / (1 - L):
about 1e-15 in float64, negligible against tolerances like 1e-6; in float32 it is about 1e-7 and tolerances below
1e-5 are not reachable. Invert in float64 when the tolerance matters.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from .._certify import certify_layer
from .._errors import InvalidInputError, NotLipschitzError
from .._result import Certificate
from ..attention import AttentionWeights, as_weights, attention as attention_map
from ..jacobian import check_norm

CERTIFIED_METHODS: tuple[str, ...] = ("paper", "factorised")


def contraction_certificate(layer: nn.Module | AttentionWeights, N: int, norm: str = "inf") -> Certificate:
    """The smallest certified global upper bound on Lip_norm(F) for N tokens; raises unless it is < 1.

    Only global, certified methods count (Theorem 3.2 and the factorised bound): an estimate or a local bound
    would not make the fixed-point iteration a contraction on all of R^{N x D}.
    """
    check_norm(norm)
    weights = as_weights(layer)
    report = certify_layer(weights, N, norm, methods=CERTIFIED_METHODS, lower=False)
    best = report.best_upper()
    if best is None or best.scope != "global":
        raise NotLipschitzError(f"no certified global {norm}-norm bound for this layer with N = {N}")
    if not best.value < 1:
        raise NotLipschitzError(
            f"X + F(X) is not certified invertible: the best certified Lip_{norm}(F) for N = {N} is "
            f"{best.value:.6g} ({best.method}), and the fixed-point inverse needs Lip < 1"
        )
    return best


def sequence_norm(X: torch.Tensor, norm: str) -> torch.Tensor:
    """||vec(X_b)||_p for each sequence of a (B, N, D) batch: max |x| (p = inf) or Frobenius (p = 2); shape (B,)."""
    flat = X.flatten(1)
    return flat.abs().amax(1) if norm == "inf" else flat.norm(dim=1)


def predicted_iterations(lipschitz: float, first_step: float, tolerance: float) -> int:
    """k* = min{k >= 0 : L^k / (1 - L) * ||X_1 - X_0|| <= tol} (0 when the first step is already zero)."""
    if not 0 <= lipschitz < 1:
        raise InvalidInputError(f"the Lipschitz bound must lie in [0, 1), got {lipschitz}")
    if not tolerance > 0:
        raise InvalidInputError(f"the tolerance must be positive, got {tolerance}")
    if first_step <= tolerance * (1 - lipschitz):
        return 0
    if lipschitz == 0:
        return 1
    k = math.ceil(math.log(tolerance * (1 - lipschitz) / first_step) / math.log(lipschitz))
    while lipschitz**k / (1 - lipschitz) * first_step > tolerance:  # guard the logarithms' rounding
        k += 1
    return k


@dataclasses.dataclass(frozen=True)
class InverseStep:
    k: int
    step: float  # max_b ||X_k - X_{k-1}||
    a_priori: float  # L^k / (1 - L) * max_b ||X_1 - X_0||
    a_posteriori: float  # L / (1 - L) * max_b ||X_k - X_{k-1}||


@dataclasses.dataclass(frozen=True)
class Inverse:
    X: torch.Tensor  # the last iterate X_k
    iterations: int
    predicted_iterations: int  # k* from the a-priori bound
    lipschitz: float  # the certified L used
    norm: str
    tolerance: float
    error_bound: float  # min(a priori, a posteriori) at the last step: ||X - g^{-1}(Y)|| <= error_bound
    converged: bool  # error_bound <= tolerance
    steps: tuple[InverseStep, ...]


class InvertibleResidualBlock(nn.Module):
    """g(X) = X + F(X) for a contractive L2 attention layer F (e.g. `ContractiveL2MultiheadAttention`)."""

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return X + self.attention(X)

    def lipschitz_certificate(self, N: int, norm: str = "inf") -> Certificate:
        return contraction_certificate(self.attention, N, norm)

    @torch.no_grad()
    def inverse(self, Y: torch.Tensor, tolerance: float = 1e-6, norm: str = "inf",
                max_iterations: int | None = None, lipschitz: float | None = None) -> Inverse:
        """X with X + F(X) = Y to within ``tolerance`` in the ``norm`` of vec(X), by fixed-point iteration."""
        return invert(self.attention, Y, tolerance, norm, max_iterations, lipschitz)


def invert(attention: nn.Module | AttentionWeights, Y: torch.Tensor, tolerance: float = 1e-6, norm: str = "inf",
           max_iterations: int | None = None, lipschitz: float | None = None) -> Inverse:
    """Fixed-point inverse of g(X) = X + F(X) at Y (B, N, D) or (N, D), with the error bounds at every step.

    ``lipschitz`` defaults to `contraction_certificate(attention, N, norm).value`; pass a value only if it is
    itself a certified bound in ``norm``. Stops when the a-posteriori or a-priori bound is <= tolerance (by the
    predicted k* at the latest), or at ``max_iterations`` (then ``converged`` is False).
    """
    check_norm(norm)
    if Y.ndim == 2:
        Y = Y.unsqueeze(0)
    if Y.ndim != 3:
        raise InvalidInputError(f"Y must have shape (B, N, D) or (N, D), got {tuple(Y.shape)}")
    L = contraction_certificate(attention, Y.shape[1], norm).value if lipschitz is None else float(lipschitz)
    if not 0 <= L < 1:
        raise NotLipschitzError(f"the fixed-point inverse needs a Lipschitz bound in [0, 1), got {L}")
    F = (lambda X: attention_map(X, attention)) if isinstance(attention, AttentionWeights) else attention
    with torch.no_grad():
        X_prev, X = Y, Y - F(Y)
        first = float(sequence_norm(X - X_prev, norm).max())
        k_star = predicted_iterations(L, first, tolerance)
        limit = k_star if max_iterations is None else min(k_star, max_iterations)
        steps = [InverseStep(1, first, L / (1 - L) * first, L / (1 - L) * first)]
        k = 1
        while min(steps[-1].a_priori, steps[-1].a_posteriori) > tolerance and k < limit:
            X_prev, X = X, Y - F(X)
            k += 1
            step = float(sequence_norm(X - X_prev, norm).max())
            steps.append(InverseStep(k, step, L**k / (1 - L) * first, L / (1 - L) * step))
    bound = min(steps[-1].a_priori, steps[-1].a_posteriori)
    return Inverse(X, k, k_star, L, norm, tolerance, bound, bound <= tolerance, tuple(steps))
