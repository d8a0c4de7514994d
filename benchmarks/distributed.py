"""Scaling of the Dask engine of the global L2 branch and bound (certify.distributed; MATH.md section 7, issue 19).

One fixed workload, c_p(N, d) to a fixed tolerance (default c_2(5, 1) at tol 0.03, the smaller constants taken from
the shipped table as ``universal_constants.py`` does), certified by:

- the single-process search (``global_l2_constant``, the baseline);
- the Dask engine on a LocalCluster of 1, 2 and 4 worker processes (one thread each; 4 oversubscribes a 2-core
  machine, which the table says).

For each: wall seconds of the search (cluster start-up and the workers' first import of certify are timed apart),
boxes, batches, speed-up and efficiency against the single-process run (efficiency = speed-up / workers, and per
core = speed-up / min(workers, cores)), the coordinator's busy time (taking batches, refining, submitting: everything
but waiting for results) per box, and the certified upper / attained lower bound. Every row's certificate must be
complete and at least the attained lower bound; the script says so.

    python benchmarks/distributed.py                       # c_2(5, 1), tol 0.03; 1, 2, 4 workers
    python benchmarks/distributed.py --N 4 --tol 0.004 --workers 1 2 --json out.json

Runs with OMP_NUM_THREADS=1 (set here, and by Dask in its workers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# this file is named like the `distributed` package: take its folder off the path, or `import distributed` finds it
HERE = Path(__file__).resolve().parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402

from certify.bounds.global_l2 import global_l2_constant  # noqa: E402
from certify.distributed import dask_client, dask_global_l2_constant  # noqa: E402

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
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
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
