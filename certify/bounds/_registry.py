"""One registry of certified upper-bound methods, shared by the Python API and the CLI.

Each `Method` declares, as data, which attention kinds it covers, which domains and norms it needs, whether it
runs by default, and its guarantee. A global method also bounds every local domain (its certificate's scope stays
"global"). ``compute(weights, N, norm, domain, time_budget=..., progress=..., lower_search=...)``: methods that
search use the time budget; the closed forms ignore it. ``lower_search`` (`certify.adversarial.LOCAL_LOWER_SEARCH`)
steers the local branch and bound and is passed through, so that bounds never import the adversarial search.

Adding a bound: write it in its own file, in the sub-package of its MATH.md part (``closed_form/``, ``local/``,
``global_l2/``; a new part gets a new sub-package), as ``f(weights, N, norm, domain, ...) -> Certificate`` returning
a certified, rounded-up value; re-export it from that sub-package's ``__init__``; register it here with its kinds
and domains (it must not import ``certify.adversarial``: `tests/test_layout.py`); add a test that adversarial lower
bounds never exceed it and one that a deliberately wrong version fails. Forgetting the rounding or the test
fails silently: nothing else checks them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .._domain import Ball, Domain, EpsBall, Global
from .._result import Certificate
from ..attention import AttentionWeights
from ._branch_and_bound import branch_and_bound, global_bnb_applies
from .closed_form import castin_bound, factorised_bound, paper_bound
from .local import MEMORY_LIMIT, memory_estimate, resolve_seeds, streamed_bound, taylor_bound


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    kinds: tuple[str, ...]
    domains: tuple[type, ...]  # domain types it can certify; Global means "any domain, scope global"
    compute: Callable[..., Certificate]
    guarantee: str
    norms: tuple[str, ...] = ("2", "inf")
    default: bool = True  # part of the default set (every applicable default method)
    extra: Callable[[AttentionWeights, int, Domain], bool] = lambda weights, N, domain: True
    fallback: str | None = None  # run instead, on what is left of the budget, when this one raises BudgetExceeded

    def covers(self, weights: AttentionWeights, domain: Domain, norm: str = "2") -> bool:
        """The kind, domain and norm are ones this method can certify (`extra` aside)."""
        covered = Global in self.domains or isinstance(domain, self.domains)
        return weights.kind in self.kinds and covered and norm in self.norms

    def applies(self, weights: AttentionWeights, domain: Domain, N: int = 2, norm: str = "2") -> bool:
        return self.covers(weights, domain, norm) and self.extra(weights, N, domain)


METHODS: dict[str, Method] = {}


def enclosing_radius(domain: Ball | EpsBall) -> float:
    """R of the domain's per-token ball, or of a per-token ball containing an eps-ball (`EpsBall.enclosing_ball`):
    a bound on that larger domain holds on the eps-ball (its scope names the ball)."""
    return domain.radius if isinstance(domain, Ball) else domain.enclosing_ball().radius


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


register(Method("paper", ("l2",), (Global,), lambda w, N, norm, domain, **_: paper_bound(w, N, norm),
                "Theorem 3.2 of Kim et al. (2021)"))
register(Method("factorised", ("l2",), (Global,), lambda w, N, norm, domain, **_: factorised_bound(w, N, norm),
                "||G|| c(N, d) ||V|| with a certified universal constant (MATH.md section 2)"))
register(Method("castin", ("dp",), (Ball, EpsBall),
                lambda w, N, norm, domain, **_: castin_bound(w, N, enclosing_radius(domain), norm),
                "Castin, Ablin & Peyre (2024), tokens in a ball (for an eps-ball: the ball containing it)"))
register(Method("bnb", ("dp", "l2"), (Ball, EpsBall, Global),
                lambda w, N, norm, domain, **options: branch_and_bound(w, N, norm, domain, **options),
                "branch and bound: over boxes of X on a bounded domain, or over projected configurations for the "
                "global L2 constant (MATH.md section 7, proofs/tail_bound.py)",
                extra=lambda w, N, domain: not isinstance(domain, Global) or global_bnb_applies(w, N)))
register(Method("sdp", ("dp", "l2"), (Ball, EpsBall),
                lambda w, N, norm, domain, **options: branch_and_bound(w, N, norm, domain, sdp=True, **options),
                "local branch and bound with certified SDP norm bounds on the leading boxes (certify.sdp)",
                norms=("2",), default=False))
register(Method("taylor", ("dp", "l2"), (EpsBall,),
                lambda w, N, norm, domain, time_budget=None, **_: taylor_bound(w, N, norm, domain,
                                                                               time_budget=time_budget),
                "first-order Taylor form of J about the centre: ||J(X0)|| plus a certified remainder, exact as "
                "eps -> 0 (proofs/taylor_remainder.py); on a Ball(R) the branch and bound uses it per box",
                extra=lambda w, N, domain: memory_estimate(
                    N, w.D, seeds=resolve_seeds("auto", N, w.D, w.kind)) <= MEMORY_LIMIT,
                fallback="streamed"))
register(Method("streamed", ("dp",), (EpsBall,),
                lambda w, N, norm, domain, **options: streamed_bound(w, N, norm, domain, **options),
                "first-order Taylor form about the centre without materialising J: ||J(X0)|| streamed one query token "
                "at a time plus separable slope sums (MATH.md section 7); for layers too large for the taylor method",
                default=True,
                extra=lambda w, N, domain: memory_estimate(
                    N, w.D, seeds=resolve_seeds("auto", N, w.D, w.kind)) > MEMORY_LIMIT))
