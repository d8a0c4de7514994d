"""The Dask engine of the global L2 branch and bound (certify.distributed, MATH.md section 7, issue 19).

The certified value is checked against the single-process search (``global_l2_constant``) and against attained
lower bounds that do not come from the engine: the shipped table's ``lower`` (||M(witness)||_p in float64) and a
fresh ``search_lower``. Faults are real: a worker process of a LocalCluster is killed mid-run, and the coordinator is
stopped mid-run (an exception after K batches, after which only the periodic checkpoint is left) and resumed.
A fake client (tasks run in-process) checks the bookkeeping deterministically: a batch whose task fails on lost
workers is sent again and counted once.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from certify import CheckpointError, ClusterError
from certify.bounds.global_l2 import Frontier, core_norm, global_l2_constant
from certify.bounds.global_l2._lower import search_lower
from certify.distributed import (
    Checkpoint,
    SearchState,
    dask_client,
    dask_global_l2_constant,
    load_checkpoint,
    resume_global_l2_constant,
    save_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "certify" / "data" / "universal_constants.json"


@functools.cache
def known_lower(N: int, d: int, norm: str) -> float:
    """The largest attained ||M(Y)||_p we know: the shipped table's witness value and a fresh local search."""
    entry = next(e for e in json.loads(TABLE.read_text())["entries"] if (e["N"], e["d"], e["norm"]) == (N, d, norm))
    return max(entry["lower"], search_lower(N, d, norm, restarts=4, seed=1)[0])


def assert_certificate(res, N: int, d: int, norm: str, tol: float) -> None:
    """A complete certificate: above every known lower bound, and within (1 + tol) of its own lower bound."""
    assert res.complete
    assert res.upper >= known_lower(N, d, norm)
    assert res.lower <= res.upper <= res.lower * (1.0 + tol) + 1e-12


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two worker processes, one thread each (the engine's default)."""
    with dask_client(2) as c:
        c.wait_for_workers(2, timeout=60)
        yield c


# -- same certificate as the single-process search --------------------------------------------------------------

def test_one_batch_in_flight_makes_the_single_process_steps(client):
    single = global_l2_constant(3, 1, "inf", tol=0.01, batch=16)
    dask = dask_global_l2_constant(3, 1, "inf", client, tol=0.01, batch=16, max_in_flight=1)
    assert (dask.upper, dask.lower, dask.boxes, dask.complete) == (single.upper, single.lower, single.boxes, True)
    assert dask.details["dask"]["ignored"] == 0


def test_two_workers_certify_the_same_value(client):
    N, d, norm, tol = 3, 1, "2", 0.004
    single = global_l2_constant(N, d, norm, tol=tol, batch=32)
    dask = dask_global_l2_constant(N, d, norm, client, tol=tol, batch=32)
    assert dask.details["dask"]["workers"] == 2 and dask.details["dask"]["max_in_flight"] == 4
    assert_certificate(single, N, d, norm, tol)
    assert_certificate(dask, N, d, norm, tol)
    assert abs(dask.upper - single.upper) <= tol * single.lower
    assert dask.tail == single.tail and dask.r == single.r


# -- faults ------------------------------------------------------------------------------------------------------

def test_a_killed_worker_loses_no_box(client):
    """One worker process is killed (SIGKILL) while it holds a batch; Dask runs its task again elsewhere."""
    N, d, norm, tol = 3, 1, "2", 0.004
    killed = []

    def kill_a_busy_worker(k: int) -> None:
        if k >= 5 and not killed:  # once the frontier is wide enough to keep both workers busy
            busy = {w: len(keys) for w, keys in client.processing().items() if keys}
            if busy:
                worker = max(busy, key=busy.get)
                killed.append((worker, busy[worker]))
                os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)

    res = dask_global_l2_constant(N, d, norm, client, tol=tol, batch=16, on_batch=kill_a_busy_worker)
    assert killed and killed[0][1] > 0  # it held at least one batch when it died
    assert_certificate(res, N, d, norm, tol)
    stats = res.details["dask"]
    assert stats["ignored"] == 0
    assert stats["batches_accepted"] == res.details["batches"]
    single = global_l2_constant(N, d, norm, tol=tol, batch=16)
    assert abs(res.upper - single.upper) <= tol * single.lower
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it


class SimulatedCrash(Exception):
    """Stands for a killed coordinator: raised from the batch hook, so no final checkpoint is written."""


