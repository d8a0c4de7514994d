"""The work unit the Dask workers run: one batch of boxes through ``evaluate_boxes`` (MATH.md section 7)."""

from __future__ import annotations

import numpy as np

from .._memory import retain_freed_memory
from ..bounds.global_l2 import BoxEvaluation, BoxSetting, evaluate_boxes


def evaluate_batch(lo: np.ndarray, hi: np.ndarray, parent_ub: np.ndarray, threshold: float,
                   setting: BoxSetting) -> BoxEvaluation:
    """Certified bounds on max ||M||_p over the boxes [lo, hi] (B, L) of one batch, each capped by its parent's
    bound, with boxes at most ``threshold`` closed on the worker (``certify.bounds.global_l2.evaluate_boxes``; the
    same function the single-process search calls). A pure function of its arguments, so a batch whose worker died
    can be run again anywhere with the same result."""
    retain_freed_memory()  # once per worker process (see certify/_memory.py)
    return evaluate_boxes(lo, hi, parent_ub, threshold, setting)
