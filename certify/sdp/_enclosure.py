"""An interval matrix, stored as a centre and an entrywise radius: {J : |J - J_c| <= R entrywise} (MATH.md 7)."""

from __future__ import annotations

import dataclasses

import numpy as np

from .._errors import InvalidInputError
from ._floating import up


@dataclasses.dataclass(frozen=True)
class MatrixEnclosure:
    """The set {J_c + Delta : |Delta_kl| <= R_kl} of m x n real matrices.

    Attributes:
        center: J_c, float64 (m, n).
        radius: R, float64 (m, n), entrywise >= 0.
    """

    center: np.ndarray
    radius: np.ndarray

    def __post_init__(self) -> None:
        c = np.asarray(self.center, dtype=np.float64)
        r = np.asarray(self.radius, dtype=np.float64)
        if c.ndim != 2:
            raise InvalidInputError(f"the enclosure centre must be a matrix (m, n), got shape {c.shape}")
        if r.shape != c.shape:
            raise InvalidInputError(f"the radius must have the centre's shape {c.shape}, got {r.shape}")
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(r))):
            raise InvalidInputError("the enclosure has NaN or Inf entries")
        if np.any(r < 0):
            raise InvalidInputError(f"the radius must be >= 0 entrywise, got min {r.min():g}")
        object.__setattr__(self, "center", c)
        object.__setattr__(self, "radius", r)

    @classmethod
    def from_bounds(cls, lower: np.ndarray, upper: np.ndarray) -> MatrixEnclosure:
        """The enclosure of the interval matrix [lower, upper]; the radius is rounded up so nothing is lost.

        Any float centre c works if R >= max(upper - c, c - lower) exactly; each difference is rounded to nearest
        and moved one step up, which bounds the exact difference.
        """
        lo = np.asarray(lower, dtype=np.float64)
        hi = np.asarray(upper, dtype=np.float64)
        if lo.shape != hi.shape or lo.ndim != 2:
            raise InvalidInputError(f"lower and upper must be matrices of one shape, got {lo.shape} and {hi.shape}")
        if np.any(lo > hi):
            raise InvalidInputError("lower > upper somewhere: not an interval matrix")
        c = lo + 0.5 * (hi - lo)
        c = np.where(np.isfinite(c), c, 0.5 * lo + 0.5 * hi)
        r = np.maximum(up(hi - c), up(c - lo))
        r = np.where(hi == lo, 0.0, np.maximum(r, 0.0))
        return cls(c, r)

    @property
    def shape(self) -> tuple[int, int]:
        return self.center.shape  # type: ignore[return-value]

    @property
    def lower(self) -> np.ndarray:
        """Entrywise lower ends, rounded down."""
        return np.nextafter(self.center - self.radius, -np.inf)

    @property
    def upper(self) -> np.ndarray:
        """Entrywise upper ends, rounded up."""
        return up(self.center + self.radius)

    def magnitude(self) -> np.ndarray:
        """Upper bound on |J| entrywise over the enclosure: |J_c| + R rounded up."""
        return up(np.abs(self.center) + self.radius)