def test_stopped_coordinator_resumes_from_its_checkpoint(client, tmp_path):
    N, d, norm, tol = 3, 1, "inf", 0.004
    path = tmp_path / "search.npz"

    def crash(k: int) -> None:
        if k >= 12 and path.exists():
            raise SimulatedCrash

    with pytest.raises(SimulatedCrash):
        dask_global_l2_constant(N, d, norm, client, tol=tol, batch=16, checkpoint=path, checkpoint_every=0.0,
                                on_batch=crash)
    saved = load_checkpoint(path)
    assert (saved.N, saved.d, saved.norm, saved.tol) == (N, d, norm, tol)
    assert saved.state.frontier.size > 0 and 0 < saved.state.batches <= 12
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]  # no temporary file left behind
    res = resume_global_l2_constant(path, client)
    assert_certificate(res, N, d, norm, tol)
    assert res.details["runs"] == 2 and res.boxes > saved.state.boxes
    assert res.details["batches"] == saved.state.batches + res.details["dask"]["batches_accepted"]
    single = global_l2_constant(N, d, norm, tol=tol, batch=16)
    assert abs(res.upper - single.upper) <= tol * single.lower
    assert load_checkpoint(path).state.frontier.size == 0  # the final checkpoint: nothing left open


def test_ctrl_c_keeps_a_certified_bound_and_resumes(client, tmp_path):
    N, d, norm, tol = 3, 1, "2", 0.004
    path = tmp_path / "interrupted.npz"

    def interrupt(k: int) -> None:
        if k == 6:
            raise KeyboardInterrupt

    stopped = dask_global_l2_constant(N, d, norm, client, tol=tol, batch=16, checkpoint=path, on_batch=interrupt)
    assert not stopped.complete and stopped.details["interrupted"]
    assert np.isfinite(stopped.upper) and stopped.upper >= known_lower(N, d, norm)
    saved = load_checkpoint(path)  # written at the stop, batches in flight included as open boxes
    assert saved.state.frontier.max == pytest.approx(stopped.details["open_max"])
    res = resume_global_l2_constant(path, client, checkpoint=tmp_path / "next.npz")
    assert_certificate(res, N, d, norm, tol)
    assert res.upper <= stopped.upper


# -- bookkeeping with a fake client: a batch lost with its workers is sent again and counted once ----------------

class KilledWorker(Exception):
    """Named like distributed.scheduler.KilledWorker, which the engine recognises by name."""


class FakeFuture:
    def __init__(self, value=None, error=None):
        self.status = "error" if error is not None else "finished"
        self._value, self._error = value, error

    def result(self):
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self):
        return self._error

    def add_done_callback(self, callback) -> None:
        callback(self)


class FakeClient:
    """Runs each task at once in this process; the tasks numbered in ``lose`` fail with KilledWorker."""

    def __init__(self, lose: set[int]):
        self.lose, self.calls = lose, 0

    def nthreads(self) -> dict[str, int]:
        return {"w0": 1, "w1": 1}

    def submit(self, fn, *args, key=None, pure=None) -> FakeFuture:
        self.calls += 1
        if self.calls in self.lose:
            return FakeFuture(error=KilledWorker(key))
        return FakeFuture(value=fn(*args))

    def cancel(self, futures) -> None:
        pass


def test_lost_batches_are_sent_again_and_counted_once():
    single = global_l2_constant(3, 1, "inf", tol=0.01, batch=16)
    res = dask_global_l2_constant(3, 1, "inf", FakeClient(lose={2, 5, 6}), tol=0.01, batch=16, max_in_flight=1,
                                  smaller=single.details["smaller"])  # tasks 2, 5, 6 are then of this search
    stats = res.details["dask"]
    assert stats["resubmitted"] == 3 and stats["ignored"] == 0
    assert stats["batches_submitted"] == stats["batches_accepted"] + 3
    assert (res.upper, res.boxes) == (single.upper, single.boxes)  # the same steps, each box once


# -- checkpoint files --------------------------------------------------------------------------------------------

def small_checkpoint() -> Checkpoint:
    rng = np.random.default_rng(0)
    lo = rng.uniform(0, 1, size=(5, 2))
    frontier = Frontier(lo, lo + 0.1, rng.uniform(2, 3, size=5))
    state = SearchState(frontier, 2.0, 1.9, np.zeros((3, 1)), 40, 3, 1.5, 1)
    return Checkpoint(3, 1, "2", 0.01, 2.5, {1: 1.0, 2: 1.61}, True, False, True, 16, state)


