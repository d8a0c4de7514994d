"""Float64 arithmetic with a proven error margin: upward-rounded sums and a verified lower bound on lambda_min.

numpy cannot switch the rounding mode, so each function rounds to nearest and then widens by a bound on the
rounding error that a theorem gives (u = 2^-53, the unit roundoff; gamma_k = k u / (1 - k u); Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., 2002, sections 3.1 and 10.1):

- `up(x)`: one step towards +inf after a round-to-nearest operation; the exact result of that operation is <= it.
- `sum_up(x, axis)`: the exact sum of nonnegative float terms is <= fl(sum) (1 + gamma_n) (Higham eq. 4.4), so
  fl(sum) (1 + 2 (n + 2) u), rounded up, bounds it.
- `lambda_min_lower(S)`: a proven lower bound on the smallest eigenvalue of a symmetric float matrix, verified by a
  floating-point Cholesky factorisation (see its docstring).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

U = 2.0**-53
"""Unit roundoff of float64."""

ETA = 2.0**-1074
"""Smallest positive subnormal float64; covers underflow in products (Rump 2006)."""


def up(x: np.ndarray | float) -> np.ndarray:
    """The next float towards +inf: an upper bound on the exact result of one round-to-nearest operation."""
    return np.nextafter(np.asarray(x, dtype=np.float64), np.inf)


def gamma(k: int) -> float:
    """gamma_k = k u / (1 - k u), rounded up (Higham, Lemma 3.1)."""
    if k * U >= 0.5:
        raise ValueError(f"gamma_k needs k u < 1/2, got k = {k}")
    return float(up(up(k * U) / (1.0 - k * U)))


def sum_up(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Upper bound on the exact sum of nonnegative float64 terms along `axis` (all terms when None).

    fl(sum_{i<=n} x_i) >= (sum x_i) / (1 + gamma_{n-1}) for x_i >= 0 in any summation order, so
    up(fl(sum) (1 + 2 (n + 2) u)) >= sum x_i (the extra factor also covers the final multiplication).
    """
    x = np.asarray(x, dtype=np.float64)
    if np.any(x < 0) or not np.all(np.isfinite(x)):
        raise ValueError("sum_up needs finite nonnegative terms")
    n = x.size if axis is None else x.shape[axis]
    return up(np.sum(x, axis=axis) * (1.0 + 2.0 * (n + 2) * U) + (n + 1) * ETA)


def mul_up(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Upper bound on the exact product of nonnegative floats (one rounding, plus underflow)."""
    return up(np.multiply(x, y) + ETA)


def _cholesky_ok(B: np.ndarray) -> bool:
    """Whether floating-point Cholesky of B completes with a finite factor (a B or a factor that overflowed float64
    proves nothing, so it counts as a failure and the caller falls back to a valid bound)."""
    if not np.all(np.isfinite(B)):
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            R = scipy.linalg.cholesky(B, lower=False, check_finite=False)
        except np.linalg.LinAlgError:
            return False
    return bool(np.all(np.isfinite(R)))


def lambda_min_lower(S: np.ndarray, *, attempts: int = 8, guess: float | None = None) -> float:
    """A proven lower bound on lambda_min(S) for a symmetric float64 matrix S (n x n).

    Guess: lambda = eigvalsh(S)[0] (LAPACK, no guarantee). Check: for shifts s = -lambda + delta with growing delta,
    form B = fl(S + s I) (only the diagonal is rounded) and run floating-point Cholesky on B. If it completes,

        R^T R = B + Delta,  |Delta| <= gamma_{n+1} |R^T| |R|           (Higham, Theorem 10.3; Demmel 1989),

    which holds for any order of the inner products (blocked LAPACK with conventional BLAS, with or without FMA)
    provided nothing underflows. Then lambda_min(B) >= -||Delta||_2 >= -gamma_{n+1} ||R||_F^2 and
    ||R||_F^2 = tr(B + Delta) <= tr(B) + gamma_{n+1} ||R||_F^2, so

        lambda_min(B) >= -gamma_{n+1} / (1 - gamma_{n+1}) tr(B).

    The diagonal rounding gives S + s I = B - E with |E_ii| <= 2 u |b_ii|, and underflow adds at most
    4 n (2 (n + 2) + max b_ii) eta (Rump, "Verification of positive definiteness", BIT 46, 2006). Hence

        lambda_min(S) >= -s - kappa,  kappa = gamma_{n+1}/(1 - gamma_{n+1}) tr(B) + 2 u max b_ii + underflow,

    evaluated with upward rounding. If Cholesky fails at every shift, the bound -||S||_inf (Gershgorin, exact up to
    rounding, itself rounded outward) is returned, which is always valid (-inf if that sum overflows float64).
    """
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)):
        raise ValueError("S has NaN or Inf entries")
    if not np.array_equal(S, S.T):
        raise ValueError("S must be exactly symmetric")
    n = S.shape[0]
    gershgorin = float(sum_up(np.abs(S), axis=1).max()) if n else 0.0
    if n == 0:
        return 0.0
    with np.errstate(over="ignore"):
        scale = max(float(np.linalg.norm(S, "fro")), 1e-300)
    if guess is None:  # (a caller may pass an estimate instead, e.g. from power iteration; only the check proves)
        guess = float(np.linalg.eigvalsh(S)[0])
    g = gamma(n + 1)
    factor = up(g / (1.0 - g))
    delta = 4.0 * n * U * scale
    for _ in range(attempts):
        s = float(up(-guess + delta))
        B = S.copy()
        B[np.diag_indices(n)] = np.diag(S) + s
        if np.all(np.diag(B) > 0) and _cholesky_ok(B):
            diag_b = np.diag(B)
            kappa = up(
                factor * sum_up(diag_b) + 2.0 * U * up(diag_b.max()) + 4.0 * n * (2.0 * (n + 2) + diag_b.max()) * ETA
            )
            kappa = up(kappa * (1.0 + 8.0 * U))
            return float(-up(s + kappa))
        delta *= 16.0
    return -gershgorin


def norm2_upper(A: np.ndarray) -> float:
    """A proven upper bound on ||A||_2: -lambda_min of the dilation [[0, A], [A^T, 0]], whose spectrum is +-sigma(A)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"A must be a matrix, got shape {A.shape}")
    m, n = A.shape
    if A.size == 0 or not np.any(A):
        return 0.0
    S = np.zeros((m + n, m + n))
    S[:m, m:] = A
    S[m:, :m] = A.T
    return float(up(-lambda_min_lower(S)))
