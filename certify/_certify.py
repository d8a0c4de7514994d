"""The entry point: `certify_layer` runs every applicable certified method and an adversarial lower bound on one
layer, and returns a `Report` (a frozen dataclass of `Certificate`s with the best-upper / best-lower ratio).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

from ._domain import Ball, Domain, Global
from ._errors import InvalidInputError
from ._result import Certificate
from .adversarial import lower_bound
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
        """README's schema: layer, tokens, norm, domain, results (method, kind, scope, value, certified, seconds)."""
        return {
            "layer": self.layer, "tokens": self.tokens, "norm": self.norm, "domain": self.domain,
            "results": [c.as_row() for c in self.certificates], "ratio": self.ratio,
        }


def make_domain(radius: float | None) -> Domain:
    return Global() if radius is None else Ball(radius)


def certify_layer(layer: torch.nn.Module | AttentionWeights, tokens: int, norm: str = "2",
                  radius: float | None = None, methods: Sequence[str] | None = None, lower: bool = True,
                  lower_options: dict[str, Any] | None = None, time_budget: float = 10.0,
                  progress: bool = False) -> Report:
    """Certify Lip_norm of an attention layer on sequences of ``tokens`` tokens.

    Args:
        layer: one of certify's attention modules, a ``torch.nn.MultiheadAttention`` (self-attention), or
            `AttentionWeights`.
        tokens: the sequence length N >= 1.
        norm: ``"2"`` or ``"inf"`` (on vec(X), MATH.md section 0).
        radius: if given, certify on the domain where every token has ||x_i||_2 <= radius. Required for
            dot-product and untied L2 attention, which are not globally Lipschitz.
        methods: names from ``certify.bounds.METHODS``, or ``["all"]`` (default: every default method that applies).
        lower: also run the adversarial search for a lower bound on the same domain.
        time_budget: seconds for each searching method (branch and bound, and the adversarial lower bound);
            Ctrl-C inside a branch and bound keeps its bound.
    """
    weights = as_weights(layer)
    check_tokens(tokens)
    check_norm(norm)
    domain = make_domain(radius)
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
    certificates = [m.compute(weights, tokens, norm, domain, time_budget=time_budget, progress=progress)
                    for m in chosen]
    if lower:
        options = {"seconds": time_budget, **(lower_options or {})}
        certificates.append(lower_bound(weights, tokens, norm, domain, progress=progress, **options))
    return Report(weights.describe(), tokens, norm, domain.scope, tuple(certificates))
