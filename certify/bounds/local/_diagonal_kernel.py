"""The exact diagonal slope S_A of `_slopes._diagonal_slope` as one compiled (numba) pass (MATH.md section 7).

    S_A[i, r, F] = sum_{t, s} h_ts |d_{t,s} A_i[r, F]|,
    d_{t,s} A_i[r, F] = delta_it sigma T_i[s, r, F] + P_it inner_its[r, F],
    inner_its[r, F] = sigma b_i[s] (k~_it[r] v~_it[F] - A_i[r, F]) + M[s, r] v~_it[F] + k~_it[r] WVO[s, F]

(the derivative of A in the `_slopes` module docstring), every factor an interval enclosure over the box. The
numpy form builds each (t, s, r, F) array of one query token as intervals, five interval operations of N D^3
entries each; here each entry is computed in registers and added to the sum at once. Two savings beside the
temporaries: for t != i the magnitude of the product P_it inner is taken as |P_it| |inner| (for intervals the
magnitude of a product is the product of the magnitudes, so nothing is lost but one rounding), and the parts
that do not depend on s are hoisted (k~_it[r] v~_it[F] - A_i[r, F] once per (i, t), h_ts |P_it| once per (t, s)).

Rounding: every interval operation is the one of `certify.interval._kernels` (the four-corner product, and sums,
each end rounded outward by at least one ulp); the sum over (t, s) of the nonnegative terms
h_ts |.| rounds every product and every partial sum up (`_up`, which adds at least 2^-1074, so underflow cannot
lose a term), and the (t, s) sum of n = N D terms is a plain float sum with the margin of
`certify.interval._kernels.sum_kernel` (4 n u times the sum, then rounded up).

No NaN can arise, so the four-corner products need no NaN test: every end is checked to be at most
`MAGNITUDE_MAX` = 1e75 in magnitude first (else the answer is +inf everywhere), so every interval end computed
before the last product stays below 1e301 (at most three factors of 1e75 and a few sums), and the last products
h_ts |P_it| |inner| are of finite nonnegative numbers: they may overflow to +inf, which rounds and adds as +inf.
"""

from __future__ import annotations

import numba
import numpy as np

from ...interval import Interval, interval_einsum
from ...interval._kernels import U, _cache_lock, _down, _up

MAGNITUDE_MAX = 1e75
"""The compiled pass runs when every end of every enclosure and every weight is at most this in magnitude."""

with _cache_lock():
    @numba.njit(cache=True, inline="always")
    def _times(a_lo: float, a_hi: float, b_lo: float, b_hi: float) -> tuple[float, float]:
        # the four-corner product of finite intervals (no corner is NaN: module docstring), rounded outward
        p1 = a_lo * b_lo
        p2 = a_lo * b_hi
        p3 = a_hi * b_lo
        p4 = a_hi * b_hi
        return _down(min(min(p1, p2), min(p3, p4))), _up(max(max(p1, p2), max(p3, p4)))

    @numba.njit(cache=True, inline="always")
    def _inner(bs_lo, bs_hi, c_lo, c_hi, M_lo, M_hi, v_lo, v_hi, k_lo, k_hi, W_lo, W_hi) -> tuple[float, float]:
        # sigma b_i[s] c[r, F] + M[s, r] v~_it[F] + k~_it[r] WVO[s, F], rounded outward
        x_lo, x_hi = _times(bs_lo, bs_hi, c_lo, c_hi)
        y_lo, y_hi = _times(M_lo, M_hi, v_lo, v_hi)
        z_lo, z_hi = _times(k_lo, k_hi, W_lo, W_hi)
        return _down(_down(x_lo + y_lo) + z_lo), _up(_up(x_hi + y_hi) + z_hi)

    @numba.njit(cache=True)
    def _diagonal_slope_kernel(P_lo, P_hi, k_lo, k_hi, v_lo, v_hi, bs_lo, bs_hi, A_lo, A_hi, M_lo, M_hi,
                               W_lo, W_hi, Ts_lo, Ts_hi, h, out):
        N, D = h.shape
        c_lo = np.empty((D, D))
        c_hi = np.empty((D, D))
        total = np.empty((D, D))
        for i in range(N):
            total[:] = 0.0
            for t in range(N):
                for r in range(D):
                    for F in range(D):  # c[r, F] = k~_it[r] v~_it[F] - A_i[r, F]
                        kv_lo, kv_hi = _times(k_lo[i, t, r], k_hi[i, t, r], v_lo[i, t, F], v_hi[i, t, F])
                        c_lo[r, F] = _down(kv_lo - A_hi[i, r, F])
                        c_hi[r, F] = _up(kv_hi - A_lo[i, r, F])
                # |P_it inner| = |P_it| |inner| for t != i: the weight h_ts |P_it| rounded up
                p_mag = max(abs(P_lo[i, t]), abs(P_hi[i, t]))
                for s in range(D):
                    weight = _up(h[t, s] * p_mag)
                    if t == i:  # P_ii inner + sigma T_i[s, r, F], then h_is times its magnitude
                        for r in range(D):
                            for F in range(D):
                                lo, hi = _inner(bs_lo[i, s], bs_hi[i, s], c_lo[r, F], c_hi[r, F], M_lo[s, r],
                                                M_hi[s, r], v_lo[i, t, F], v_hi[i, t, F], k_lo[i, t, r],
                                                k_hi[i, t, r], W_lo[s, F], W_hi[s, F])
                                d_lo, d_hi = _times(P_lo[i, i], P_hi[i, i], lo, hi)
                                lo = _down(d_lo + Ts_lo[i, s, r, F])
                                hi = _up(d_hi + Ts_hi[i, s, r, F])
                                total[r, F] += _up(h[t, s] * max(abs(lo), abs(hi)))
                        continue
                    for r in range(D):
                        for F in range(D):
                            lo, hi = _inner(bs_lo[i, s], bs_hi[i, s], c_lo[r, F], c_hi[r, F], M_lo[s, r], M_hi[s, r],
                                            v_lo[i, t, F], v_hi[i, t, F], k_lo[i, t, r], k_hi[i, t, r], W_lo[s, F],
                                            W_hi[s, F])
                            total[r, F] += _up(weight * max(abs(lo), abs(hi)))
            # a float sum of n nonnegative terms is within gamma_(n-1) of the exact one (`_kernels.sum_kernel`)
            n = N * D
            for r in range(D):
                for F in range(D):
                    out[i, r, F] = _up(total[r, F] + 4.0 * n * U * total[r, F])


