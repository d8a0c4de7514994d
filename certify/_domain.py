"""Input domains over which a Lipschitz constant is taken (MATH.md sections 3 and 7).

- `Global`: all of R^{N x D}. Only L2 attention with tied W^Q = W^K is Lipschitz there (Theorem 3.2).
- `Ball`: every token in the Euclidean ball ||x_i||_2 <= R (what LayerNorm outputs satisfy). Theorem 3.1 makes
  this, or a neighbourhood, necessary for dot-product attention.
- `EpsBall`: the l_p ball of radius eps (p in {2, inf}) around a given input X0 (on vec(X)).

Over a convex domain the Lipschitz constant equals sup ||J(X)||, so every bound here is a bound on that sup.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ._errors import InvalidInputError


@dataclasses.dataclass(frozen=True)
class Global:
    @property
    def scope(self) -> str:
        return "global"


@dataclasses.dataclass(frozen=True)
class Ball:
    radius: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise InvalidInputError(f"the ball radius R must be a positive finite number, got {self.radius!r}")

    @property
    def scope(self) -> str:
        return f"ball(R={self.radius:g})"


@dataclasses.dataclass(frozen=True)
class EpsBall:
    center: torch.Tensor  # (N, D)
    eps: float
    p: str = "inf"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise InvalidInputError(f"eps must be a positive finite number, got {self.eps!r}")
        if self.p not in ("2", "inf"):
            raise InvalidInputError(f"the eps-ball norm must be '2' or 'inf', got {self.p!r}")
        if self.center.ndim != 2:
            raise InvalidInputError(f"the eps-ball centre X0 must have shape (N, D), got {tuple(self.center.shape)}")
        if not torch.isfinite(self.center).all():
            raise InvalidInputError("the eps-ball centre X0 has NaN or Inf entries")

    @property
    def scope(self) -> str:
        return f"eps-ball(l{self.p}, eps={self.eps:g})"

    def enclosing_ball(self) -> Ball:
        """A `Ball(R)` containing the eps-ball: every token has ||x_i||_2 <= ||x0_i||_2 + eps (l2: ||x_i - x0_i||_2
        <= ||vec(X - X0)||_2 <= eps; l_inf: ||x_i - x0_i||_2 <= sqrt(D) eps), so R = max_i ||x0_i||_2 + eps'.

        Floating point: the float64 norm of D numbers has relative error below (D + 2) u (u = 2^-53), and the sum and
        the square root one u each; the relative margin (D + 4) 2^-52 covers them, then one ulp up (and the absolute
        1e-300 keeps R > 0).
        """
        X0 = self.center.detach().to("cpu", torch.float64)
        D = X0.shape[1]
        spread = self.eps * (math.sqrt(D) if self.p == "inf" else 1.0)
        radius = (float(X0.norm(dim=1).max()) + spread) * (1 + (D + 4) * 2.0**-52) + 1e-300
        if not math.isfinite(radius):
            raise InvalidInputError(f"the eps-ball around X0 does not fit in a finite ball (radius {radius})")
        return Ball(math.nextafter(radius, math.inf))


Domain = Global | Ball | EpsBall
