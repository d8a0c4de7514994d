"""Certified robustness radii and VNNLIB answers for whole models, from the first-order enclosure of the model
(`_jacobian_chain.ChainEnclosure.linear_lower`).

The prediction is constant on the ball {||x - x0||_p <= eps} when every margin y_label(x) - y_j(x) (j != label) has
a certified positive lower bound there; the radius is the largest eps found so (`largest_radius`: only radii that
some enclosure certified are returned, so the value is certified even though the search is not monotone in eps).
Ctrl-C during the search keeps the largest radius certified so far (``interrupted``: it may not be the largest).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from .._bisection import largest_radius
from .._errors import InvalidInputError
from ._blocks import Model
from ._certify import model_enclosure
from ._forward import forward
from ._nested import piece, shells, step_integral
from ..interval import round_down, round_up


@dataclasses.dataclass(frozen=True)
class ModelRadius:
    """The label is constant on the l_norm ball of radius ``value`` about the input (label 'certified').

    ``interrupted``: Ctrl-C stopped the bisection; ``value`` is the largest eps certified before it (still
    certified, possibly smaller than the search would have found; 0 when none was)."""

    value: float
    norm: str
    label: int
    calls: int
    seconds: float
    kind: str = "certified"
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def margin_rows(classes: int, label: int) -> np.ndarray:
    """A (classes - 1, classes): row j is e_label - e_j for j != label."""
    rows = [np.eye(classes)[label] - np.eye(classes)[j] for j in range(classes) if j != label]
    return np.array(rows)


def _classes(model: Model, x0: Any) -> tuple[int, np.ndarray]:
    y = forward(model, x0)[0].numpy().reshape(-1)
    if y.size < 2:
        raise InvalidInputError(f"a robustness radius needs at least 2 outputs (classes), the model has {y.size}")
    return y.size, y


@dataclasses.dataclass(frozen=True)
class BallMargins:
    """One enclosure's terms for the margins A y on the ball of radius ``radius`` about x0 (`margin_slopes`):
    ``lower`` <= a^T y(x0), ``slope`` >= |a^T J(z) delta| for z in the ball and ||delta|| <= radius, and
    ``whole`` (`linear_lower` > 0 on every row: the ball is certified, the output box included)."""

    radius: float
    lower: np.ndarray
    slope: np.ndarray
    whole: bool


def _step_slopes(balls: list[BallMargins]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(radii, per_unit, lower): the balls' radii sorted, their slopes per unit radius (slope / rho, rounded up;
    NaN: +inf) and the largest lower bound on the margins at x0 (NaN: -inf)."""
    balls = sorted(balls, key=lambda b: b.radius)
    radii = np.array([b.radius for b in balls])
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        per_unit = np.stack([np.nextafter(b.slope / b.radius, np.inf) for b in balls])  # (k, rows)
    lower = np.max(np.stack([np.where(np.isnan(b.lower), -np.inf, b.lower) for b in balls]), axis=0)
    return radii, per_unit, lower


def nested_lower(balls: list[BallMargins], radius: float) -> np.ndarray:
    """Lower bounds on every margin a^T y(x) over the ball ||x - x0|| <= radius (at most the largest ball's):
    lower - int_0^radius sigma(s) ds (`nested_radius`), the integral rounded up piece by piece
    (`_nested.step_integral`)."""
    radii, per_unit, lower = _step_slopes(balls)
    if not 0 <= radius <= radii[-1]:
        raise InvalidInputError(f"radius must lie in [0, {radii[-1]}] (the largest ball), got {radius}")
    integral = step_integral(radii, per_unit, radius)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(integral), round_down(lower - integral), -np.inf)


def nested_radius(balls: list[BallMargins]) -> float:
    """The largest R found with every margin certified positive on the ball of radius R about x0, from the
    enclosures of several balls about the same x0 (same norm).

    For x = x0 + delta, ||delta|| = R' <= R, the point x0 + t delta lies in the ball of radius t R', so
        a^T y(x) - a^T y(x0) = int_0^1 a^T J(x0 + t delta) delta dt >= -int_0^R' sigma(s) ds,
    sigma(s) the smallest slope per unit radius, slope_k / rho_k, over the enclosures with radius rho_k >= s (each
    holds on its whole ball, so at every point with ||z - x0|| <= s <= rho_k; |a^T J(z) delta| <= sigma R'). The
    integral is a step function's, a sum over the sorted radii (`_nested.shells`). So the margin is positive up to
    the smallest R where the largest ``lower`` (every enclosure bounds y(x0)) meets it: with one ball this is
    `certified_scale`'s radius, with the smaller balls of a search the super-linear growth of the slopes with the
    radius (the enclosures' first-order error) is paid only on the outer part of the segment. Rounding: every slope
    per unit and every partial integral is rounded up, the root rounded down twice (its rounding and strictness).
    A ball certified whole (`whole`) gives its radius. 0 when no ball gives anything."""
    if not balls:
        return 0.0
    best = max((b.radius for b in balls if b.whole), default=0.0)
    radii, per_unit, lower = _step_slopes(balls)
    if not np.all(lower > 0):
        return best
    starts, widths, sigma = shells(radii, per_unit)
    value = np.inf
    for row in range(lower.size):
        integral = 0.0  # an upper bound on int_0^{rho_{k-1}} sigma
        root = radii[-1]
        for k, start in enumerate(starts):
            step = float(piece(widths[k], sigma[k, row]))
            if float(round_up(integral + step)) >= lower[row]:
                with np.errstate(divide="ignore", over="ignore"):
                    inside = float(round_down(round_down(lower[row] - integral) / sigma[k, row]))
                root = float(np.nextafter(np.nextafter(round_down(start + inside), 0.0), 0.0))
                root = min(max(root, 0.0), radii[k])
                break
            integral = float(round_up(integral + step))
        value = min(value, root)
    return float(max(best, value))


