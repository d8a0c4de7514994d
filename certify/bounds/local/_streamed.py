"""The first-order Taylor form for large DP layers, without materialising J (MATH.md section 7; issue 15, item 6).

At BERT size (N = 128, D = 768) J has (N D)^2 = 9.7e9 entries: the `taylor` method and the branch and bound, which
hold interval copies of J, would need terabytes. The bounds here need J only through sums of magnitudes. For X in
the box X0 +- eta (it contains the eps-ball for both p), entrywise |J(X)| <= |J(X0)| + S with S the coordinate
slopes (mean-value theorem, `_slopes`), so with rows r = R_0 + R_S, columns c = C_0 + C_S:

- ||J(X)||_inf <= max r (R_0: row sums of |J(X0)|, exact up to rounding, so the bound tends to ||J(X0)||_inf);
- ||J(X)||_2 <= || |J(X)| ||_2 <= sqrt(max r max c) (Schur test with unit weights), and
  ||J(X)||_2 <= ||J(X0)||_2 + ||S||_2 <= ||B_0||_2 + sqrt(max R_S max C_S), with B_0[i, l] >= ||J_il(X0)||_F
  (a block matrix's 2-norm is at most that of its blocks' norms; B_0 is N x N, `nonnegative_norm2_upper`).

R_0, C_0, B_0 (`centre_sums`): the row block of query token i,

    J_il = sum_h [ P^h_il U_h + (1/sqrt(d)) (W^O_h^T C^h_il)(W_K q^h_i)^T + delta_il (1/sqrt(d)) W^O_h^T C^h_i K^h W_Q^T ]

(U_h = W_V^h W^O_h, C^h_il = P^h_il (v_l - vbar_i), C^h_i K^h = sum_l C^h_il (k_l - k_i)^T, as in
`_enclosure.dp_jacobian_enclosure`), is formed in float64 from the building blocks enclosed at the point X0, one
chunk of key tokens at a time, and reduced at once; its rounding errors are bounded by sums that separate over
the factors. R_S, C_S (`slope_sums`): the slope bound of `_slopes` by the triangle inequality, whose row and column
sums separate (O(N^2 D) per head, never N^2 D^2).

Memory: O(N^2 D + H N^2 d + c_l D^2) with c_l key tokens per chunk (`plan_chunks`); time about 2 H N^2 D^2 flops
for R_0 (two float einsums per key chunk), measured on the first query token and extrapolated, so a run that
cannot meet its time budget stops there (`BudgetExceeded`) and certifies nothing.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from ..._domain import Domain, EpsBall
from ..._errors import BudgetExceeded, InvalidInputError
from ..._progress import progress_bar
from ..._result import Certificate
from ...attention import AttentionWeights, attention_forward, check_tokens
from ...interval import Interval, exp, interval_einsum, isum, reciprocal, round_up, stack
from ...jacobian import check_norm
from ...sdp._floating import ETA, gamma, sum_up, up
from ._domain import initial_box
from ._enclosure import _Weights, _zero_diagonal, clip01, const, numpy_weights, point_einsum, token_differences
from ._slopes import average_over_nested_boxes, half_widths, nested_box
from ._upper import _add, _einsum_up, _mul
from ._taylor import nonnegative_norm2_upper

CHUNK_BYTES = 256 * 2**20
"""Target bytes of one key-token chunk of J_i's interval-sized arrays (c_l D^2 entries of 16 bytes)."""

QUERY_CHUNK_BYTES = 256 * 2**20
"""Target bytes of the (c_q, N, N, d) interval products of the attention enclosure."""


@dataclasses.dataclass(frozen=True)
class HeadParts:
    """Enclosures over the box, for all heads: P (H, N, N), C (H, N, N, d) with C[h, i, l] = P_il (v_l - vbar_i),
    CK (H, N, d, d) with CK[h, i] = sum_l C_il (k_l - k_i)^T, Kq (H, N, D) with Kq[h, i] = W_K q_i."""

    P: Interval
    C: Interval
    CK: Interval
    Kq: Interval


def memory_estimate(N: int, D: int, H: int, d: int) -> int:
    """Estimated peak bytes of `streamed_bound`: the token differences (N^2 D), the head parts (H N^2 d) and the
    chunk temporaries (about 12 arrays of CHUNK_BYTES / 2), 16 bytes per interval."""
    return int(16 * (N * N * D + 2 * H * N * N * d + H * N * (d * d + D)) + 12 * CHUNK_BYTES)


