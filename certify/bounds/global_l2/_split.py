"""The split bound of the global L2 branch and bound: a box-specific tail bound (MATH.md section 7).

For any partition of the tokens into groups G_1, ..., G_m (m >= 2, indices kept in place),

    M(Y) = blockdiag_g M(Y_{G_g}) + E(Y),   so   ||M(Y)||_p <= max_g c_p(|G_g|, d) + ||E(Y)||_p,

because a block-diagonal matrix (up to a simultaneous permutation) has the largest of its blocks' norms and
||M(Y_G)||_p <= c_p(|G|, d) by definition. ``proofs/tail_bound.py`` bounds ||E|| by worst-case constants; here every
block E_ij is bounded over a box of configurations by interval enclosures of the quantities in the same identities
(proved by SymPy in ``proofs/split_bound.py``). For a token i, let G be its own group, tau_i = sum_{k not in G} P_ik,
Q_ij = softmax over j in G (the P of Y_G), ybar^G_i = sum_{l in G} Q_il y_l, Delta_i = ybar_i - ybar^G_i
= sum_{k not in G} P_ik (y_k - ybar^G_i), m_P = ybar_i - y_i, m_Q = ybar^G_i - y_i, and n_ij >= ||y_i - y_j||:

- j not in G:      E_ij = P_ij (I + 2 (y_j - ybar_i)(y_i - y_j)^T),
                   ||E_ij|| <= P_ij (1 + 2 ||y_j - ybar_i|| n_ij);
- j in G, j != i:  E_ij = -tau_i Q_ij I + 2 Q_ij (-tau_i (y_j - ybar_i) - Delta_i)(y_i - y_j)^T,
                   ||E_ij|| <= tau_i Q_ij + 2 Q_ij (tau_i ||y_j - ybar_i|| + ||Delta_i||) n_ij;
- j = i:           E_ii = -tau_i Q_ii I + 2 (-tau_i S2_Q + sum_{k not in G} P_ik u_k u_k^T - (m_P m_P^T - m_Q m_Q^T)),
                   with u_k = y_k - y_i and S2_Q = sum_{k in G} Q_ik u_k u_k^T (positive semidefinite, so
                   ||S2_Q|| <= sum_G Q_ik ||u_k||^2), and m_P - m_Q = Delta_i:
                   ||E_ii|| <= tau_i Q_ii + 2 (tau_i sum_G Q_ik n_ik^2 + sum_{k not in G} P_ik n_ik^2
                               + (||m_P|| + ||m_Q||) ||Delta_i||).

The matrix e of these block bounds gives ||E||_2 <= ||e||_2 <= min(sqrt(||e||_1 ||e||_inf), ||e||_F) and
||E||_inf <= sqrt(d) ||e||_inf (||B||_inf <= sqrt(d) ||B||_2 for a d x d block). Every quantity is enclosed over the
box with the outward-rounded intervals of ``certify.interval`` (P_ij = 1 / sum_k exp(D_jk . S_ijk) as in
``_enclosure``, Q the same with k restricted to G, vectors y_j - ybar_i = sum_k P_ik (y_j - y_k)).

The bound holds for any partition; it is small when the groups are far apart (P_ij <= e^{-dist^2} across), so the
branch and bound tries the partitions of each box into groups far apart in all its configurations
(``_domain.cluster_partitions``) and keeps the smallest bound. Unlike the
analytic tail bound it needs no r >= 1 and no worst case over the groups' shapes, so boxes whose groups are at
distance 2-3 close without being refined along the groups' internal coordinates.
"""

from __future__ import annotations

import numpy as np

from ... import interval as iv
from ...interval import Interval
from ._enclosure import Parametrisation, _linear, probability
from ._mean_value import nonneg_norm_upper


def _norm_upper(x: Interval) -> np.ndarray:
    """Upper bound on the Euclidean norm over the trailing axis of an interval vector (..., d)."""
    return iv.sqrt(iv.isum(iv.square(x), axis=-1)).hi


def _up(x: np.ndarray) -> Interval:
    """[0, x] for a nonnegative upper bound x (so that products of upper bounds stay outward rounded)."""
    return Interval(np.zeros_like(x), x)