def certified_radius(model: Model, x0: Any, norm: str = "inf", label: int | None = None, *, start: float = 1e-5,
                     steps: int = 8, tolerance: float = 0.02, progress: Callable[[int], None] | None = None,
                     on_step: Callable[[float, float], None] | None = None) -> ModelRadius:
    """The largest eps found at which every margin y_label - y_j is certified positive on the eps-ball (0 when none
    is, e.g. when ``label`` (default: the float64 prediction) is not the prediction).

    Each call encloses the model on one ball, its boxes narrowed by the slopes of the smaller balls enclosed before
    (`_jacobian_chain.nested_spread`), and certifies the largest ball about x0 that this enclosure and the earlier
    ones prove together (`nested_radius`: the slopes of the smaller balls on the inner part of each segment from x0;
    with one ball `ChainEnclosure.certified_scale`); `_bisection.largest_radius` brackets and
    bisects (at most ``steps`` steps, stopping once the bracket is within ``tolerance``, relative).

    ``progress(k)`` after each top-level block of every enclosure; ``on_step(eps, radius)`` after each tested
    eps, with the radius certified so far (the ball of radius eps is certified whole when radius >= eps). Ctrl-C
    (KeyboardInterrupt) returns the largest radius certified so far with ``interrupted`` True.
    """
    begin = time.perf_counter()
    classes, y = _classes(model, x0)
    label = int(np.argmax(y)) if label is None else int(label)
    if not 0 <= label < classes:
        raise InvalidInputError(f"label must lie in [0, {classes}), got {label}")
    A = margin_rows(classes, label)
    passed: list[float] = []
    calls = 0
    balls: list[BallMargins] = []
    slopes: list = []  # the chains' `StateSlopes`, which narrow the boxes of the later (larger) balls

    def radius_at(eps: float) -> float:
        nonlocal calls
        calls += 1
        inner = tuple(b for b in slopes if b.radius < eps)
        enclosure = model_enclosure(model, x0, eps, norm, progress, smaller=inner)
        if enclosure.slopes is not None:
            slopes.append(enclosure.slopes)
        balls.append(BallMargins(eps, *enclosure.margin_slopes(A), bool(np.all(enclosure.linear_lower(A) > 0))))
        radius = nested_radius(balls)
        passed.append(radius)
        if on_step is not None:
            on_step(eps, radius)
        return radius

    try:
        value, calls = largest_radius(radius_at, start=start, steps=steps, tolerance=tolerance)
    except KeyboardInterrupt:  # keep what is certified: the largest radius certified so far
        return ModelRadius(max(passed, default=0.0), norm, label, calls, time.perf_counter() - begin,
                           interrupted=True)
    return ModelRadius(float(value), norm, label, calls, time.perf_counter() - begin)


NESTED_SCALES = (2.0**-0.5, 0.5)
"""`vnnlib_bounds` refines an undecided property with the enclosures of the boxes scaled by these about the centre
(near 1, where the slopes grow: on the tiny test model at box radius 0.019 the worse margin bound is +0.108 with
these, +0.070 with (1/2, 1/4))."""


def vnnlib_bounds(model: Model, nested: bool = True) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``lower_bounds(x_lo, x_hi, A)`` for `decide`: certified lower bounds on A y(x) over the input box (inputs
    X_i in the row-major order of ``model.input_shape``), from the enclosure about the box's midpoint; where a bound
    is not positive and ``nested``, also from the enclosures of the boxes scaled by `NESTED_SCALES` about it
    (`nested_lower`, scale t in place of the radius: the point c + t delta lies in the box scaled by t; each scaled
    radius is rounded up, so its box contains the exact one), the larger bound kept per row."""
    n = int(np.prod(model.input_shape))

    def lower_bounds(x_lo: np.ndarray, x_hi: np.ndarray, A: np.ndarray) -> np.ndarray:
        if x_lo.shape != (n,) or x_hi.shape != (n,):
            raise InvalidInputError(f"the property has {x_lo.size} inputs, the model {n}")
        centre = np.clip(0.5 * x_lo + 0.5 * x_hi, x_lo, x_hi)
        radius = np.maximum(x_hi - centre, centre - x_lo)
        radius = np.nextafter(radius, np.inf) * (radius > 0)  # covers the rounding of the differences
        shape = tuple(model.input_shape)
        full = model_enclosure(model, centre.reshape(shape), radius.reshape(shape), "inf")
        bound = full.linear_lower(A)
        if not nested or np.all(bound > 0) or not np.any(radius > 0):
            return bound
        balls = [BallMargins(1.0, *full.margin_slopes(A), False)]
        for scale in NESTED_SCALES:
            inner = model_enclosure(model, centre.reshape(shape), round_up(radius * scale).reshape(shape), "inf")
            balls.append(BallMargins(scale, *inner.margin_slopes(A), False))
        return np.maximum(bound, nested_lower(balls, 1.0))

    return lower_bounds
