"""Lower bounds on c_p(N, d) = sup_Y ||M(Y)||_p: local maximisation with restarts (an attained value, not a bound
from above). The value returned is recomputed in float64 at the returned configuration Y (the witness)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from ._global_l2_enclosure import core_jacobian_float


def core_norm(Y: np.ndarray, norm: str) -> float:
    """||M(Y)||_p in float64 for one configuration Y (N, d)."""
    M = core_jacobian_float(np.asarray(Y, dtype=np.float64)[None])[0]
    return float(np.linalg.norm(M, ord=np.inf if norm == "inf" else 2))


def search_lower(N: int, d: int, norm: str, restarts: int = 24, seed: int = 0,
                 starts: list[np.ndarray] | None = None) -> tuple[float, np.ndarray]:
    """Maximise ||M(Y)||_p over Y in R^{N x d} by Nelder-Mead from random and given starts; (value, witness Y)."""
    rng = np.random.default_rng(seed)
    candidates = [np.asarray(s, dtype=np.float64).reshape(N, d) for s in (starts or [])]
    for k in range(restarts):
        scale = (0.4, 0.8, 1.2, 1.6)[k % 4]
        candidates.append(rng.normal(size=(N, d)) * scale)
    best_value, best_Y = core_norm(np.zeros((N, d)), norm), np.zeros((N, d))

    def objective(flat: np.ndarray) -> float:
        return -core_norm(flat.reshape(N, d), norm)

    for Y0 in candidates:
        res = minimize(objective, Y0.ravel(), method="Nelder-Mead",
                       options={"maxiter": 400 * N * d, "xatol": 1e-10, "fatol": 1e-13})
        res = minimize(objective, res.x, method="Nelder-Mead",
                       options={"maxiter": 400 * N * d, "xatol": 1e-12, "fatol": 1e-15})
        value = core_norm(res.x.reshape(N, d), norm)
        if value > best_value:
            best_value, best_Y = value, res.x.reshape(N, d).copy()
    best_Y = best_Y - best_Y[0]
    return core_norm(best_Y, norm), best_Y
