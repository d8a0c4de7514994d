"""Claim: the split bound of the global L2 branch and bound (MATH.md section 7; ``certify/bounds/global_l2/_split.py``).

Setting (MATH.md section 2). N points y_k in R^d, P_ij = softmax_j(-||y_i - y_j||^2) and
M_ij = P_ij I + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T. Take any partition of the tokens into
groups G_1..G_m (m >= 2, indices kept in place) and E = M(Y) - blockdiag_g M(Y_{G_g}). For a token i with group G:
tau_i = sum_{k not in G} P_ik, Q_ij = softmax over j in G, ybar^G_i = sum_{l in G} Q_il y_l, Delta_i = ybar_i - ybar^G_i,
m_P = ybar_i - y_i, m_Q = ybar^G_i - y_i, u_k = y_k - y_i, S2_Q = sum_{k in G} Q_ik u_k u_k^T.

Claim. ||M(Y)||_p <= max_g c_p(|G_g|, d) + ||E||_p, and the blocks of E are

    (X) j not in G:      E_ij = P_ij (I + 2 (y_j - ybar_i)(y_i - y_j)^T)                     (M^G has no such block);
    (S) j in G, j != i:  E_ij = -tau_i Q_ij I + 2 Q_ij (-tau_i (y_j - ybar_i) - Delta_i)(y_i - y_j)^T;
    (D) j = i:           E_ii = -tau_i Q_ii I + 2 (-tau_i S2_Q + sum_{k not in G} P_ik u_k u_k^T - (m_P m_P^T - m_Q m_Q^T));
    (T) Delta_i = sum_{k not in G} P_ik (y_k - ybar^G_i) = m_P - m_Q.

Hence, with n_ij >= ||y_i - y_j||, the block bounds of the code: ||E_ij|| <= P_ij (1 + 2 ||y_j - ybar_i|| n_ij) for (X),
tau_i Q_ij + 2 Q_ij (tau_i ||y_j - ybar_i|| + ||Delta_i||) n_ij for (S), and for (D)
tau_i Q_ii + 2 (tau_i sum_G Q_ik n_ik^2 + sum_{k not in G} P_ik n_ik^2 + (||m_P|| + ||m_Q||) ||Delta_i||), using the
triangle inequality, ||a b^T||_2 = ||a|| ||b||, ||S2_Q||_2 <= trace S2_Q (S2_Q is positive semidefinite), and
m_P m_P^T - m_Q m_Q^T = m_P Delta^T + Delta m_Q^T. Then ||E||_2 <= ||e||_2 (block norms: ||E x|| <= ||e z|| with
z_j = ||x_j||), ||e||_2 <= sqrt(||e||_1 ||e||_inf), and ||E||_inf <= sqrt(d) ||e||_inf. The first inequality holds
because blockdiag_g M(Y_G) is block diagonal after a simultaneous permutation (which keeps both norms), so its norm
is the largest block norm, and ||M(Y_G)||_p <= c_p(|G|, d) by the definition of c_p.

Checks. The identities (S), (D), (T) are PROVED by SymPy with symbolic positive weights (P_ij = w_ij / sum_k w_ik,
Q_ij = w_ij / sum_{k in G} w_ik, which covers the softmax) and symbolic points, for row i = 0 of the partitions
{0, 1 | 2} and {0, 1 | 2 | 3} in d = 1 and {0, 1 | 2} in d = 2 (the algebra does not depend on N or on which row).
The assembled bound (identities, the norm facts above, and the code's interval enclosure of every quantity over a
box) is SAMPLED: for random boxes (N 2..6, d 1..2, random partitions), configurations sampled in each box, corners
included, satisfy |E_ij| <= e_ij blockwise and ||M||_p <= max_g ||M(Y_G)||_p + eps_p for both norms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy as sp

from proofs._check import fact, numeric
from proofs._l2numeric import core_blocks
from proofs._result import ProofResult, Status, combine

CLAIM = ("||M(Y)||_p <= max_g c_p(|G_g|) + ||E||_p for any partition, with E's blocks given by the identities (X), "
         "(S), (D), (T) and bounded blockwise by interval enclosures over a box (the code's split bound)")
SCOPE = {"identities": "partitions {01|2}, {01|2|3} (d = 1), {01|2} (d = 2)", "bound": "sampled boxes, N 2..6, d 1..2"}


def _identities(groups: list[list[int]], d: int) -> tuple[Status, str]:
    """(S), (D), (T) for row 0 of the partition ``groups`` with symbolic weights and points."""
    N = sum(len(g) for g in groups)
    i = 0
    G = next(g for g in groups if i in g)
    w = sp.symbols(f"w0:{N}", positive=True)  # w_0k = exp(-||y_0 - y_k||^2), kept symbolic
    y = [sp.Matrix(sp.symbols(f"y{k}_0:{d}")) for k in range(N)]
    Z, ZG = sum(w), sum(w[k] for k in G)
    P = [w[k] / Z for k in range(N)]
    Q = [w[k] / ZG if k in G else 0 for k in range(N)]
    ybar = sum((P[k] * y[k] for k in range(N)), sp.zeros(d, 1))
    ybarG = sum((Q[k] * y[k] for k in range(N)), sp.zeros(d, 1))
    tau = sum(P[k] for k in range(N) if k not in G)
    Delta = ybar - ybarG
    eye = sp.eye(d)

    def cov(weights: list, mean: sp.Matrix) -> sp.Matrix:
        return sum(((weights[k]) * (y[k] - mean) * (y[k] - mean).T for k in range(N)), sp.zeros(d, d))

    def block(weights: list, mean: sp.Matrix, j: int) -> sp.Matrix:
        m = weights[j] * eye + 2 * weights[j] * (y[j] - mean) * (y[i] - y[j]).T
        return m + 2 * cov(weights, mean) if j == i else m

    residues = []
    for j in G:
        if j == i:
            continue
        E = block(P, ybar, j) - block(Q, ybarG, j)
        formula = -tau * Q[j] * eye + 2 * Q[j] * (-tau * (y[j] - ybar) - Delta) * (y[i] - y[j]).T
        residues.append(E - formula)
    u = [y[k] - y[i] for k in range(N)]
    S2_Q = sum((Q[k] * u[k] * u[k].T for k in range(N)), sp.zeros(d, d))
    far = sum((P[k] * u[k] * u[k].T for k in range(N) if k not in G), sp.zeros(d, d))
    m_P, m_Q = ybar - y[i], ybarG - y[i]
    E_ii = block(P, ybar, i) - block(Q, ybarG, i)
    residues.append(E_ii - (-tau * Q[i] * eye + 2 * (-tau * S2_Q + far - (m_P * m_P.T - m_Q * m_Q.T))))
    residues.append(Delta - sum((P[k] * (y[k] - ybarG) for k in range(N) if k not in G), sp.zeros(d, 1)))
    residues.append(Delta - (m_P - m_Q))
    ok = all(r.applyfunc(lambda x: sp.simplify(sp.together(x))) == sp.zeros(*r.shape) for r in residues)
    name = " | ".join(",".join(map(str, g)) for g in groups)
    return fact(ok, f"(S), (D), (T) for row 0 of the partition {{{name}}}, d = {d}, symbolic weights and points: "
                    f"{'every difference simplifies to 0' if ok else 'a difference does not simplify to 0'}")


def _block_diagonal(Y: np.ndarray, labels: np.ndarray) -> np.ndarray:
    N, d = Y.shape
    out = np.zeros((N, d, N, d))
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        out[np.ix_(idx, range(d), idx, range(d))] = core_blocks(Y[idx])
    return out


def check_split(block_bounds: Callable, boxes: int = 120, samples: int = 12, seed: int = 0) -> tuple[Status, str]:
    """Random boxes in point coordinates, random partitions: sampled |E_ij| <= e_ij and the norm inequality."""
    from certify.bounds.global_l2._enclosure import Parametrisation

    rng = np.random.default_rng(seed)
    worst, worst_at, tested = 0.0, "", 0
    for _ in range(boxes):
        N = int(rng.integers(2, 7))
        d = int(rng.integers(1, 3))
        par = Parametrisation(np.eye(N * d).reshape(N, d, N * d))
        centre = rng.normal(size=N * d) * rng.choice([0.5, 1.5, 3.0])
        half = rng.uniform(0.0, 0.3, size=N * d)
        lo, hi = centre - half, centre + half
        labels = rng.integers(0, int(rng.integers(2, N + 1)) if N > 2 else 2, size=N)
        if len(np.unique(labels)) < 2:
            labels[0] = labels.max() + 1
        e = block_bounds(lo[None], hi[None], par, labels[None])[0]
        eps = {"2": float(min(np.sqrt(e.sum(1).max() * e.sum(0).max()), np.sqrt((e**2).sum()))),
               "inf": float(np.sqrt(d) * e.sum(1).max())}
        for s in range(samples):
            corner = s < 2
            theta = np.where(rng.random(N * d) < 0.5, lo, hi) if corner else rng.uniform(lo, hi)
            Y = theta.reshape(N, d)
            M = core_blocks(Y)
            E = M - _block_diagonal(Y, labels)
            block_norms = np.array([[np.linalg.norm(E[i, :, j, :], 2) for j in range(N)] for i in range(N)])
            tested += 1
            ratio = float((block_norms / e)[e > 1e-10].max(initial=0.0))  # below: float noise of E itself
            if ratio > worst:
                worst, worst_at = ratio, f"N={N} d={d} labels={labels.tolist()}"
            if not (block_norms <= e * (1 + 1e-9) + 1e-14).all():
                i, j = np.unravel_index(np.argmax(block_norms - e), e.shape)
                return Status.UNPROVED, (f"||E_{i}{j}|| = {block_norms[i, j]:.6g} > e = {e[i, j]:.6g} at N={N}, d={d}, "
                                       f"labels={labels.tolist()}, Y={np.round(Y, 4).tolist()}")
            for p, order in (("2", 2), ("inf", np.inf)):
                whole = np.linalg.norm(M.reshape(N * d, N * d), ord=order)
                parts = max(np.linalg.norm(core_blocks(Y[labels == g]).reshape(-1, int((labels == g).sum()) * d), ord=order)
                            for g in np.unique(labels))
                if whole > parts + eps[p] * (1 + 1e-9) + 1e-12:
                    return Status.UNPROVED, (f"||M||_{p} = {whole:.6g} > max block norm {parts:.6g} + eps {eps[p]:.6g} "
                                           f"at N={N}, d={d}, labels={labels.tolist()}, Y={np.round(Y, 4).tolist()}")
    return numeric(True, f"{boxes} random boxes (N 2..6, d 1..2, half-widths <= 0.3, random partitions), {tested} "
                         f"configurations (corners included): ||E_ij||_2 <= e_ij and ||M||_p <= max_g ||M(Y_G)||_p + "
                         f"eps_p for both norms; largest ||E_ij|| / e_ij = {worst:.3g} at {worst_at}")


def _code_block_bounds(lo, hi, par, labels):
    from certify.bounds.global_l2._split import block_bounds

    return block_bounds(lo, hi, par, labels)


def prove() -> ProofResult:
    parts = [_identities([[0, 1], [2]], 1), _identities([[0, 1], [2], [3]], 1), _identities([[0, 1], [2]], 2)]
    parts.append(check_split(_code_block_bounds))
    return combine(CLAIM, parts, scope=SCOPE)


def _too_small(lo, hi, par, labels):
    """Deliberately wrong: the code's block bounds halved."""
    return _code_block_bounds(lo, hi, par, labels) / 2.0


INJECTIONS = {"bound": lambda: combine(CLAIM + " [injected: e / 2]", [check_split(_too_small)])}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
