"""Entrywise bounds on the Jacobian over an eps-ball through auto_LiRPA, and the local Lipschitz bounds they give.

`AttentionJVP` (see `_jvp`) computes column m of J(X) for the basis direction e_m. With the N D basis directions
in the batch dimension (X0 repeated, each copy perturbed over the same ball) one CROWN or IBP call bounds a chunk
of columns; `chunk` caps the number of directions per call (memory grows with chunk x N D x N^2 d). The result is
an interval matrix [lower, upper] containing J(X) for every X in the ball, and so (MATH.md sections 0 and 7)

    Lip_inf over the ball <= max_k sum_l max(|lower_kl|, |upper_kl|)                  (exact for the enclosure),
    Lip_2   over the ball <= the `certify.sdp` bound on the enclosure (SDP, or ||J_c|| + ||R|| as baseline).

The ball is convex, so Lip over the ball = sup ||J(X)|| there. The enclosure itself comes from float64 bound
propagation without outward rounding, so these certificates carry ``certified=False`` (see `_bounds`).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
import torch
from torch import nn

from .._errors import InvalidInputError
from .._result import Certificate
from ..attention import AttentionWeights, as_weights
from ..jacobian import check_norm
from ..sdp import MatrixEnclosure, SDPFallbackWarning, enclosure_norm
from . import _compat
from ._bounds import bounded_module, check_ball, compute, float64_default, perturbation
from ._jvp import AttentionJVP, jacobian_directions

MEMORY_BUDGET = 2**28
"""Bytes allowed for one chunk's largest CROWN coefficient tensor (chunk x N D x N^2 d doubles)."""


def default_chunk(N: int, D: int, d: int) -> int:
    """Directions per call so that chunk x (N D) x (N^2 d) x 8 bytes stays within MEMORY_BUDGET."""
    return int(max(1, min(N * D, MEMORY_BUDGET // (8 * N * D * N * N * max(d, D)))))


@dataclasses.dataclass(frozen=True)
class JacobianBounds:
    """lower <= J(X) <= upper entrywise, (N D, N D) row-major, for every X in the eps-ball around X0."""

    method: str
    p: str
    eps: float
    lower: np.ndarray
    upper: np.ndarray
    seconds: float
    chunk: int

    def enclosure(self) -> MatrixEnclosure:
        return MatrixEnclosure.from_bounds(self.lower, self.upper)


def jacobian_bounds(layer: nn.Module | AttentionWeights, X0: torch.Tensor, eps: float, p: str = "inf",
                    method: str = "CROWN", chunk: int | None = None) -> JacobianBounds:
    """Entrywise bounds on J(X) over {||vec(X - X0)||_p <= eps} by ``method`` ("IBP" or "CROWN")."""
    X0 = check_ball(X0, eps, p)
    weights = as_weights(layer)
    if weights.kind not in ("dp", "l2"):
        raise InvalidInputError(f"Jacobian bounds cover kinds 'dp' and 'l2', got {weights.kind!r}")
    N, D = X0.shape
    if D != weights.D:
        raise InvalidInputError(f"X0 has D = {D} features per token, the layer expects {weights.D}")
    n = N * D
    chunk = default_chunk(N, D, weights.d) if chunk is None else int(chunk)
    if chunk < 1:
        raise InvalidInputError(f"chunk must be a positive number of directions, got {chunk}")
    start = time.perf_counter()
    lower, upper = np.empty((n, n)), np.empty((n, n))
    with float64_default():
        module = AttentionJVP(weights)
        bounded, size = None, None
        for first in range(0, n, chunk):
            columns = range(first, min(n, first + chunk))
            T = jacobian_directions(N, D, columns)
            X = X0.unsqueeze(0).expand(len(columns), N, D).contiguous()
            if bounded is None or size != len(columns):  # a new trace only for the last, shorter chunk
                bounded, size = bounded_module(module, (X, T)), len(columns)
            lo, hi = compute(bounded, (_compat.BoundedTensor(X, perturbation(eps, p)), T), method)
            lower[:, first:first + len(columns)] = lo.numpy().T  # batch element m = column m of J
            upper[:, first:first + len(columns)] = hi.numpy().T
    return JacobianBounds(method, p, float(eps), lower, upper, time.perf_counter() - start, chunk)


def lirpa_lipschitz(layer: nn.Module | AttentionWeights, X0: torch.Tensor, eps: float, p: str = "inf",
                    norm: str = "inf", method: str = "CROWN", norm2: str = "sdp", chunk: int | None = None,
                    bounds: JacobianBounds | None = None, time_limit: float | None = None) -> Certificate:
    """Upper bound on Lip_norm(F) over the eps-ball from auto_LiRPA's Jacobian enclosure (module docstring).

    ``norm2`` is the `certify.sdp.enclosure_norm` method for the 2-norm ("sdp", "baseline", "magnitude",
    "cheap"); pass precomputed ``bounds`` to reuse one enclosure for both norms.
    """
    check_norm(norm)
    if bounds is None:
        bounds = jacobian_bounds(layer, X0, eps, p, method, chunk)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SDPFallbackWarning)
        result = enclosure_norm(bounds.enclosure(), norm, method=norm2, time_limit=time_limit)
    return Certificate(
        value=result.value, kind="upper", certified=False, method=f"auto_LiRPA-{bounds.method}-Jacobian",
        scope=f"eps-ball(l{bounds.p}, eps={bounds.eps:g})", norm=norm,  # type: ignore[arg-type]
        seconds=bounds.seconds + time.perf_counter() - start,
        message=f"{bounds.method} enclosure of J over the ball (auto_LiRPA {_compat.VERSION}, float64, not "
                f"outward-rounded), norm by {result.method}",
        details={"norm_method": result.method, "enclosure_seconds": bounds.seconds, "chunk": bounds.chunk},
    )
