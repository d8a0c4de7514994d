"""The `bnb` and `sdp` methods: certified bounds by branch and bound, local or global (MATH.md section 7).

- On a bounded domain (`Ball`, `EpsBall`) both run `local_bound`: branch and bound over boxes of X with interval
  enclosures of J. `bnb` bounds each box's enclosure by the cheap proven norms only; `sdp` also refines the leading
  boxes with the certified SDP norm bound (`certify.sdp`) up to N D = 64.
- Globally, for tied L2 attention with head width d = 1 and N <= 6, or d = 2 and N <= 4, `bnb` computes the universal constant
  c_p(N, d) by branch and bound over projected configurations (`global_l2_constant`, proof in
  `proofs/tail_bound.py`) within the time budget, and returns the factorised bound with it. The shipped table is
  used for the smaller N of the recursion and wherever it is already at least as tight.
"""

from __future__ import annotations

import dataclasses
import time

from .._domain import Domain, Global
from .._errors import InvalidInputError
from .._result import Certificate
from ..attention import AttentionWeights
from .closed_form import certified_table, factorised_weight_factors, require_global_lipschitz, universal_constant
from .global_l2 import global_l2_constant
from .local import LowerSearch, local_bound

GLOBAL_MAX_TOKENS = {1: 6, 2: 4, 3: 3}
"""Head width d -> the largest N the global search domains cover (`global_l2._domain`)."""


def global_bnb_applies(weights: AttentionWeights, N: int) -> bool:
    return weights.kind == "l2" and 2 <= N <= GLOBAL_MAX_TOKENS.get(weights.d, 0)


def global_bnb_bound(weights: AttentionWeights, N: int, norm: str, time_budget: float = 10.0,
                     progress: bool = False) -> Certificate:
    """||G|| c_p(N, d) ||V|| with c_p(N, d) certified by branch and bound now (or the shipped table if tighter)."""
    start = time.perf_counter()
    require_global_lipschitz(weights)
    if not global_bnb_applies(weights, N):
        raise InvalidInputError(
            f"global branch and bound covers tied L2 heads with (head width d: largest N) {GLOBAL_MAX_TOKENS}; "
            f"got N = {N}, d = {weights.d} (use the factorised bound)"
        )
    table = certified_table()
    smaller = {s: table[(s, weights.d, norm)]["upper"] for s in range(2, N) if (s, weights.d, norm) in table}
    shipped = universal_constant(N, weights.d, norm)
    try:
        result = global_l2_constant(N, weights.d, norm, time_budget=time_budget, smaller=smaller,
                                    progress=(lambda text: print(text, flush=True)) if progress else None)
    except KeyboardInterrupt:  # interrupted before the branch and bound (which keeps its own partial bound) began
        result = None
    if result is not None and result.upper <= shipped.value:
        constant, source = result.upper, "branch and bound now"
        if result.details.get("interrupted"):
            source += " (interrupted: the bound certified so far)"
    else:
        constant, source = shipped.value, shipped.source + (" (search interrupted)" if result is None else "")
    left, right = factorised_weight_factors(weights, norm)
    return Certificate(
        value=(left * constant * right).round_up("the branch-and-bound bound"), kind="upper", certified=True,
        method="bnb", scope=Global().scope,
        norm=norm, seconds=time.perf_counter() - start,
        message=f"||G|| c_{norm}(N, d) ||V|| with c from the {source} (proofs/tail_bound.py)",
        details={"constant": constant, "constant_source": source,
                 **({} if result is None else {"constant_lower": result.lower, "boxes": result.boxes,
                                               "complete": result.complete})},
    )


def branch_and_bound(weights: AttentionWeights, N: int, norm: str, domain: Domain, *, sdp: bool = False,
                     time_budget: float = 10.0, progress: bool = False,
                     lower_search: LowerSearch | None = None) -> Certificate:
    """Local branch and bound on a bounded domain, or the global L2 constant by branch and bound.

    lower_search: steers the local search (`local_bound`; `certify.adversarial.LOCAL_LOWER_SEARCH`)."""
    if isinstance(domain, Global):
        return global_bnb_bound(weights, N, norm, time_budget, progress)
    certificate = local_bound(weights, N, norm, domain, time_budget, sdp_max_size=64 if sdp else 0,
                              quiet=not progress, lower_search=lower_search)
    return dataclasses.replace(certificate, method="sdp" if sdp else "bnb")
