"""The tightness sweep on the Dask engine (certify.distributed.dask_tightness, issue 19 item 3; MATH.md section 5).

Rows computed as work units on a LocalCluster equal the serial ``tightness`` rows (a deterministic search:
``seconds=None``, restarts x steps), in the serial order. A coordinator stopped after two rows leaves a checkpoint of
exactly those rows, and ``resume`` computes only the others, with the same final rows. Damaged checkpoints, those of
another sweep and unreachable schedulers are refused with a message (exit status 2 on the command line).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from certify import CheckpointError
from certify.adversarial import TightnessRow, tightness, tightness_points
from certify.adversarial._tightness import check_against_uppers
from certify.cli import main
from certify.distributed import dask_client, dask_tightness, load_sweep, run_sweep
from certify.distributed._sweep import tightness_job

SEARCH = dict(seconds=None, restarts=4, steps=30)
"""A deterministic search (no time budget), small enough for a test."""


def comparable(row: TightnessRow) -> dict:
    """A row without its wall time (``seconds``), which no two runs share."""
    out = dataclasses.asdict(row)
    out.pop("seconds")
    return out


@pytest.fixture(scope="module")
def client():
    with dask_client(2) as c:
        c.wait_for_workers(2, timeout=60)
        yield c


@pytest.fixture(scope="module")
def serial():
    return tightness("unit", ("inf", "2"), max_tokens=4, **SEARCH) + tightness("dp", ("2",), points=[(8, 1.0)],
                                                                               **SEARCH)


def points():
    return tightness_points("unit", ("inf", "2"), 4) + tightness_points("dp", ("2",), points=[(8, 1.0)])


def test_rows_on_the_cluster_equal_the_serial_rows(client, serial):
    sweep = dask_tightness(points(), client, **SEARCH)
    assert [comparable(r) for r in sweep.results] == [comparable(r) for r in serial]
    check_against_uppers(sweep.results)
    assert sweep.stats.computed == 5 and sweep.stats.resumed == 0 and sweep.stats.workers == 2


class Stop(Exception):
    """The coordinator stops (as if killed) after some rows."""


def test_a_stopped_sweep_resumes_with_the_serial_rows(client, serial, tmp_path):
    path = tmp_path / "sweep.json"
    seen = []

    def stop_after_two(row: TightnessRow) -> None:
        seen.append(row)
        if len(seen) == 2:
            raise Stop

    with pytest.raises(Stop):
        dask_tightness(points(), client, checkpoint=path, on_row=stop_after_two, **SEARCH)
    job = tightness_job(None, False, 0, None, None, {"restarts": 4, "steps": 30})
    done = load_sweep(path, job)
    assert sorted(done) == sorted(r.config + f"/N={r.N}/R={'-' if r.radius is None else r.radius}/{r.norm}"
                                  for r in seen)
    resumed = dask_tightness(points(), client, checkpoint=path, resume=True, **SEARCH)
    assert resumed.stats.resumed == 2 and resumed.stats.computed == 3
    assert [comparable(r) for r in resumed.results] == [comparable(r) for r in serial]
    assert len(load_sweep(path, job)) == 5
    again = dask_tightness(points(), None, checkpoint=path, resume=True, **SEARCH)  # nothing left: no work
    assert again.stats.computed == 0 and [comparable(r) for r in again.results] == [comparable(r) for r in serial]


def test_in_process_sweep_checkpoints_each_row(tmp_path):
    path = tmp_path / "sweep.json"
    counts = []
    sweep = run_sweep([3, 1, 2], lambda x: {"square": x * x}, None, key=str, job={"sweep": "squares"},
                      encode=dict, decode=dict, checkpoint=path,
                      on_result=lambda unit, result: counts.append(len(json.loads(path.read_text())["done"])))
    assert sweep.results == [{"square": 9}, {"square": 1}, {"square": 4}]
    assert counts == [1, 2, 3]


def write_stopped(path) -> dict:
    job = {"sweep": "squares"}
    with pytest.raises(Stop):
        run_sweep([1, 2, 3], lambda x: {"square": x * x}, None, key=str, job=job, encode=dict, decode=dict,
                  checkpoint=path, on_result=lambda unit, result: (_ for _ in ()).throw(Stop()) if unit == 2 else None)
    return job


def test_damaged_or_foreign_checkpoints_are_refused(tmp_path):
    path = tmp_path / "sweep.json"
    job = write_stopped(path)
    assert load_sweep(path, job) == {"1": {"square": 1}, "2": {"square": 4}}
    text = path.read_text()
    path.write_text(text.replace('"square": 4', '"square": 5'))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_sweep(path, job)
    path.write_text(text)
    with pytest.raises(CheckpointError, match=r"another sweep \(differs in \['sweep'\]\)"):
        run_sweep([1], lambda x: x, None, key=str, job={"sweep": "cubes"}, encode=dict, decode=dict,
                  checkpoint=path, resume=True)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(CheckpointError, match="not a certify sweep checkpoint"):
        load_sweep(path, job)
    with pytest.raises(CheckpointError, match="no such file"):
        load_sweep(tmp_path / "missing.json", job)
    path.write_text(json.dumps({"format": "certify.global_l2.checkpoint/1"}))
    with pytest.raises(CheckpointError, match="checkpoint format"):
        load_sweep(path, job)


def test_cli_checkpoint_and_resume(tmp_path, capsys):
    path, out = tmp_path / "t.json", tmp_path / "figs"
    args = ["tightness", "--config", "unit", "--norm", "inf", "--max-tokens", "2", "--seconds", "0.3", "--quiet",
            "--out", str(out)]
    assert main(args + ["--checkpoint", str(path)]) == 0
    first = capsys.readouterr().out
    done = json.loads(path.read_text())["done"]
    assert list(done) == ["unit/N=2/R=-/inf"]
    assert main(args + ["--resume", str(path)]) == 0  # the row comes from the file: the same table
    assert capsys.readouterr().out == first
    assert main(args[:-5] + ["--seconds", "0.4", "--quiet", "--out", str(out), "--resume", str(path)]) == 2
    assert "another sweep (differs in ['seconds'])" in capsys.readouterr().err
    path.write_text("{")
    assert main(args + ["--resume", str(path)]) == 2
    assert "is not a certify sweep checkpoint" in capsys.readouterr().err


def test_cli_refuses_an_unreachable_scheduler(tmp_path, capsys):
    assert main(["tightness", "--max-tokens", "2", "--quiet", "--out", str(tmp_path), "--scheduler",
                 "tcp://127.0.0.1:9", "--scheduler-timeout", "1"]) == 2
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in capsys.readouterr().err


def test_units_lost_with_their_workers_run_again_and_count_once(client, tmp_path):
    """Unit 1 kills its worker process on its first five attempts: Dask runs it again on the restarted workers,
    then gives up (KilledWorker, after the scheduler's allowed failures), and the sweep submits it once more. Every
    unit's result is taken once, and the checkpoint holds each."""
    counter = tmp_path / "attempts"
    counter.write_text("0")

    def work(x: int) -> dict:  # local, so pickled by value (the workers cannot import this test module)
        import os

        if x == 1:
            attempts = int(counter.read_text()) + 1
            counter.write_text(str(attempts))
            if attempts <= 5:
                os._exit(1)
        return {"square": x * x}

    path = tmp_path / "sweep.json"
    taken = []
    sweep = run_sweep([0, 1, 2], work, client, key=str, job={"sweep": "killing squares"}, encode=dict, decode=dict,
                      checkpoint=path, on_result=lambda unit, result: taken.append(unit))
    assert sweep.results == [{"square": 0}, {"square": 1}, {"square": 4}]
    assert sorted(taken) == [0, 1, 2] and sweep.stats.computed == 3
    assert sweep.stats.resubmitted >= 1 and int(counter.read_text()) == 6
    assert load_sweep(path, {"sweep": "killing squares"}) == {"0": {"square": 0}, "1": {"square": 1},
                                                              "2": {"square": 4}}
    client.wait_for_workers(2, timeout=120)  # the nannies restart the killed workers


def test_cli_runs_the_rows_on_a_cluster(client, tmp_path, capsys):
    """certify tightness --scheduler ADDRESS: the rows as work units on the running cluster, checkpointed."""
    path = tmp_path / "t.json"
    assert main(["tightness", "--config", "dp", "--norm", "2", "--seconds", "0.3", "--quiet", "--out",
                 str(tmp_path), "--scheduler", client.scheduler.address, "--checkpoint", str(path)]) == 0
    assert "tightness, config dp" in capsys.readouterr().out
    assert len(json.loads(path.read_text())["done"]) == 7  # R = 1, 2, ..., 64
