"""The frontier of the global L2 branch and bound and one refinement step (MATH.md section 7), shared by the
single-process search (``_search.global_l2_constant``) and the Dask engine (``certify.distributed``).

The invariant both engines keep: every r-connected configuration of the domain (modulo symmetry) lies in a closed
box, whose bound is at most ``closed_max``, or in a box of the frontier (or of a batch in flight), whose ``ub`` bounds
||M||_p over it. Hence

    c_p(N, d) <= max( closed_max, max ub over the frontier and the batches in flight, tail term ),

at every moment, which is why a run stopped at any batch boundary (time budget, Ctrl-C, a lost coordinator resumed
from a checkpoint) still has a certified value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._enclosure import Parametrisation
from ._lower import core_norm


@dataclass(frozen=True)
class Frontier:
    """Open boxes [lo, hi] (B, L) of parameters theta, each with a certified bound ``ub`` (B,) on max ||M||_p over
    it (inf for the root box)."""

    lo: np.ndarray
    hi: np.ndarray
    ub: np.ndarray

    @staticmethod
    def root(lo: np.ndarray, hi: np.ndarray) -> "Frontier":
        """The whole domain [lo, hi] (L,) as one box with bound inf."""
        return Frontier(np.asarray(lo, dtype=np.float64)[None].copy(), np.asarray(hi, dtype=np.float64)[None].copy(),
                        np.array([np.inf]))

    @staticmethod
    def concatenate(parts: list["Frontier"]) -> "Frontier":
        return Frontier(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("lo", "hi", "ub")))

    @property
    def size(self) -> int:
        return int(self.ub.shape[0])

    @property
    def max(self) -> float:
        """max ub (-inf when empty): the frontier's part of the certified value."""
        return float(self.ub.max()) if self.ub.size else -np.inf

    def take(self, batch: int) -> tuple["Frontier", "Frontier"]:
        """(the ``batch`` boxes with the largest bounds, the rest): best first, so the certified value falls
        steadily. All boxes when there are at most ``batch``."""
        if self.size <= batch:
            return self, Frontier(self.lo[:0], self.hi[:0], self.ub[:0])
        top = np.argpartition(-self.ub, batch)[:batch]
        rest = np.ones(self.size, dtype=bool)
        rest[top] = False
        return (Frontier(self.lo[top], self.hi[top], self.ub[top]),
                Frontier(self.lo[rest], self.hi[rest], self.ub[rest]))


@dataclass(frozen=True)
class Refinement:
    """What one evaluated batch changes: the (possibly raised) attained ``lower`` with its ``witness``, the largest
    bound of the boxes closed below (1 + tol) lower (-inf if none), and the children of the boxes left open."""

    lower: float
    witness: np.ndarray
    closed_max: float
    children: Frontier


def refine(lo: np.ndarray, hi: np.ndarray, ub: np.ndarray, centre_norm: np.ndarray, scores: np.ndarray,
           lower: float, witness: np.ndarray, par: Parametrisation, norm: str, tol: float) -> Refinement:
    """One step of the branch and bound on the boxes an evaluation left open (``_search.BoxEvaluation``).

    The lower bound rises to ||M(Y_c)||_p (float64) at the best box centre Y_c when that is larger. Then boxes with
    ub <= (1 + tol) lower are closed, and each other box is bisected along the axis l with the largest score (its
    bound's error contribution, h_l ||dM/dtheta_l|| or the Taylor analogue); both halves keep the box's bound.
    """
    if lo.shape[0] == 0:
        return Refinement(lower, witness, -np.inf, Frontier(lo, hi, ub))
    k_best = int(np.argmax(centre_norm))
    if centre_norm[k_best] > lower:
        Yc = par.points((0.5 * lo[k_best] + 0.5 * hi[k_best])[None])[0]
        value = core_norm(Yc, norm)
        if value > lower:
            lower, witness = value, Yc - Yc[0]
    threshold = lower * (1.0 + tol)
    done = ub <= threshold
    closed_max = float(ub[done].max()) if done.any() else -np.inf
    lo, hi, ub, scores = lo[~done], hi[~done], ub[~done], scores[~done]
    if lo.shape[0] == 0:
        return Refinement(lower, witness, closed_max, Frontier(lo, hi, ub))
    axis = np.argmax(scores * (hi - lo > 0), axis=1)
    rows = np.arange(lo.shape[0])
    midpoint = 0.5 * lo[rows, axis] + 0.5 * hi[rows, axis]
    hi_left, lo_right = hi.copy(), lo.copy()
    hi_left[rows, axis] = midpoint
    lo_right[rows, axis] = midpoint
    return Refinement(lower, witness, closed_max,
                      Frontier(np.concatenate([lo, lo_right]), np.concatenate([hi_left, hi]), np.concatenate([ub, ub])))
