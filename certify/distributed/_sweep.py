"""Sweeps of independent work units on a Dask cluster, resumable from a checkpoint of the finished units (issue 19
item 3): the tightness sweep (``dask_tightness``, MATH.md section 5) and any job of the same shape (``run_sweep``).

A unit is a pure function of its arguments, so where it runs does not change its result: the rows are the serial
run's, in the serial order. After each finished unit, the results so far go to the checkpoint (``write_json``:
a temporary file renamed into place, so a coordinator killed mid-write leaves the old file or the new one), with the
job's parameters and a SHA-256 of the results. ``resume=True`` reads it (``CheckpointError`` when it is missing,
damaged, or from another job), keeps its results and runs only the missing units. A unit lost with its worker is
run again by Dask, or submitted again here after ``KilledWorker``; its result is taken once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .._errors import CheckpointError, ClusterError
from ..adversarial import TightnessPoint, TightnessRow, tightness_row
from ..report import write_json
from ._engine import LOST

Unit = TypeVar("Unit")
Result = TypeVar("Result")
FORMAT = "certify.sweep.checkpoint/1"


@dataclass(frozen=True)
class SweepStats:
    """Counters of one sweep run: ``units`` in the job, ``resumed`` taken from the checkpoint, ``computed`` here,
    ``resubmitted`` after their task was lost with its workers, ``workers`` (worker threads, 0 without a cluster),
    ``checkpoints`` written, ``seconds`` of wall time."""

    units: int
    resumed: int
    computed: int
    resubmitted: int
    workers: int
    checkpoints: int
    seconds: float


@dataclass(frozen=True)
class Sweep(Generic[Result]):
    """The results of a sweep, in the order of its units, and its counters."""

    results: list[Result]
    stats: SweepStats


def _digest(done: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(done, sort_keys=True).encode()).hexdigest()


def save_sweep(path: str | os.PathLike, job: dict[str, Any], done: dict[str, Any]) -> None:
    """Write the finished units ``done`` (key -> JSON result) of ``job`` to ``path`` atomically."""
    write_json(path, {"format": FORMAT, "job": job, "done": done, "sha256": _digest(done)})


def load_sweep(path: str | os.PathLike, job: dict[str, Any]) -> dict[str, Any]:
    """The finished units of the sweep checkpoint ``path``, which must be of the same ``job``; ``CheckpointError``
    saying what is wrong otherwise (missing, unreadable, not JSON, another format, damaged, another job)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise CheckpointError(f"cannot read sweep checkpoint {path}: no such file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"cannot read sweep checkpoint {path}: {error}") from error
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not a certify sweep checkpoint (not JSON: {error})") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, expected {FORMAT!r}")
    done = data.get("done")
    if not isinstance(done, dict) or data.get("sha256") != _digest(done):
        raise CheckpointError(f"{path}: the results do not match the checkpoint's SHA-256 (damaged file)")
    saved = data.get("job")
    if saved != json.loads(json.dumps(job)):
        diff = sorted(k for k in set(saved or {}) | set(job) if (saved or {}).get(k) != job.get(k))
        raise CheckpointError(f"{path}: a checkpoint of another sweep (differs in {diff}); resume with the same "
                              "options, or start a new checkpoint")
    return done


def _slots(client) -> int:
    return int(sum(client.nthreads().values()))


def run_sweep(units: Sequence[Unit], work: Callable[[Unit], Result], client=None, *, key: Callable[[Unit], str],
              job: dict[str, Any], encode: Callable[[Result], dict], decode: Callable[[dict], Result],
              checkpoint: str | os.PathLike | None = None, resume: bool = False,
              on_result: Callable[[Unit, Result], None] | None = None) -> Sweep[Result]:
    """``[work(u) for u in units]``, the units on the Dask ``client``'s workers (in this process when ``client`` is
    None), checkpointed to ``checkpoint`` after each finished unit and, with ``resume``, continued from it.

    ``key(u)``: a unit's stable name; ``job``: the parameters that must match on resume (JSON); ``encode`` /
    ``decode``: a result to and from JSON (``decode(encode(r))`` equals ``r``). ``on_result(u, r)`` is called for
    each unit computed here (progress; a hook for fault tests). A ``KeyboardInterrupt`` or an error stops the sweep;
    the checkpoint then holds every unit finished before."""
    start = time.perf_counter()
    keys = [key(u) for u in units]
    if len(set(keys)) != len(keys):
        raise ValueError("the units of a sweep need distinct keys")
    done: dict[str, Any] = {}
    if resume:
        if checkpoint is None:
            raise ValueError("resume needs the checkpoint file")
        done = dict(load_sweep(checkpoint, job))
        unknown = sorted(set(done) - set(keys))
        if unknown:
            raise CheckpointError(f"{checkpoint}: results for units not in this sweep: {unknown[:3]}")
    resumed = len(done)
    todo = [u for u, k in zip(units, keys) if k not in done]
    computed = resubmitted = checkpoints = 0

    def finish(unit: Unit, result: Result) -> None:
        nonlocal computed, checkpoints
        done[key(unit)] = encode(result)
        computed += 1
        if checkpoint is not None:
            save_sweep(checkpoint, job, done)
            checkpoints += 1
        if on_result is not None:
            on_result(unit, result)

    if checkpoint is not None and not resume:
        save_sweep(checkpoint, job, done)  # a writable path, checked before any work
        checkpoints += 1
    workers = 0
    if client is None:
        for unit in todo:
            finish(unit, work(unit))
    elif todo:
        workers = _slots(client)
        resubmitted = _run_on_cluster(todo, work, client, finish)
    results = [decode(done[k]) for k in keys]
    return Sweep(results, SweepStats(len(keys), resumed, computed, resubmitted, workers, checkpoints,
                                     time.perf_counter() - start))


