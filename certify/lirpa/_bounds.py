"""Output bounds of an attention layer over an eps-ball of inputs, by IBP and CROWN (auto_LiRPA 0.3).

For X in the ball {X : ||vec(X - X0)||_p <= eps}, p in {2, inf}, auto_LiRPA returns l <= vec(F(X)) <= u entrywise:

- IBP propagates intervals (the l_2 ball enters as its bounding box X0 +- eps);
- CROWN propagates linear bounds backwards and concretises them on the l_p ball with the dual norm
  (Zhang et al. 2018; Xu et al. 2020, "Automatic perturbation analysis for scalable certified robustness").

Both are sound in exact arithmetic. auto_LiRPA computes them in float64 without outward rounding, so the bridge
never marks them (or anything derived from them) as certified in the sense of `Certificate.certified`; they are
"bound propagation, float64". From the box, max over the ball of ||F(X) - F(X0)||_q is at most
||max(u - F(X0), F(X0) - l)||_q (`OutputBounds.deviation`), which compares directly with Lip_q(F) eps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from typing import Iterator, Sequence

import torch
from torch import nn

from .._errors import InvalidInputError
from ..attention import AttentionWeights
from . import _compat
from ._export import export_attention

METHODS: tuple[str, ...] = ("IBP", "CROWN")
BOUND_OPTS = {"fixed_reducemax_index": True, "conv_mode": "matrix"}


@contextlib.contextmanager
def float64_default() -> Iterator[None]:
    """auto_LiRPA allocates with the default dtype: make it float64 while bounding, then restore it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def check_ball(X0: torch.Tensor, eps: float, p: str) -> torch.Tensor:
    """Validate the centre (N, D) and radius of an eps-ball; returns X0 in float64."""
    if not isinstance(X0, torch.Tensor) or X0.ndim != 2:
        shape = tuple(X0.shape) if isinstance(X0, torch.Tensor) else type(X0).__name__
        raise InvalidInputError(f"the eps-ball centre X0 must be a tensor of shape (N, D), got {shape}")
    if not torch.isfinite(X0).all():
        raise InvalidInputError("the eps-ball centre X0 has NaN or Inf entries")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise InvalidInputError(f"eps must be a positive finite number, got {eps!r}")
    if p not in ("2", "inf"):
        raise InvalidInputError(f"the eps-ball norm p must be '2' or 'inf', got {p!r}")
    return X0.detach().to(torch.float64, copy=True)


def perturbation(eps: float, p: str):
    return _compat.PerturbationLpNorm(norm=math.inf if p == "inf" else 2.0, eps=float(eps))


def bounded_module(module: nn.Module, inputs: tuple[torch.Tensor, ...], custom_ops: dict | None = None):
    """auto_LiRPA's BoundedModule with the options of MATH.md section 8 (tracing warnings silenced); ``custom_ops``
    maps ONNX op names of our own autograd Functions to their Bound classes (e.g. `_gelu.BoundGelu`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _compat.BoundedModule(module, inputs, bound_opts=dict(BOUND_OPTS), verbose=False,
                                     custom_ops=custom_ops)


def compute(bounded, inputs: tuple, method: str, C: torch.Tensor | None = None,
            upper: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward pass on the bounded inputs (required by 0.3), then (lower, upper) by ``method`` (upper None when
    ``upper=False``, which skips its backward pass).

    Runs without autograd: the module's parameters require gradients inside auto_LiRPA, and with autograd on every
    intermediate A matrix stays referenced by the graph until the bounds are freed (on a 1-layer D = 48 transformer,
    5.3 GB instead of 0.9 GB, and slower).
    """
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {METHODS}, got {method!r}")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        bounded(*inputs)
        lower, high = bounded.compute_bounds(x=inputs, method=method, C=C, bound_upper=upper)
    return lower.detach(), (high.detach() if upper else None)


@dataclasses.dataclass(frozen=True)
class OutputBounds:
    """lower <= F(X) <= upper (each (N, D)) for every X in the eps-ball around X0; ``center`` = F(X0)."""

    method: str
    p: str
    eps: float
    lower: torch.Tensor
    upper: torch.Tensor
    center: torch.Tensor
    seconds: float

    @property
    def width(self) -> float:
        """The widest output interval, max (upper - lower)."""
        return float((self.upper - self.lower).max())

    def deviation(self, q: str | None = None) -> float:
        """Bound on max over the ball of ||vec(F(X) - F(X0))||_q (q defaults to the ball's p)."""
        q = self.p if q is None else q
        gap = torch.maximum(self.upper - self.center, self.center - self.lower).clamp_min(0).reshape(-1)
        return float(gap.max() if q == "inf" else gap.norm())


def output_bounds(layer: nn.Module | AttentionWeights, X0: torch.Tensor, eps: float, p: str = "inf",
                  methods: Sequence[str] = METHODS) -> tuple[OutputBounds, ...]:
    """IBP and/or CROWN bounds on F(X) over {||vec(X - X0)||_p <= eps}; X0 of shape (N, D)."""
    X0 = check_ball(X0, eps, p)
    with float64_default():
        module = export_attention(layer)
        if X0.shape[1] != module.D:
            raise InvalidInputError(f"X0 has D = {X0.shape[1]} features per token, the layer expects {module.D}")
        X = X0.unsqueeze(0)
        with torch.no_grad():
            center = module(X).reshape(X0.shape)
        bounded = bounded_module(module, (X,))
        results = []
        for method in methods:
            start = time.perf_counter()
            lower, upper = compute(bounded, (_compat.BoundedTensor(X, perturbation(eps, p)),), method)
            results.append(OutputBounds(method, p, float(eps), lower.reshape(X0.shape), upper.reshape(X0.shape),
                                        center, time.perf_counter() - start))
    return tuple(results)
