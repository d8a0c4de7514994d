"""The SDP relaxation of max ||J||_2 over an interval matrix, as a CVXPY problem (MATH.md section 7).

For the enclosure {J_c + Delta : |Delta_kl| <= r_kl} of m x n matrices,

    minimise t  subject to  [[t I_m - diag(u), J_c], [J_c^T, t I_n - diag(v)]] >= 0,
                            u_k = sum_l r_kl a_kl,  v_l = sum_k r_kl b_kl,  a_kl b_kl >= 1,

with one pair (a_kl, b_kl) per entry with r_kl > 0, and a b >= 1 written as the second-order cone
||(2, a - b)||_2 <= a + b. Validity: [[t I, J], [J^T, t I]] equals the LMI matrix plus
sum_kl r_kl [[a_kl e_k e_k^T, (Delta_kl / r_kl) e_k f_l^T], [., b_kl f_l f_l^T]], and each term is PSD when
a_kl b_kl >= 1 >= (Delta_kl / r_kl)^2; so ||J||_2 <= t for every J in the enclosure.

This file only encodes and solves. It returns the multipliers a_kl as a hint; nothing here is a certificate
(see `_certify.py`, which re-derives t from the multipliers in float64 with a proven margin).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from ._enclosure import MatrixEnclosure

SOLVERS: tuple[str, ...] = ("auto", "clarabel", "scs")

CLARABEL_MAX_SIZE = 32
"""'auto' uses Clarabel up to m + n <= 2 * 32 and SCS (with the time limit) beyond (MATH.md 7 timings)."""


@dataclasses.dataclass(frozen=True)
class LMISolution:
    """What the solver returned: the multipliers (hint only), its t (never trusted), status and timing.

    Attributes:
        a: multipliers a_kl (m, n) recovered as sqrt(a / b) (so that a b = 1 in exact arithmetic); NaN where
            r_kl = 0, and None if the solver returned no point.
        a_dual: multipliers recovered from the dual matrix Z of the LMI as sqrt(Z22_ll / Z11_kk) (the minimiser of
            a Z11_kk + b Z22_ll subject to a b = 1); None when the solver gave no usable dual.
        t_solver: the solver's objective; reported, never used as a bound.
        status: CVXPY's status string.
        solver: the solver name.
        seconds: wall time of the solve.
    """

    a: np.ndarray | None
    t_solver: float
    status: str
    solver: str
    seconds: float
    a_dual: np.ndarray | None = None


def choose_solver(enclosure: MatrixEnclosure, solver: str) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver != "auto":
        return solver
    m, n = enclosure.shape
    return "clarabel" if max(m, n) <= CLARABEL_MAX_SIZE else "scs"


def build_problem(enclosure: MatrixEnclosure) -> tuple[cp.Problem, cp.Variable, cp.Variable, cp.Variable, np.ndarray]:
    """The CVXPY problem, its variables (t, a, b) and the (k, l) index pairs of the entries with r_kl > 0.

    The LMI is the problem's first constraint (its dual value is Z)."""
    Jc, R = enclosure.center, enclosure.radius
    m, n = Jc.shape
    rows, cols = np.nonzero(R > 0)
    K = rows.size
    t = cp.Variable()
    if K == 0:
        lmi = cp.bmat([[t * np.eye(m), Jc], [Jc.T, t * np.eye(n)]])
        return cp.Problem(cp.Minimize(t), [lmi >> 0]), t, None, None, np.zeros((0, 2), int)  # type: ignore[return-value]
    a = cp.Variable(K)
    b = cp.Variable(K)
    r = R[rows, cols]
    # u = S_row (r * a), v = S_col (r * b), with sparse incidence matrices
    S_row = sp.csr_matrix((r, (rows, np.arange(K))), shape=(m, K))
    S_col = sp.csr_matrix((r, (cols, np.arange(K))), shape=(n, K))
    u = S_row @ a
    v = S_col @ b
    lmi = cp.bmat([[t * np.eye(m) - cp.diag(u), Jc], [Jc.T, t * np.eye(n) - cp.diag(v)]])
    # CVXPY's PSD constraint symmetrises; the matrix is symmetric by construction.
    cones = [cp.SOC(a + b, cp.vstack([2.0 * np.ones(K), a - b]), axis=0)]
    problem = cp.Problem(cp.Minimize(t), [lmi >> 0, *cones])
    return problem, t, a, b, np.stack([rows, cols], axis=1)


def solve_lmi(enclosure: MatrixEnclosure, *, solver: str = "auto", time_limit: float | None = None) -> LMISolution:
    """Solve the relaxation; return the multipliers as a hint (see module docstring). Never raises on failure."""
    name = choose_solver(enclosure, solver)
    problem, t, a, b, idx = build_problem(enclosure)
    kwargs: dict = {}
    if name == "clarabel":
        kwargs = {"solver": cp.CLARABEL}
        if time_limit is not None:
            kwargs["time_limit"] = float(time_limit)
    else:
        kwargs = {"solver": cp.SCS, "eps": 1e-7, "max_iters": 200_000}
        if time_limit is not None:
            kwargs["time_limit_secs"] = float(time_limit)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem.solve(**kwargs)
        status = str(problem.status)
    except (cp.error.SolverError, ValueError, ArithmeticError) as error:
        return LMISolution(None, float("nan"), f"error: {error}", name, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    t_solver = float(t.value) if t.value is not None else float("nan")
    m, n = enclosure.shape
    if a is None:
        return LMISolution(np.full((m, n), np.nan), t_solver, status, name, seconds)
    if a.value is None or b.value is None:
        return LMISolution(None, t_solver, status, name, seconds)
    av = np.asarray(a.value, dtype=np.float64)
    bv = np.asarray(b.value, dtype=np.float64)
    if not (np.all(np.isfinite(av)) and np.all(np.isfinite(bv))):
        return LMISolution(None, t_solver, status, name, seconds)
    tiny = 1e-12
    ratio = np.sqrt(np.maximum(av, tiny) / np.maximum(bv, tiny))
    A = np.full((m, n), np.nan)
    A[idx[:, 0], idx[:, 1]] = ratio
    return LMISolution(A, t_solver, status, name, seconds, _dual_multipliers(problem, idx, m, n))


def _dual_multipliers(problem: cp.Problem, idx: np.ndarray, m: int, n: int) -> np.ndarray | None:
    Z = problem.constraints[0].dual_value
    if Z is None:
        return None
    Z = np.asarray(Z, dtype=np.float64)
    if Z.shape != (m + n, m + n) or not np.all(np.isfinite(Z)):
        return None
    z11 = np.maximum(np.diag(Z)[:m], 1e-300)
    z22 = np.maximum(np.diag(Z)[m:], 1e-300)
    A = np.full((m, n), np.nan)
    A[idx[:, 0], idx[:, 1]] = np.sqrt(z22[idx[:, 1]] / z11[idx[:, 0]])
    return A
