"""Scaling of the Dask engine of the global L2 branch and bound (certify.distributed; MATH.md section 7, issue 19).

One fixed workload, c_p(N, d) to a fixed tolerance (default c_2(5, 1) at tol 0.03, the smaller constants taken from
the shipped table as ``universal_constants.py`` does), certified by:

- the single-process search (``global_l2_constant``, the baseline);
- the Dask engine on a LocalCluster of 1, 2 and 4 worker processes (one thread each; 4 oversubscribes a 2-core
  machine, which the table says).

With ``--simulate``, a *simulated* cluster instead (no box is really bounded, no certificate comes out): a Dask
scheduler and worker processes started here as separate processes (``dask scheduler``, ``dask worker``; the
coordinator reaches them by address, as on a real cluster), with W simulated workers = W worker threads spread over
at most ``--processes`` processes. Their work unit sleeps ``--latency`` seconds (a real batch of 256 boxes of
c_2(5, 1) costs a worker about 0.4 s) and then makes a trivial evaluation: a deterministic hash of each box closes
about half of them, the others come back open with their parent's bound. The coordinator is the real one
(``certify.distributed._engine._run``: taking batches best first, refining, bisecting, submitting), started on a
frontier of ``--frontier`` boxes that stays about that large. For W in ``--sim-workers`` (default 1 4 16 64 256)
it runs ``--seconds`` and reports batches/s and boxes/s against the ideal W / latency, and the CPU the coordinator
process (the engine's loop plus the Dask client) and the scheduler process spend per batch: the coordinator
saturates where batches/s stops following W and its CPU nears one core.

For each real run: wall seconds of the search (cluster start-up and the workers' first import of certify are timed apart),
boxes, batches, speed-up and efficiency against the single-process run (efficiency = speed-up / workers, and per
core = speed-up / min(workers, cores)), the coordinator's busy time (taking batches, refining, submitting: everything
but waiting for results) per box, and the certified upper / attained lower bound. Every row's certificate must be
complete and at least the attained lower bound; the script says so.

    python benchmarks/distributed.py                       # c_2(5, 1), tol 0.03; 1, 2, 4 workers
    python benchmarks/distributed.py --N 4 --tol 0.004 --workers 1 2 --json out.json
    python benchmarks/distributed.py --simulate --json sim.json            # simulated workers, 1..256

Runs with OMP_NUM_THREADS=1 (set here, and by Dask in its workers).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# this file is named like the `distributed` package: take its folder off the path, or `import distributed` finds it
HERE = Path(__file__).resolve().parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from certify.bounds.global_l2 import Frontier, global_l2_constant, plan_search  # noqa: E402
from certify.distributed import SearchState, dask_client, dask_global_l2_constant  # noqa: E402
from certify.distributed._engine import _run  # noqa: E402
from certify.distributed._simulated import box_hash, simulated_batch  # noqa: E402

TABLE = Path(__file__).resolve().parents[1] / "certify" / "data" / "universal_constants.json"


def smaller_from_table(N: int, d: int, norm: str) -> dict[int, float]:
    """Certified c_p(s, d), 2 <= s < N, from the shipped table (what universal_constants.py passes)."""
    entries = json.loads(TABLE.read_text())["entries"]
    return {e["N"]: e["upper"] for e in entries if e["d"] == d and e["norm"] == norm and 2 <= e["N"] < N}


def _import_certify() -> None:
    import certify.bounds.global_l2  # noqa: F401


def row(engine: str, workers: int, res, wall: float, start_up: float, cores: int, baseline: float | None) -> dict:
    stats = res.details.get("dask", {})
    speed_up = baseline / wall if baseline else 1.0
    return {
        "engine": engine, "workers": workers, "oversubscribed": workers > cores, "wall_s": wall,
        "start_up_s": start_up, "boxes": res.boxes, "batches": res.details.get("batches"),
        "speed_up": speed_up, "efficiency": speed_up / workers, "efficiency_per_core": speed_up / min(workers, cores),
        "coordinator_s": stats.get("coordinator_seconds"),
        "coordinator_us_per_box": (1e6 * stats["coordinator_seconds"] / res.boxes) if stats and res.boxes else None,
        "resubmitted": stats.get("resubmitted"), "upper": res.upper, "lower": res.lower, "complete": res.complete,
    }


# -- the simulated cluster -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SimulatedRow:
    """One point of the simulated sweep: ``workers`` simulated workers (worker threads over ``processes``
    processes), each batch costing a worker ``latency`` seconds of sleep; what the real coordinator achieved in
    ``seconds`` of wall time, against the ideal ``workers / latency`` batches/s, and the CPU seconds the
    coordinator process and the scheduler process spent per accepted batch (``*_cpu_ms_per_batch``) and per wall
    second (``*_cpu_share``: 1.0 = one core busy)."""

    workers: int
    processes: int
    latency_s: float
    seconds: float
    batches: int
    boxes: int
    batches_per_s: float
    boxes_per_s: float
    ideal_batches_per_s: float
    utilisation: float
    coordinator_cpu_ms_per_batch: float
    coordinator_cpu_share: float
    coordinator_loop_ms_per_batch: float
    scheduler_cpu_ms_per_batch: float
    scheduler_cpu_share: float
    frontier_end: int
    start_up_s: float


def seeded_frontier(lo: np.ndarray, hi: np.ndarray, size: int) -> Frontier:
    """About ``size`` (at least) equal boxes tiling [lo, hi] (L,), with a spread of finite bounds: the frontier the
    simulated coordinator starts from (a search well under way)."""
    L = lo.shape[0]
    k = max(1, int(np.ceil(size ** (1.0 / L))))
    edges = [np.linspace(a, b, k + 1) for a, b in zip(lo, hi)]
    index = np.stack(np.meshgrid(*[np.arange(k)] * L, indexing="ij"), axis=-1).reshape(-1, L)
    box_lo = np.stack([edges[j][index[:, j]] for j in range(L)], axis=1)
    box_hi = np.stack([edges[j][index[:, j] + 1] for j in range(L)], axis=1)
    ub = 5.0 + box_hash(box_lo, box_hi)
    return Frontier(box_lo, box_hi, ub)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def simulated_cluster(workers: int, processes: int, timeout: float = 180.0) -> Iterator[tuple[str, int]]:
    """A Dask scheduler and ``min(workers, processes)`` worker processes of ``workers`` threads in all, started as
    subprocesses (``python -m distributed.cli.dask_scheduler`` / ``dask_worker``, one each, no nanny, no memory
    limit);
    yields (scheduler address, scheduler pid) and stops them on exit."""
    procs = min(workers, processes)
    if workers % procs:
        raise ValueError(f"{workers} simulated workers do not split evenly over {procs} processes")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=HERE.parent)
    started = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                 "--port", str(port), "--no-dashboard"], **quiet)]
    try:
        for _ in range(procs):  # one process each: --nworkers needs a nanny, one more process per worker
            started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                             "--nthreads", str(workers // procs), "--no-nanny", "--memory-limit",
                                             "0", "--no-dashboard"], **quiet))
        yield address, started[0].pid
    finally:
        for proc in reversed(started):
            proc.terminate()
        for proc in reversed(started):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def simulate_one(workers: int, args: argparse.Namespace, plan, state: SearchState) -> SimulatedRow:
    """The real coordinator on ``workers`` simulated workers for ``args.seconds`` seconds."""
    import distributed

    t0 = time.perf_counter()
    with simulated_cluster(workers, args.processes) as (address, scheduler_pid):
        deadline = time.perf_counter() + 180.0
        client = None
        while client is None:
            try:
                client = distributed.Client(address, timeout=10)
            except OSError:
                if time.perf_counter() > deadline:
                    raise
                time.sleep(0.5)
        with client:
            client.wait_for_workers(min(workers, args.processes), timeout=120)
            while sum(client.nthreads().values()) < workers:
                time.sleep(0.2)
            client.run(importlib.import_module, "certify.distributed._simulated")  # by name: importable there
            start_up = time.perf_counter() - t0
            task = functools.partial(simulated_batch, latency=args.latency, close_fraction=0.5)
            cpu0, sched0, wall0 = time.process_time(), _cpu_seconds(scheduler_pid), time.perf_counter()
            res = _run(plan, state, client, batch=args.batch, time_budget=args.seconds, max_in_flight=None,
                       checkpoint=None, checkpoint_every=5.0, progress=None, on_batch=None,
                       started=time.perf_counter(), task=task)
            wall = time.perf_counter() - wall0
            cpu, sched = time.process_time() - cpu0, _cpu_seconds(scheduler_pid) - sched0
    stats = res.details["dask"]
    batches = max(1, stats["batches_accepted"])
    ideal = workers / args.latency
    return SimulatedRow(
        workers=workers, processes=min(workers, args.processes), latency_s=args.latency, seconds=wall,
        batches=stats["batches_accepted"], boxes=res.boxes, batches_per_s=stats["batches_accepted"] / wall,
        boxes_per_s=res.boxes / wall, ideal_batches_per_s=ideal, utilisation=stats["batches_accepted"] / wall / ideal,
        coordinator_cpu_ms_per_batch=1e3 * cpu / batches, coordinator_cpu_share=cpu / wall,
        coordinator_loop_ms_per_batch=1e3 * stats["coordinator_seconds"] / batches,
        scheduler_cpu_ms_per_batch=1e3 * sched / batches, scheduler_cpu_share=sched / wall,
        frontier_end=int(res.details.get("open_boxes", -1)), start_up_s=start_up)


def simulate(args: argparse.Namespace) -> int:
    """The simulated sweep: print the table, write --json; exit status 0."""
    N, d, norm = args.N, args.d, args.norm
    entry = table_entry(N, d, norm)
    plan = plan_search(N, d, norm, {1: 1.0, **smaller_from_table(N, d, norm)}, entry["lower"], r=None, tol=args.tol,
                       second_order=True, third_order=False, split=True)
    dom = plan.setting.domain
    frontier = seeded_frontier(dom.lo, dom.hi, args.frontier)
    state = SearchState(frontier, -np.inf, entry["lower"], np.asarray(entry["witness"], dtype=np.float64),
                        0, 0, 0.0, 1)
    cores = os.cpu_count() or 1
    print(f"SIMULATED cluster: the workers only sleep {args.latency:g} s per batch of {args.batch} boxes and then "
          f"evaluate them trivially (no certificate); the coordinator is the real one, on a frontier of "
          f"{frontier.size} boxes of the c_{norm}({N}, {d}) domain; {args.seconds:g} s per point; scheduler and "
          f"workers in their own processes; {cores} cores", flush=True)
    rows = []
    for workers in args.sim_workers:
        rows.append(simulate_one(workers, args, plan, state))
        r = rows[-1]
        print(f"  {workers} simulated workers: {r.batches_per_s:.1f} batches/s of ideal {r.ideal_batches_per_s:.1f}",
              file=sys.stderr, flush=True)
    header = (f"{'sim. workers':>12} {'procs':>5} {'batches/s':>9} {'ideal':>7} {'util.':>6} {'boxes/s':>8} "
              f"{'coord. CPU ms/batch':>19} {'coord. CPU':>10} {'loop ms/batch':>13} {'sched. CPU ms/batch':>19} "
              f"{'sched. CPU':>10}")
    print(header)
    for r in rows:
        print(f"{r.workers:>12} {r.processes:>5} {r.batches_per_s:9.1f} {r.ideal_batches_per_s:7.1f} "
              f"{r.utilisation:6.0%} {r.boxes_per_s:8.0f} {r.coordinator_cpu_ms_per_batch:19.2f} "
              f"{r.coordinator_cpu_share:10.0%} {r.coordinator_loop_ms_per_batch:13.2f} "
              f"{r.scheduler_cpu_ms_per_batch:19.2f} {r.scheduler_cpu_share:10.0%}")
    print("(simulated workers: sleep + trivial evaluation; CPU shares are of one core)")
    if args.json is not None:
        args.json.write_text(json.dumps({"simulated": True, "N": N, "d": d, "norm": norm, "batch": args.batch,
                                         "latency_s": args.latency, "frontier": frontier.size, "cores": cores,
                                         "rows": [asdict(r) for r in rows]}, indent=1) + "\n")
    return 0


def table_entry(N: int, d: int, norm: str) -> dict:
    """The shipped table's entry for c_p(N, d) (its lower bound and witness seed the simulated coordinator)."""
    entries = json.loads(TABLE.read_text())["entries"]
    for e in entries:
        if (e["N"], e["d"], e["norm"]) == (N, d, norm):
            return e
    raise SystemExit(f"distributed.py: no table entry for c_{norm}({N}, {d})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--N", type=int, default=5)
    parser.add_argument("--d", type=int, default=1)
    parser.add_argument("--norm", choices=("2", "inf"), default="2")
    parser.add_argument("--tol", type=float, default=0.03)
    parser.add_argument("--batch", type=int, default=256, help="boxes per Dask task (default 256)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--time-budget", type=float, default=900.0)
    parser.add_argument("--json", type=Path, default=None, help="write the rows to FILE")
    parser.add_argument("--simulate", action="store_true",
                        help="a simulated cluster: sleeping workers, the real coordinator (see the module docstring)")
    parser.add_argument("--sim-workers", type=int, nargs="+", default=[1, 4, 16, 64, 256],
                        help="simulated worker counts (default 1 4 16 64 256)")
    parser.add_argument("--processes", type=int, default=8, help="worker processes at most, simulated (default 8)")
    parser.add_argument("--latency", type=float, default=0.4, help="seconds a simulated batch sleeps (default 0.4)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per simulated point (default 20)")
    parser.add_argument("--frontier", type=int, default=20_000, help="boxes in the simulated frontier (default 20000)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.simulate:
        return simulate(args)
    cores = os.cpu_count() or 1
    N, d, norm, tol = args.N, args.d, args.norm, args.tol
    smaller = smaller_from_table(N, d, norm)
    common = dict(tol=tol, time_budget=args.time_budget, smaller=smaller, batch=args.batch)
    print(f"workload: c_{norm}({N}, {d}) to tol {tol}, batches of {args.batch} boxes; {cores} cores", flush=True)
    rows = []
    t0 = time.perf_counter()
    single = global_l2_constant(N, d, norm, **common)
    rows.append(row("single process", 1, single, time.perf_counter() - t0, 0.0, cores, None))
    baseline = rows[0]["wall_s"]
    for workers in args.workers:
        t0 = time.perf_counter()
        with dask_client(workers) as client:
            client.wait_for_workers(workers, timeout=120)
            client.run(_import_certify)  # the workers' first import (torch, numba caches): not part of the search
            start_up = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = dask_global_l2_constant(N, d, norm, client, **common)
            wall = time.perf_counter() - t0
        rows.append(row("dask LocalCluster", workers, res, wall, start_up, cores, baseline))
    header = (f"{'engine':<18} {'workers':>7} {'wall s':>7} {'boxes':>7} {'batches':>7} {'speed-up':>8} "
              f"{'eff.':>5} {'eff/core':>8} {'coord. us/box':>13} {'start-up s':>10} {'upper':>9} {'lower':>9} ok")
    print(header)
    for r in rows:
        per_box = "-" if r["coordinator_us_per_box"] is None else f"{r['coordinator_us_per_box']:.0f}"
        ok = r["complete"] and r["upper"] >= r["lower"]
        note = " (oversubscribed)" if r["oversubscribed"] else ""
        print(f"{r['engine']:<18} {r['workers']:>7} {r['wall_s']:7.1f} {r['boxes']:>7} {str(r['batches']):>7} "
              f"{r['speed_up']:8.2f} {r['efficiency']:5.0%} {r['efficiency_per_core']:8.0%} {per_box:>13} "
              f"{r['start_up_s']:10.1f} {r['upper']:9.6f} {r['lower']:9.6f} {ok}{note}")
    if args.json is not None:
        args.json.write_text(json.dumps({"N": N, "d": d, "norm": norm, "tol": tol, "batch": args.batch,
                                         "cores": cores, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["complete"] and r["upper"] >= r["lower"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
