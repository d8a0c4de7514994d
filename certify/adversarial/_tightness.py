"""The asymptotic-tightness experiment of Kim et al. Sec. 5.1 (MATH.md section 5), reproduced and extended.

For each configuration and sequence length N (or ball radius R), the best adversarial lower bound on Lip_p(F)
stands beside the certified upper bounds of the same scope, and their ratios:

- ``unit``: L2-MHA with D = H = 1 and unit weights (the paper's set-up), N = 2, 4, ..., max_tokens; bounds
  ``paper`` (Theorem 3.2) and ``factorised`` (||G|| c(N, d) ||V||);
- ``multihead``: L2-MHA with D = 8, H = 2 and seeded Gaussian weights (entries N(0, 1/D)); same bounds;
- ``dp``: DP-MHA (D = 2, H = 1, N = 8, seeded weights) on the ball ||x_i|| <= R for R = 1, 2, 4, ...: the lower
  bound keeps growing with R (Theorem 3.1 made visible) next to Castin et al.'s bound.

Optionally (``baseline=True``) the naive search (`naive_lower_bound`) runs with the same time budget.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from .._domain import Ball, Domain, Global
from .._errors import InvalidInputError
from ..attention import AttentionWeights
from ..bounds import METHODS
from ._naive import naive_lower_bound
from ._lower_search import LOCAL_LOWER_SEARCH
from ._search import lower_bound

CONFIGS = ("unit", "multihead", "dp")
DP_TOKENS = 8
METHODS_SHOWN = {"unit": ("paper", "factorised"), "multihead": ("paper", "factorised"), "dp": ("castin",)}


@dataclasses.dataclass(frozen=True)
class TightnessRow:
    config: str
    N: int
    radius: float | None
    norm: str
    lower: float
    uppers: dict[str, float]
    seconds: float
    found_in: str
    naive: float | None = None
    witness: list | None = dataclasses.field(default=None, repr=False)

    def ratio(self, method: str) -> float:
        """lower / upper for a method (nan when absent)."""
        upper = self.uppers.get(method)
        return self.lower / upper if upper else math.nan

    def to_json(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["ratios"] = {name: self.ratio(name) for name in self.uppers}
        return row

    @staticmethod
    def from_json(row: dict[str, Any]) -> "TightnessRow":
        """The row ``to_json`` wrote (its ``ratios`` are recomputed; non-finite numbers may come back as the strings
        ``write_json`` makes of them)."""
        number = lambda x: None if x is None else float(x)  # noqa: E731
        return TightnessRow(str(row["config"]), int(row["N"]), number(row["radius"]), str(row["norm"]),
                            float(row["lower"]), {str(k): float(v) for k, v in row["uppers"].items()},
                            float(row["seconds"]), str(row["found_in"]), number(row.get("naive")),
                            row.get("witness"))


@dataclasses.dataclass(frozen=True)
class TightnessPoint:
    """One independent unit of the sweep: a configuration at one N (or ball radius R) in one norm."""

    config: str
    N: int
    radius: float | None
    norm: str

    @property
    def key(self) -> str:
        """A stable name, e.g. ``unit/N=4/R=-/inf`` (the key of its row in a sweep checkpoint)."""
        return f"{self.config}/N={self.N}/R={'-' if self.radius is None else repr(self.radius)}/{self.norm}"


def config_weights(config: str, seed: int = 0) -> AttentionWeights:
    """The layer of a configuration (float64)."""
    g = torch.Generator().manual_seed(seed)
    if config == "unit":
        one = torch.ones(1, 1, 1, dtype=torch.float64)
        return AttentionWeights("l2", one, one, one, one[0])
    if config == "multihead":
        H, D, d = 2, 8, 4
        draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(D)  # noqa: E731
        W_Q = draw(H, D, d)
        return AttentionWeights("l2", W_Q, W_Q, draw(H, D, d), draw(H * d, D))
    if config == "dp":
        H, D, d = 1, 2, 2
        draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(D)  # noqa: E731
        return AttentionWeights("dp", draw(H, D, d), draw(H, D, d), draw(H, D, d), draw(H * d, D))
    raise InvalidInputError(f"config must be one of {CONFIGS}, got {config!r}")


def default_points(config: str, max_tokens: int) -> list[tuple[int, float | None]]:
    """(N, R) pairs: N = 2, 4, ..., max_tokens for L2 configs; R = 1, 2, 4, ..., 64 at N = 8 for dp."""
    if config == "dp":
        return [(DP_TOKENS, float(2**k)) for k in range(7)]
    points, N = [], 2
    while N <= max_tokens:
        points.append((N, None))
        N *= 2
    return points


def shown_methods(config: str, methods: tuple[str, ...] | None) -> tuple[str, ...]:
    """The certified methods a row of ``config`` compares with (default `METHODS_SHOWN`); unknown names refused."""
    names = METHODS_SHOWN[config] if methods is None else tuple(methods)
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise InvalidInputError(f"unknown method(s) {unknown}; known: {sorted(METHODS)}")
    return names


def tightness_points(config: str, norms: tuple[str, ...] = ("inf", "2"), max_tokens: int = 1024,
                     points: list[tuple[int, float | None]] | None = None) -> list[TightnessPoint]:
    """The units of one configuration's sweep, in the order of its table: each (N or R) in ``norms`` order."""
    if config not in CONFIGS:
        raise InvalidInputError(f"config must be one of {CONFIGS}, got {config!r}")
    return [TightnessPoint(config, N, radius, norm) for N, radius in points or default_points(config, max_tokens)
            for norm in norms]