def test_checkpoint_round_trip_is_exact(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, small_checkpoint())
    back = load_checkpoint(path)
    want = small_checkpoint()
    assert back.state.frontier.lo.tobytes() == want.state.frontier.lo.tobytes()
    assert back.state.frontier.ub.tobytes() == want.state.frontier.ub.tobytes()
    assert (back.N, back.tol, back.r, back.smaller, back.batch) == (want.N, want.tol, want.r, want.smaller, want.batch)
    assert (back.state.closed_max, back.state.boxes, back.state.batches) == (2.0, 40, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


@pytest.mark.parametrize("damage,message", [
    ("missing", "no such file"),
    ("text", "not an .npz archive"),
    ("truncated", "is not a certify branch-and-bound checkpoint"),
    ("tampered", "SHA-256"),
])
def test_unreadable_checkpoints_are_refused(tmp_path, damage, message):
    path = tmp_path / "c.npz"
    if damage != "missing":
        save_checkpoint(path, small_checkpoint())
        data = path.read_bytes()
        if damage == "text":
            path.write_text("not a checkpoint")
        elif damage == "truncated":
            path.write_bytes(data[: len(data) // 2])
        else:
            with np.load(path) as z:
                arrays = {k: z[k] for k in z.files}
            arrays["ub"] = arrays["ub"] - 1.0  # bounds lowered behind the digest's back
            with open(path, "wb") as f:
                np.savez(f, **arrays)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


# -- the command that computes the table -------------------------------------------------------------------------

def universal_constants_script():
    spec = importlib.util.spec_from_file_location("universal_constants", ROOT / "benchmarks" / "universal_constants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_refuses_an_unreadable_checkpoint(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_text("garbage")
    script = universal_constants_script()
    assert script.main(["--resume", str(bad), "--no-write"]) == 2
    assert f"error: {bad} is not a certify branch-and-bound checkpoint (not an .npz archive)" in capsys.readouterr().err


def test_cli_refuses_an_unreachable_scheduler(capsys):
    script = universal_constants_script()
    assert script.main(["--N", "2", "--d", "1", "--norm", "2", "--scheduler", "tcp://127.0.0.1:9",
                        "--scheduler-timeout", "1", "--no-write"]) == 2
    assert "error: cannot reach the Dask scheduler at 'tcp://127.0.0.1:9' within 1 s" in capsys.readouterr().err
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler"):
        with dask_client(scheduler="tcp://127.0.0.1:9", timeout=1):
            pass


def test_cli_checkpoint_then_resume_writes_the_entry(client, tmp_path):
    """--checkpoint then --resume through the script, on the running cluster (--scheduler ADDRESS)."""
    script = universal_constants_script()
    out, path = tmp_path / "table.json", tmp_path / "c.npz"
    out.write_text(TABLE.read_text())
    address = client.scheduler.address
    assert script.main(["--N", "2", "--d", "1", "--norm", "inf", "--checkpoint", str(path), "--time-budget", "0",
                        "--scheduler", address, "--out", str(out)]) == 0
    assert load_checkpoint(path).state.frontier.size == 1  # stopped before the first batch: the root box
    assert script.main(["--resume", str(path), "--scheduler", address, "--out", str(out)]) == 0
    entry = next(e for e in json.loads(out.read_text())["entries"] if (e["N"], e["d"], e["norm"]) == (2, 1, "inf"))
    assert entry["complete"] and entry["upper"] >= known_lower(2, 1, "inf")
    assert entry["command"].endswith("--resume FILE (2 runs)")


def test_table_rows_of_the_dask_engine_say_whether_they_are_at_target():
    """Rows added with the Dask engine (issue 19 item 4) carry their worker count, command and status; a row that is
    not at the issue's target says so, and its ratio is the one of the value the table ships."""
    script = universal_constants_script()
    rows = [e for e in json.loads(TABLE.read_text())["entries"] if "status" in e]
    assert {(e["N"], e["d"]) for e in rows} >= {(7, 1)}
    for e in rows:
        ratio = e["upper"] / e["lower"]
        target = script.TARGETS.get((e["N"], e["d"]))
        at_target = e["complete"] and (target is None or ratio <= target)
        assert e["at_target"] == at_target and e["status"].startswith("complete" if at_target else "not at target")
        assert f"ratio {ratio:.4f}" in e["status"]
        assert e["workers"] >= 1
        assert f"--workers {e['workers']}" in e["command"] or (e["workers"] == 1 and "--workers" not in e["command"])
        attained = core_norm(np.asarray(e["witness"], dtype=np.float64), e["norm"])  # the lower bound is attained
        assert attained == pytest.approx(e["lower"], rel=1e-12) and e["upper"] >= attained
