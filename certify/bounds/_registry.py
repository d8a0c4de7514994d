"""One registry of certified upper-bound methods, shared by the Python API and the CLI.

Each `Method` declares, as data, which attention kinds it covers, which domains it needs, and its guarantee.
A global method also bounds every local domain (its certificate's scope stays "global").

Adding a bound: write it in its own file as ``f(weights, N, norm, domain) -> Certificate`` returning a
certified, rounded-up value; register it here with its kinds and domains; add a test that adversarial lower
bounds never exceed it (tests/test_bounds.py) and one that a deliberately wrong version fails.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .._domain import Ball, Domain, Global
from .._result import Certificate
from ..attention import AttentionWeights
from ._castin import castin_bound
from ._factorised import factorised_bound
from ._paper import paper_bound


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    kinds: tuple[str, ...]
    domains: tuple[type, ...]  # domain types it can certify; Global means "any domain, scope global"
    compute: Callable[[AttentionWeights, int, str, Domain], Certificate]
    guarantee: str

    def applies(self, weights: AttentionWeights, domain: Domain) -> bool:
        return weights.kind in self.kinds and (Global in self.domains or isinstance(domain, self.domains))


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


register(Method("paper", ("l2",), (Global,), lambda w, N, norm, domain: paper_bound(w, N, norm),
                "Theorem 3.2 of Kim et al. (2021)"))
register(Method("factorised", ("l2",), (Global,), lambda w, N, norm, domain: factorised_bound(w, N, norm),
                "||G|| c(N, d) ||V|| with a certified universal constant (MATH.md section 2)"))
register(Method("castin", ("dp",), (Ball,), lambda w, N, norm, domain: castin_bound(w, N, domain.radius, norm),
                "Castin, Ablin & Peyre (2024), tokens in a ball"))