def tightness_row(point: TightnessPoint, seconds: float | None = 20.0, baseline: bool = False, seed: int = 0,
                  device: str | None = None, progress: bool = False, methods: tuple[str, ...] | None = None,
                  **search: Any) -> TightnessRow:
    """One row of the sweep, a pure function of its arguments (with ``seconds`` None; a time budget makes the search
    depend on the machine's speed): the lower bound of ``lower_bound``, every applicable certified upper bound, and
    the naive baseline with the same wall time. The Dask engine runs it as one work unit
    (``certify.distributed.dask_tightness``)."""
    names = shown_methods(point.config, methods)
    if baseline and point.radius is not None:
        raise InvalidInputError("the naive baseline searches the whole space; use it with L2 configs")
    weights = config_weights(point.config, seed)
    domain: Domain = Global() if point.radius is None else Ball(point.radius)
    N, norm = point.N, point.norm
    lower = lower_bound(weights, N, norm, domain, seed=seed, seconds=seconds, device=device, progress=progress,
                        **search)
    uppers = {name: METHODS[name].compute(weights, N, norm, domain, lower_search=LOCAL_LOWER_SEARCH).value
              for name in names if METHODS[name].applies(weights, domain, N, norm)}
    naive = None
    if baseline:
        naive = naive_lower_bound(weights, N, norm, lower.seconds, seed=seed, device=lower.details["device"]).value
    return TightnessRow(point.config, N, point.radius, norm, lower.value, uppers, lower.seconds,
                        lower.details["found_in"], naive, lower.details["witness"])


def tightness(config: str = "unit", norms: tuple[str, ...] = ("inf", "2"), max_tokens: int = 1024,
              seconds: float | None = 20.0, baseline: bool = False, seed: int = 0, device: str | None = None,
              progress: bool = False, points: list[tuple[int, float | None]] | None = None,
              on_row: Callable[[TightnessRow], None] | None = None, methods: tuple[str, ...] | None = None,
              **search: Any) -> list[TightnessRow]:
    """One row per (N or R, norm): the lower bound, every applicable certified upper bound, and the naive baseline.

    ``seconds`` is the search budget per row (None: run ``restarts`` x ``steps`` from ``search``); the naive
    baseline gets the wall time the search actually used. ``methods``: certified methods to compare with (default
    `METHODS_SHOWN`, the closed-form ones; the slower branch-and-bound methods can be named here). The rows are
    ``tightness_row`` of each of ``tightness_points``, in order (``certify.distributed.dask_tightness`` runs them
    on a Dask cluster, resumably).
    """
    shown_methods(config, methods)
    config_weights(config, seed)  # an unknown config is refused before any work
    rows = []
    for point in tightness_points(config, norms, max_tokens, points):
        row = tightness_row(point, seconds=seconds, baseline=baseline, seed=seed, device=device, progress=progress,
                            methods=methods, **search)
        if on_row is not None:
            on_row(row)
        rows.append(row)
    return rows


def check_against_uppers(rows: list[TightnessRow]) -> None:
    """Raise AssertionError if any lower bound exceeds a certified upper bound (a soundness failure)."""
    for row in rows:
        for name, upper in row.uppers.items():
            if row.lower > upper:
                raise AssertionError(f"lower bound {row.lower} > certified {name} bound {upper} at N={row.N}, "
                                     f"norm {row.norm}, R={row.radius}: a bound or the search is wrong")
