"""Certification after the solve: rebuild the LMI from the multipliers in float64 and bound t with a proof.

The solver's t is never used. From any positive multipliers a_kl (the solver's, or any other choice):

1. b_kl = 1 / a_kl rounded up, so a_kl b_kl >= 1 exactly;
2. u_k = sum_l r_kl a_kl and v_l = sum_k r_kl b_kl, rounded up (`sum_up`), so the float u, v are >= the exact
   sums; a larger u, v only makes the LMI matrix smaller in the Loewner order, so validity is kept;
3. M0 = [[-diag(u), J_c], [J_c^T, -diag(v)]] (the LMI matrix at t = 0; negation and copying are exact);
4. t_cert = -lambda_min_lower(M0), a proven lower bound on lambda_min from a floating-point Cholesky factorisation
   (`_floating.lambda_min_lower`, Higham Thm 10.3). Then M0 + t_cert I >= 0, so ||J||_2 <= t_cert on the whole
   enclosure (see `_lmi.py` for the relaxation's validity).

This is at least as strong as MATH.md's recipe t = -lambda_min(M0) + 4 (m + n) eps ||M0||_F: that margin is the
Cholesky check's first shift, and the check proves it instead of assuming LAPACK's eigenvalue accuracy.
"""

from __future__ import annotations

import numpy as np

from ._enclosure import MatrixEnclosure
from ._floating import lambda_min_lower, mul_up, sum_up, up

A_RANGE = (1e-100, 1e100)
"""Multipliers are clipped into this range (any positive value is valid; this avoids overflow)."""


def lmi_matrix(enclosure: MatrixEnclosure, a: np.ndarray) -> np.ndarray:
    """M0 = [[-diag(u), J_c], [J_c^T, -diag(v)]] with b = 1/a and u, v rounded up (steps 1-3 above).

    Args:
        enclosure: the interval matrix (m, n).
        a: multipliers (m, n); only entries with r_kl > 0 are read. NaN or nonpositive entries there are
            replaced by 1 (still valid).
    """
    Jc, R = enclosure.center, enclosure.radius
    m, n = Jc.shape
    a = np.asarray(a, dtype=np.float64)
    if a.shape != (m, n):
        raise ValueError(f"multipliers must have shape {(m, n)}, got {a.shape}")
    active = R > 0
    a = np.where(active & np.isfinite(a) & (a > 0), a, 1.0)
    a = np.clip(a, *A_RANGE)
    b = up(1.0 / a)
    ra = np.where(active, mul_up(R, a), 0.0)
    rb = np.where(active, mul_up(R, b), 0.0)
    u = sum_up(ra, axis=1)
    v = sum_up(rb, axis=0)
    M0 = np.zeros((m + n, m + n))
    M0[:m, :m] = -np.diag(u)
    M0[m:, m:] = -np.diag(v)
    M0[:m, m:] = Jc
    M0[m:, :m] = Jc.T
    return M0


def certified_t(enclosure: MatrixEnclosure, a: np.ndarray, guess: float | None = None) -> float:
    """A proven upper bound on max ||J||_2 over the enclosure, from multipliers a (step 4 above); ``guess``, an
    estimate of lambda_min of the LMI matrix at t = 0 (saves LAPACK's eigenvalues; only the check proves)."""
    return float(up(-lambda_min_lower(lmi_matrix(enclosure, a), guess=guess)))


def is_certified(enclosure: MatrixEnclosure, a: np.ndarray, t: float) -> bool:
    """True when the multipliers a prove ||J||_2 <= t on the enclosure (t >= the certified value)."""
    return bool(np.isfinite(t) and t >= certified_t(enclosure, a))


def perron_multipliers(enclosure: MatrixEnclosure) -> np.ndarray:
    """a_kl = y_l / x_k with (x, y) the top singular pair of R: in exact arithmetic this gives ||J_c|| + ||R||.

    Then u_k = (R y)_k / x_k = ||R|| and v_l = ||R|| (MATH.md 7). Zero entries of x, y are floored at 1e-12 of
    their maximum, which only affects rows and columns where R nearly vanishes.
    """
    R = enclosure.radius
    if not np.any(R):
        return np.ones_like(R)
    U_, s, Vt = np.linalg.svd(R)
    x = np.abs(U_[:, 0])
    y = np.abs(Vt[0])
    x = np.maximum(x, 1e-12 * x.max())
    y = np.maximum(y, 1e-12 * y.max())
    return y[None, :] / x[:, None]
