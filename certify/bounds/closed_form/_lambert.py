"""phi(x) = x e^{x+1} and its inverse, phi^{-1}(n) = W_0(n / e) (Lambert W, principal branch), MATH.md section 4.

phi^{-1}(N-1) is the constant of the Lemma of Theorem 3.2 and grows like log N - log log N.
`phi_inverse` is rounded up: it is evaluated with mpmath at 40 digits and the float64 result is moved up until it
is >= the high-precision value, so bounds that use it stay upper bounds.
"""

from __future__ import annotations

import math

import mpmath
import torch

from ..._errors import InvalidInputError


def phi(x: float) -> float:
    """phi(x) = x e^{x + 1}."""
    return x * math.exp(x + 1.0)


def phi_inverse(n: float) -> float:
    """W_0(n / e), rounded up to a float64 >= the exact value; n >= 0."""
    if not (n >= 0 and math.isfinite(n)):
        raise InvalidInputError(f"phi^{{-1}}(n) needs a finite n >= 0, got {n!r}")
    if n == 0:
        return 0.0
    with mpmath.workdps(40):
        exact = mpmath.lambertw(mpmath.mpf(n) / mpmath.e)
        value = float(exact.real)
        while mpmath.mpf(value) < exact.real:
            value = math.nextafter(value, math.inf)
    return value


def phi_inverse_tensor(n: float, like: torch.Tensor) -> torch.Tensor:
    """phi^{-1}(n) as a constant tensor with the dtype and device of ``like`` (for differentiable bounds)."""
    return torch.tensor(phi_inverse(n), dtype=like.dtype, device=like.device)