def diagonal_slope(P: Interval, k_tilde: Interval, v_tilde: Interval, b_sigma: Interval, A: Interval, M: Interval,
                   WVO: Interval, T_sigma: Interval, h: np.ndarray) -> np.ndarray:
    """S_A (N, D, D) >= sum_{t, s} h_ts |d_{t,s} A_i[r, F]| over the box (module docstring), from the enclosures
    P (N, N), k~ and v~ (N, N, D), b_sigma = sigma b (N, D), A (N, D, D), M and WVO (D, D), T_sigma = sigma T
    (N, D, D, D: [i, s, r, F]) and the weights h (N, D), nonnegative. All +inf unless every end is at most
    `MAGNITUDE_MAX` in magnitude (module docstring)."""
    N, D = h.shape
    operands = (P, k_tilde, v_tilde, b_sigma, A, M, WVO, T_sigma)
    if not all(np.all(np.abs(end) <= MAGNITUDE_MAX) for x in operands for end in (x.lo, x.hi)) or not np.all(
            (h >= 0) & (h <= MAGNITUDE_MAX)):
        return np.full((N, D, D), np.inf)
    ends = [np.ascontiguousarray(end, dtype=np.float64) for x in operands for end in (x.lo, x.hi)]
    out = np.empty((N, D, D))
    with np.errstate(over="ignore", invalid="ignore"):
        _diagonal_slope_kernel(*ends, np.ascontiguousarray(h, dtype=np.float64), out)
    return out


def diagonal_slope_by_arrays(P: Interval, k_tilde: Interval, v_tilde: Interval, b: Interval, A: Interval,
                             M: Interval, WVO: Interval, sigma: Interval, h: np.ndarray) -> np.ndarray:
    """The same S_A by whole-array interval operations, one (t, s, r, F) array per query token, summed in plain
    float64 (so not rounded up): the numpy form the compiled pass replaced, kept as the reference for the tests
    and for benchmarks/diagonal_slope.py. Not for certificates."""
    N, D = h.shape
    kv = k_tilde.expand(-1) * v_tilde.expand(-2)  # [i, t, r, F] = k~_it[r] v~_it[F]
    T = interval_einsum("il,ils,ilr,ilF->isrF", P, k_tilde, k_tilde, v_tilde)  # [i, s, r, F]
    out = np.empty((N, D, D))
    for i in range(N):
        inner = ((kv[i].expand(1) - A[i].expand(0).expand(0)) * (b[i] * sigma).reshape(1, D, 1, 1)
                 + M.expand(0).expand(-1) * v_tilde[i].expand(1).expand(1)
                 + k_tilde[i].expand(1).expand(-1) * WVO.expand(0).expand(2))
        derivative = P[i].reshape(N, 1, 1, 1) * inner  # [t, s, r, F]
        mags = derivative.mag
        mags[i] = (derivative[i] + T[i] * sigma).mag
        out[i] = np.einsum("ts,tsrF->rF", h, mags)
    return out
