"""The adversarial search: maximise ||J_F(X)||_p over X in a domain (MATH.md sections 5 and 7).

Three phases share one time budget, each a batched projected Adam ascent (all restarts in one tensor, cosine
learning-rate decay):

1. **Clusters** (tied L2, permutation-invariant domains, N >= 3): K distinct tokens with multiplicities m summing
   to N, searched exactly through the K D x K D reduced Jacobian (`_clusters.py`): first with real m (a smooth
   relaxation), then with m rounded to integers. Cheap for any N, and the 2-norm maximisers found this way have
   this shape (two large clusters and one token between them).
2. **Free** search over all N D coordinates from random starts at several scales, the structured starts of
   `_starts.py` (Lemma / Castin) and the expanded cluster witnesses.
3. **Polish**: the best input and jittered copies, with a small learning rate.

Objectives (`_objectives.py`): inf-norm by row block 0 over permutation-invariant domains; 2-norm by the exact
SVD up to N D = ``DENSE_TWO_NORM``, else matrix-free power iteration with JVP/VJP. The best input is the witness;
its value is recomputed in float64 by `attained_norm`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Callable

import torch
from tqdm import tqdm

from .._domain import Ball, Domain, EpsBall, Global
from .._errors import InvalidInputError
from .._progress import progress_bar
from .._result import Certificate
from ..attention import AttentionWeights, check_tokens
from ..jacobian import check_norm
from ._attained import DENSE_LIMIT, attained_norm
from ._clusters import cluster_norm, expand, round_multiplicities
from ._domains import natural_scale, project, starting_points, symmetric
from ._objectives import PowerIteration, dense_norm, row_inf_norm
from ._starts import castin_starts, lemma_starts

DENSE_TWO_NORM = 64
FREE_BATCH_ENTRIES = 2**22  # cap on restarts * (N D)^2 in the free phase, so one step stays short at large N
CLUSTER_SIZES = (2, 3, 4, 6)
Objective = Callable[[torch.Tensor], torch.Tensor]


@functools.cache
def _warm_up() -> None:
    """Construct one Adam optimiser: the first construction in a process imports torch._dynamo (seconds)."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def default_device() -> torch.device:
    """CUDA when available, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclasses.dataclass
class _Best:
    value: float = -math.inf
    X: torch.Tensor | None = None
    phase: str = ""
    multiplicities: list[int] | None = None

    def offer(self, values: torch.Tensor, X: torch.Tensor, phase: str, multiplicities=None) -> None:
        top = int(values.argmax())
        if float(values[top]) > self.value:
            self.value, self.X, self.phase = float(values[top]), X[top].detach().clone(), phase
            self.multiplicities = None if multiplicities is None else multiplicities[top].round().long().tolist()


class _Clock:
    def __init__(self, seconds: float | None, bar: tqdm):
        self.start, self.seconds, self.bar = time.perf_counter(), seconds, bar
        self.evaluations: dict[str, int] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def past(self, fraction: float) -> bool:
        return self.seconds is not None and self.elapsed() > fraction * self.seconds

    def tick(self, best: _Best) -> None:
        self.bar.update(1)
        if self.bar.n % 10 == 0:
            self.bar.set_postfix(best=f"{best.value:.6g}", refresh=False)


def _ascend(params: list[torch.Tensor], objective: Callable[[], torch.Tensor], steps: int, learning_rate: float,
            after_step: Callable[[], None], clock: _Clock, until: float, on_values: Callable[[torch.Tensor], None],
            best: _Best, phase: str, share: float = 1.0) -> None:
    """Projected Adam ascent on objective() (B,) over params, cosine-decayed to 1e-3 of the rate.

    The schedule runs on the larger of step/steps and the fraction used of this ascent's time (``share`` of what
    is left before ``until`` times the budget), so the decay completes before the deadline.
    """
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    budget = None if clock.seconds is None else max(until * clock.seconds - clock.elapsed(), 0.0) * share
    begin = time.perf_counter()
    for step in range(steps + 1):
        values = objective()
        on_values(values.detach())
        clock.evaluations[phase] = clock.evaluations.get(phase, 0) + values.shape[0]
        fraction = step / max(steps, 1)
        if step == 0:
            begin = time.perf_counter()  # the first evaluation may include one-off warm-up costs
        elif budget is not None:
            fraction = max(fraction, (time.perf_counter() - begin) / budget if budget > 0 else 1.0)
        if step == steps or fraction >= 1 or clock.past(until):
            break
        for group in optimizer.param_groups:
            group["lr"] = learning_rate * (1e-3 + (1 - 1e-3) * (1 + math.cos(math.pi * fraction)) / 2)
        optimizer.zero_grad()
        (-values.sum()).backward()
        optimizer.step()
        with torch.no_grad():
            after_step()
        clock.tick(best)


def _objective(weights: AttentionWeights, norm: str, domain: Domain, shape: torch.Size,
               generator: torch.Generator) -> Objective:
    N, D = shape[1], shape[2]
    if norm == "inf":
        if symmetric(domain):
            return lambda X: row_inf_norm(X, weights, 0)
        if N * D <= DENSE_LIMIT:
            return lambda X: dense_norm(X, weights, "inf")
        return lambda X: torch.stack([row_inf_norm(X, weights, t) for t in range(N)]).amax(0)
    if N * D <= DENSE_TWO_NORM:
        return lambda X: dense_norm(X, weights, "2")
    power = PowerIteration(shape, generator, weights.dtype, weights.W_Q.device)
    return lambda X: power.objective(X, weights)


def _cluster_phase(w: AttentionWeights, N: int, norm: str, domain: Domain, restarts: int, steps: int,
                   learning_rate: float, generator: torch.Generator, clock: _Clock, until: float,
                   best: _Best) -> list[torch.Tensor]:
    """Clustered inputs for K in CLUSTER_SIZES (K < N); returns the best expanded witness for each K."""
    found = []
    scale = natural_scale(w)
    sizes = [K for K in CLUSTER_SIZES if K < N]
    for k, K in enumerate(sizes):
        if clock.past(until):
            break
        c0 = torch.randn(restarts, K, w.D, generator=generator, dtype=torch.float64) * 1.5 * scale
        theta0 = torch.randn(restarts, K, generator=generator, dtype=torch.float64)
        c = project(c0, domain).to(w.W_Q).requires_grad_(True)
        theta = theta0.to(w.W_Q).requires_grad_(True)
        relaxed = lambda: 1 + (N - K) * torch.softmax(theta, -1)  # noqa: E731
        after = lambda: c.copy_(project(c, domain))  # noqa: E731
        half = max(steps // 2, 1)
        _ascend([c, theta], lambda: cluster_norm(c, relaxed(), w, norm), half, learning_rate, after, clock,
                until, lambda v: None, best, "clusters", 1 / (2 * (len(sizes) - k)))
        m = round_multiplicities(relaxed().detach(), N)
        local = _Best()
        _ascend([c], lambda: cluster_norm(c, m, w, norm), half, learning_rate, after, clock, until,
                lambda v: local.offer(v, c, f"clusters K={K}", m), best, "clusters",
                1 / (2 * (len(sizes) - k) - 1))
        if local.X is not None:
            counts = torch.tensor([local.multiplicities])
            X = expand(local.X.to(device="cpu", dtype=torch.float64), counts[0])
            best.offer(torch.tensor([local.value], dtype=torch.float64), X[None], local.phase, counts)
            found.append(X)
    return found


def _free_starts(w64: AttentionWeights, N: int, domain: Domain, restarts: int, generator: torch.Generator,
                 seeds: list[torch.Tensor]) -> torch.Tensor:
    """The seed inputs (jittered) first, then a quarter structured (Lemma for L2, Castin for DP), then random."""
    structured = max(2, restarts // 4)
    if isinstance(domain, EpsBall) or N < 2:
        special = starting_points(w64, N, domain, structured, generator)
    elif w64.kind == "dp":
        special = castin_starts(w64, N, domain, structured, generator)
    else:
        special = project(lemma_starts(w64, N, structured, generator), domain)
    jittered = [project(X[None] + 0.01 * natural_scale(w64) * torch.randn(X[None].shape, generator=generator,
                                                                               dtype=torch.float64), domain)
                for X in seeds]
    parts = [*jittered, special]
    rest = restarts - sum(len(p) for p in parts)
    if rest > 0:
        parts.append(starting_points(w64, N, domain, rest, generator))
    return torch.cat(parts)[: max(restarts, 1)]


def lower_bound(weights: AttentionWeights, N: int, norm: str, domain: Domain = Global(), restarts: int = 24,
                steps: int = 300, learning_rate: float = 0.05, seed: int = 0, seconds: float | None = None,
                progress: bool = False, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float64, clusters: bool = True) -> Certificate:
    """max ||J_F(X)||_norm over X in the domain, by batched projected Adam; the best X is kept as the witness.

    Args:
        weights: the layer. N: sequence length. norm: ``"2"`` or ``"inf"``. domain: `Global`, `Ball`, `EpsBall`.
        restarts: batch size of each ascent (all restarts run as one tensor computation).
        steps: Adam steps per free round and for the polish; each cluster size gets steps/2 relaxed and steps/2
            with integer multiplicities (so without ``seconds`` the cost is about (2 + #sizes) * steps steps).
        learning_rate: relative to the layer's natural input scale (`natural_scale`).
        seed: seeds every random start; without ``seconds`` the result is reproducible.
        seconds: time budget for the whole search: clusters until 40% of it, free rounds (each taking half the
            time left) until 80-85%, then the polish; each ascent's schedule is compressed to fit.
        device: default CUDA when available; dtype: float64 or float32 for the search.
        clusters: run the cluster phase (tied L2 on a permutation-invariant domain).

    Returns a lower-bound `Certificate` (never certified) whose value is ||J(X*)||_norm recomputed in float64 at
    ``details["witness"]`` = X*.
    """
    check_tokens(N)
    check_norm(norm)
    if restarts < 1 or steps < 0:
        raise InvalidInputError(f"need restarts >= 1 and steps >= 0, got restarts={restarts}, steps={steps}")
    if dtype not in (torch.float32, torch.float64):
        raise InvalidInputError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if isinstance(domain, EpsBall) and tuple(domain.center.shape) != (N, weights.D):
        raise InvalidInputError(f"the eps-ball centre must have shape {(N, weights.D)}, got "
                                f"{tuple(domain.center.shape)}")
    _warm_up()  # a one-off import cost, kept out of the time budget
    device = default_device() if device is None else torch.device(device)
    w64 = weights.to(device="cpu", dtype=torch.float64)
    w = weights.to(dtype, device)
    if isinstance(domain, EpsBall):
        domain = dataclasses.replace(domain, center=domain.center.to(dtype=dtype, device=device))
    generator = torch.Generator().manual_seed(seed)
    lr = learning_rate * natural_scale(w64)
    if isinstance(domain, Ball):
        lr = min(lr, learning_rate * domain.radius)
    best = _Best()
    total = None if seconds is not None else steps * (len(CLUSTER_SIZES) + 2)
    bar = progress_bar(progress, total=total, desc=f"lower bound ({norm}-norm, N={N})", leave=False)
    clock = _Clock(seconds, bar)
    phases: dict[str, float] = {}

    seeds: list[torch.Tensor] = []
    if clusters and w.kind == "l2" and symmetric(domain) and N >= 3:
        seeds = [X.to(device="cpu", dtype=torch.float64) for X in
                 _cluster_phase(w, N, norm, domain, restarts, steps, lr, generator, clock, 0.4, best)]
        phases["clusters"] = best.value

    free_restarts = max(2, min(restarts, FREE_BATCH_ENTRIES // (N * w.D) ** 2))
    rounds = 0
    while rounds == 0 or (seconds is not None and not clock.past(0.8)):
        starts = _free_starts(w64, N, domain, free_restarts, generator, seeds if rounds == 0 else [])
        X = starts.to(dtype=dtype, device=device).requires_grad_(True)
        objective = _objective(w, norm, domain, X.shape, generator)
        _ascend([X], lambda: objective(X), steps, lr, lambda: X.copy_(project(X, domain)), clock, 0.85,
                lambda v: best.offer(v, X, "free"), best, "free", 0.5)
        rounds += 1
    phases["free"] = best.value

    if best.X is not None and steps > 0 and not clock.past(0.97):
        count = max(2, min(free_restarts, 8))
        base = best.X.to(device="cpu", dtype=torch.float64)
        noise = torch.randn((count, *base.shape), generator=generator, dtype=torch.float64)
        noise[0] = 0
        X = project(base[None] + 1e-3 * natural_scale(w64) * noise, domain).to(dtype=dtype, device=device)
        X.requires_grad_(True)
        objective = _objective(w, norm, domain, X.shape, generator)
        _ascend([X], lambda: objective(X), steps, 0.1 * lr, lambda: X.copy_(project(X, domain)), clock, 1.0,
                lambda v: best.offer(v, X, "polish"), best, "free")
        phases["polish"] = best.value
    bar.close()

    witness = best.X.to(device="cpu", dtype=torch.float64)
    value, how = attained_norm(witness, w64, norm)
    return Certificate(
        value=value, kind="lower", certified=False, method="adversarial", scope=domain.scope, norm=norm,
        seconds=clock.elapsed(),
        message=f"attained at the stored witness X* ({how})",
        details={"witness": witness.tolist(), "search_value": best.value, "found_in": best.phase,
                 "multiplicities": best.multiplicities, "phases": phases, "restarts": restarts, "steps": steps,
                 "rounds": rounds, "evaluations": clock.evaluations, "seed": seed, "device": str(device),
                 "dtype": str(dtype).replace("torch.", "")},
    )
