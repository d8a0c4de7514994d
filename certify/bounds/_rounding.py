"""Floating-point safety for bounds computed from weights: a relative margin, an absolute term, and power-of-two
scaling so that no intermediate can underflow or overflow.

Notation: u = 2^-53 (unit roundoff), eta = 2^-1074 (smallest subnormal), TINY = 2^-1022 (smallest normal),
TAU = 2^-900, up(x) = the next float64 above x. With round-to-nearest, up(fl(x)) >= x for every real x whose
rounding fl(x) is finite (the rounding error is at most half an ulp of fl(x), and up adds one ulp).

**Why scaling.** A closed form such as ||W^Q||^4 ||W^V||^2 ||W^O||^2 can underflow to 0 (W^Q = 1e-90) or lose
digits in the subnormal range, although the real value is an ordinary number; a relative margin cannot repair a
0. So every weight tensor is split as W = 2^k W_hat with max |W_hat| in [1/2, 1) (`power_of_two_scaled`; exact for
every entry that stays normal, and an entry that becomes subnormal or 0 moves by at most eta / 2), norms are taken
of W_hat, and every scalar is carried as `Scaled` = m 2^e with m in [1/2, 1) and e an unbounded Python int. Then:

1. Scaled norms. For an m x n block W_hat_b of a scaled tensor (m + n <= MAX_SIZE), the entries that underflowed
   moved by a matrix E with ||E||_2 <= ||E||_F <= sqrt(m n) eta / 2 < 2^-1057. An SVD (2-norm) returns
   sigma (1 + delta) with |delta| <= p u, p <= 16 (m + n) (backward-stable LAPACK, Weyl), plus absolute underflow
   terms of LAPACK of at most poly(m, n) eta << TAU; a row sum of n nonnegative terms has relative error <= n u
   and absolute underflow error <= n eta. We add TAU to every computed norm: if the computed norm c >= 2^-800,
   all absolute errors are below 2^-250 c and fold into the relative error; if c < 2^-800, TAU alone exceeds
   them. So the exact norm is <= (c + TAU)(1 + (p + 2) u).
2. Products of weights (W^O_h^T W^V_h^T W^Q_h, W^Q_h W^K_h^T) are formed from scaled factors F_1 ... F_c
   (entries <= 1, inner dimension <= K, so nothing overflows), left to right. Each product obeys
   |fl(A B) - A B| <= gamma_K |A| |B| + K eta entrywise (Higham, section 3.5; gamma_K = K u / (1 - K u)), so
   by induction ||fl(F_1 ... F_c) - F_1 ... F_c||_F <= ((1 + gamma_K)^(c-1) - 1) prod_i ||F_i||_F + (underflow,
   at most sqrt(m n) c K^2 eta < 2^-1000 < TAU). `chain_product` returns this Frobenius bound; a norm of the
   product is then bounded by ||fl(P)|| + ||E|| with ||E||_2 <= ||E||_F and ||E||_inf <= sqrt(n) ||E||_F.
   This holds under any cancellation (the error is absolute, in the scaled units), which a relative margin
   alone does not cover.
3. `Scaled` arithmetic never underflows or overflows: a product of mantissas in [1/2, 1) lies in [1/4, 1) (one
   rounding, relative error <= u); a square root halves an even exponent (relative error <= u); a sum aligns the
   mantissas to the largest exponent (terms that underflow move by <= eta / 2 each, relative to a sum >= 1/2)
   and is correctly rounded by math.fsum (relative error <= u + n eta). Multiplying by a computed constant
   (phi^{-1}, sqrt(N), d^{-1/4}, the universal constant) adds its own relative error, a few u.
4. `Scaled.round_up` returns up(ldexp(up(m (1 + MARGIN)), e)): ldexp rounds once (to a subnormal when the value
   is below TINY, with an error below one ulp), and the final up covers that rounding, so the float returned is
   >= m (1 + MARGIN) 2^e. A value >= 2^1024 is refused (InvalidInputError naming float64), never returned as inf.

**The margin.** Counting every step above for the closed forms (at most three SVDs of sizes m + n <= MAX_SIZE,
sums over at most MAX_SIZE heads and rows, two chained products, a dozen Scaled operations and constants), the
accumulated relative error is below 16 * 2 * MAX_SIZE u + 2 MAX_SIZE u + (a few hundred) u < 4e-10 < 1e-9 =
MARGIN, and every absolute error has been folded into it (points 1-2) or is covered by the added error terms.
Hence: a computed bound c satisfies exact <= c (1 + MARGIN), and the float returned by `Scaled.round_up` is
>= the exact real value, at every scale from subnormal weights up to the float64 limit.

**Plain floats.** `round_up(v)` = up(up(v (1 + MARGIN)) + TINY) >= v (1 + MARGIN) + TINY (each up covers the
rounding before it). It is >= the exact x whenever x <= v (1 + MARGIN) + TINY, i.e. for a value computed from
quantities of ordinary size with relative error below MARGIN and at most TINY of absolute error from underflow in
its last steps. It never returns 0 or a subnormal. Computations that multiply norms of weights must use `Scaled`
instead: an underflow followed by a large factor is not an absolute error of TINY.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable

import numpy as np
import torch

from .._errors import InvalidInputError

MARGIN = 1e-9
MAX_SIZE = 100_000
U = 2.0**-53
TINY = 2.0**-1022
"""Smallest normal float64: the absolute term of `round_up`."""
TAU = 2.0**-900
"""Absolute term (in scaled units) added to every scaled norm and product norm (module docstring, points 1-2)."""


def up(x: float) -> float:
    return math.nextafter(x, math.inf)


def round_up(value: float) -> float:
    """up(up(value (1 +- MARGIN)) + TINY): >= the exact value it stands for (module docstring, "Plain floats")."""
    if not math.isfinite(value):
        raise InvalidInputError(f"a bound evaluated to {value}; the weights are too large for float64")
    scaled = value * (1.0 + MARGIN) if value > 0 else value * (1.0 - MARGIN)
    return up(up(scaled) + TINY)


@dataclasses.dataclass(frozen=True)
class Scaled:
    """A nonnegative real mantissa * 2**exponent with mantissa in [1/2, 1) (or 0 with exponent 0); no float64
    underflow or overflow can occur in its arithmetic (module docstring, point 3)."""

    mantissa: float
    exponent: int

    @staticmethod
    def of(x: float, exponent: int = 0) -> Scaled:
        """x 2^exponent for a finite float x >= 0 (frexp is exact, subnormals included)."""
        if not (math.isfinite(x) and x >= 0):
            raise InvalidInputError(f"a norm evaluated to {x}; no bound can be certified")
        m, e = math.frexp(x)
        return Scaled(m, e + exponent) if m else Scaled(0.0, 0)

    def __mul__(self, other: Scaled | float) -> Scaled:
        other = other if isinstance(other, Scaled) else Scaled.of(float(other))
        return Scaled.of(self.mantissa * other.mantissa, self.exponent + other.exponent)

    def __pow__(self, k: int) -> Scaled:
        result = self
        for _ in range(k - 1):
            result = result * self
        return result

    def __add__(self, other: Scaled | float) -> Scaled:
        other = other if isinstance(other, Scaled) else Scaled.of(float(other))
        return Scaled.sum([self, other])

    def sqrt(self) -> Scaled:
        m, e = (self.mantissa, self.exponent) if self.exponent % 2 == 0 else (2 * self.mantissa, self.exponent - 1)
        return Scaled.of(math.sqrt(m), e // 2)

    @staticmethod
    def sum(terms: Iterable[Scaled]) -> Scaled:
        """Correctly rounded sum of the mantissas aligned to the largest exponent."""
        terms = [t for t in terms if t.mantissa]
        if not terms:
            return Scaled(0.0, 0)
        top = max(t.exponent for t in terms)
        return Scaled.of(math.fsum(math.ldexp(t.mantissa, t.exponent - top) for t in terms), top)

    @staticmethod
    def max(terms: Iterable[Scaled]) -> Scaled:
        return max(terms, key=lambda t: (t.mantissa > 0, t.exponent, t.mantissa))

    def __float__(self) -> float:
        """The nearest float64 (inf beyond the range): for display, not for certificates."""
        try:
            return math.ldexp(self.mantissa, self.exponent)
        except OverflowError:
            return math.inf

    def round_up(self, what: str = "the bound") -> float:
        """A float64 >= mantissa (1 + MARGIN) 2^exponent (point 4), or InvalidInputError beyond float64."""
        m = up(self.mantissa * (1.0 + MARGIN))
        try:
            value = up(math.ldexp(m, self.exponent))
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise InvalidInputError(
                f"{what} is about 10^{self.exponent * math.log10(2):.0f}, beyond the float64 range (1.8e308): "
                "the weights (or the radius) are too large to certify in float64"
            )
        return value


def as_float64(matrix: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        array = matrix.detach().to("cpu", torch.float64).numpy()
    else:
        array = np.asarray(matrix, dtype=np.float64)
    if sum(array.shape[-2:]) > MAX_SIZE:
        raise InvalidInputError(f"matrix of shape {array.shape} exceeds the verified size m + n <= {MAX_SIZE}")
    return array


def power_of_two_scaled(matrix: torch.Tensor | np.ndarray) -> tuple[np.ndarray, int]:
    """(W_hat, k) with W = 2^k W_hat and max |W_hat| in [1/2, 1) (W_hat = W, k = 0 when W = 0); point 1."""
    array = as_float64(matrix)
    top = float(np.abs(array).max()) if array.size else 0.0
    if not math.isfinite(top):
        raise InvalidInputError("a weight matrix has NaN or Inf entries; no bound can be certified")
    if top == 0:
        return array, 0
    k = math.frexp(top)[1]
    return np.ldexp(array, -k), k


def matrix_norms(array: np.ndarray, norm: str) -> np.ndarray:
    """||A_b||_norm of each matrix of a scaled (..., m, n) array, plus TAU (point 1); 2: SVD, inf: row sums."""
    if array.size == 0:
        return np.zeros(array.shape[:-2])
    if norm == "2":
        values = np.linalg.norm(array, 2, axis=(-2, -1))
    else:
        values = np.abs(array).sum(axis=-1).max(axis=-1)
    return values + TAU


def chain_product(factors: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(fl(F_1 ... F_c), bound on ||fl - exact||_F per batch element) for scaled batched factors (point 2)."""
    K = max(F.shape[-2] for F in factors[1:])
    g = up(up(K * U) / (1.0 - K * U))
    product = factors[0]
    frobenius = np.sqrt((factors[0] ** 2).sum(axis=(-2, -1)))
    for F in factors[1:]:
        product = product @ F
        frobenius = frobenius * np.sqrt((F**2).sum(axis=(-2, -1)))
    j = len(factors) - 1
    growth = j * g * (1.0 + 1e-9)  # >= (1 + g)^j - 1 = j g (1 + O(j g)), j g < 1e-10, with its own rounding
    return product, growth * frobenius + TAU


def norm_2(matrix: torch.Tensor) -> float:
    """Largest singular value in float64, computed on the power-of-two scaled matrix (to nearest; not a bound)."""
    scaled, k = power_of_two_scaled(matrix)
    return float(Scaled.of(float(matrix_norms(scaled, "2")), k)) if scaled.size else 0.0


def norm_inf(matrix: torch.Tensor) -> float:
    """Largest absolute row sum in float64, computed on the power-of-two scaled matrix (to nearest)."""
    scaled, k = power_of_two_scaled(matrix)
    return float(Scaled.of(float(matrix_norms(scaled, "inf")), k)) if scaled.size else 0.0


def scaled_norm(matrix: torch.Tensor | np.ndarray, norm: str) -> Scaled:
    """||W||_norm (+ TAU in scaled units) as a `Scaled`: never 0 or inf for nonzero finite weights."""
    scaled, k = power_of_two_scaled(matrix)
    return Scaled.of(float(matrix_norms(scaled, norm)), k) if scaled.size else Scaled(0.0, 0)