SECONDS_PER_UNIT = 1.5e-9
"""Measured seconds per unit of 2 H N^2 D^2 (the GEMMs of `centre_sums`) on the 2-core development machine: 348 s
at N = 128, D = 768, H = 12. Only used to refuse a pass 4x beyond the time budget before any work."""


def predicted_seconds(N: int, D: int, H: int) -> float:
    """The reference machine's time for the centre pass (SECONDS_PER_UNIT)."""
    return SECONDS_PER_UNIT * 2 * H * N * N * D * D


def plan_chunks(N: int, D: int, d: int) -> tuple[int, int]:
    """(query chunk, key chunk) sizes: c_q with c_q N^2 d intervals and c_l with c_l D^2 intervals near their
    byte targets, at least 1."""
    query = max(1, min(N, QUERY_CHUNK_BYTES // max(16 * N * N * d, 1)))
    key = max(1, min(N, CHUNK_BYTES // max(16 * D * D, 1)))
    return query, key


def head_blocks_d(box: Interval, w: _Weights, h: int,
                  query_chunk: int) -> tuple[Interval, Interval, Interval, Interval, Interval]:
    """Head h over the box, queries in chunks of `query_chunk`: (Q (N, d), P (N, N), Dk, Dv (N, N, d), CK (N, d, d)) with
    Dk[i, l] = k_l - kbar_i, Dv[i, l] = v_l - vbar_i and CK[i] = sum_l C_il (k_l - k_i)^T, C_il = P_il Dv[i, l].

    P_ij = 1 / sum_k exp(q_i . (k_k - k_j) / sqrt(d)) (the k = j term exactly 1) and z_l - zbar_i =
    sum_k P_ik (z_l - z_k), as in `_enclosure.dp_scores` / `dp_jacobian_enclosure`, restricted to a chunk of rows.
    """
    N = box.shape[0]
    dX = token_differences(box)  # [j, k] = x_j - x_k
    scale = const(1.0 / math.sqrt(w.d))
    Q = point_einsum("nD,Dc->nc", box, w.W_Q[h])
    if w.b_Q is not None:
        Q = Q + w.b_Q[h]
    dK = point_einsum("jkD,Dc->jkc", dX, w.W_K[h])  # k_j - k_k
    dV = point_einsum("jkD,Dc->jkc", dX, w.W_V[h])  # v_j - v_k
    rows: dict[str, list[Interval]] = {"P": [], "Dk": [], "Dv": [], "CK": []}
    for start in range(0, N, query_chunk):
        stop = min(start + query_chunk, N)
        L = interval_einsum("ic,kjc->ijk", Q[start:stop], dK)  # [i, j, k] = q_i . (k_k - k_j)
        L = _zero_diagonal(L * scale, (-2, -1))
        P = clip01(reciprocal(isum(exp(L), -1)))  # (c, N)
        Dk = interval_einsum("ik,lkc->ilc", P, dK)  # [i, l] = sum_k P_ik (k_l - k_k) = k_l - kbar_i
        Dv = interval_einsum("ik,lkc->ilc", P, dV)
        C = P.expand(-1) * Dv  # [i, l, a]
        CK = interval_einsum("ila,lic->iac", C, dK[:, start:stop])  # dK[l, i] = k_l - k_i
        for name, value in (("P", P), ("Dk", Dk), ("Dv", Dv), ("CK", CK)):
            rows[name].append(value)
    P, Dk, Dv, CK = (_concatenate(rows[name], 0) for name in ("P", "Dk", "Dv", "CK"))
    return Q, P, Dk, Dv, CK


def head_parts(box: Interval, w: _Weights, query_chunk: int) -> HeadParts:
    """The building blocks of J over the box (class docstring) for every head (`head_blocks_d`)."""
    parts: dict[str, list[Interval]] = {"P": [], "C": [], "CK": [], "Kq": []}
    for h in range(w.H):
        Q, P, _, Dv, CK = head_blocks_d(box, w, h, query_chunk)
        parts["P"].append(P)
        parts["C"].append(P.expand(-1) * Dv)
        parts["CK"].append(CK)
        parts["Kq"].append(point_einsum("ic,Ec->iE", Q, w.W_K[h]))
    return HeadParts(**{name: stack(pieces) for name, pieces in parts.items()})


def slope_sums(box: Interval, w: _Weights, eta: float, query_chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column sums (R_S[i, F] over (l, E), C_S[l, E] over (i, F)), rounded up, of a nonnegative S with
    |J(X) - J(X0)| <= S entrywise for every X in the box and a point X0 of it with |X_m - X0_m| <= `eta` for every
    coordinate m (e.g. X0 the centre and eta the largest half-width; not any two points of the box: with X0 at a
    corner the differences reach 1.95 R_S, proofs/slope_remainder.py).

    Mean-value theorem on the segment [X0, X] (inside the box): |J(X) - J(X0)| <= sum_m eta sup |dJ/dX_m|. The
    coordinate derivatives of J's building blocks (`_slopes` module docstring, proofs/slopes_derivatives.py) are
    bounded by the triangle inequality with magnitudes over the box, and with every weight h_m = eta the sums over
    m become l1 norms, so each term of the row and column sums separates (one head; P, k~ = W_Q Dk, v~ = W_O^T Dv,
    b_i = W_K q_i their magnitudes over the box, |.|_1 sums, s_P[i] = sum_t P_it, sigma = 1/sqrt(d), M = W_K W_Q^T,
    WVO = W_V W_O):

        S_P[i, l]  = sigma eta P_il (|k~_il|_1 + (1 + s_P[i]) |b_i|_1)              (slope of P_il)
        S_v[i, F]  = eta [(1 + s_P[i]) |WVO[:, F]|_1 + sigma a[i, F] + sigma |b_i|_1 sum_t P_it |v~_it[F]|]
                     with a[i, F] = sum_l P_il |k~_il|_1 |v~_il[F]| >= sum_r |A_i[r, F]|   (slope of v~_il[F])
        S_b[E]     = eta |M[E, :]|_1                                                 (slope of b_i[E])
        S_A        : its row sums RA[i, F] and column sums CA[i, E] over the other index, from
                     d_{t,s} A_i[r, F] = delta_it sigma T_i[s, r, F] + P_it {sigma b_i[s] (k~_it[r] v~_it[F] - A_i[r, F])
                                         + M[s, r] v~_it[F] + k~_it[r] WVO[s, F]}

    and S_il[F, E] = S_P[i, l] |WVO[E, F]| + sigma (S_P[i, l] |v~_il[F]| + P_il S_v[i, F]) |b_i[E]|
    + sigma P_il |v~_il[F]| S_b[E] + delta_il sigma S_A[i, E, F] (product rule on the three terms of J_il). Summed
    over heads. Work per head O(N^2 D) after the O(N^2 d D) enclosures of k~ and v~; memory O(N^2 D).
    """
    N, D = box.shape
    sigma = float(const(1.0 / math.sqrt(w.d)).hi)
    sigma_eta = _mul(np.full(1, sigma), np.full(1, eta))
    R_S, C_S = np.zeros((N, D)), np.zeros((N, D))
    for h in range(w.H):
        Q, P_box, Dk, Dv, _ = head_blocks_d(box, w, h, query_chunk)
        P = P_box.mag
        kt = point_einsum("ilc,rc->ilr", Dk, w.W_Q[h]).mag  # |k~_il[r]|
        vt = point_einsum("ila,aF->ilF", Dv, w.W_O[h]).mag  # |v~_il[F]|
        bm = point_einsum("ic,Ec->iE", Q, w.W_K[h]).mag  # |b_i[E]|
        WVO = interval_einsum("ra,aF->rF", Interval.point(w.W_V[h]), Interval.point(w.W_O[h])).mag
        M = interval_einsum("Ec,rc->Er", Interval.point(w.W_K[h]), Interval.point(w.W_Q[h])).mag
        k1, v1, b1, sP = sum_up(kt, axis=2), sum_up(vt, axis=2), sum_up(bm, axis=1), sum_up(P, axis=1)
        wvo_col, wvo_row, wvo_all = sum_up(WVO, axis=0), sum_up(WVO, axis=1), sum_up(WVO)
        m_row, m_col, m_all = sum_up(M, axis=1), sum_up(M, axis=0), sum_up(M)
        Pk1 = _mul(P, k1)  # P_il |k~_il|_1
        one_plus = _add(np.full(1, 1.0), sP)  # 1 + s_P[i] >= sum_t |delta_lt - P_it|
        S_P = _mul(sigma_eta, P, _add(k1, _mul(one_plus, b1)[:, None]))
        a = _einsum_up("il,ilF->iF", Pk1, vt)  # >= sum_r |A_i[r, F]|
        a_col = _einsum_up("il,ilE,il->iE", P, kt, v1)  # >= sum_F |A_i[E, F]|
        pv = _einsum_up("it,itF->iF", P, vt)
        S_v = _mul(np.full(1, eta), _add(_mul(one_plus[:, None], wvo_col[None, :]), _mul(np.full(1, sigma), a),
                                          _mul(np.full(1, sigma), b1[:, None], pv)))
        # row sums RA[i, F] = sum_r S_A[i, r, F] and column sums CA[i, E] = sum_F S_A[i, E, F]
        RA = _mul(np.full(1, eta), _add(
            _mul(np.full(1, sigma), _einsum_up("il,il,ilF->iF", Pk1, k1, vt)),
            _mul(np.full(1, sigma), b1[:, None], _einsum_up("it,itF->iF", Pk1, vt)),
            _mul(np.full(1, sigma), b1[:, None], sP[:, None], a),
            _mul(np.full(1, float(m_all)), pv),
            _mul(sum_up(Pk1, axis=1)[:, None], wvo_col[None, :])))
        CA = _mul(np.full(1, eta), _add(
            _mul(np.full(1, sigma), _einsum_up("il,ilE,il->iE", Pk1, kt, v1)),
            _mul(np.full(1, sigma), b1[:, None], _einsum_up("it,itE,it->iE", P, kt, v1)),
            _mul(np.full(1, sigma), b1[:, None], sP[:, None], a_col),
            _mul(_einsum_up("it,it->i", P, v1)[:, None], m_col[None, :]),
            _mul(np.full(1, float(wvo_all)), _einsum_up("it,itE->iE", P, kt))))
        # J's slope: rows R[i, F] = sum_{l, E} S_il[F, E], columns C[l, E] = sum_{i, F} S_il[F, E]
        S_Pv = _einsum_up("il,ilF->iF", S_P, vt)  # sum_l S_P[i, l] |v~_il[F]|
        PS_v = _mul(sP[:, None], S_v)  # sum_l P_il S_v[i, F]
        R = _add(_mul(sum_up(S_P, axis=1)[:, None], wvo_col[None, :]),
                 _mul(np.full(1, sigma), _add(S_Pv, PS_v), b1[:, None]),
                 _mul(sigma_eta, pv, np.full(1, float(m_all))),
                 _mul(np.full(1, sigma), RA))
        column_weight = _add(_einsum_up("il,il->il", S_P, v1), _mul(P, sum_up(S_v, axis=1)[:, None]))  # [i, l]
        C = _add(_mul(sum_up(S_P, axis=0)[:, None], wvo_row[None, :]),
                 _mul(np.full(1, sigma), _einsum_up("il,iE->lE", column_weight, bm)),
                 _mul(sigma_eta, _einsum_up("il,il->l", P, v1)[:, None], m_row[None, :]),
                 _mul(np.full(1, sigma), CA))
        R_S, C_S = _add(R_S, R), _add(C_S, C)
    return R_S, C_S


def _concatenate(pieces: list[Interval], axis: int) -> Interval:
    return Interval(np.concatenate([p.lo for p in pieces], axis), np.concatenate([p.hi for p in pieces], axis))


@dataclasses.dataclass(frozen=True)
class MagnitudeSums:
    """Proven upper bounds on sums of M = max |J| over the box: rows (N, D) over (l, E), columns (N, D) over
    (i, F), and block Frobenius norms (N, N)."""

    rows: np.ndarray
    columns: np.ndarray
    blocks: np.ndarray

    def inf_norm(self) -> float:
        return float(np.max(self.rows))

    def norm2(self) -> float:
        schur = float(up(np.sqrt(up(np.max(self.rows) * np.max(self.columns)))))
        return min(schur, nonnegative_norm2_upper(self.blocks))


@dataclasses.dataclass(frozen=True)
class _Product:
    """The midpoints and radii of two interval operands of a float einsum over heads (`centre_sums`)."""

    mid_a: np.ndarray
    rad_a: np.ndarray
    mid_b: np.ndarray
    rad_b: np.ndarray


def _error_sum(p: _Product, a_spec: str, b_spec: str, out: str, terms: int) -> np.ndarray:
    """An upper bound on the sum, over the output axes not in `out`, of the error bound of t = fl(einsum_h(m_a, m_b))
    against any members x_a, x_b of the two intervals:
        |x_a x_b - m_a m_b| <= r_a |m_b| + |m_a| r_b + r_a r_b,
    plus the float einsum's rounding, at most g sum_h |m_a| |m_b| with g = gamma_{2(K + 2) + 4} (K = `terms`
    products per entry, Higham section 3.1), plus an absolute 4 eta per summed entry for underflow. Every term is
    an einsum of nonnegative factors, so summing over output axes separates over a and b (`_einsum_up`)."""
    abs_a, abs_b = np.abs(p.mid_a), np.abs(p.mid_b)
    subscripts = f"{a_spec},{b_spec}->{out}"
    g = gamma(2 * (terms + 2) + 4)
    total = _add(_einsum_up(subscripts, p.rad_a, abs_b), _einsum_up(subscripts, abs_a, p.rad_b),
                 _einsum_up(subscripts, p.rad_a, p.rad_b), _mul(np.full(1, g), _einsum_up(subscripts, abs_a, abs_b)))
    summed = p.mid_a.size * p.mid_b.size  # at least the number of output entries summed into each result
    return round_up(total + summed * 4 * ETA)


def _sum_finite(x: np.ndarray, axis: int) -> np.ndarray:
    """`sum_up` (an upper bound on the exact sum) for an array already known finite and nonnegative, without
    `sum_up`'s two checking passes over it."""
    n = x.shape[axis]
    return up(np.sum(x, axis=axis) * (1.0 + 2.0 * (n + 2) * 2.0**-53) + (n + 1) * ETA)


def _squares_finite(x: np.ndarray) -> np.ndarray:
    """An upper bound on the exact sum of squares along the last axis of a finite nonnegative (m, n) array: each
    square is within u of its float, the float sum of n such terms within gamma_{n-1}, so the factor
    (1 + 2 (n + 3) u) covers both, plus (2 n + 1) eta for underflow (one dot product per row, BLAS)."""
    n = x.shape[-1]
    with np.errstate(under="ignore", over="ignore"):
        squares = np.einsum("ij,ij->i", x, x)
    return up(squares * (1.0 + 2.0 * (n + 3) * 2.0**-53) + (2 * n + 1) * ETA)


def centre_sums(parts: HeadParts, w: _Weights, N: int, key_chunk: int, *, seconds: float | None = None,
                progress: bool = False) -> MagnitudeSums:
    """Row, column and block sums of |J(X0)| from the point-box building blocks, one query token at a time.

    For query i and keys l in a chunk, t = fl(value + cross) with value = einsum_h(mid P_il, mid U_h) and
    cross = einsum_h(mid (W^O_h^T C_il), mid (sigma W_K q_i)) (float GEMMs: no interval array of size D^2 is
    formed), plus the diagonal block's midpoint at l = i. Every member J of the enclosure satisfies
    |J| <= (1 + 2u) |t| + e (two float additions) with e the error bounds of `_error_sum` and the diagonal's
    radius; sums of |t| are rounded up (`sum_up`), sums of e separate over the two operands, and the block
    Frobenius bound uses ||e_il||_F <= the sum of e_il's entries (e >= 0).
    """
    D = w.D
    U = interval_einsum("hEa,haF->hEF", Interval.point(w.W_V), Interval.point(w.W_O))  # W_V^h W^O_h
    scale = const(1.0 / math.sqrt(w.d))
    u_mid, u_rad = U.mid, U.rad
    rows, columns, blocks = np.zeros((N, D)), np.zeros((N, D)), np.zeros((N, N))
    relative = np.full(1, 1.0 + 4.0 * 2.0**-53)
    WO, WQ = Interval.point(w.W_O), Interval.point(w.W_Q)
    begin = time.perf_counter()
    with progress_bar(progress, total=N, desc="J(X0) rows") as bar:
        for i in range(N):
            Kq = parts.Kq[:, i] * scale  # (H, E): sigma W_K q_i
            k_mid, k_rad = Kq.mid, Kq.rad
            diagonal = interval_einsum("hac,haF,hEc->EF", parts.CK[:, i], WO, WQ) * scale
            row = np.zeros(D)
            for start in range(0, N, key_chunk):
                keys = slice(start, min(start + key_chunk, N))
                P = parts.P[:, i, keys]  # (H, l)
                OC = interval_einsum("hla,haF->hlF", parts.C[:, i, keys], WO)  # W^O_h^T C_il
                value = _Product(P.mid, P.rad, u_mid, u_rad)
                cross = _Product(OC.mid, OC.rad, k_mid, k_rad)
                with np.errstate(under="ignore"):
                    t = np.einsum("hl,hEF->lEF", value.mid_a, value.mid_b, optimize=True)
                    t += np.einsum("hlF,hE->lEF", cross.mid_a, cross.mid_b, optimize=True)
                inside = keys.start <= i < keys.stop
                if inside:
                    t[i - keys.start] += diagonal.mid
                if not np.all(np.isfinite(t)):
                    unbounded = np.full((N, D), np.inf)
                    return MagnitudeSums(unbounded, unbounded, np.full((N, N), np.inf))
                T = np.abs(t, out=t)

                def error(out: str) -> np.ndarray:
                    return _add(_error_sum(value, "hl", "hEF", out, w.H), _error_sum(cross, "hlF", "hE", out, w.H))

                row = _add(row, _mul(relative, _sum_finite(T.reshape(-1, D), 0)), error("F"))  # over (l, E)
                columns[keys] = _add(columns[keys], _mul(relative, _sum_finite(T, 2)), error("lE"))  # over F
                frobenius = up(np.sqrt(_squares_finite(T.reshape(T.shape[0], -1))))
                blocks[i, keys] = _add(_mul(relative, frobenius), error("l"))
                if inside:
                    r = diagonal.rad  # (E, F)
                    row = _add(row, sum_up(r, axis=0))
                    columns[i] = _add(columns[i], sum_up(r, axis=1))
                    blocks[i, i] = _add(blocks[i, i], sum_up(r))
            rows[i] = row
            bar.update(1)
            if i == 0 and seconds is not None:
                needed = (time.perf_counter() - begin) * N
                if needed > seconds:
                    raise BudgetExceeded(
                        f"streamed: the first of {N} query tokens took {time.perf_counter() - begin:.2f} s, so the "
                        f"pass needs about {needed:.0f} s > the {seconds:.0f} s left of the time budget "
                        f"(raise time_budget)")
    return MagnitudeSums(rows, columns, blocks)


def attained_without_jacobian(X0: torch.Tensor, weights: AttentionWeights, norm: str, row: int,
                              iterations: int = 30) -> float:
    """A value of ||J(X0)||_norm's lower side, attained at X0, without forming J (float64, an estimate): for the
    inf-norm the l1 norm of row `row` of J (one vector-Jacobian product); for the 2-norm ||J v|| / ||v|| after
    power iteration with Jacobian-vector and vector-Jacobian products."""
    def forward(X: torch.Tensor) -> torch.Tensor:
        return attention_forward(X[None], weights)[0]

    if norm == "inf":
        _, pull = torch.func.vjp(forward, X0)
        seed = torch.zeros(X0.numel(), dtype=X0.dtype)
        seed[row] = 1.0
        return float(pull(seed.reshape(X0.shape))[0].abs().sum())
    v = torch.ones_like(X0) / math.sqrt(X0.numel())
    value = 0.0
    _, pull = torch.func.vjp(forward, X0)
    for _ in range(iterations):
        Jv = torch.func.jvp(forward, (X0,), (v,))[1]
        value = max(value, float(Jv.norm()))
        v = pull(Jv)[0]
        v = v / v.norm()
    return value


def nested_slope_sums(box: Interval, X0: np.ndarray, w: _Weights, eta: float, query_chunk: int,
                      time_budget: float | None, start: float) -> tuple[list[np.ndarray], int]:
    """[R_S, C_S] of `slope_sums` averaged over nested boxes B_t = B & (X0 +- t h) (`_slopes.integral_slopes`: the
    integral form of the mean-value theorem), each reweighted by eta / eta_t (slope_sums weighs every coordinate by
    the half-width eta_t of its box; the segment needs eta); with a time_budget, as many levels as fit in 90% of it
    counted from ``start``, else one pass on the box."""
    def weighted(t: float) -> list[np.ndarray]:
        sub = box if t == 1.0 else nested_box(box, X0, t)
        eta_t = eta if t == 1.0 else float(np.max(half_widths(sub, X0)))
        R, C = slope_sums(sub, w, eta_t, query_chunk)
        factor = np.full(1, float(round_up(np.float64(eta) / eta_t)))
        return [_mul(factor, R), _mul(factor, C)]

    if time_budget is None:
        return average_over_nested_boxes(weighted, 1, None)
    left = 0.9 * time_budget - (time.perf_counter() - start)
    return average_over_nested_boxes(weighted, 16, left)


def streamed_bound(weights: AttentionWeights, N: int, norm: str = "2", domain: Domain | None = None, *,
                   time_budget: float | None = None, progress: bool = False, **_: object) -> Certificate:
    """Certified bound on Lip_norm(F) over an eps-ball of a DP layer without materialising J (module docstring).

    Returns Certificate(kind="upper", certified=True, method="streamed"); details: inf_norm and norm2 bounds of
    the enclosure, lower = ||J(X0)||_norm (attained at the centre), ratio, memory_estimate, chunks. Raises
    `BudgetExceeded` when the pass cannot finish within ``time_budget`` (nothing is certified then).
    """
    start = time.perf_counter()
    check_tokens(N)
    check_norm(norm)
    if weights.kind != "dp":
        raise InvalidInputError(f"the streamed bound covers dot-product attention, got {weights.kind!r}")
    if not isinstance(domain, EpsBall):
        raise InvalidInputError(f"the streamed bound needs an EpsBall(X0, eps), got {domain!r}")
    w64 = weights.to(torch.float64, "cpu")
    box = initial_box(domain, N, w64.D)
    X0 = domain.center.detach().to(torch.float64).cpu().numpy()
    eta = float(np.max(half_widths(box, X0)))
    nw = numpy_weights(w64)
    query_chunk, key_chunk = plan_chunks(N, nw.D, nw.d)
    if time_budget is not None and predicted_seconds(N, nw.D, nw.H) / 4 > time_budget:
        raise BudgetExceeded(
            f"streamed: the pass needs about {predicted_seconds(N, nw.D, nw.H):.0f} s on this machine's reference "
            f"speed (at least {predicted_seconds(N, nw.D, nw.H) / 4:.0f} s on a 4x faster one) > the time budget "
            f"{time_budget:.0f} s (raise time_budget)")
    parts = head_parts(Interval(X0, X0), nw, query_chunk)
    setup = time.perf_counter() - start
    left = None if time_budget is None else max(time_budget - 2 * setup, 0.0)  # the slope sums cost about the same
    centre = centre_sums(parts, nw, N, key_chunk, seconds=left, progress=progress)
    (R_S, C_S), steps = nested_slope_sums(box, X0, nw, eta, query_chunk, time_budget, start)
    rows, columns = _add(centre.rows, R_S), _add(centre.columns, C_S)
    inf_norm = float(np.max(rows))
    schur = float(up(np.sqrt(up(np.max(rows) * np.max(columns)))))
    split = float(_add(np.full(1, centre.norm2()), up(np.sqrt(up(np.max(R_S) * np.max(C_S)))))[0])
    value = inf_norm if norm == "inf" else min(schur, split)
    at_centre = centre.inf_norm() if norm == "inf" else centre.norm2()
    lower = attained_without_jacobian(torch.from_numpy(X0), w64, norm, row=int(np.argmax(centre.rows)))
    ratio = value / lower if lower > 0 else math.inf
    return Certificate(
        value=float(value), kind="upper", certified=True, method="streamed", scope=domain.scope,
        norm=norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=(f"first-order Taylor form about X0 without materialising J: ||J(X0)|| <= {at_centre:.6g} (streamed by "
                 f"query token) plus separable slope sums"
                 + (f" averaged over {steps} nested boxes" if steps > 1 else "")
                 + f" (proofs/slope_remainder.py); upper / ||J(X0)|| = {ratio:.4f}"),
        details={"lower": lower, "ratio": ratio, "at_centre": at_centre, "remainder": value - at_centre,
                 "eta": eta, "steps": steps,
                 "memory_estimate": memory_estimate(N, nw.D, nw.H, nw.d), "chunks": [query_chunk, key_chunk]},
    )
