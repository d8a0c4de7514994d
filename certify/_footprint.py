"""Memory floors: refuse a certification that cannot fit before it allocates anything.

Each floor is a lower bound on the bytes one array of the computation needs (float64), so a refusal never turns
away a run that would have fitted; a run under the floor may still need several times more (autograd keeps
intermediates). The closed forms (paper, factorised, castin) use O(H D d) memory whatever N is: they are the
matrix-free path for long sequences.

- local branch and bound (``bnb`` / ``sdp`` on a ball or eps-ball): where N D <= DENSE_LOWER_COORDINATES its first
  step evaluates 64 dense Jacobians of size (N D)^2 (`certify.bounds.local._search.local_bound`); above, it bounds
  boxes by the structured norm bound alone once the entrywise enclosure and the interval softmax do not fit
  (`_search._set_up`: O(N D + N^2) memory per box), so its floor is one box and one N x N array of P's bounds
  (2 N D + N^2 floats);
- global branch and bound: applies only for N <= 6 (cheap);
- adversarial lower bound: the free phase runs ``max(2, min(restarts, FREE_BATCH_ENTRIES / (N D)^2))`` inputs at
  once, each with H attention matrices of N^2 entries (times d for L2 attention: the pairwise differences
  x_i W^Q - x_j W^K, `certify.attention.l2_scores`).
"""

from __future__ import annotations

import os

from ._domain import Domain, Global
from ._errors import InvalidInputError
from .adversarial._search import FREE_BATCH_ENTRIES
from .bounds.local._search import DENSE_LOWER_COORDINATES
from .attention import AttentionWeights

FLOAT64_BYTES = 8
LOCAL_SAMPLES = 64  # inputs whose dense Jacobians the local branch and bound evaluates first


def method_floor_bytes(name: str, weights: AttentionWeights, N: int, domain: Domain) -> int:
    """A lower bound on the memory certified method ``name`` needs for N tokens (0: independent of N)."""
    if name in ("bnb", "sdp") and not isinstance(domain, Global):
        if N * weights.D <= DENSE_LOWER_COORDINATES:
            return LOCAL_SAMPLES * (N * weights.D) ** 2 * FLOAT64_BYTES
        return (2 * N * weights.D + N * N) * FLOAT64_BYTES
    if name == "streamed":
        from .bounds.local._streamed import memory_estimate as streamed_memory

        return streamed_memory(N, weights.D, weights.H, weights.d)
    return 0


def lower_bound_floor_bytes(weights: AttentionWeights, N: int, restarts: int = 24) -> int:
    """A lower bound on the memory of the adversarial lower bound's free phase for N tokens."""
    batch = max(2, min(restarts, FREE_BATCH_ENTRIES // (N * weights.D) ** 2))
    per_pair = 1 if weights.kind == "dp" else weights.d
    return batch * weights.H * N * N * per_pair * FLOAT64_BYTES


def available_bytes() -> int | None:
    """Memory available to this process now (Linux MemAvailable, else free physical pages; None if unknown)."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024 or unit == "PiB":
            return f"{count:.3g} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def check_memory(method_names: list[str], weights: AttentionWeights, N: int, domain: Domain,
                 lower_restarts: int | None, available: int | None = None) -> None:
    """Refuse (`InvalidInputError`, with the estimates) if any part's memory floor exceeds the available memory.

    ``lower_restarts``: the adversarial lower bound's restarts, or None when it does not run.
    """
    available = available_bytes() if available is None else available
    if available is None:
        return
    needs = {name: method_floor_bytes(name, weights, N, domain) for name in method_names}
    if lower_restarts is not None:
        needs["adversarial lower bound"] = lower_bound_floor_bytes(weights, N, lower_restarts)
    too_big = {name: need for name, need in needs.items() if need > available}
    if too_big:
        parts = ", ".join(f"{name} needs at least {format_bytes(need)}" for name, need in too_big.items())
        raise InvalidInputError(
            f"N = {N} tokens is too long for this machine: {parts} (estimated before allocating), and "
            f"{format_bytes(available)} is available. The closed-form methods (paper, factorised for L2; castin "
            "for dot-product on a ball) need no N-sized memory: choose them with --method (methods= in Python) "
            "and skip the lower bound (--no-lower, lower=False), or use fewer tokens."
        )
