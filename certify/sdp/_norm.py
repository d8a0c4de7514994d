"""Certified bounds on max ||J|| over an interval matrix: exact for the inf-norm, SDP or baseline for the 2-norm.

- inf-norm (exact, MATH.md 7): max_J ||J||_inf = max_k sum_l max(|lo_kl|, |hi_kl|) = max_k sum_l (|c_kl| + r_kl),
  attained by the sign pattern of each row; rounded up.
- 2-norm, "baseline": ||J_c||_2 + ||R||_2 (triangle inequality), each factor a proven upper bound
  (`norm2_upper`).
- 2-norm, "magnitude": || |J_c| + R ||_2, valid since ||J||_2 <= || |J| ||_2 and the spectral norm is monotone on
  nonnegative matrices. Cheap; sometimes better than the baseline, sometimes worse.
- 2-norm, "scaled": the same relaxation as "sdp" with multipliers a_kl = exp(alpha_l - beta_k), chosen by L-BFGS
  without a solver (`_scaling.py`) and certified like the solver's (`_certify.py`); min(scaled, baseline).
- 2-norm, "sdp": the relaxation of `_lmi.py`, certified by `_certify.py` from the solver's multipliers only
  (recovered from the primal as sqrt(a/b) and from the dual as sqrt(Z22_ll / Z11_kk); each is certified and the
  smaller certified value is kept). The
  returned value is min(sdp, baseline), so it is never above the baseline. If the solver fails or returns no
  point, the baseline is returned with an `SDPFallbackWarning`.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from .._result import Certificate
from ._certify import certified_t
from ._enclosure import MatrixEnclosure
from ._floating import ETA, norm2_upper, sum_up, up
from ._lmi import solve_lmi
from ._scaling import scaled_multipliers

METHODS: tuple[str, ...] = ("sdp", "baseline", "magnitude", "cheap", "scaled")
"""'cheap' = min(baseline, magnitude): no solver, what branch and bound uses on every box."""


class SDPFallbackWarning(UserWarning):
    """The SDP solver failed or was inaccurate; a looser certified bound was returned instead."""


def inf_norm_bound(enclosure: MatrixEnclosure) -> float:
    """max over the enclosure of ||J||_inf, exactly (rounded up)."""
    return float(sum_up(enclosure.magnitude(), axis=1).max()) if enclosure.center.size else 0.0


def baseline_bound(enclosure: MatrixEnclosure) -> float:
    """||J_c||_2 + ||R||_2, each proven, rounded up."""
    return float(up(norm2_upper(enclosure.center) + norm2_upper(enclosure.radius)))


def magnitude_bound(enclosure: MatrixEnclosure) -> float:
    """|| |J_c| + R ||_2, proven."""
    return norm2_upper(enclosure.magnitude())


def scaled_bound(enclosure: MatrixEnclosure, *, iterations: int = 40, deadline: float | None = None) -> float:
    """A proven bound on max ||J||_2 over the enclosure from the solver-free multipliers of `_scaling.py` (at most
    ``iterations`` L-BFGS iterations, stopped at ``deadline``, a `time.perf_counter()` value); it can exceed the
    baseline only by rounding (the iterations start at the baseline's multipliers)."""
    if not np.any(enclosure.radius):
        return norm2_upper(enclosure.center)
    # an exact power-of-two scaling to a largest entry in [1/2, 1) keeps the Cholesky check out of underflow and
    # overflow; entries that become subnormal move by at most eta / 2, which the radius' extra ETA covers
    exponent = math.frexp(float(max(np.abs(enclosure.center).max(), enclosure.radius.max())))[1]
    with np.errstate(under="ignore"):
        scaled = MatrixEnclosure(np.ldexp(enclosure.center, -exponent), np.ldexp(enclosure.radius, -exponent) + ETA)
    a, estimate = scaled_multipliers(scaled, iterations=iterations, deadline=deadline)
    value = certified_t(scaled, a, guess=-estimate if np.isfinite(estimate) else None)
    with np.errstate(over="ignore"):
        return float(up(np.ldexp(value, exponent)))  # inf on overflow: still an upper bound


def _certificate(value: float, method: str, norm: str, start: float, message: str, **details) -> Certificate:
    return Certificate(
        value=float(value),
        kind="upper",
        certified=True,
        method=method,
        scope="enclosure",
        norm=norm,  # type: ignore[arg-type]
        seconds=time.perf_counter() - start,
        message=message,
        details=details,
    )


def enclosure_norm(
    enclosure: MatrixEnclosure,
    norm: str = "2",
    *,
    method: str = "sdp",
    solver: str = "auto",
    time_limit: float | None = None,
) -> Certificate:
    """A certified upper bound on max ||J||_norm over J in the enclosure (see module docstring).

    Args:
        enclosure: the interval matrix.
        norm: "2" or "inf" ("inf" is always exact; `method` is ignored).
        method: one of METHODS, for the 2-norm.
        solver: "auto" (Clarabel up to 32 x 32, SCS beyond), "clarabel" or "scs".
        time_limit: seconds for the solver (SCS and Clarabel both honour it).

    Returns:
        A Certificate with scope "enclosure"; details hold the baseline, the solver's (untrusted) t, its status.
    """
    start = time.perf_counter()
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if norm == "inf":
        return _certificate(inf_norm_bound(enclosure), "exact-row-sum", norm, start, "max row sum of |J_c| + R")
    base = baseline_bound(enclosure)
    if method == "baseline":
        return _certificate(base, "baseline", norm, start, "||J_c||_2 + ||R||_2", baseline=base)
    if method in ("magnitude", "cheap"):
        mag = magnitude_bound(enclosure)
        if method == "magnitude":
            return _certificate(mag, "magnitude", norm, start, "|| |J_c| + R ||_2", baseline=base)
        best = min(base, mag)
        name = "baseline" if base <= mag else "magnitude"
        return _certificate(best, name, norm, start, "min(||J_c|| + ||R||, || |J_c| + R ||)", baseline=base)
    if method == "scaled":
        scaled = scaled_bound(enclosure, deadline=None if time_limit is None else start + time_limit)
        return _certificate(min(base, scaled), "scaled" if scaled < base else "baseline", norm, start,
                            "relaxation with multipliers exp(alpha_l - beta_k) (no solver)", baseline=base)
    if not np.any(enclosure.radius):
        value = norm2_upper(enclosure.center)
        return _certificate(value, "sdp", norm, start, "point matrix: proven ||J_c||_2", baseline=base)
    solution = solve_lmi(enclosure, solver=solver, time_limit=time_limit)
    details = {
        "baseline": base,
        "t_solver": solution.t_solver,
        "status": solution.status,
        "solver": solution.solver,
        "solver_seconds": solution.seconds,
    }
    if solution.a is None:
        warnings.warn(
            f"SDP solver {solution.solver} returned no solution (status {solution.status}); "
            f"falling back to the baseline ||J_c|| + ||R|| = {base:.6g}",
            SDPFallbackWarning,
            stacklevel=2,
        )
        return _certificate(base, "baseline", norm, start, "SDP failed; baseline ||J_c||_2 + ||R||_2", **details)
    # every candidate set of multipliers is certified independently; the smallest certified value wins
    candidates = {"primal": solution.a, "dual": solution.a_dual}
    certified = {name: certified_t(enclosure, a) for name, a in candidates.items() if a is not None}
    source = min(certified, key=certified.get)
    t_cert = certified[source]
    details["t_cert"] = t_cert
    details["multipliers"] = source
    details["t_cert_by_source"] = certified
    if solution.status != "optimal":
        warnings.warn(
            f"SDP solver {solution.solver} status {solution.status}: its t = {solution.t_solver:.6g} is not used; "
            f"the multipliers certify {t_cert:.6g}, the baseline is {base:.6g}",
            SDPFallbackWarning,
            stacklevel=2,
        )
    if t_cert >= base:
        return _certificate(base, "baseline", norm, start, "SDP no better than the baseline ||J_c|| + ||R||", **details)
    return _certificate(
        t_cert, "sdp", norm, start, "SDP multipliers re-certified in float64 (Cholesky-verified LMI)", **details
    )
