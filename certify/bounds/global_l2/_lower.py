"""Lower bounds on c_p(N, d) = sup_Y ||M(Y)||_p: local maximisation with restarts (an attained value, not a bound
from above). The value returned is recomputed in float64 at the returned configuration Y (the witness)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from ._enclosure import core_jacobian_float


def core_norm(Y: np.ndarray, norm: str) -> float:
    """||M(Y)||_p in float64 for one configuration Y (N, d)."""
    M = core_jacobian_float(np.asarray(Y, dtype=np.float64)[None])[0]
    return float(np.linalg.norm(M, ord=np.inf if norm == "inf" else 2))


def polish(Y: np.ndarray, norm: str) -> tuple[float, np.ndarray]:
    """Local maximisation of ||M(Y)||_p from Y (d = 1: L-BFGS-B over sorted gaps >= 0, which reaches coincident
    points exactly; d > 1: Nelder-Mead over all coordinates). Returns (value, Y) with value recomputed."""
    Y = np.asarray(Y, dtype=np.float64)
    N, d = Y.shape
    if d == 1:
        ys = np.sort(Y[:, 0])
        g0 = np.diff(ys)

        def objective_gaps(g: np.ndarray) -> float:
            return -core_norm(np.concatenate([[0.0], np.cumsum(g)])[:, None], norm)

        res = minimize(objective_gaps, g0, method="L-BFGS-B", bounds=[(0.0, 6.0)] * (N - 1),
                       options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-12})
        candidate = np.concatenate([[0.0], np.cumsum(res.x)])[:, None]
    else:
        def objective(flat: np.ndarray) -> float:
            return -core_norm(flat.reshape(N, d), norm)

        res = minimize(objective, Y.ravel(), method="Nelder-Mead",
                       options={"maxiter": 600 * N * d, "xatol": 1e-12, "fatol": 1e-15})
        candidate = res.x.reshape(N, d)
    candidate = candidate - candidate[0]
    value = core_norm(candidate, norm)
    start = core_norm(Y, norm)
    return (value, candidate) if value >= start else (start, Y - Y[0])


def search_lower(N: int, d: int, norm: str, restarts: int = 24, seed: int = 0,
                 starts: list[np.ndarray] | None = None) -> tuple[float, np.ndarray]:
    """Maximise ||M(Y)||_p over Y in R^{N x d} from random and given starts (``polish``); (value, witness Y).

    Random starts place points in clusters (the maximisers found have coincident points) at spacings near 1.4.
    """
    rng = np.random.default_rng(seed)
    candidates = [np.asarray(s, dtype=np.float64).reshape(N, d) for s in (starts or [])]
    for k in range(restarts):
        if k % 2 == 0:
            centres = rng.normal(size=(int(rng.integers(1, N + 1)), d)) * 1.4
            Y0 = centres[rng.integers(0, centres.shape[0], size=N)] + 0.05 * rng.normal(size=(N, d))
        else:
            Y0 = rng.normal(size=(N, d)) * (0.6, 1.0, 1.5)[k % 3]
        candidates.append(Y0)
    best_value, best_Y = core_norm(np.zeros((N, d)), norm), np.zeros((N, d))
    for Y0 in candidates:
        value, Y = polish(Y0, norm)
        if value > best_value:
            best_value, best_Y = value, Y
    return core_norm(best_Y, norm), best_Y