def block_bounds(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, labels: np.ndarray) -> np.ndarray:
    """e (B, N, N) with ||E_ij(Y)||_2 <= e[b, i, j] for every configuration Y of box b, where E is the
    remainder M(Y) - blockdiag over the groups of labels[b] (B, N) of M(Y_group); formulas in the module
    docstring."""
    A = par.A
    N, d = par.N, par.d
    B = lo.shape[0]
    theta = Interval(lo, hi)
    cD = A[:, None] - A[None, :]  # D[j, k] = y_j - y_k, (N, N, d, L)
    cS = A[None, :, None] + A[None, None, :] - 2.0 * A[:, None, None]  # S[i, j, k] = y_j + y_k - 2 y_i
    D = _linear(theta, cD, with_grad=False).v  # (B, N, N, d)
    S = _linear(theta, cS, with_grad=False).v  # (B, N, N, N, d)
    X = iv.isum(D.reshape(B, 1, N, N, d) * S, axis=-1)  # [i, j, k] = ||y_i - y_j||^2 - ||y_i - y_k||^2
    ex = iv.exp(X)
    P = probability(iv.isum(ex, axis=-1))  # (B, N, N)
    same = labels[:, :, None] == labels[:, None, :]  # (B, i, k): k in the group of i
    # Q_ij = 1 / sum_{k in G(i)} exp(X_ijk) for j in G(i) (the k = j term is exp(0) = 1), 0 across the groups
    Q = probability(iv.isum(ex * same[:, :, None, :].astype(float), axis=-1))
    Q = Interval(np.where(same, Q.lo, 0.0), np.where(same, Q.hi, 0.0))
    cross = (~same).astype(float)
    tau = iv.isum(P * cross, axis=-1).hi  # (B, N)
    tau = np.minimum(tau, 1.0)
    n = _norm_upper(D)  # n[b, i, j] >= ||y_i - y_j||
    # v[i, j] = y_j - ybar_i = sum_k P_ik (y_j - y_k);  w[i, k] = y_k - ybar^G_i = sum_{l in G} Q_il (y_k - y_l)
    v = _norm_upper(iv.isum(P.reshape(B, N, 1, N, 1) * D.reshape(B, 1, N, N, d), axis=3))
    w = _norm_upper(iv.isum(Q.reshape(B, N, 1, N, 1) * D.reshape(B, 1, N, N, d), axis=3))
    P_up, Q_up, tau_up, n_up = _up(P.hi), _up(Q.hi), _up(tau), _up(n)
    delta = iv.isum(P_up * _up(w) * cross, axis=-1)  # (B, N) >= ||Delta_i||
    idx = np.arange(N)
    m_P, m_Q = _up(v[:, idx, idx]), _up(w[:, idx, idx])  # ||ybar_i - y_i||, ||ybar^G_i - y_i||
    n2 = iv.square(n_up)
    S2_Q = iv.isum(Q_up * n2, axis=-1)  # >= ||S2_Q|| (trace of a PSD matrix)
    far2 = iv.isum(P_up * n2 * cross, axis=-1)  # >= ||sum_{k not in G} P_ik u_k u_k^T||
    tau_i = tau_up.reshape(B, N, 1)
    e_cross = P_up * (_up(v) * n_up * 2.0 + 1.0)
    e_same = tau_i * Q_up + Q_up * (tau_i * _up(v) + delta.reshape(B, N, 1)) * n_up * 2.0
    e_diag = tau_up * Q_up[:, idx, idx] + (tau_up * S2_Q + far2 + (m_P + m_Q) * delta) * 2.0
    e = np.where(same, e_same.hi, e_cross.hi)
    e[:, idx, idx] = e_diag.hi
    return e


def split_bound(lo: np.ndarray, hi: np.ndarray, par: Parametrisation, norm: str, labels: np.ndarray,
                smaller: dict[int, float]) -> np.ndarray:
    """Certified max over box b of ||M(Y)||_p: the largest c_p(|group|) over the groups of labels[b] (B, N; group
    numbers 0..N-1) plus a bound on ||E||_p (module docstring), rounded up. ``smaller`` maps s -> a certified upper
    bound on c_p(s, d) for 1 <= s < N (a group of N tokens gets inf)."""
    N = par.N
    if labels.shape != (lo.shape[0], N) or labels.min(initial=0) < 0 or labels.max(initial=0) >= N:
        raise ValueError(f"labels must have shape ({lo.shape[0]}, {N}) with group numbers in 0..{N - 1}")
    e = block_bounds(lo, hi, par, labels)
    if norm == "inf":
        eps = iv.round_up(np.sqrt(par.d) * nonneg_norm_upper(e, "inf") * (1.0 + 4 * 2.0**-53))
    else:
        eps = nonneg_norm_upper(e, "2")
    sizes = (labels[:, :, None] == np.arange(N)[None, None, :]).sum(axis=1)  # (B, N): size of group g
    constants = np.array([0.0] + [smaller.get(s, np.inf) for s in range(1, N + 1)])
    blocks = constants[sizes].max(axis=1)
    return iv.round_up(blocks + eps)
