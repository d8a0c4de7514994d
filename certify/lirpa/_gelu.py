"""The exact GELU, f(x) = x Phi(x) (Phi the standard normal CDF), as a custom auto_LiRPA 0.3 op with a sound relaxation.

auto_LiRPA 0.3 bounds neither GELU nor Erf (torch exports GELU as Erf, Div, Add, Mul), so `gelu` is an autograd
Function exported as the ONNX node ``custom::Gelu``, and `BoundGelu` (passed to BoundedModule as a custom op)
bounds it:

    f'(x) = Phi(x) + x phi(x),   f''(x) = phi(x) (2 - x^2),   phi the standard normal density.

f is convex on [-sqrt 2, sqrt 2], concave outside, and has its minimum f(x*) = -0.16997... at x* = -0.75179...

**IBP** on [l, u]: upper max(f(l), f(u)); lower f(x*) if l <= x* <= u, else min(f(l), f(u)) (f decreases left of
x* and increases right of it).

**CROWN** on [l, u]: for a slope a, g = f - a x has |g''| = |f''| <= M on [l, u], with M the largest |f''| at l,
u and the critical points 0, +-2 of f'' inside [l, u]. On the grid t_k = l + k h, h = (u - l) / (GRID - 1), g
differs from its piecewise-linear interpolant by at most M h^2 / 8, so

    min_k g(t_k) - M h^2 / 8  <=  g(x)  <=  max_k g(t_k) + M h^2 / 8   on [l, u],

and a x + (min_k g(t_k) - M h^2 / 8) <= f(x) <= a x + (max_k g(t_k) + M h^2 / 8) for every slope a. The
relaxation is sound for any a; each side takes, among the chord and the tangent slopes at l, (l + u) / 2 and u, the
one with the least mean gap on the grid. The grid values are float64 without outward rounding (as auto_LiRPA
itself); ``ROUNDING`` (1 + |l| + |u|) is added to both gaps to cover their rounding errors.
"""

from __future__ import annotations

import math

import torch

from ._compat import BoundActivation

GRID = 129
ROUNDING = 1e-14
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def value(x: torch.Tensor) -> torch.Tensor:
    """f(x) = x Phi(x) (torch's exact, erf-based GELU)."""
    return torch.nn.functional.gelu(x)


def derivative(x: torch.Tensor) -> torch.Tensor:
    """f'(x) = Phi(x) + x phi(x)."""
    return 0.5 * (1.0 + torch.erf(x * _SQRT_HALF)) + x * _INV_SQRT_2PI * torch.exp(-0.5 * x * x)


def _curvature(x: torch.Tensor) -> torch.Tensor:
    """|f''(x)| = phi(x) |2 - x^2|."""
    return _INV_SQRT_2PI * torch.exp(-0.5 * x * x) * (2.0 - x * x).abs()


def _minimiser() -> tuple[float, float]:
    """(x*, f(x*)): Newton on f'(x) = 0 from -0.75 (f'' > 0 there); f(x*) is lowered by 1e-15 for rounding."""
    x = torch.tensor(-0.75, dtype=torch.float64)
    for _ in range(50):
        x = x - derivative(x) / (_INV_SQRT_2PI * torch.exp(-0.5 * x * x) * (2.0 - x * x))
    return float(x), float(value(x)) - 1e-15


X_MIN, F_MIN = _minimiser()


def interval(lower: torch.Tensor, upper: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[min f, max f] over [lower, upper] entrywise (module docstring, IBP)."""
    f_lower, f_upper = value(lower), value(upper)
    inside = (lower <= X_MIN) & (upper >= X_MIN)
    low = torch.where(inside, torch.full_like(lower, F_MIN), torch.minimum(f_lower, f_upper))
    return low, torch.maximum(f_lower, f_upper)


def relaxation(lower: torch.Tensor, upper: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(lw, lb, uw, ub) with lw x + lb <= f(x) <= uw x + ub on [lower, upper], entrywise (module docstring)."""
    width = (upper - lower).clamp_min(0.0)
    middle = 0.5 * (lower + upper)
    t = torch.linspace(0.0, 1.0, GRID, dtype=lower.dtype, device=lower.device)
    x = lower.unsqueeze(-1) + width.unsqueeze(-1) * t  # (..., GRID)
    fx = value(x)
    positive = width > 0
    chord = torch.where(positive, (fx[..., -1] - fx[..., 0]) / torch.where(positive, width, 1.0), derivative(middle))
    slopes = torch.stack([chord, derivative(lower), derivative(middle), derivative(upper)], dim=-1)  # (..., 4)
    g = fx.unsqueeze(-2) - slopes.unsqueeze(-1) * x.unsqueeze(-2)  # (..., 4, GRID)
    M = torch.maximum(_curvature(lower), _curvature(upper))
    for critical in (-2.0, 0.0, 2.0):
        inside = (lower <= critical) & (upper >= critical)
        M = torch.where(inside, torch.maximum(M, _curvature(torch.full_like(M, critical))), M)
    gap = (M * (width / (GRID - 1)) ** 2 / 8.0 + ROUNDING * (1.0 + lower.abs() + upper.abs())).unsqueeze(-1)
    low, high, mean = g.amin(-1) - gap, g.amax(-1) + gap, g.mean(-1)  # (..., 4)
    pick_low = (mean - low).argmin(-1, keepdim=True)
    pick_high = (high - mean).argmin(-1, keepdim=True)
    return (slopes.gather(-1, pick_low).squeeze(-1), low.gather(-1, pick_low).squeeze(-1),
            slopes.gather(-1, pick_high).squeeze(-1), high.gather(-1, pick_high).squeeze(-1))


class _GeluFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return value(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * derivative(x)

    @staticmethod
    def symbolic(g, x):
        return g.op("custom::Gelu", x).setType(x.type())  # the output has the input's type and shape


def gelu(x: torch.Tensor) -> torch.Tensor:
    """f(x) = x Phi(x), traced by auto_LiRPA as one ``custom::Gelu`` node (bounded by `BoundGelu`)."""
    return _GeluFunction.apply(x)


class BoundGelu(BoundActivation):
    """auto_LiRPA's node for ``custom::Gelu``: IBP by `interval`, CROWN by `relaxation`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return value(x)

    def interval_propagate(self, *v):
        return interval(*v[0])

    def bound_relax(self, x) -> None:
        self.lw, self.lb, self.uw, self.ub = relaxation(x.lower, x.upper)
