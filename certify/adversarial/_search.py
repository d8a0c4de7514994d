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
from ..attention import AttentionWeights, attention_forward, check_tokens, jacobian_equivalent
from ..jacobian import check_norm
from ._attained import DENSE_LIMIT, DENSE_TIMED_LIMIT, ROW_CHUNK, attained_norm, dense_attained
from ._clusters import cluster_norm, expand, round_multiplicities
from ._eps_ball import applies as eps_ball_applies
from ._eps_ball import eps_ball_ascent
from ._domains import cpu64, natural_scale, project, starting_points, symmetric
from ._objectives import PowerIteration, dense_norm, row_block, row_inf_norm
from ._starts import castin_starts, directions, lemma_starts, rank_one_starts

DENSE_TWO_NORM = 64
FREE_BATCH_ENTRIES = 2**22  # cap on restarts * (N D)^2 in the free phase, so one step stays short at large N
CLUSTER_SIZES = (2, 3, 4, 6)
CLUSTER_MAX_COORDINATES = 1024  # K D above this: the reduced K D x K D SVD per step is too slow for a search
STEP_SHARE = 0.02  # with a budget, the free-phase batch is sized so that one step takes about this share of it
MIN_STEP_SECONDS = 0.05  # ... but never below this (small sizes are overhead-bound: batching is nearly free)
ASCENT_SHARE = 0.4  # on a dense-affordable eps-ball, this share of the budget goes to `eps_ball_ascent` first
POLISH_STEPS = 2  # the polish runs this many times ``steps`` (its share of the budget is 45% of the search)
FINAL_SHARE = 0.05  # at least this share of the budget is kept for the float64 recomputation at the witness
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
    v: torch.Tensor | None = None  # the power iteration's right vector at X (2-norm, matrix-free): a warm start

    def keep_vector(self, values: torch.Tensor, power: PowerIteration | None) -> None:
        """After an `offer` from a power-iteration objective: keep the vector of the batch's best input."""
        if power is not None and self.X is not None:
            top = int(values.argmax())
            if float(values[top]) >= self.value:
                self.v = power.v[top].detach().clone()

    def offer(self, values: torch.Tensor, X: torch.Tensor, phase: str, multiplicities=None) -> None:
        top = int(values.argmax())
        if float(values[top]) > self.value:
            self.value, self.X, self.phase = float(values[top]), X[top].detach().clone(), phase
            self.multiplicities = None if multiplicities is None else multiplicities[top].round().long().tolist()


class _Clock:
    """Elapsed time against the search's share of the budget; ``until`` fractions refer to ``seconds``.

    ``cost`` holds the measured seconds of the last step of each ascent kind, so that no step starts when it
    would end past its deadline (the check runs before every evaluation, the first included, from an estimate).
    """

    def __init__(self, seconds: float | None, bar: tqdm, start: float | None = None):
        self.start, self.seconds, self.bar = time.perf_counter() if start is None else start, seconds, bar
        self.evaluations: dict[str, int] = {}
        self.stopped = "steps"

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def past(self, fraction: float) -> bool:
        return self.seconds is not None and self.elapsed() > fraction * self.seconds

    def fits(self, cost: float, fraction: float) -> bool:
        """Whether work of ``cost`` seconds started now ends before ``fraction`` of the budget."""
        if self.seconds is None:
            return True
        if self.elapsed() + cost > fraction * self.seconds:
            self.stopped = "time"
            return False
        return True

    def tick(self, best: _Best) -> None:
        self.bar.update(1)
        if self.bar.n % 10 == 0:
            self.bar.set_postfix(best=f"{best.value:.6g}", refresh=False)


def _ascend(params: list[torch.Tensor], objective: Callable[[], torch.Tensor], steps: int, learning_rate: float,
            after_step: Callable[[], None], clock: _Clock, until: float, on_values: Callable[[torch.Tensor], None],
            best: _Best, phase: str, share: float = 1.0, estimate: float = 0.0) -> None:
    """Projected Adam ascent on objective() (B,) over params, cosine-decayed to 1e-3 of the rate.

    The schedule runs on the larger of step/steps and the fraction used of this ascent's time (``share`` of what
    is left before ``until`` times the budget), so the decay completes before the deadline. Before every
    evaluation the clock checks that one more step (``estimate`` seconds for the first, then the measured cost of
    the last) ends before ``until``; otherwise the ascent stops.
    """
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    budget = None if clock.seconds is None else max(until * clock.seconds - clock.elapsed(), 0.0) * share
    begin = time.perf_counter()
    cost = estimate
    for step in range(steps + 1):
        if not clock.fits(cost, until):
            break
        started = time.perf_counter()
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
        cost = time.perf_counter() - started
        clock.tick(best)


