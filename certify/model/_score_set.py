"""The score differences of a DP attention block over the set its prefix reaches, with their directional derivatives
(MATH.md section 7; used by `_jacobian_chain.directional_bounds`).

Setting. The block's input is xi = c + Delta, where c is the midpoint of the prefix's point enclosure (N, D) and
Delta ranges over {s (y0 - c) + W~ delta + E~ delta}: s in [0, 1], W~ in the prefix's interval Jacobian W (N D, n0),
delta in the input domain (a box of radii r or an l_2 ball), ||E~||_inf <= e. Every point of a segment [c, y] with
y = F(x) reachable lies there (`directional_bounds`), so an enclosure over this set is all the Taylor form needs.
Per coordinate, |Delta - W~ delta| <= u := |y0 - c| + e max |delta| (the ``u`` of `directional_bounds`).

Head h, with q_i = W_Q^T xi_i + b_Q and k_t = W_K^T xi_t (W_Q, W_K of shape (D, d)), scores enter the softmax only
through the differences L_ijk = q_i . (k_k - k_j) / sqrt(d) (`_enclosure.dp_score_differences`), a quadratic in xi:

    L_ijk(c + Delta) = L_ijk(c) + [Q_i . dk_jk + q_i . dK_jk] / sqrt(d) + [Q_i . dK_jk] / sqrt(d),

q_i, dk_jk = k_k - k_j at c, Q_i = W_Q^T Delta_i, dK_jk = W_K^T (Delta_k - Delta_j). The linear term is a^T Delta
for one vector a per (i, j, k); over the set, |a^T W~ delta| <= spread(a^T W) (`Domain.spread`: the interval row
a^T W = dk_jk^T (W_Q^T W_i) + q_i^T (W_K^T (W_k - W_j)) keeps the cancellations among the tokens' coordinates that
the box loses) and |a^T (Delta - W~ delta)| <= |a|^T u. The quadratic term is at most sum_c SQ_ic SK_jkc with
SQ_ic >= |(Q_i)_c| and SK_jkc >= |(dK_jk)_c| bounded the same way. The directional derivative along a direction g
(N, D) is linear in xi:

    dL_ijk(c + Delta)[g] = dL_ijk(c)[g] + [alpha_i . dK_jk + Q_i . beta_jk] / sqrt(d),

alpha_i = W_Q^T g_i, beta_jk = W_K^T (g_k - g_j), so it lies within sum_c (|alpha_ic| SK_jkc + SQ_ic |beta_jkc|) /
sqrt(d) of its value at c. L_ijj = 0 exactly. The linear parts themselves, q_i, k_j - k_k and v_j - v_k, lie within
SQ, SK and SV (the same bound with W_V) of their values at c; the forward pass takes them too (`KnownHead`). Every
quantity is computed in outward-rounded interval arithmetic.

Why: over the box around the reachable set (N D coordinates, each bounded alone) the score differences of the digits
ViT's last attention block are several units wide at eps = 3e-4 (l_inf), so exp gives the softmax enclosure a
factor e^several and the directional remainder was 1,000x its value at c; over the set, which has n0 = 64
dimensions, they are O(eps) wide.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..bounds.local._dual import Dual
from ..bounds.local._enclosure import KnownHead, const
from ..interval import Interval, isum, round_down, round_up


@dataclasses.dataclass(frozen=True)
class HeadScores:
    """One head's enclosures over the set (module docstring): L (N, N, N) = [i, j, k]; at c: q (N, d) and
    dk (N, N, d) = [j, k] = k_k - k_j; SQ (N, d) >= |W_Q^T Delta_i|, SK (N, N, d) >= |W_K^T (Delta_k - Delta_j)|;
    over the set: Q (N, d) = q_i, dK = k_j - k_k and dV = v_j - v_k ([j, k], the box pass's order; linear in xi,
    so q +- SQ, and likewise)."""

    L: Interval
    q: Interval
    dk: Interval
    SQ: np.ndarray
    SK: np.ndarray
    Q: Interval
    dK: Interval
    dV: Interval


BYTES_PER_ENTRY = 80
"""Peak bytes of `head_scores` per entry of an (N, N, d, n0) array (its largest: dK's rows, and one query token's
rows with their products), rounded up from tracemalloc: 18.4 MiB at (N, d, n0) = (17, 16, 64), 43 MiB at
(32, 8, 128), i.e. 65 and 44 bytes per entry."""


def memory_estimate(N: int, d: int, n0: int) -> int:
    """Peak bytes of `head_scores` (the caller skips the sets above `_taylor.MEMORY_LIMIT`)."""
    return BYTES_PER_ENTRY * N * N * d * n0


def _off_diagonal(x: Interval) -> Interval:
    """x with the entries [..., i, j, j, ...] (axes 1 and 2 of (N, N, N, ...)) set to exactly 0: L_ijj = 0."""
    N = x.shape[1]
    mask = ~np.eye(N, dtype=bool).reshape(1, N, N, *([1] * (x.lo.ndim - 3)))
    return Interval(np.where(mask, x.lo, 0.0), np.where(mask, x.hi, 0.0))


def _differences(x: Interval) -> Interval:
    """[j, k] = x_k - x_j for x (N, ...)."""
    return x.expand(0) - x.expand(1)


def _magnitude_image(u: np.ndarray, M: np.ndarray) -> np.ndarray:
    """An upper bound on |M|^T u per token: u (N, D) >= 0, M (D, d) exact -> (N, d)."""
    return _token_image(Interval(u, u.copy()), np.abs(M)).hi


def _within(centre: Interval, radius: np.ndarray) -> Interval:
    return Interval(round_down(centre.lo - radius), round_up(centre.hi + radius))


def _token_image(C: Interval, M: np.ndarray) -> Interval:
    """x_t^T M for every token of C (N, D), M (D, m) exact: (N, m)."""
    return isum(C.expand(-1) * M, -2)


def _rows_image(W3: Interval, M: np.ndarray) -> Interval:
    """M^T W_t for every token block W_t (D, n) of W3 (N, D, n): (N, m, n)."""
    return isum(W3.expand(-2) * M[..., None], -3)


def head_scores(c: np.ndarray, u: np.ndarray, W: Interval, spread, W_Q: np.ndarray, W_K: np.ndarray,
                b_Q: np.ndarray | None, W_V: np.ndarray) -> HeadScores:
    """The module docstring's enclosures for one head: c (N, D) a float point, u (N, D) >= |Delta - W~ delta|,
    W (N D, n0) the prefix's interval Jacobian, ``spread(G)`` >= max |G delta| over the domain for each row of an
    interval matrix G (..., n0) (`Domain.spread`), W_Q, W_K, W_V (D, d) and b_Q (d,) exact."""
    N, D = c.shape
    d = W_Q.shape[1]
    scale = const(1.0 / math.sqrt(d))
    C = Interval(c, c.copy())
    q = _token_image(C, W_Q) if b_Q is None else _token_image(C, W_Q) + b_Q  # (N, d)
    dk = _differences(_token_image(C, W_K))  # (N, N, d) [j, k]
    W3 = Interval(W.lo.reshape(N, D, -1), W.hi.reshape(N, D, -1))
    Wq = _rows_image(W3, W_Q)  # (N, d, n0): W_Q^T W_i
    dWk = _differences(_rows_image(W3, W_K))  # (N, N, d, n0) [j, k]: W_K^T (W_k - W_j)
    row_spread = np.empty((N, N, N))  # one query token at a time: (N, N, d, n0) entries, not N times that
    for i in range(N):
        row = isum(dk.expand(-1) * Wq[i], -2)  # (N, N, n0): dk_jk^T W_Q^T W_i
        row = row + isum(q[i].expand(-1) * dWk, -2)  # + q_i^T W_K^T (W_k - W_j)
        row_spread[i] = spread(row)
    uq, uk, uv = _magnitude_image(u, W_Q), _magnitude_image(u, W_K), _magnitude_image(u, W_V)  # (N, d)
    SQ = (Interval(spread(Wq), spread(Wq)) + uq).hi  # (N, d)
    uk_jk = Interval(uk, uk.copy()).expand(0) + uk[:, None, :]
    SK = (uk_jk + spread(dWk)).hi  # (N, N, d)
    SV = (Interval(uv, uv.copy()).expand(0) + uv[:, None, :] + spread(_differences(_rows_image(W3, W_V)))).hi
    linear_rest = isum(Interval(dk.mag, dk.mag).expand(0) * uq[:, None, None, :], -1)  # |W_Q dk|^T u_i
    linear_rest = linear_rest + isum(Interval(q.mag, q.mag)[:, None, None, :] * uk_jk.hi[None], -1)  # |W_K q_i|^T u
    quadratic = isum(Interval(SQ, SQ.copy())[:, None, None, :] * SK[None], -1)
    radius = ((Interval(row_spread, row_spread) + linear_rest + quadratic) * scale).hi
    centre = isum(q.expand(1).expand(1) * dk.expand(0), -1) * scale
    L = _off_diagonal(_within(centre, radius))
    dV = _within(-_differences(_token_image(C, W_V)), SV)
    return HeadScores(L, q, dk, SQ, SK, _within(q, SQ), _within(-dk, SK), dV)


def score_duals(heads: list[HeadScores], g: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, d: int
                ) -> list[KnownHead]:
    """Per head, the `KnownHead` of the forward pass along the float directions g (N, D, K): L a Dual enclosing
    L_ijk(xi) (N, N, N) and dL_ijk(xi)[g_z] (N, N, N, K) for xi in the set, and the values of Q, dK, dV there
    (module docstring)."""
    scale = const(1.0 / math.sqrt(d))
    G = Interval(g, g.copy())
    out = []
    for h, head in enumerate(heads):
        alpha = _rows_image(G, W_Q[h])  # (N, d, K): W_Q^T g_i
        beta = _differences(_rows_image(G, W_K[h]))  # (N, N, d, K) [j, k]: W_K^T (g_k - g_j)
        at_c = isum(alpha.expand(1).expand(1) * head.dk.expand(0).expand(-1), -2)  # (N, N, N, K)
        at_c = (at_c + isum(head.q.expand(1).expand(1).expand(-1) * beta.expand(0), -2)) * scale
        moved = isum(Interval(alpha.mag, alpha.mag)[:, None, None] * head.SK[None, ..., None], -2)
        moved = moved + isum(Interval(beta.mag, beta.mag)[None] * head.SQ[:, None, None, :, None], -2)
        radius = (moved * scale).hi
        out.append(KnownHead(Dual(head.L, _off_diagonal(_within(at_c, radius))), head.Q, head.dK, head.dV))
    return out
