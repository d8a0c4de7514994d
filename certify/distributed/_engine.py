"""The global L2 branch and bound on a Dask cluster (MATH.md section 7): the coordinator keeps the frontier, the
attained lower bound and the certified bound; the workers evaluate batches of boxes.

The search is the one of ``certify.bounds.global_l2.global_l2_constant``, with the same parts: ``plan_search`` (cluster
radius r, tail term, domain), ``evaluate_boxes`` on the workers (``_tasks.evaluate_batch``), ``refine`` on the
coordinator (raise the lower bound at the best box centre, close the boxes with ub <= (1 + tol) lower, bisect the
others). What changes is that up to ``max_in_flight`` batches (default: twice the worker threads) are evaluated at
once, each taken best first from the frontier when a worker slot frees up. The certified value is

    c_p(N, d) <= max( closed_max, max ub over the frontier and the batches in flight, tail term ),

the same kind of proof as the single-process run. With the same tolerance it reaches the same value up to the
set of closed boxes (more batches in flight refine in another order); with ``max_in_flight=1`` it makes the
single-process run's steps exactly (tests/test_distributed.py).

Faults. A batch leaves the coordinator's books only when its result arrives: until then its boxes are in flight,
and they count in the certified bound with their parent's bound. Dask runs a task again when its worker dies; a task
that failed on lost workers too often (``KilledWorker``) is submitted again here. A result for a batch already
accepted is ignored. So no box is lost and none counted twice. Every ``checkpoint_every`` seconds, and when the run
stops (complete, time budget, Ctrl-C), the frontier with the batches in flight, the bound and the counters go to
``checkpoint`` (``_checkpoint``, atomic); ``resume_global_l2_constant`` continues from it. An unexpected error
propagates without a final write: the last periodic checkpoint stands, as after a killed coordinator.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import CheckpointError, ClusterError
from .._memory import retain_freed_memory
from ..bounds.global_l2 import (
    BoxEvaluation,
    Frontier,
    GlobalL2Result,
    SearchPlan,
    core_norm,
    plan_search,
    polish,
    refine,
    search_lower,
)
from ..bounds.closed_form._dimension_reduction import reduces
from ..bounds.global_l2._search import DEFAULT_R, domain, reduced_result
from ._checkpoint import Checkpoint, SearchState, load_checkpoint, save_checkpoint
from ._tasks import evaluate_batch

LOST = ("KilledWorker", "FutureCancelledError", "CancelledError")
"""Names of the exceptions of a task that did not run to its end for lack of workers (not for an error of its own)."""
WORKER_TIMEOUT = 60.0
"""Seconds without any worker after which the run checkpoints and raises ``ClusterError``."""


@dataclass(frozen=True)
class EngineStats:
    """Counters of one Dask run (this run only, not earlier runs of a resumed search).

    ``workers``: worker threads at the start; ``batches_submitted`` counts tasks sent (resubmissions included),
    ``batches_accepted`` results taken into the search, ``resubmitted`` batches sent again after their task failed on
    lost workers (``KilledWorker``) or was cancelled, ``ignored`` results of batches already accepted (expected 0);
    ``checkpoints`` files written and their ``checkpoint_seconds``; ``coordinator_seconds`` the wall time outside
    waiting for results (taking batches, refining, submitting, checkpointing), ``wait_seconds`` the rest."""

    workers: int
    max_in_flight: int
    batches_submitted: int
    batches_accepted: int
    resubmitted: int
    ignored: int
    checkpoints: int
    checkpoint_seconds: float
    coordinator_seconds: float
    wait_seconds: float


def _slots(client) -> int:
    """Worker threads the scheduler knows now."""
    return int(sum(client.nthreads().values()))


def dask_global_l2_constant(N: int, d: int, norm: str, client, *, r: float | None = None, tol: float = 0.005,
                            time_budget: float = 600.0, smaller: dict[int, float] | None = None, batch: int = 256,
                            lower_restarts: int = 24, seed: int = 0, second_order: bool = True,
                            third_order: bool = False, split: bool = True, max_in_flight: int | None = None,
                            checkpoint: str | os.PathLike | None = None, checkpoint_every: float = 5.0,
                            progress: Callable[[str], None] | None = None,
                            on_batch: Callable[[int], None] | None = None) -> GlobalL2Result:
    """Certified upper bound (and attained lower bound) on c_p(N, d) = sup_Y ||M(Y)||_p, by the branch and bound of
    ``global_l2_constant`` with batches of ``batch`` boxes evaluated on the Dask ``client``'s workers.

    The arguments shared with ``global_l2_constant`` mean the same; missing ``smaller`` entries are computed first,
    on the same cluster, without checkpoints. ``max_in_flight`` batches are out at once (default: twice the worker
    threads, so that no worker waits while the coordinator refines). ``checkpoint``: a file written atomically every
    ``checkpoint_every`` seconds and at the end (``resume_global_l2_constant`` continues from it). ``on_batch(k)``
    is called after the k-th accepted batch (a hook for fault tests). ``details["dask"]`` holds ``EngineStats``.
    """
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    if not (isinstance(N, int) and N >= 2):
        raise ValueError(f"N must be an integer >= 2, got {N!r}")
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    retain_freed_memory()
    start = time.perf_counter()
    if reduces(N, d, norm):  # c_2(N, d) from c_2(N, N - 1); a checkpoint holds that search
        base = dask_global_l2_constant(N, N - 1, norm, client, r=r, tol=tol, time_budget=time_budget, batch=batch,
                                       lower_restarts=lower_restarts, seed=seed, second_order=second_order,
                                       third_order=third_order, split=split, max_in_flight=max_in_flight,
                                       checkpoint=checkpoint, checkpoint_every=checkpoint_every, progress=progress,
                                       on_batch=on_batch)
        return reduced_result(base, d, start)
    domain(N, d, norm, DEFAULT_R)  # a ValueError now, before the recursion, where no domain covers (N, d, norm)
    smaller = dict(smaller or {})
    smaller[1] = 1.0
    for s in range(2, N):
        if s not in smaller:
            smaller[s] = dask_global_l2_constant(s, d, norm, client, r=r, tol=tol, time_budget=time_budget,
                                                 smaller=smaller, batch=batch, seed=seed, second_order=second_order,
                                                 third_order=third_order, split=split, max_in_flight=max_in_flight,
                                                 progress=progress).upper
    lower, witness = search_lower(N, d, norm, restarts=lower_restarts, seed=seed)
    plan = plan_search(N, d, norm, smaller, lower, r=r, tol=tol, second_order=second_order,
                       third_order=third_order, split=split)
    dom = plan.setting.domain
    state = SearchState(Frontier.root(dom.lo, dom.hi), -np.inf, lower, witness, 0, 0, 0.0, 1)
    return _run(plan, state, client, batch=batch, time_budget=time_budget - (time.perf_counter() - start),
                max_in_flight=max_in_flight, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                progress=progress, on_batch=on_batch, started=start)


def resume_global_l2_constant(path: str | os.PathLike, client, *, time_budget: float = 600.0,
                              max_in_flight: int | None = None, checkpoint: str | os.PathLike | None = None,
                              checkpoint_every: float = 5.0, progress: Callable[[str], None] | None = None,
                              on_batch: Callable[[int], None] | None = None) -> GlobalL2Result:
    """Continue the branch and bound saved in the checkpoint ``path`` (``CheckpointError`` if it cannot be read),
    with ``time_budget`` more seconds, checkpointing to ``checkpoint`` (default: ``path`` itself).

    The problem (N, d, norm, tol, r, the smaller constants, the forms, the batch size) comes from the file. The lower
    bound is recomputed as ||M(witness)||_p in float64, so it is attained whatever the file says; the upper bound is
    as valid as the file's boxes and closed bound (the file holds a SHA-256 of its boxes). ``seconds`` and
    ``boxes`` of the result add up every run of the search."""
    saved = load_checkpoint(path)
    state = saved.state
    try:
        lower = core_norm(state.witness, saved.norm)
        plan = plan_search(saved.N, saved.d, saved.norm, saved.smaller, lower, r=saved.r, tol=saved.tol,
                           second_order=saved.second_order, third_order=saved.third_order, split=saved.split)
    except ValueError as error:
        raise CheckpointError(f"{path}: the checkpoint's problem cannot be set up ({error})") from error
    L = plan.setting.domain.par.L
    if state.frontier.size and state.frontier.lo.shape[1] != L:
        raise CheckpointError(f"{path}: boxes have {state.frontier.lo.shape[1]} coordinates; the domain of "
                              f"c_{saved.norm}({saved.N}, {saved.d}) has {L}")
    state = dataclasses.replace(state, lower=lower, runs=state.runs + 1)
    return _run(plan, state, client, batch=saved.batch, time_budget=time_budget, max_in_flight=max_in_flight,
                checkpoint=path if checkpoint is None else checkpoint, checkpoint_every=checkpoint_every,
                progress=progress, on_batch=on_batch, started=time.perf_counter())


def _run(plan: SearchPlan, state: SearchState, client, *, batch: int, time_budget: float,
         max_in_flight: int | None, checkpoint: str | os.PathLike | None, checkpoint_every: float,
         progress: Callable[[str], None] | None, on_batch: Callable[[int], None] | None,
         started: float, task: Callable[..., BoxEvaluation] = evaluate_batch) -> GlobalL2Result:
    """The coordinator loop, from ``state``, for at most ``time_budget`` seconds of wall time.

    ``task(lo, hi, parent_ub, threshold, setting)`` is the work unit the workers run: ``evaluate_batch``; only the
    simulated cluster of benchmarks/distributed.py passes another (a sleep and a trivial evaluation), to time the
    coordinator alone; its result is then no certificate."""
    setting, norm, tol, N, d = plan.setting, plan.norm, plan.tol, plan.N, plan.d
    par = setting.domain.par
    frontier, closed_max, lower, witness = state.frontier, state.closed_max, state.lower, state.witness
    boxes, accepted_total = state.boxes, state.batches
    run_start = time.perf_counter()
    workers = _slots(client)
    if workers == 0:
        try:
            client.wait_for_workers(1, timeout=WORKER_TIMEOUT)
        except Exception as error:
            raise ClusterError(f"the Dask cluster has no workers (waited {WORKER_TIMEOUT:g} s)") from error
        workers = _slots(client)
    limit = max_in_flight if max_in_flight is not None else 2 * workers
    if not (isinstance(limit, int) and limit >= 1):
        raise ValueError(f"max_in_flight must be an integer >= 1, got {limit!r}")
    token = uuid.uuid4().hex[:12]
    flying: dict[int, Frontier] = {}  # batch id -> its boxes with their parents' bounds, until its result arrives
    futures: dict[object, int] = {}  # live future -> batch id
    done: queue.Queue = queue.Queue()
    next_id = submitted = accepted = resubmitted = ignored = checkpoints = 0
    checkpoint_seconds = wait_seconds = 0.0
    last_checkpoint = last_report = time.perf_counter()
    no_workers_since: float | None = None
    timed_out = interrupted = False

    def submit(bid: int) -> None:
        nonlocal submitted
        part = flying[bid]
        future = client.submit(task, part.lo, part.hi, part.ub, lower * (1.0 + tol), setting,
                               key=f"certify-bnb-{token}-{bid}-{submitted}", pure=False)
        futures[future] = bid
        submitted += 1
        future.add_done_callback(done.put)

    def snapshot() -> SearchState:
        everything = Frontier.concatenate([frontier, *flying.values()]) if flying else frontier
        return SearchState(everything, closed_max, lower, witness, boxes, accepted_total,
                           state.seconds + time.perf_counter() - started, state.runs)

    def save() -> None:
        nonlocal checkpoints, checkpoint_seconds, last_checkpoint
        t0 = time.perf_counter()
        save_checkpoint(checkpoint, Checkpoint(N, d, norm, tol, plan.r, dict(setting.smaller), setting.second_order,
                                               setting.third_order, setting.split, batch, snapshot()))
        checkpoints += 1
        checkpoint_seconds += time.perf_counter() - t0
        last_checkpoint = time.perf_counter()

    try:
        while True:
            if time.perf_counter() - run_start > time_budget:
                timed_out = bool(frontier.size or flying)
                break
            while len(flying) < limit and frontier.size:
                part, frontier = frontier.take(batch)
                flying[next_id] = part
                submit(next_id)
                next_id += 1
            if not flying:
                break  # every box closed
            t0 = time.perf_counter()
            try:
                arrived = [done.get(timeout=1.0)]
            except queue.Empty:
                arrived = []
            wait_seconds += time.perf_counter() - t0
            while True:
                try:
                    arrived.append(done.get_nowait())
                except queue.Empty:
                    break
            for future in arrived:
                bid = futures.pop(future, None)
                if bid is None:
                    continue  # a future released earlier
                t0, out = time.perf_counter(), None
                try:  # a result lost with its worker after it finished is computed again: result() waits for it
                    out = None if future.status == "cancelled" else future.result()
                except Exception as error:
                    if type(error).__name__ not in LOST:
                        if isinstance(error, ImportError):
                            raise ClusterError(f"a Dask worker cannot import certify ({error}); install this "
                                               "version of certify on every worker") from error
                        raise
                finally:
                    wait_seconds += time.perf_counter() - t0
                if out is None:  # lost with its workers (or cancelled by the scheduler): the same boxes go out again
                    if bid in flying:
                        resubmitted += 1
                        submit(bid)
                    continue
                if bid not in flying:
                    ignored += 1
                    continue
                step = refine(out.lo, out.hi, out.ub, out.centre_norm, out.scores, lower, witness, par, norm, tol)
                # the batch stays on the books until its open children are in the frontier (a Ctrl-C in between
                # leaves its boxes covered twice, never not at all)
                lower, witness = step.lower, step.witness
                closed_max = max(closed_max, out.closed_max, step.closed_max)
                if step.children.size:
                    frontier = Frontier.concatenate([frontier, step.children])
                del flying[bid]
                boxes += out.evaluated
                accepted += 1
                accepted_total += 1
                if on_batch is not None:
                    on_batch(accepted)
            now = time.perf_counter()
            if checkpoint is not None and now - last_checkpoint >= checkpoint_every:
                save()
            if not arrived:  # nothing came back for a second: are there workers at all?
                if _slots(client) == 0:
                    no_workers_since = no_workers_since or now
                    if now - no_workers_since > WORKER_TIMEOUT:
                        if checkpoint is not None:
                            save()
                        raise ClusterError(f"the Dask cluster has had no workers for {WORKER_TIMEOUT:g} s; "
                                           + (f"resume with --resume {checkpoint}" if checkpoint is not None
                                              else "no checkpoint was asked for"))
                else:
                    no_workers_since = None
            if progress is not None and now - last_report > 10.0:
                last_report = now
                open_max = max([frontier.max, *(part.max for part in flying.values())])
                progress(f"N={N} d={d} p={norm} (dask, {_slots(client)} workers): {boxes} boxes, "
                         f"{frontier.size} open, {len(flying)} batches in flight, lower {lower:.6f}, "
                         f"closed max {closed_max:.6f}, open max {open_max:.6f}, {now - run_start:.0f} s")
    except KeyboardInterrupt:  # Ctrl-C: keep what is certified so far (batches in flight keep their parents' bound)
        interrupted = True
    finally:
        if futures:
            try:
                client.cancel(list(futures))
            except Exception:  # the cluster may be gone; nothing of ours depends on these futures any more
                pass
    loop_seconds = time.perf_counter() - run_start
    final = snapshot()  # the frontier with the batches in flight: the open boxes of the certificate
    if checkpoint is not None:
        save()
    open_max = final.frontier.max
    upper = max(closed_max, open_max, plan.tail_total)
    if not interrupted:
        lower, witness = polish(witness, norm)
    stats = EngineStats(workers, limit, submitted, accepted, resubmitted, ignored, checkpoints, checkpoint_seconds,
                        loop_seconds - wait_seconds, wait_seconds)
    return GlobalL2Result(N=N, d=d, norm=norm, upper=float(upper), lower=float(lower), witness=witness,
                          seconds=state.seconds + time.perf_counter() - started, boxes=boxes,
                          complete=not (timed_out or interrupted) and final.frontier.size == 0, r=plan.r,
                          tail=plan.tail_total,
                          method=plan.method + f"; Dask engine, {workers} worker threads",
                          details={"closed_max": closed_max, "open_max": open_max, "eps": plan.eps,
                                   "smaller": dict(setting.smaller), "tol": tol, "interrupted": interrupted,
                                   "runs": state.runs, "batches": accepted_total, "open_boxes": final.frontier.size,
                                   "checkpoint": None if checkpoint is None else str(Path(checkpoint)),
                                   "dask": dataclasses.asdict(stats)})
