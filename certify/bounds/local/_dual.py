"""Forward-mode differentiation in interval arithmetic: enclosures of a function and of its gradient over a box.

A `Dual` holds an interval value v (shape S) and an interval tangent t (shape S + (n,)): for every point X of the
input box, the exact value lies in v and its derivative with respect to the n input coordinates lies in t. Each
operation applies the chain rule with interval arithmetic, so both enclosures keep holding (the tangent of a
product u w is t_u w + u t_w, evaluated with the value enclosures). Tightening the value alone (clipping a
probability to [0, 1]) keeps the tangent valid; intersecting two enclosures of one function intersects both parts.

Used for the mean-value form of `_enclosure.py`: J(X) in J(c) + sum_m [X_m - c_m] dJ/dX_m(box).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...interval import Interval, as_interval, exp, intersect, isum, reciprocal, square


def _axis(axis: int, ndim: int) -> int:
    return axis if axis >= 0 else ndim + axis


@dataclasses.dataclass(frozen=True)
class Dual:
    v: Interval
    t: Interval

    @staticmethod
    def seed(x: Interval) -> Dual:
        """The input boxes (..., N, D) themselves: tangent = identity (exact) over the N D coordinates of each."""
        N, D = x.shape[-2:]
        eye = np.broadcast_to(np.eye(N * D).reshape(N, D, N * D), (*x.shape, N * D))
        return Dual(x, Interval(eye, eye))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.v.shape

    def expand(self, axis: int) -> Dual:
        ax = _axis(axis, self.v.lo.ndim + 1)
        return Dual(self.v.expand(ax), self.t.expand(ax))

    def swapaxes(self, a: int, b: int) -> Dual:
        n = self.v.lo.ndim
        a, b = _axis(a, n), _axis(b, n)
        return Dual(self.v.swapaxes(a, b), self.t.swapaxes(a, b))

    def __neg__(self) -> Dual:
        return Dual(-self.v, -self.t)

    def __add__(self, other) -> Dual:
        if isinstance(other, Dual):
            return Dual(self.v + other.v, self.t + other.t)
        return Dual(self.v + other, self.t)

    __radd__ = __add__

    def __sub__(self, other) -> Dual:
        return self + (-other)

    def __mul__(self, other) -> Dual:
        if isinstance(other, Dual):
            return Dual(self.v * other.v, self.t * other.v.expand(-1) + other.t * self.v.expand(-1))
        o = as_interval(other)
        return Dual(self.v * o, self.t * o.expand(-1))

    __rmul__ = __mul__


def d_exp(x: Dual) -> Dual:
    e = exp(x.v)
    return Dual(e, x.t * e.expand(-1))


def d_reciprocal(x: Dual) -> Dual:
    r = reciprocal(x.v)
    return Dual(r, x.t * (-square(r)).expand(-1))


def d_square(x: Dual) -> Dual:
    return Dual(square(x.v), x.t * (x.v * 2.0).expand(-1))


def d_isum(x: Dual, axis) -> Dual:
    n = x.v.lo.ndim
    axes = tuple(_axis(a, n) for a in np.atleast_1d(axis))
    return Dual(isum(x.v, axis=axes), isum(x.t, axis=axes))


def d_intersect(a: Dual, b: Dual) -> Dual:
    return Dual(intersect(a.v, b.v), intersect(a.t, b.t))


def d_where_zero(mask: np.ndarray, x: Dual) -> Dual:
    """x where mask, exactly 0 elsewhere (mask broadcasts against the value's shape)."""
    mv = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, x.v.shape))
    mt = mv[..., None]
    return Dual(
        Interval(np.where(mv, x.v.lo, 0.0), np.where(mv, x.v.hi, 0.0)),
        Interval(np.where(mt, x.t.lo, 0.0), np.where(mt, x.t.hi, 0.0)),
    )
