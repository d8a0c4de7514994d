"""The entry point: `certify_layer` runs every applicable certified method and an adversarial lower bound on one
layer, and returns a `Report` (a frozen dataclass of `Certificate`s with the best-upper / best-lower ratio).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Sequence

import numpy as np
import torch

from ._domain import Ball, Domain, EpsBall, Global
from ._errors import BudgetExceeded, InvalidInputError
from ._footprint import available_bytes, check_memory, format_bytes, method_floor_bytes
from ._result import Certificate
from .adversarial import LOCAL_LOWER_SEARCH, lower_bound
from .attention import AttentionWeights, as_weights, check_tokens
from .bounds import METHODS, require_global_lipschitz
from .jacobian import check_norm


@dataclasses.dataclass(frozen=True)
class Report:
    layer: dict[str, Any]
    tokens: int
    norm: str
    domain: str
    certificates: tuple[Certificate, ...]
    skipped: tuple[str, ...] = ()
    """Default methods left out before running, each with its reason (e.g. its memory floor on this machine)."""

    def best_upper(self) -> Certificate | None:
        """The smallest certified upper bound (every certified scope covers the report's domain)."""
        uppers = [c for c in self.certificates if c.kind == "upper" and c.certified]
        return min(uppers, key=lambda c: c.value, default=None)

    def best_lower(self) -> Certificate | None:
        """The largest lower bound attained inside the report's domain."""
        lowers = [c for c in self.certificates if c.kind == "lower" and c.scope == self.domain]
        return max(lowers, key=lambda c: c.value, default=None)

    @property
    def ratio(self) -> float:
        """best certified upper / best lower (nan when either is missing)."""
        upper, lower = self.best_upper(), self.best_lower()
        if upper is None or lower is None or lower.value <= 0:
            return math.nan
        return upper.value / lower.value

    def to_json(self) -> dict[str, Any]:
        """README's schema: layer, tokens, norm, domain, results (method, kind, scope, value, certified, seconds),
        ratio, skipped (the methods left out or refused, and why)."""
        return {
            "layer": self.layer, "tokens": self.tokens, "norm": self.norm, "domain": self.domain,
            "results": [c.as_row() for c in self.certificates], "ratio": self.ratio, "skipped": list(self.skipped),
        }


def as_center(center: Any, weights: AttentionWeights) -> torch.Tensor:
    """An eps-ball centre X0 as a float64 CPU tensor of shape (N, D), or a clear error (shape, dtype, NaN)."""
    if isinstance(center, np.ndarray):
        if not (np.issubdtype(center.dtype, np.floating) or np.issubdtype(center.dtype, np.integer)) \
                or center.dtype == np.bool_:
            raise InvalidInputError(f"the eps-ball centre X0 must hold real numbers, got numpy dtype {center.dtype}")
        center = torch.from_numpy(np.array(center, dtype=np.float64))
    if not isinstance(center, torch.Tensor):
        raise InvalidInputError(f"the eps-ball centre X0 must be a torch.Tensor or numpy array of shape (N, D), "
                                f"got {type(center).__name__}")
    if center.is_complex() or center.dtype == torch.bool:
        raise InvalidInputError(f"the eps-ball centre X0 must hold real numbers, got dtype {center.dtype}")
    if center.ndim != 2 or center.shape[0] < 1 or center.shape[1] != weights.D:
        raise InvalidInputError(f"the eps-ball centre X0 must have shape (N, D) with D = {weights.D} and N >= 1, "
                                f"got {tuple(center.shape)}")
    center = center.detach().to("cpu", torch.float64)
    if not torch.isfinite(center).all():
        raise InvalidInputError("the eps-ball centre X0 has NaN or Inf entries")
    return center


def make_domain(weights: AttentionWeights, tokens: int | None, radius: float | None = None, center: Any = None,
                eps: float | None = None, eps_norm: str = "inf", domain: Domain | None = None) -> tuple[Domain, int]:
    """The domain and N from `certify_layer`'s arguments: at most one of ``domain``, ``radius``, ``center``/``eps``.

    Without any of them the domain is all of R^{N x D} (`Global`). With ``center`` (X0, shape (N, D)) and ``eps``
    it is `EpsBall(X0, eps, eps_norm)` and N is X0's number of rows (``tokens``, if given, must agree).
    """
    given = [name for name, value in (("domain", domain), ("radius", radius), ("center", center)) if value is not None]
    if len(given) > 1:
        raise InvalidInputError(f"give at most one of domain, radius and center/eps, got {given}")
    if (center is None) != (eps is None) and domain is None:
        raise InvalidInputError("an eps-ball needs both center (X0, shape (N, D)) and eps")
    if domain is None:
        if center is not None:
            domain = EpsBall(as_center(center, weights), float(eps), str(eps_norm))
        else:
            domain = Global() if radius is None else Ball(radius)
    elif not isinstance(domain, (Global, Ball, EpsBall)):
        raise InvalidInputError(f"domain must be certify.Global(), Ball(R) or EpsBall(X0, eps, p), got {domain!r}")
    if isinstance(domain, EpsBall):
        domain = dataclasses.replace(domain, center=as_center(domain.center, weights))
        N = domain.center.shape[0]
        if tokens is not None and tokens != N:
            raise InvalidInputError(f"tokens = {tokens!r} does not match the eps-ball centre's N = {N}")
        return domain, N
    if tokens is None:
        raise InvalidInputError("give the sequence length: tokens = N (or an eps-ball centre X0 of shape (N, D))")
    return domain, check_tokens(tokens)


def certify_layer(layer: torch.nn.Module | AttentionWeights, tokens: int | None = None, norm: str = "2",
                  radius: float | None = None, methods: Sequence[str] | str | None = None, lower: bool = True,
                  lower_options: dict[str, Any] | None = None, time_budget: float = 10.0,
                  progress: bool = False, *, center: Any = None, eps: float | None = None, eps_norm: str = "inf",
                  domain: Domain | None = None) -> Report:
    """Certify Lip_norm of an attention layer on sequences of ``tokens`` tokens.

    Args:
        layer: one of certify's attention modules, a ``torch.nn.MultiheadAttention`` (self-attention), or
            `AttentionWeights`.
        tokens: the sequence length N >= 1 (may be left out with an eps-ball: N is the centre's number of rows).
        norm: ``"2"`` or ``"inf"`` (on vec(X), MATH.md section 0).
        radius: if given, certify on the domain where every token has ||x_i||_2 <= radius. Dot-product and untied
            L2 attention, which are not globally Lipschitz, need this or an eps-ball.
        center, eps, eps_norm: certify on the eps-ball {X : ||vec(X - X0)||_p <= eps} around X0 = ``center``
            (a tensor or array of shape (N, D)), p = ``eps_norm`` (``"inf"`` or ``"2"``).
        domain: instead of radius or center/eps, a `certify.Global()`, `Ball(R)` or `EpsBall(X0, eps, p)`.
        methods: names from ``certify.bounds.METHODS`` (a list, or one name as a string), or ``"all"`` (default:
            every default method that applies).
        lower: also run the adversarial search for a lower bound on the same domain.
        time_budget: seconds for each method that searches or makes one long pass (branch and bound, taylor,
            streamed, and the adversarial lower bound); Ctrl-C inside a branch and bound keeps its bound. A
            one-pass method whose predicted time does not fit refuses before it starts (listed in
            ``Report.skipped`` with the budget it would need); taylor then leaves what is left of its budget to
            the streamed form, which certifies the same eps-ball matrix-free, more loosely.

    Refuses (`InvalidInputError`, before allocating) a run whose estimated memory exceeds what is available.
    """
    weights = as_weights(layer)
    check_norm(norm)
    domain, tokens = make_domain(weights, tokens, radius, center, eps, eps_norm, domain)
    if isinstance(methods, str):
        methods = [methods]
    if isinstance(domain, Global):
        require_global_lipschitz(weights)
    if methods is None or list(methods) == ["all"]:
        chosen = [m for m in METHODS.values()
                  if m.applies(weights, domain, tokens, norm) and (methods is not None or m.default)]
    else:
        unknown = [name for name in methods if name not in METHODS]
        if unknown:
            raise InvalidInputError(f"unknown method(s) {unknown}; known: {sorted(METHODS)}")
        chosen = [METHODS[name] for name in methods]
        inapplicable = [m.name for m in chosen if not m.applies(weights, domain, tokens, norm)]
        if inapplicable:
            raise InvalidInputError(
                f"method(s) {inapplicable} do not apply to {weights.kind!r} attention on domain {domain.scope} "
                f"in the {norm}-norm with N = {tokens}"
            )
    if not chosen:
        raise InvalidInputError(f"no certified method applies to {weights.kind!r} attention on domain {domain.scope}")
    restarts = (lower_options or {}).get("restarts", 24) if lower else None
    skipped: list[str] = []
    if methods is None or list(methods) == ["all"]:  # chosen for the user: leave out what cannot fit, and say so
        available = available_bytes()
        if available is not None:
            fitting = [m for m in chosen if method_floor_bytes(m.name, weights, tokens, domain) <= available]
            if fitting:
                skipped = [f"{m.name}: needs at least {format_bytes(method_floor_bytes(m.name, weights, tokens, domain))}"
                           f" (estimated before allocating), {format_bytes(available)} available"
                           for m in chosen if m not in fitting]
                chosen = fitting
    check_memory([m.name for m in chosen], weights, tokens, domain, restarts)
    certificates = []
    for m in chosen:
        began = time.perf_counter()
        try:
            certificates.append(m.compute(weights, tokens, norm, domain, time_budget=time_budget, progress=progress,
                                          lower_search=LOCAL_LOWER_SEARCH))
        except BudgetExceeded as error:  # a one-pass method that cannot finish in time certifies nothing
            if methods is not None and list(methods) != ["all"] and len(chosen) == 1:
                raise
            skipped.append(str(error))
            fallback = METHODS.get(m.fallback) if m.fallback else None
            left = time_budget - (time.perf_counter() - began)
            if fallback is None or fallback in chosen or not fallback.covers(weights, domain, norm) or left <= 0:
                continue
            try:  # the fallback on what is left of this method's budget
                certificates.append(fallback.compute(weights, tokens, norm, domain, time_budget=left,
                                                     progress=progress, lower_search=LOCAL_LOWER_SEARCH))
                skipped.append(f"{m.name}: {fallback.name} ran instead, on the {left:.1f} s left of its budget")
            except BudgetExceeded as fallback_error:
                skipped.append(str(fallback_error))
    if lower:
        options = {"seconds": time_budget, **(lower_options or {})}
        certificates.append(lower_bound(weights, tokens, norm, domain, progress=progress, **options))
    return Report(weights.describe(), tokens, norm, domain.scope, tuple(certificates), tuple(skipped))
