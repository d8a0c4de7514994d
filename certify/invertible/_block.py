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

The a-priori and a-posteriori bounds are exact-arithmetic statements about the iteration; they steer it (when to
stop) but are not what `invert` certifies, because F is evaluated in floating point: in float32 the iterates stall
about 1e-7 away from X*, and the a-posteriori bound can read 0 there. The reported ``error_bound`` is instead

    ||X_k - X*|| <= ||g(X_k) - Y|| / (1 - L)        (`_residual`: X_k - T(X_k) = g(X_k) - Y),

with ||g(X_k) - Y|| enclosed in outward-rounded float64 interval arithmetic from the exact weights, so it holds
for the point X_k actually returned, whatever dtype the iteration ran in. ``converged`` means this certified bound
is <= the tolerance; when the dtype cannot reach the tolerance (e.g. 1e-9 in float32), ``converged`` is False and
``message`` says so. ``dtype=torch.float64`` runs the iteration in float64 (the returned X is float64), which
reaches tolerances near 1e-15 ||X|| for layers stored in float32 too.
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
from ._residual import residual_upper

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
    error_bound: float  # certified: ||g(X) - Y|| / (1 - L) >= ||X - g^{-1}(Y)|| (module docstring)
    converged: bool  # error_bound <= tolerance
    steps: tuple[InverseStep, ...]  # the exact-arithmetic estimates that steered the iteration
    message: str = ""  # how the bound was certified, or why the tolerance was not met


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
                max_iterations: int | None = None, lipschitz: float | None = None,
                dtype: torch.dtype | None = None) -> Inverse:
        """X with X + F(X) = Y to within ``tolerance`` in the ``norm`` of vec(X), by fixed-point iteration."""
        return invert(self.attention, Y, tolerance, norm, max_iterations, lipschitz, dtype)


def invert(attention: nn.Module | AttentionWeights, Y: torch.Tensor, tolerance: float = 1e-6, norm: str = "inf",
           max_iterations: int | None = None, lipschitz: float | None = None,
           dtype: torch.dtype | None = None) -> Inverse:
    """Fixed-point inverse of g(X) = X + F(X) at Y (B, N, D) or (N, D), with a certified error bound.

    ``lipschitz`` defaults to `contraction_certificate(attention, N, norm).value`; pass a value only if it is
    itself a certified bound in ``norm``. The iteration stops when the a-posteriori or a-priori estimate is
    <= tolerance (by the predicted k* at the latest), or at ``max_iterations``; then ``error_bound`` =
    ||g(X) - Y|| / (1 - L), enclosed in interval arithmetic (module docstring), and ``converged`` says whether it
    is <= tolerance. ``dtype`` (default: the layer's) is the dtype the iteration runs in.
    """
    check_norm(norm)
    if Y.ndim == 2:
        Y = Y.unsqueeze(0)
    if Y.ndim != 3:
        raise InvalidInputError(f"Y must have shape (B, N, D) or (N, D), got {tuple(Y.shape)}")
    if not tolerance > 0:
        raise InvalidInputError(f"the tolerance must be positive, got {tolerance}")
    weights = as_weights(attention)
    L = contraction_certificate(weights, Y.shape[1], norm).value if lipschitz is None else float(lipschitz)
    if not 0 <= L < 1:
        raise NotLipschitzError(f"the fixed-point inverse needs a Lipschitz bound in [0, 1), got {L}")
    iterated = weights if dtype is None else weights.to(dtype)
    Y = Y.to(iterated.dtype)
    F = lambda X: attention_map(X, iterated)  # noqa: E731
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
    gap = math.nextafter(1.0 - L, 0.0)  # <= the real 1 - L
    bound = math.nextafter(residual_upper(weights, X, Y, norm) / gap, math.inf)
    converged = bound <= tolerance
    how = (f"error bound ||g(X) - Y|| / (1 - L) in float64 interval arithmetic; iteration in "
           f"{str(iterated.dtype).replace('torch.', '')}")
    if converged:
        message = how
    elif min(steps[-1].a_priori, steps[-1].a_posteriori) <= tolerance:
        message = (f"tolerance {tolerance:g} not met: the certified error is {bound:.3g}, the accuracy "
                   f"{str(iterated.dtype).replace('torch.', '')} evaluation of F allows; pass dtype=torch.float64 "
                   f"to iterate in float64 ({how})")
    else:
        message = f"tolerance {tolerance:g} not met after {k} iterations (max_iterations); {how}"
    return Inverse(X, k, k_star, L, norm, tolerance, bound, converged, tuple(steps), message)
