"""Multipliers for the SDP relaxation without a solver: a_kl = exp(alpha_l - beta_k) (MATH.md section 7).

For the interval matrix J_c +- R (m x n) and any positive multipliers a_kl, `_certify.certified_t` proves

    max ||J||_2 <= lambda_max([[diag(u), J_c], [J_c^T, diag(v)]]),   u_k = sum_l r_kl a_kl,  v_l = sum_k r_kl / a_kl

(from |x_k| |y_l| <= (a_kl x_k^2 + y_l^2 / a_kl) / 2). The solver-free family a_kl = exp(alpha_l - beta_k) has
m + n parameters instead of m n, contains the Perron multipliers (`perron_multipliers`, which give exactly the
baseline ||J_c|| + ||R||), and lambda_max is a convex function of (alpha, beta) (each diagonal entry is a sum of
exponentials of linear forms, and lambda_max is convex and nondecreasing in the diagonal). Its gradient, with
(x, y) the unit top eigenvector: d/d alpha_l = sum_k x_k^2 r_kl a_kl - y_l^2 v_l, d/d beta_k = -x_k^2 u_k +
sum_l y_l^2 r_kl / a_kl. `scaled_multipliers` runs L-BFGS from the Perron point until its iterations or its deadline
end and returns the best multipliers seen; nothing it computes is trusted: `certified_t` proves the bound.

On the taylor form's enclosure of a trained D = 48 layer's Jacobian (N = 17, eps = 1e-2, 816 x 816): baseline
30.27, after 10 iterations 28.73 (5 s), after 80 28.38; an ascent over unit (x, y) on the same enclosure reaches
28.21, so the enclosure's own maximum is within 0.5% of the 80-iteration value.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.optimize import minimize
from scipy.sparse.linalg import eigsh

from ._enclosure import MatrixEnclosure
from ._certify import perron_multipliers

EXPONENT_LIMIT = 200.0
"""alpha_l - beta_k is clipped to [-EXPONENT_LIMIT, EXPONENT_LIMIT] (any positive multiplier is valid)."""

DENSE_EIGH_MAX = 64
"""Up to this size (m + n) the top eigenpair comes from a dense eigh, above from Lanczos (eigsh)."""


class _Deadline(Exception):
    pass


def scaled_multipliers(enclosure: MatrixEnclosure, *, iterations: int = 40,
                       deadline: float | None = None) -> tuple[np.ndarray, float]:
    """(a, estimate): multipliers a_kl = exp(alpha_l - beta_k) (m, n) that make the relaxation's lambda_max small, and
    that lambda_max as computed in floating point (an estimate, for the certification's Cholesky guess; not a bound).

    L-BFGS over (alpha, beta) from the Perron multipliers, at most ``iterations`` iterations, stopped at
    ``deadline`` (a `time.perf_counter()` value); the best point evaluated is returned."""
    C, R = enclosure.center, enclosure.radius
    m, n = C.shape
    perron = perron_multipliers(enclosure)
    if not np.any(R):
        return perron, math.nan
    # the Perron point: a_kl = y_l / x_k
    alpha0 = np.log(perron[0])
    beta0 = -np.log(perron[:, 0]) + alpha0[0]
    best = {"value": math.inf, "theta": np.concatenate([alpha0, beta0])}
    state = {"v0": np.full(m + n, 1.0 / math.sqrt(m + n))}  # a fixed start: the result does not depend on a seed

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        if deadline is not None and time.perf_counter() > deadline and math.isfinite(best["value"]):
            raise _Deadline
        alpha, beta = theta[:n], theta[n:]
        exponent = np.clip(alpha[None, :] - beta[:, None], -EXPONENT_LIMIT, EXPONENT_LIMIT)
        RA, RB = R * np.exp(exponent), R * np.exp(-exponent)
        u, v = RA.sum(axis=1), RB.sum(axis=0)
        M = np.block([[np.diag(u), C], [C.T, np.diag(v)]])
        if m + n <= DENSE_EIGH_MAX:
            values, vectors = np.linalg.eigh(M)
            value, top = float(values[-1]), vectors[:, -1]
        else:
            values, vectors = eigsh(M, k=1, which="LA", tol=1e-9, v0=state["v0"])
            value, top = float(values[0]), vectors[:, 0]
            state["v0"] = top
        x2, y2 = top[:m] ** 2, top[m:] ** 2
        gradient = np.concatenate([(x2[:, None] * RA).sum(axis=0) - y2 * v, -x2 * u + (RB * y2[None, :]).sum(axis=1)])
        if value < best["value"]:
            best["value"], best["theta"] = value, theta.copy()
        return value, gradient

    try:
        minimize(objective, best["theta"], jac=True, method="L-BFGS-B", options={"maxiter": iterations})
    except _Deadline:
        pass
    theta = best["theta"]
    exponent = np.clip(theta[:n][None, :] - theta[n:][:, None], -EXPONENT_LIMIT, EXPONENT_LIMIT)
    return np.exp(exponent), best["value"]
