"""Score differences of a DP attention block over the set a prefix reaches (certify/model/_score_set.py, issue 17).

Every point xi = c + s (y0 - c) + W~ delta + E~ delta of the set (W~ in the interval W, delta in the domain,
||E~||_inf <= e, |y0 - c| <= gap) must have its score differences L_ijk(xi) and their derivatives along the given
directions inside the enclosures; a radius 10% smaller must be caught at a vertex.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from certify.interval import Interval
from certify.model._jacobian_chain import Domain
from certify.model._score_set import head_scores, score_duals


def exact(xi: np.ndarray, g: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, b_Q: np.ndarray, d: int):
    """L[i, j, k] = q_i . (k_k - k_j) / sqrt(d) at xi (N, D) and its derivative along each g[..., z]."""
    q, k = xi @ W_Q + b_Q, xi @ W_K
    dk = k[None, :, :] - k[:, None, :]
    L = np.einsum("ic,jkc->ijk", q, dk) / math.sqrt(d)
    gq, gk = np.einsum("nDz,Dc->ncz", g, W_Q), np.einsum("nDz,Dc->ncz", g, W_K)
    dL = np.einsum("icz,jkc->ijkz", gq, dk) + np.einsum("ic,jkcz->ijkz", q, gk[None] - gk[:, None])
    return L, dL / math.sqrt(d)


def inside(value: np.ndarray, enclosure: Interval) -> bool:
    slack = 1e-12 * (1 + np.abs(value))  # the reference is computed in float64
    return bool(np.all(enclosure.lo <= value + slack) and np.all(value - slack <= enclosure.hi))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 3), st.integers(1, 6), st.sampled_from(["inf", "2"]),
       st.integers(0, 2**31 - 1))
def test_enclosures_hold_on_the_set(N, D, d, n0, norm, seed):
    rng = np.random.default_rng(seed)
    (W_Q, W_K, W_V), b_Q = (rng.normal(size=(D, d)) for _ in range(3)), rng.normal(size=d)
    c = rng.normal(size=(N, D))
    W_mid, W_rad = rng.normal(size=(N * D, n0)), 0.3 * rng.random((N * D, n0))
    W = Interval(W_mid - W_rad, W_mid + W_rad)
    radius = 0.2 * rng.random(n0) if norm == "inf" else np.array([0.2])
    domain = Domain(np.zeros(n0), radius, norm)
    gap, e = 0.01 * rng.random((N, D)), 0.05
    u = gap + e * float(radius.max())
    g = rng.normal(size=(N, D, 3))
    head = head_scores(c, u, W, domain.spread, W_Q, W_K, b_Q, W_V)
    known = score_duals([head], g, W_Q[None], W_K[None], d)[0]
    assert known.L.v is head.L
    for sample in range(60):
        if norm == "inf":
            delta = radius * rng.choice([-1.0, 1.0], n0) * (rng.random(n0) if sample % 2 else 1.0)
        else:
            v = rng.normal(size=n0)
            delta = 0.2 * v / np.linalg.norm(v)
        W_any = W_mid + W_rad * (rng.choice([-1.0, 1.0], W_mid.shape) if sample % 3 == 0
                                 else rng.uniform(-1, 1, W_mid.shape))
        E = rng.normal(size=(N * D, n0))
        E *= e / np.abs(E).sum(1).max()  # ||E||_inf = e
        xi = c + gap * rng.uniform(-1, 1, gap.shape) + ((W_any + E) @ delta).reshape(N, D)
        L, dL = exact(xi, g, W_Q, W_K, b_Q, d)
        assert inside(L, head.L)
        assert inside(dL, known.L.t)
        k, v = xi @ W_K, xi @ W_V
        assert inside(xi @ W_Q + b_Q, known.Q)
        assert inside(k[:, None] - k[None], known.dK) and inside(v[:, None] - v[None], known.dV)
        assert np.all(L[:, np.arange(N), np.arange(N)] == 0) and np.all(head.L.lo[:, np.arange(N), np.arange(N)] == 0)


def test_a_tenth_smaller_radius_is_caught():
    """With a point W, no error and no gap, the linear part is attained at a vertex of the box (the quadratic part
    is small at radius 1e-3), so shrinking the radius by 10% leaves a vertex outside."""
    rng = np.random.default_rng(3)
    N, D, d, n0 = 3, 4, 2, 4
    W_Q, W_K, b_Q = rng.normal(size=(D, d)), rng.normal(size=(D, d)), rng.normal(size=d)
    c, W_mid = rng.normal(size=(N, D)), rng.normal(size=(N * D, n0))
    radius = np.full(n0, 1e-3)
    domain = Domain(np.zeros(n0), radius, "inf")
    head = head_scores(c, np.zeros((N, D)), Interval(W_mid, W_mid.copy()), domain.spread, W_Q, W_K, b_Q, W_K)
    shrunk = Interval(head.L.mid - 0.9 * head.L.rad, head.L.mid + 0.9 * head.L.rad)
    caught = False
    for signs in itertools.product([-1.0, 1.0], repeat=n0):
        L, _ = exact(c + (W_mid @ (radius * np.array(signs))).reshape(N, D), np.zeros((N, D, 1)), W_Q, W_K, b_Q, d)
        assert inside(L, head.L)
        caught = caught or not inside(L, shrunk)
    assert caught