@dataclasses.dataclass
class _Objective:
    """A batched objective X (B, N, D) -> (B,), with its power-iteration state (2-norm, matrix-free) if any."""

    evaluate: Objective
    power: PowerIteration | None = None
    factor: float = 6.0  # estimated cost of one value-and-gradient step per restart, in forward passes

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        return self.evaluate(X)


def _row_count(D: int, forward: float, target: float) -> int:
    """How many output rows one inf-norm step (one restart) can afford: about 4 forward passes per row."""
    return max(1, min(D, int(target / max(4 * forward, 1e-12))))


def _objective(weights: AttentionWeights, norm: str, domain: Domain, shape: torch.Size,
               generator: torch.Generator, rows: int | None = None) -> _Objective:
    """The search objective for inputs of ``shape``; ``rows`` caps the output rows per row block (inf-norm at
    large D, where all D reverse passes would not fit in one step): a max over fewer rows is still a lower bound."""
    N, D = shape[1], shape[2]
    chosen = None if rows is None or rows >= D else list(range(rows))
    count = D if chosen is None else len(chosen)
    if norm == "inf":
        if symmetric(domain):
            return _Objective(lambda X: row_inf_norm(X, weights, 0, chosen), factor=4.0 * count)
        if N * D <= DENSE_LIMIT:
            return _Objective(lambda X: dense_norm(X, weights, "inf"))
        tokens = range(N) if chosen is None else range(min(N, max(1, len(chosen) // 4)))
        return _Objective(lambda X: torch.stack([row_inf_norm(X, weights, t, chosen) for t in tokens]).amax(0),
                          factor=4.0 * count * len(tokens))
    if N * D <= DENSE_TWO_NORM:
        return _Objective(lambda X: dense_norm(X, weights, "2"))
    power = PowerIteration(shape, generator, weights.dtype, weights.W_Q.device)
    return _Objective(lambda X: power.objective(X, weights), power, factor=8.0)


def _row_block_seconds(weights: AttentionWeights, N: int, rows: int = 8) -> float:
    """Measured seconds of one float64 row block (D reverse-mode rows of one query token, `row_block`), from the
    time of ``rows`` of them scaled to D, with a 50% margin: the final inf-norm recomputation's unit of work (a
    forward-pass model underestimated it 5x at D = 768)."""
    w = cpu64(weights)
    X = torch.zeros(1, N, w.D, dtype=torch.float64)
    chosen = list(range(min(rows, w.D)))
    begin = time.perf_counter()
    row_block(X, w, 0, False, rows=chosen)
    return 1.5 * (time.perf_counter() - begin) * w.D / len(chosen)


def _forward_seconds(weights: AttentionWeights, N: int, dtype: torch.dtype, device: torch.device) -> float:
    """Measured seconds of one forward pass at batch 1 (the best of three): the unit of the step-cost estimates."""
    w = weights.to(dtype, device)
    X = torch.zeros(1, N, w.D, dtype=dtype, device=device)
    best = math.inf
    for _ in range(3):
        begin = time.perf_counter()
        with torch.no_grad():
            attention_forward(X, w)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - begin)
    return best


def _cluster_phase(w: AttentionWeights, N: int, norm: str, domain: Domain, restarts: int, steps: int,
                   learning_rate: float, generator: torch.Generator, clock: _Clock, until: float,
                   best: _Best) -> list[torch.Tensor]:
    """Clustered inputs for K in CLUSTER_SIZES (K < N); returns the best expanded witness for each K."""
    found = []
    scale = natural_scale(cpu64(w))
    sizes = [K for K in CLUSTER_SIZES if K < N and K * w.D <= CLUSTER_MAX_COORDINATES]
    full = restarts
    for k, K in enumerate(sizes):
        if clock.past(until):
            break
        restarts = max(1, min(full, FREE_BATCH_ENTRIES // (K * w.D) ** 2))  # a K D x K D SVD per restart
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
                 seeds: list[torch.Tensor], scale: float, found: torch.Tensor) -> torch.Tensor:
    """The seed inputs first (exact, then jittered), then a quarter structured (Lemma for L2; Castin and the
    rank-one starts for DP, `_starts`), then random. Seeds are the cluster witnesses, the eps-ball centre (the data
    point) and the caller's starts."""
    structured = max(2, restarts // 4)
    if isinstance(domain, EpsBall) or N < 2:
        special = starting_points(w64, N, domain, structured, generator, scale=scale)
    elif w64.kind == "dp" and N >= 3:  # Castin, and up to 6 per head for the structured bound's rank-one term
        special = torch.cat([castin_starts(w64, N, domain, structured - structured // 2, generator, found, scale),
                             rank_one_starts(w64, N, domain, min(6 * w64.H, max(1, restarts // 3)), generator,
                                             scale)])
    elif w64.kind == "dp":
        special = castin_starts(w64, N, domain, structured, generator, found, scale)
    else:
        special = project(lemma_starts(w64, N, structured, generator, found), domain)
    if isinstance(domain, EpsBall):
        scale = min(scale, domain.eps)
    exact = [project(X[None], domain) for X in seeds]
    jittered = [project(X[None] + 0.01 * scale * torch.randn(X[None].shape, generator=generator,
                                                             dtype=torch.float64), domain)
                for X in seeds]
    parts = [*exact, *jittered, special]
    rest = restarts - sum(len(p) for p in parts)
    if rest > 0:
        parts.append(starting_points(w64, N, domain, rest, generator, scale=scale))
    return torch.cat(parts)[: max(restarts, 1)]


def lower_bound(weights: AttentionWeights, N: int, norm: str, domain: Domain = Global(), restarts: int = 24,
                steps: int = 300, learning_rate: float = 0.05, seed: int = 0, seconds: float | None = None,
                progress: bool = False, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float64, clusters: bool = True,
                starts: torch.Tensor | None = None, polish: int = 3) -> Certificate:
    """max ||J_F(X)||_norm over X in the domain, by batched projected Adam; the best X is kept as the witness.

    Args:
        weights: the layer. N: sequence length. norm: ``"2"`` or ``"inf"``. domain: `Global`, `Ball`, `EpsBall`.
        restarts: batch size of each ascent (all restarts run as one tensor computation); with ``seconds`` it is
            lowered at large N D so that one step takes about ``STEP_SHARE`` of the budget (measured cost model).
        steps: Adam steps per free round and for the polish; each cluster size gets steps/2 relaxed and steps/2
            with integer multiplicities (so without ``seconds`` the cost is about (2 + #sizes) * steps steps).
        learning_rate: relative to the layer's natural input scale (`natural_scale`).
        seed: seeds every random start; without ``seconds`` the result is reproducible.
        seconds: time budget for the whole call, the float64 recomputation at the witness included: clusters until
            40% of the search share, free rounds until 55%, the polish until 100% of it (the search share leaves
            at least ``FINAL_SHARE`` for the recomputation). No step starts unless its measured (first: estimated)
            cost fits before its phase's deadline; ``details["stopped"]`` says "time" when the clock ended it.
        device: default CUDA when available; dtype: float64 or float32 for the search.
        clusters: run the cluster phase (tied L2 on a permutation-invariant domain).
        starts: extra starting inputs (B, N, D) or (N, D), e.g. the centre of an upper bound's worst box; they
            are projected onto the domain and tried exactly and jittered. An `EpsBall`'s centre always is.
        polish: how many of the best distinct inputs the final phase polishes (with a smaller learning rate).

    Returns a lower-bound `Certificate` (never certified) whose value is ||J(X*)||_norm recomputed in float64 at
    ``details["witness"]`` = X* (exactly, or a Rayleigh / row-subset lower bound on it at large N D).
    """
    begin = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    if restarts < 1 or steps < 0 or polish < 0:
        raise InvalidInputError(f"need restarts >= 1, steps >= 0 and polish >= 0, got restarts={restarts}, "
                                f"steps={steps}, polish={polish}")
    if dtype not in (torch.float32, torch.float64):
        raise InvalidInputError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if seconds is not None and not seconds > 0:
        raise InvalidInputError(f"seconds must be positive, got {seconds!r}")
    if isinstance(domain, EpsBall) and tuple(domain.center.shape) != (N, weights.D):
        raise InvalidInputError(f"the eps-ball centre must have shape {(N, weights.D)}, got "
                                f"{tuple(domain.center.shape)}")
    extra: list[torch.Tensor] = []
    if starts is not None:
        given = torch.as_tensor(starts).detach().to(device="cpu", dtype=torch.float64)
        given = given[None] if given.dim() == 2 else given
        if given.dim() != 3 or tuple(given.shape[1:]) != (N, weights.D) or not torch.isfinite(given).all():
            raise InvalidInputError(f"starts must be finite, of shape (B, {N}, {weights.D}) or ({N}, {weights.D}), "
                                    f"got {tuple(given.shape)}")
        extra = list(given)
    weights = jacobian_equivalent(weights)  # the same J everywhere, without the biases' roundoff (every phase)
    ascent = None
    if isinstance(domain, EpsBall) and seconds is not None and N * weights.D > 1 and eps_ball_applies(N, weights.D):
        ascent = eps_ball_ascent(weights, domain, norm, ASCENT_SHARE * seconds, seed=seed)
        extra.insert(0, ascent[1])  # its best point seeds the search below, which gets the rest of the budget
    _warm_up()  # a one-off import cost (counted in the budget: the clock started on entry)
    device = default_device() if device is None else torch.device(device)
    w64 = cpu64(weights)
    w = w64 if (dtype, device.type) == (torch.float64, "cpu") else weights.to(dtype, device)
    if isinstance(domain, EpsBall):
        extra.insert(0, domain.center.detach().to(device="cpu", dtype=torch.float64))  # the data point itself
        domain = dataclasses.replace(domain, center=domain.center.to(dtype=dtype, device=device))
    generator = torch.Generator().manual_seed(seed)
    scale = natural_scale(w64)
    found = directions(w64)
    lr = learning_rate * scale
    if isinstance(domain, Ball):
        lr = min(lr, learning_rate * domain.radius)
    if isinstance(domain, EpsBall):
        lr = min(lr, learning_rate * domain.eps)
    best = _Best()
    total = None if seconds is not None else steps * (len(CLUSTER_SIZES) + 2)
    bar = progress_bar(progress, total=total, desc=f"lower bound ({norm}-norm, N={N})", leave=False)

    # cost model: one measured forward pass (search dtype and device, and float64 on the CPU for the witness)
    forward = _forward_seconds(weights, N, dtype, device)
    forward64 = forward if (dtype, device.type) == (torch.float64, "cpu") else _forward_seconds(
        weights, N, torch.float64, torch.device("cpu"))
    n = N * weights.D
    if n <= DENSE_TIMED_LIMIT:
        final_cost = 2e-9 * n**3 + 10 * forward64
    else:  # the 2-norm: one power iteration and the closing Jacobian-vector product (inf-norm: below)
        final_cost = 8 * forward64
    target = None if seconds is None else max(STEP_SHARE * seconds, MIN_STEP_SECONDS)
    rows = None if target is None or norm != "inf" else _row_count(weights.D, forward, target)
    if n > DENSE_TIMED_LIMIT and norm == "inf":
        # the recomputation (`attained_norm`, in chunks of ROW_CHUNK rows from row 0 of block 0) must reach the rows
        # the search optimised, the first `rows` of block 0
        share = min(1.0, max(rows or weights.D, ROW_CHUNK) / weights.D)
        final_cost = _row_block_seconds(weights, N) * share
    search_seconds = None
    if seconds is not None:
        used = time.perf_counter() - begin
        search_seconds = max(seconds - used - max(FINAL_SHARE * seconds, final_cost), 0.0)
    clock = _Clock(search_seconds, bar)
    phases: dict[str, float] = {}

    seeds: list[torch.Tensor] = list(extra)
    if clusters and w.kind == "l2" and symmetric(domain) and N >= 3 and search_seconds != 0:
        seeds += [X.to(device="cpu", dtype=torch.float64) for X in
                  _cluster_phase(w, N, norm, domain, restarts, steps, lr, generator, clock, 0.4, best)]
        phases["clusters"] = best.value

    free_restarts = max(1, min(restarts, FREE_BATCH_ENTRIES // n**2)) if n > DENSE_TWO_NORM else restarts
    probe = _objective(w, norm, domain, torch.Size((1, N, weights.D)), generator, rows)
    if target is not None:
        free_restarts = max(1, min(free_restarts, int(target / max(probe.factor * forward, 1e-12))))
    free_restarts = max(free_restarts, min(restarts, len(seeds) + 2))  # the seeds and two more always fit
    rounds = 0
    witness_fallback = None
    free_until = 0.55 if polish > 0 else 0.97
    pool: list[tuple[float, torch.Tensor]] = []  # the best input of each restart of each round

    def keep(values: torch.Tensor, X: torch.Tensor) -> None:
        best.offer(values, X, "free")
        top_values.copy_(torch.maximum(top_values, values.to(top_values)))
        better = values.to(top_values) >= top_values
        top_X[better] = X.detach()[better].to(top_X)

    while rounds == 0 or (seconds is not None and not clock.past(free_until - 0.05)):
        initial = _free_starts(w64, N, domain, free_restarts, generator, seeds if rounds == 0 else [], scale,
                               found)
        if witness_fallback is None:
            witness_fallback = initial[0]
        X = initial.to(dtype=dtype, device=device).requires_grad_(True)
        objective = _objective(w, norm, domain, X.shape, generator, rows)
        top_values = torch.full((X.shape[0],), -math.inf, dtype=torch.float64, device=device)
        top_X = X.detach().clone()
        power = objective.power
        _ascend([X], lambda: objective(X), steps, lr, lambda: X.copy_(project(X, domain)), clock, free_until,
                lambda v: (keep(v, X), best.keep_vector(v, power)), best, "free", 0.5,
                estimate=objective.factor * forward * X.shape[0])
        pool += [(float(v), x.to(device="cpu", dtype=torch.float64)) for v, x in zip(top_values, top_X)
                 if math.isfinite(float(v))]
        rounds += 1
        if seconds is None or clock.stopped == "time":
            break
    phases["free"] = best.value

    if best.X is not None:
        pool.append((best.value, best.X.to(device="cpu", dtype=torch.float64)))
    if polish > 0 and pool and steps > 0 and (seconds is None or not clock.past(0.97)):
        chosen = _distinct_best(pool, polish, scale if not isinstance(domain, EpsBall) else domain.eps)
        copies = max(1, min(free_restarts, 8) // len(chosen))
        base = torch.stack([x.to(device="cpu", dtype=torch.float64) for x in chosen])
        noise = torch.randn((len(chosen), copies, *base.shape[1:]), generator=generator, dtype=torch.float64)
        noise[:, 0] = 0
        size = 1e-3 * (scale if not isinstance(domain, EpsBall) else domain.eps)
        X = project((base[:, None] + size * noise).flatten(0, 1), domain).to(dtype=dtype, device=device)
        X.requires_grad_(True)
        objective = _objective(w, norm, domain, X.shape, generator, rows)
        power = objective.power
        _ascend([X], lambda: objective(X), POLISH_STEPS * steps, 0.2 * lr, lambda: X.copy_(project(X, domain)),
                clock, 1.0, lambda v: (best.offer(v, X, "polish"), best.keep_vector(v, power)), best, "free",
                estimate=objective.factor * forward * X.shape[0])
        phases["polish"] = best.value
    bar.close()

    if best.X is None:  # not one step fitted in the budget: the first structured start, unevaluated
        best.X, best.phase = witness_fallback, "start (no step fitted in the budget)"
    witness = best.X.to(device="cpu", dtype=torch.float64)
    left = None if seconds is None else max(seconds - (time.perf_counter() - begin), 0.0)
    value, how = attained_norm(witness, w64, norm, seconds=left, v0=best.v)
    left = None if seconds is None else max(seconds - (time.perf_counter() - begin), 0.0)
    if isinstance(domain, EpsBall) and (left is None or (left > 0 and dense_attained(n, norm))):
        # the data point itself is in the domain: never report less than its norm (when that is cheap: dense)
        centre = domain.center.detach().to(device="cpu", dtype=torch.float64)
        centre_value, centre_how = attained_norm(centre, w64, norm, seconds=left)
        if centre_value > value:
            witness, value, how, best.phase = centre, centre_value, centre_how, "the eps-ball's centre"
    if ascent is not None and ascent[0] > value:
        witness, value, best.phase = ascent[1], ascent[0], "eps-ball ascent"
        how = "at the eps-ball ascent's best point: " + ("exact largest row sum" if norm == "inf" else "||J v|| for a unit v (<= ||J||_2)") + " of the closed-form Jacobian, float64"
    return Certificate(
        value=value, kind="lower", certified=False, method="adversarial", scope=domain.scope, norm=norm,
        seconds=time.perf_counter() - begin,
        message=f"attained at the stored witness X* ({how}); stopped: {clock.stopped}",
        details={"witness": witness.tolist(), "search_value": best.value, "found_in": best.phase,
                 "multiplicities": best.multiplicities, "phases": phases, "restarts": restarts, "steps": steps,
                 "free_restarts": free_restarts, "rows": rows, "stopped": clock.stopped,
                 "rounds": rounds, "evaluations": clock.evaluations, "seed": seed, "device": str(device),
                 "dtype": str(dtype).replace("torch.", ""), "forward_seconds": forward},
    )


def _distinct_best(pool: list[tuple[float, torch.Tensor]], count: int, scale: float) -> list[torch.Tensor]:
    """The ``count`` best inputs of the pool that differ pairwise by more than 1e-3 ``scale`` per coordinate."""
    chosen: list[torch.Tensor] = []
    for _, X in sorted(pool, key=lambda item: -item[0]):
        if all(float((X - Y).abs().max()) > 1e-3 * scale for Y in chosen):
            chosen.append(X)
        if len(chosen) == count:
            break
    return chosen
