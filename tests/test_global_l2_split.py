"""Soundness of the split bound of the global L2 branch and bound (MATH.md section 7, proofs/split_bound.py).

The remainder E = M(Y) - blockdiag_g M(Y_G) is computed here with the foundation's torch Jacobian
(certify.jacobian.l2_core_jacobian), independently of the interval code under test, at configurations sampled in
boxes (corners included). The last tests show that the same checks catch block bounds 10% too small.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from certify.bounds.global_l2._search import SPLIT_MIN_DISTANCE, domain, split_bounds
from certify.bounds.global_l2._domain import cluster_partitions
from certify.bounds.global_l2._enclosure import Parametrisation
from certify.bounds.global_l2._split import block_bounds, split_bound
from certify.jacobian import l2_core_jacobian

TABLE = Path(__file__).resolve().parents[1] / "certify" / "data" / "universal_constants.json"


def table_constants(d: int, norm: str) -> dict[int, float]:
    entries = json.loads(TABLE.read_text())["entries"]
    out = {e["N"]: e["upper"] for e in entries if e["d"] == d and e["norm"] == norm}
    out[1] = 1.0
    return out


def core(Y: np.ndarray) -> np.ndarray:
    """M(Y) as (N, d, N, d) from the foundation's torch implementation."""
    N, d = Y.shape
    return l2_core_jacobian(torch.as_tensor(Y[None], dtype=torch.float64))[0].reshape(N, d, N, d).numpy()


def remainder(Y: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """E = M(Y) - blockdiag over the groups of labels of M(Y_G), shape (N, d, N, d)."""
    N, d = Y.shape
    E = core(Y)
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        E[np.ix_(idx, range(d), idx, range(d))] -= core(Y[idx])
    return E


def point_boxes(rng: np.random.Generator, N: int, d: int, width: float, spread: float):
    """A box in point coordinates (y = theta) and a random partition into at least two groups."""
    par = Parametrisation(np.eye(N * d).reshape(N, d, N * d))
    lo = rng.normal(size=N * d) * spread
    hi = lo + width * rng.uniform(0.2, 1.0, size=N * d)
    labels = rng.integers(0, max(2, int(rng.integers(2, N + 1))), size=N)
    if len(np.unique(labels)) < 2:
        labels[0] = labels.max() + 1
    return par, lo, hi, labels


def block_violations(e: np.ndarray, par, lo, hi, labels, rng, samples: int = 10) -> list[str]:
    """Sampled ||E_ij||_2 above e_ij (relative 1e-9 plus 1e-13, the float noise of E itself)."""
    N, d = par.N, par.d
    bad = []
    for s in range(samples):
        theta = np.where(rng.random(lo.size) < 0.5, lo, hi) if s < 2 else rng.uniform(lo, hi)
        Y = par.points(theta[None])[0]
        E = remainder(Y, labels)
        norms = np.array([[np.linalg.norm(E[i, :, j, :], 2) for j in range(N)] for i in range(N)])
        over = norms > e * (1 + 1e-9) + 1e-13
        if over.any():
            i, j = np.argwhere(over)[0]
            bad.append(f"||E_{i}{j}|| = {norms[i, j]:.6g} > e = {e[i, j]:.6g} at Y = {np.round(Y, 4).tolist()}")
    return bad


@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 6), d=st.integers(1, 2), width=st.sampled_from([1e-3, 0.1, 0.5]),
       spread=st.sampled_from([0.3, 1.0, 2.5]), seed=st.integers(0, 10_000))
