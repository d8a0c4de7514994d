"""Floating-point safety for bounds computed from weights.

Every certified number here is computed in float64 from float64 copies of the weights (float32 -> float64 is
exact) by a short chain of sums, products, square roots and one singular value decomposition. Each of those has a
relative error of at most p * u, u = 2^-53, with p <= 16 (m + n) for an m x n SVD (backward stable LAPACK, Weyl's
inequality) and p <= n for a sum of n nonnegative terms. For matrices with m + n <= MAX_SIZE the accumulated relative
error stays below 16 * 2 * MAX_SIZE * u + (a few hundred) u < 1e-9 = MARGIN. `round_up` multiplies by (1 + MARGIN)
and then moves one ulp up, so a computed bound, once passed through `round_up`, is >= the exact real value.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._errors import InvalidInputError

MARGIN = 1e-9
MAX_SIZE = 100_000


def round_up(value: float) -> float:
    """value * (1 + MARGIN), then one ulp towards +inf; the stated margin above."""
    if not math.isfinite(value):
        raise InvalidInputError(f"a bound evaluated to {value}; the weights are too large for float64")
    return math.nextafter(value * (1.0 + MARGIN) if value > 0 else value * (1.0 - MARGIN), math.inf)


def as_float64(matrix: torch.Tensor) -> np.ndarray:
    array = matrix.detach().to("cpu", torch.float64).numpy()
    if sum(array.shape[-2:]) > MAX_SIZE:
        raise InvalidInputError(f"matrix of shape {array.shape} exceeds the verified size m + n <= {MAX_SIZE}")
    return array


def norm_2(matrix: torch.Tensor) -> float:
    """Largest singular value in float64 (to be passed through `round_up` with the rest of the bound)."""
    array = as_float64(matrix)
    return float(np.linalg.norm(array, 2)) if array.size else 0.0


def norm_inf(matrix: torch.Tensor) -> float:
    """Largest absolute row sum in float64."""
    array = as_float64(matrix)
    return float(np.abs(array).sum(axis=-1).max()) if array.size else 0.0