def _run_on_cluster(todo: list, work: Callable, client, finish: Callable) -> int:
    """Submit every unit, take the results as they come (``finish``), submit again those lost with their workers;
    the number submitted again."""
    import distributed

    resubmitted = 0
    futures = {client.submit(work, unit, pure=False): unit for unit in todo}
    pending = distributed.as_completed(list(futures))
    try:
        for future in pending:
            unit = futures.pop(future)
            try:
                result = future.result()
            except Exception as error:
                if type(error).__name__ not in LOST:
                    if isinstance(error, ImportError):
                        raise ClusterError(f"a Dask worker cannot import certify ({error}); install this version "
                                           "of certify on every worker") from error
                    raise
                again = client.submit(work, unit, pure=False)
                futures[again] = unit
                pending.add(again)
                resubmitted += 1
                continue
            finish(unit, result)
    finally:
        if futures:
            try:
                client.cancel(list(futures))
            except Exception:  # the cluster may be gone; nothing depends on these futures any more
                pass
    return resubmitted


def tightness_job(seconds: float | None, baseline: bool, seed: int, device: str | None,
                  methods: tuple[str, ...] | None, search: dict[str, Any]) -> dict[str, Any]:
    """The parameters a tightness checkpoint must match on resume (those that change a row)."""
    return {"sweep": "tightness", "seconds": seconds, "baseline": baseline, "seed": seed, "device": device,
            "methods": None if methods is None else list(methods), "search": dict(search)}


def tightness_unit(point: TightnessPoint, *, baseline: bool, **options: Any) -> TightnessRow:
    """The work unit of the tightness sweep: ``tightness_row``, with the naive baseline for rows on the whole space
    only (it cannot search a ball)."""
    return tightness_row(point, baseline=baseline and point.radius is None, **options)


def dask_tightness(points: Sequence[TightnessPoint], client=None, *, seconds: float | None = 20.0,
                   baseline: bool = False, seed: int = 0, device: str | None = None,
                   methods: tuple[str, ...] | None = None, progress: bool = False,
                   checkpoint: str | os.PathLike | None = None, resume: bool = False,
                   on_row: Callable[[TightnessRow], None] | None = None, **search: Any) -> Sweep[TightnessRow]:
    """The tightness sweep (``certify.adversarial.tightness``) over ``points`` (``tightness_points``, any configs),
    one ``tightness_row`` per work unit on the Dask ``client`` (in this process when None), checkpointed after each
    row and resumable (``run_sweep``). With ``seconds`` None (``restarts`` x ``steps`` from ``search``) the rows equal
    the serial run's; with a time budget each row depends on the speed of the worker that ran it, as serially.
    ``baseline``: the naive search too, for the rows on the whole space (not dp's balls). ``progress``: progress bars
    (in-process runs)."""
    work = functools.partial(tightness_unit, seconds=seconds, baseline=baseline, seed=seed, device=device,
                             progress=progress, methods=methods, **search)
    job = tightness_job(seconds, baseline, seed, device, methods, search)
    return run_sweep(list(points), work, client, key=lambda p: p.key, job=job, encode=_row_json,
                     decode=TightnessRow.from_json, checkpoint=checkpoint, resume=resume,
                     on_result=None if on_row is None else (lambda point, row: on_row(row)))


def _row_json(row: TightnessRow) -> dict[str, Any]:
    out = dataclasses.asdict(row)
    out["radius"] = row.radius
    return out