def test_block_bounds_contain_sampled_remainders(N: int, d: int, width: float, spread: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    par, lo, hi, labels = point_boxes(rng, N, d, width, spread)
    e = block_bounds(lo[None], hi[None], par, labels[None])[0]
    assert np.isfinite(e).all() and (e >= 0).all()
    assert block_violations(e, par, lo, hi, labels, rng) == []


@settings(max_examples=16, deadline=None)
@given(N=st.integers(2, 6), norm=st.sampled_from(["2", "inf"]), width=st.sampled_from([0.01, 0.2, 0.8]),
       seed=st.integers(0, 10_000))
def test_split_bounds_dominate_sampled_norms(N: int, norm: str, width: float, seed: int) -> None:
    """In gap coordinates (d = 1) with the shipped constants: every partition the search uses gives a bound above
    ||M(Y)||_p at sampled Y (the shipped constants are tested against lower bounds in test_global_l2.py)."""
    rng = np.random.default_rng(seed)
    par = domain(N, 1, norm, 3.5).par
    lo = rng.uniform(0.0, 3.0, size=(8, N - 1))
    hi = lo + width * rng.uniform(0.2, 1.0, size=lo.shape)
    distances, labels = cluster_partitions(par, lo, hi)
    constants = table_constants(1, norm)
    for k in range(N - 1):
        bound = split_bound(lo, hi, par, norm, labels[:, k], constants)
        for b in range(lo.shape[0]):
            for s in range(6):
                theta = np.where(rng.random(N - 1) < 0.5, lo[b], hi[b]) if s < 2 else rng.uniform(lo[b], hi[b])
                Y = par.points(theta[None])[0]
                value = np.linalg.norm(core(Y).reshape(N, N), ord=np.inf if norm == "inf" else 2)
                assert value <= bound[b] * (1 + 1e-12), (k, b, value, bound[b], labels[b, k])


def test_cluster_partitions_separate_groups() -> None:
    rng = np.random.default_rng(3)
    for N, d in ((4, 1), (6, 1), (3, 2), (4, 2)):
        par = Parametrisation(np.eye(N * d).reshape(N, d, N * d))
        lo = rng.normal(size=(50, N * d)) * 2.0
        hi = lo + rng.uniform(0.0, 0.4, size=lo.shape)
        a, labels = cluster_partitions(par, lo, hi)
        assert (np.diff(a, axis=1) <= 0).all()  # descending
        for b in range(50):
            Y = par.points(rng.uniform(lo[b], hi[b])[None])[0]
            dist = np.linalg.norm(Y[:, None] - Y[None], axis=-1)
            for k in range(N - 1):
                across = labels[b, k][:, None] != labels[b, k][None, :]
                assert (dist[across] >= a[b, k] - 1e-12).all()
                assert len(np.unique(labels[b, k])) >= k + 2
                assert set(labels[b, k]) <= set(range(N))


def test_split_bounds_take_the_smallest_partition_bound() -> None:
    rng = np.random.default_rng(0)
    N, norm = 6, "2"
    par = domain(N, 1, norm, 3.5).par
    lo = rng.uniform(0.0, 3.0, size=(64, N - 1))
    hi = lo + 0.1
    distances, labels = cluster_partitions(par, lo, hi)
    constants = table_constants(1, norm)
    best = split_bounds(lo, hi, par, norm, distances, labels, constants)
    for k in range(N - 1):
        use = distances[:, k] >= SPLIT_MIN_DISTANCE
        single = split_bound(lo[use], hi[use], par, norm, labels[use, k], constants)
        assert (best[use] <= single).all()
    assert np.isfinite(best[distances[:, 0] >= SPLIT_MIN_DISTANCE]).all()
    assert np.isinf(best[distances[:, 0] < SPLIT_MIN_DISTANCE]).all()
    # far-apart groups of small constants close far below the N = 6 lower bound (2.3585)
    far = np.array([[0.1, 3.0, 0.1, 3.0, 0.1]])
    distances, labels = cluster_partitions(par, far, far + 0.2)
    assert split_bounds(far, far + 0.2, par, norm, distances, labels, constants)[0] < 1.7


def test_split_bound_rejects_group_numbers_it_cannot_count() -> None:
    par = domain(3, 1, "2", 3.5).par
    lo, hi = np.array([[2.0, 0.0]]), np.array([[2.1, 0.1]])
    with pytest.raises(ValueError, match="group numbers"):
        split_bound(lo, hi, par, "2", np.array([[7, 7, 1]]), {1: 1.0, 2: 1.61})


def test_block_bounds_10_percent_too_small_are_caught() -> None:
    """The containment check above fails for e / 1.1 on boxes whose groups are close (E large)."""
    rng = np.random.default_rng(1)
    caught = 0
    for _ in range(10):
        par, lo, hi, labels = point_boxes(rng, 4, 1, 1e-3, 0.6)
        e = block_bounds(lo[None], hi[None], par, labels[None])[0]
        assert block_violations(e, par, lo, hi, labels, rng, samples=4) == []
        caught += bool(block_violations(e / 1.1, par, lo, hi, labels, rng, samples=4))
    assert caught >= 5
