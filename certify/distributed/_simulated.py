"""A simulated work unit for timing the coordinator of the Dask engine alone (benchmarks/distributed.py --simulate):
it sleeps instead of bounding boxes, and its result is no certificate. It lives in the package so that workers of a
separately started cluster import it by name, as they import ``_tasks.evaluate_batch``."""

from __future__ import annotations

import time

import numpy as np

from ..bounds.global_l2 import BoxEvaluation, BoxSetting


def box_hash(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A deterministic number in [0, 1) per box [lo, hi] (B, L), the same wherever it is computed."""
    L = lo.shape[1]
    weights = np.sqrt(np.arange(2, 2 * L + 2, dtype=np.float64))
    x = np.concatenate([lo, hi], axis=1) @ weights
    return np.modf(np.abs(np.sin(x * 12.9898)) * 43758.5453)[0]


def simulated_batch(lo: np.ndarray, hi: np.ndarray, parent_ub: np.ndarray, threshold: float, setting: BoxSetting, *,
                    latency: float, close_fraction: float = 0.5) -> BoxEvaluation:
    """The simulated work unit (the signature of ``_tasks.evaluate_batch``): sleep ``latency`` seconds, then close
    the boxes whose ``box_hash`` is below ``close_fraction`` and return the others open with their parent's bound
    (capped at 10, so finite), centre norms 0 (the lower bound never moves) and equal split scores. Each open box
    becomes two children, so with ``close_fraction`` 0.5 the frontier stays about as large as it started. Not a
    bound of anything."""
    time.sleep(latency)
    keep = box_hash(lo, hi) >= close_fraction
    ub = np.minimum(parent_ub, 10.0)[keep]
    closed = -np.inf if keep.all() else 0.5 * threshold
    return BoxEvaluation(lo[keep], hi[keep], ub, np.zeros(ub.shape), np.ones(lo[keep].shape), closed, lo.shape[0])
