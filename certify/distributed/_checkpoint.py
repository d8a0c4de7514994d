"""Checkpoints of the global L2 branch and bound (MATH.md section 7): the frontier, the running bound, the
counters and the problem, written atomically, so that a stopped run (Ctrl-C, time budget, a killed coordinator)
resumes where the last checkpoint left it (``resume_global_l2_constant``).

A checkpoint is taken at a batch boundary, where the invariant of ``certify.bounds.global_l2._frontier`` holds:
every r-connected configuration lies in a closed box (bound <= ``closed_max``) or in an open box. The batches in
flight are written as open boxes with their parent's bound; on resume they are evaluated again, and counted once,
when their results arrive. The file is a numpy ``.npz`` (no pickled objects: loaded with ``allow_pickle=False``)
with the boxes as arrays, the rest as JSON, and a SHA-256 of the arrays. It is trusted like the table of constants:
the resumed certificate is as valid as the boxes and ``closed_max`` the file holds.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import CheckpointError
from ..bounds.global_l2 import Frontier

FORMAT = "certify.global_l2.checkpoint/1"
ARRAYS = ("lo", "hi", "ub", "witness")


@dataclass(frozen=True)
class SearchState:
    """A branch and bound at a batch boundary: the open boxes (``frontier``, batches in flight included, with their
    parents' bounds), the largest bound of the closed boxes (-inf if none), the attained ``lower`` bound
    ||M(witness)||_p, the boxes evaluated and batches accepted so far, the wall seconds spent over all runs, and the
    number of runs (1 + resumes)."""

    frontier: Frontier
    closed_max: float
    lower: float
    witness: np.ndarray
    boxes: int
    batches: int
    seconds: float
    runs: int


@dataclass(frozen=True)
class Checkpoint:
    """The problem (c_p(N, d) with tolerance ``tol``, cluster radius ``r``, the certified c_p(s, d) for s < N in
    ``smaller``, the box forms and the batch size) and its ``state``."""

    N: int
    d: int
    norm: str
    tol: float
    r: float
    smaller: dict[int, float]
    second_order: bool
    third_order: bool
    split: bool
    batch: int
    state: SearchState


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in ARRAYS:
        a = np.ascontiguousarray(arrays[name], dtype=np.float64)
        h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def save_checkpoint(path: str | os.PathLike, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically: a temporary file beside it, flushed to disk, then ``os.replace``
    (a reader, or a coordinator killed mid-write, sees the old file or the new one, never a partial one)."""
    path = Path(path)
    state = checkpoint.state
    arrays = {"lo": state.frontier.lo, "hi": state.frontier.hi, "ub": state.frontier.ub,
              "witness": np.asarray(state.witness, dtype=np.float64)}
    meta = {"format": FORMAT, "N": checkpoint.N, "d": checkpoint.d, "norm": checkpoint.norm, "tol": checkpoint.tol,
            "r": checkpoint.r, "smaller": {str(s): c for s, c in checkpoint.smaller.items()},
            "second_order": checkpoint.second_order, "third_order": checkpoint.third_order,
            "split": checkpoint.split, "batch": checkpoint.batch, "closed_max": state.closed_max,
            "lower": state.lower, "boxes": state.boxes, "batches": state.batches, "seconds": state.seconds,
            "runs": state.runs, "sha256": _digest(arrays)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; ``CheckpointError`` saying what is wrong otherwise
    (missing or unreadable file, not a checkpoint, another format, arrays that do not match their digest or shapes)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic != b"PK\x03\x04":
            raise CheckpointError(f"{path} is not a certify branch-and-bound checkpoint (not an .npz archive)")
        with np.load(path, allow_pickle=False) as data:
            if "meta" not in data.files:
                raise CheckpointError(f"{path} is not a certify branch-and-bound checkpoint (no 'meta' entry)")
            meta = json.loads(str(data["meta"]))
            missing = [name for name in ARRAYS if name not in data.files]
            if missing:
                raise CheckpointError(f"{path}: checkpoint lacks the arrays {missing}")
            arrays = {name: np.asarray(data[name], dtype=np.float64) for name in ARRAYS}
    except CheckpointError:
        raise
    except FileNotFoundError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: no such file") from error
    except IsADirectoryError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: it is a directory") from error
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error}") from error
    except (ValueError, zipfile.BadZipFile, EOFError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not a certify branch-and-bound checkpoint ({error})") from error
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, expected {FORMAT!r}")
    if meta.get("sha256") != _digest(arrays):
        raise CheckpointError(f"{path}: the boxes do not match the checkpoint's SHA-256 (corrupted file)")
    lo, hi, ub = arrays["lo"], arrays["hi"], arrays["ub"]
    if lo.ndim != 2 or hi.shape != lo.shape or ub.shape != lo.shape[:1]:
        raise CheckpointError(f"{path}: boxes of shapes lo {lo.shape}, hi {hi.shape}, ub {ub.shape}; expected "
                              "(B, L), (B, L), (B,)")
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo <= hi).all() and not np.isnan(ub).any()):
        raise CheckpointError(f"{path}: boxes with lo > hi or non-finite entries, or bounds that are NaN")
    try:
        state = SearchState(Frontier(lo, hi, ub), float(meta["closed_max"]), float(meta["lower"]),
                            arrays["witness"], int(meta["boxes"]), int(meta["batches"]), float(meta["seconds"]),
                            int(meta["runs"]))
        checkpoint = Checkpoint(int(meta["N"]), int(meta["d"]), str(meta["norm"]), float(meta["tol"]),
                                float(meta["r"]), {int(s): float(c) for s, c in meta["smaller"].items()},
                                bool(meta["second_order"]), bool(meta["third_order"]), bool(meta["split"]),
                                int(meta["batch"]), state)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(f"{path}: checkpoint metadata incomplete or malformed ({error!r})") from error
    if checkpoint.norm not in ("2", "inf") or checkpoint.N < 2 or math.isnan(state.closed_max):
        raise CheckpointError(f"{path}: checkpoint for an invalid problem (N = {checkpoint.N}, norm = "
                              f"{checkpoint.norm!r})")
    if state.witness.shape != (checkpoint.N, checkpoint.d):
        raise CheckpointError(f"{path}: witness of shape {state.witness.shape}, expected ({checkpoint.N}, "
                              f"{checkpoint.d})")
    return checkpoint
