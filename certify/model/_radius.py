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


def certified_radius(model: Model, x0: Any, norm: str = "inf", label: int | None = None, *, start: float = 1e-5,
                     steps: int = 8, tolerance: float = 0.02, progress: Callable[[int], None] | None = None,
                     on_step: Callable[[float, bool], None] | None = None) -> ModelRadius:
    """The largest eps found at which every margin y_label - y_j is certified positive on the eps-ball (0 when none
    is, e.g. when ``label`` (default: the float64 prediction) is not the prediction).

    Each call encloses the model on one ball and certifies the largest ball about x0 that this enclosure proves
    (`ChainEnclosure.certified_scale`: all of it, or a fraction); `_bisection.largest_radius` brackets and bisects
    (at most ``steps`` steps, stopping once the bracket is within ``tolerance``, relative).

    ``progress(k)`` after each top-level block of every enclosure; ``on_step(eps, certified)`` after each tested
    eps. Ctrl-C (KeyboardInterrupt) returns the largest eps certified so far with ``interrupted`` True.
    """
    begin = time.perf_counter()
    classes, y = _classes(model, x0)
    label = int(np.argmax(y)) if label is None else int(label)
    if not 0 <= label < classes:
        raise InvalidInputError(f"label must lie in [0, {classes}), got {label}")
    A = margin_rows(classes, label)
    passed: list[float] = []
    calls = 0

    def radius_at(eps: float) -> float:
        nonlocal calls
        calls += 1
        scale = model_enclosure(model, x0, eps, norm, progress).certified_scale(A)
        radius = eps if scale >= 1.0 else float(np.nextafter(scale * eps, 0.0))  # scale * eps rounded down
        passed.append(radius)
        if on_step is not None:
            on_step(eps, radius >= eps)
        return radius

    try:
        value, calls = largest_radius(radius_at, start=start, steps=steps, tolerance=tolerance)
    except KeyboardInterrupt:  # keep what is certified: the largest radius certified so far
        return ModelRadius(max(passed, default=0.0), norm, label, calls, time.perf_counter() - begin,
                           interrupted=True)
    return ModelRadius(float(value), norm, label, calls, time.perf_counter() - begin)


def vnnlib_bounds(model: Model) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``lower_bounds(x_lo, x_hi, A)`` for `decide`: certified lower bounds on A y(x) over the input box (inputs
    X_i in the row-major order of ``model.input_shape``), from the enclosure about the box's midpoint."""
    n = int(np.prod(model.input_shape))

    def lower_bounds(x_lo: np.ndarray, x_hi: np.ndarray, A: np.ndarray) -> np.ndarray:
        if x_lo.shape != (n,) or x_hi.shape != (n,):
            raise InvalidInputError(f"the property has {x_lo.size} inputs, the model {n}")
        centre = np.clip(0.5 * x_lo + 0.5 * x_hi, x_lo, x_hi)
        radius = np.maximum(x_hi - centre, centre - x_lo)
        radius = np.nextafter(radius, np.inf) * (radius > 0)  # covers the rounding of the differences
        shape = tuple(model.input_shape)
        return model_enclosure(model, centre.reshape(shape), radius.reshape(shape), "inf").linear_lower(A)

    return lower_bounds
