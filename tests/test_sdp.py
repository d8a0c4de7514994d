"""certify.sdp: proven bounds on max ||J|| over an interval matrix (MATH.md section 7)."""

from __future__ import annotations

import itertools
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certify._errors import CertifyError
from certify.sdp import (
    LMISolution,
    MatrixEnclosure,
    SDPFallbackWarning,
    baseline_bound,
    certified_t,
    enclosure_norm,
    inf_norm_bound,
    is_certified,
    lambda_min_lower,
    magnitude_bound,
    norm2_upper,
    perron_multipliers,
    scaled_bound,
    solve_lmi,
)

mpmath.mp.dps = 40


def _random_enclosure(seed: int, m: int, n: int, scale: float = 0.3) -> MatrixEnclosure:
    rng = np.random.default_rng(seed)
    return MatrixEnclosure(rng.standard_normal((m, n)), scale * np.abs(rng.standard_normal((m, n))))


def _vertex_norms(enc: MatrixEnclosure, limit: int = 4096, seed: int = 0) -> np.ndarray:
    """2-norms of all vertices J_c + S * R (S in {-1, 1}^{m x n}), or of `limit` random ones."""
    m, n = enc.shape
    if m * n <= 12:
        signs = np.array(list(itertools.product([-1.0, 1.0], repeat=m * n))).reshape(-1, m, n)
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(limit, m, n))
    return np.linalg.norm(enc.center + signs * enc.radius, ord=2, axis=(1, 2))


def _mp_sigma_max(A: np.ndarray) -> float:
    """sigma_max in 40-digit arithmetic (independent of LAPACK)."""
    M = mpmath.matrix(A.tolist())
    s = mpmath.svd_r(M, compute_uv=False)
    return max(float(x) for x in s)


# --- the floating-point layer -------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 7), scale=st.sampled_from([1e-8, 1.0, 1e6]))
def test_lambda_min_lower_is_below_the_exact_eigenvalue(seed, n, scale):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)) * scale
    S = A + A.T
    exact = min(float(x) for x in mpmath.eigsy(mpmath.matrix(S.tolist()), eigvals_only=True))
    lower = lambda_min_lower(S)
    assert lower <= exact
    assert exact - lower <= 1e-11 * scale * max(1.0, n)  # and it is tight


def test_lambda_min_lower_of_a_known_spectrum():
    # [[2, 1], [1, 2]] has eigenvalues 1 and 3; a PSD but singular matrix has lambda_min = 0 exactly.
    assert 1.0 - 1e-14 < lambda_min_lower(np.array([[2.0, 1.0], [1.0, 2.0]])) <= 1.0
    singular = np.ones((5, 5))
    assert -1e-13 < lambda_min_lower(singular) <= 0.0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 6), n=st.integers(1, 6))
def test_norm2_upper_is_above_the_exact_norm(seed, m, n):
    A = np.random.default_rng(seed).standard_normal((m, n))
    exact = _mp_sigma_max(A)
    assert exact <= norm2_upper(A) <= exact * (1 + 1e-12)


def test_lambda_min_lower_rejects_bad_input():
    with pytest.raises(ValueError, match="symmetric"):
        lambda_min_lower(np.array([[0.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="square"):
        lambda_min_lower(np.zeros((2, 3)))


# --- the enclosure type -------------------------------------------------------------------------------------


def test_enclosure_rejects_bad_input():
    with pytest.raises(CertifyError, match="radius must be >= 0"):
        MatrixEnclosure(np.zeros((2, 2)), -np.ones((2, 2)))
    with pytest.raises(CertifyError, match=r"centre's shape \(2, 2\)"):
        MatrixEnclosure(np.zeros((2, 2)), np.ones((2, 3)))
    with pytest.raises(CertifyError, match="lower > upper"):
        MatrixEnclosure.from_bounds(np.ones((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="norm must be"):
        enclosure_norm(_random_enclosure(0, 2, 2), "1")


def test_from_bounds_contains_the_interval():
    rng = np.random.default_rng(1)
    lo = rng.standard_normal((5, 4))
    hi = lo + np.abs(rng.standard_normal((5, 4))) * np.array([0, 1e-17, 1e-3, 10.0])
    enc = MatrixEnclosure.from_bounds(lo, hi)
    assert np.all(enc.lower <= lo) and np.all(enc.upper >= hi)
    # exact check in rationals: |lo - c| <= r and |hi - c| <= r
    from fractions import Fraction

    for x, c, r in zip(np.r_[lo.ravel(), hi.ravel()], np.tile(enc.center.ravel(), 2), np.tile(enc.radius.ravel(), 2)):
        assert abs(Fraction(x) - Fraction(c)) <= Fraction(r)


# --- norm bounds --------------------------------------------------------------------------------------------


def test_inf_norm_is_exact_and_attained():
    for seed in range(5):
        enc = _random_enclosure(seed, 3, 4)
        bound = inf_norm_bound(enc)
        # the row maximising sum |c| + r is attained by the vertex with signs sign(c)
        vertex = enc.center + np.sign(enc.center) * enc.radius
        attained = np.abs(vertex).sum(axis=1).max()
        assert attained <= bound <= attained * (1 + 1e-14)
        assert enclosure_norm(enc, "inf").value == bound


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 4),
    n=st.integers(1, 3),
    scale=st.sampled_from([0.01, 0.3, 3.0]),
)
def test_sdp_contains_every_vertex_and_is_below_the_baseline(seed, m, n, scale):
    enc = _random_enclosure(seed, m, n, scale)
    cert = enclosure_norm(enc)
    assert cert.certified and cert.kind == "upper"
    vertices = _vertex_norms(enc)
    assert vertices.max() <= cert.value
    assert cert.value <= baseline_bound(enc)
    # random interior points too
    rng = np.random.default_rng(seed)
    inner = enc.center + rng.uniform(-1, 1, (64, m, n)) * enc.radius
    assert np.linalg.norm(inner, ord=2, axis=(1, 2)).max() <= cert.value


def test_sdp_is_strictly_below_the_baseline_on_most_enclosures():
    strict = 0
    for seed in range(20):
        enc = _random_enclosure(seed, 6, 6)
        cert = enclosure_norm(enc)
        base = baseline_bound(enc)
        assert cert.value <= base
        strict += cert.value < base * (1 - 1e-4)
        assert _vertex_norms(enc).max() <= cert.value
    assert strict >= 16


def test_sdp_on_an_exact_instance():
    # J_c = 0, R = ones((n, n)): every vertex is a sign matrix, max norm n (all ones); the SDP gives n exactly.
    n = 4
    enc = MatrixEnclosure(np.zeros((n, n)), np.ones((n, n)))
    cert = enclosure_norm(enc)
    assert n <= cert.value <= n * (1 + 1e-6)


def test_perron_multipliers_reproduce_the_baseline():
    enc = _random_enclosure(3, 5, 5)
    assert certified_t(enc, perron_multipliers(enc)) == pytest.approx(baseline_bound(enc), rel=1e-9)


def test_a_perturbed_solver_value_is_not_certified():
    """Trusting the solver's t after moving it down by 1% must fail the check; the certified value passes."""
    for seed in range(5):
        enc = _random_enclosure(seed, 4, 4)
        solution = solve_lmi(enc)
        t_cert = certified_t(enc, solution.a)
        assert is_certified(enc, solution.a, t_cert)
        assert not is_certified(enc, solution.a, 0.99 * solution.t_solver)
        # and the solver's t itself is only accepted when the certified value is not larger
        assert is_certified(enc, solution.a, solution.t_solver) == (solution.t_solver >= t_cert)


def test_a_ten_percent_too_narrow_enclosure_is_caught():
    """A bound computed on a radius shrunk by 10% is exceeded by a vertex of the true enclosure."""
    caught = 0
    for seed in range(10):
        enc = _random_enclosure(seed, 3, 3, scale=1.0)
        narrow = MatrixEnclosure(enc.center, 0.9 * enc.radius)
        caught += _vertex_norms(enc).max() > enclosure_norm(narrow).value
    assert caught >= 8


def test_solver_failure_falls_back_to_the_baseline(monkeypatch):
    import certify.sdp._norm as norm_module

    enc = _random_enclosure(4, 5, 5)
    monkeypatch.setattr(norm_module, "solve_lmi", lambda *a, **k: LMISolution(None, float("nan"), "infeasible", "x", 0))
    with pytest.warns(SDPFallbackWarning, match="no solution"):
        cert = enclosure_norm(enc)
    assert cert.value == baseline_bound(enc) and cert.method == "baseline" and cert.certified


def test_an_inaccurate_solver_is_never_trusted(monkeypatch):
    """Garbage multipliers and a false t = 0 with status optimal_inaccurate: the value stays sound."""
    import certify.sdp._norm as norm_module

    enc = _random_enclosure(5, 4, 3)
    garbage = np.random.default_rng(0).uniform(1e-3, 1e3, (4, 3))
    monkeypatch.setattr(norm_module, "solve_lmi", lambda *a, **k: LMISolution(garbage, 0.0, "optimal_inaccurate", "x", 0))
    with pytest.warns(SDPFallbackWarning, match="not used"):
        cert = enclosure_norm(enc)
    assert _vertex_norms(enc).max() <= cert.value <= baseline_bound(enc)


def test_clarabel_and_scs_agree():
    enc = _random_enclosure(6, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SDPFallbackWarning)
        a = enclosure_norm(enc, solver="clarabel").value
        b = enclosure_norm(enc, solver="scs", time_limit=20).value
    assert a == pytest.approx(b, rel=1e-3)


def test_cheap_methods_are_sound():
    for seed in range(5):
        enc = _random_enclosure(seed, 3, 4, 1.0)
        top = _vertex_norms(enc).max()
        assert top <= magnitude_bound(enc)
        assert top <= enclosure_norm(enc, method="cheap").value <= baseline_bound(enc)


def test_primal_and_dual_multipliers_both_certify():
    """Both recoveries give valid multipliers; on an accurate solve they certify nearly the same value."""
    enc = _random_enclosure(7, 6, 6)
    solution = solve_lmi(enc, solver="clarabel")
    primal, dual = certified_t(enc, solution.a), certified_t(enc, solution.a_dual)
    top = _vertex_norms(enc).max()
    assert top <= primal and top <= dual
    assert dual == pytest.approx(primal, rel=1e-4)


# --- the solver-free multipliers (`_scaling.py`) ---------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 5), n=st.integers(1, 5),
       scale=st.sampled_from([0.01, 0.3, 3.0]), magnitude=st.sampled_from([1e-200, 1.0, 1e100]))
def test_scaled_bound_contains_every_vertex_and_is_at_most_the_baseline(seed, m, n, scale, magnitude):
    """Sound (every vertex and interior point below it, at every magnitude) and never above the baseline it starts
    from (up to the rounding of the Cholesky check)."""
    base = _random_enclosure(seed, m, n, scale)
    enc = MatrixEnclosure(base.center * magnitude, base.radius * magnitude)
    value = scaled_bound(enc)
    assert np.isfinite(value) and _vertex_norms(enc).max() <= value
    rng = np.random.default_rng(seed)
    inner = enc.center + rng.uniform(-1, 1, (64, m, n)) * enc.radius
    assert np.linalg.norm(inner, ord=2, axis=(1, 2)).max() <= value
    assert value <= baseline_bound(enc) * (1 + 1e-9)
    assert enclosure_norm(enc, method="scaled").value <= baseline_bound(enc)


def test_scaled_bound_sees_uncertainty_away_from_the_centre_s_direction():
    """J_c = diag(10, 0), R = e_2 e_2^T * 5: every member is diag(10, t), |t| <= 5, so the maximum is 10 while the
    baseline says 15; the scaled multipliers get within 1% of 10 (and 10% less is broken by J_c itself)."""
    enc = MatrixEnclosure(np.diag([10.0, 0.0]), np.array([[0.0, 0.0], [0.0, 5.0]]))
    value = scaled_bound(enc, iterations=60)
    assert baseline_bound(enc) >= 15.0
    assert 10.0 <= value <= 10.1
    assert 0.9 * value < np.linalg.norm(enc.center, 2)


def test_scaled_bound_is_below_the_baseline_on_random_enclosures():
    strict = 0
    for seed in range(10):
        enc = _random_enclosure(seed, 8, 8)
        value, base = scaled_bound(enc), baseline_bound(enc)
        assert _vertex_norms(enc).max() <= value <= base * (1 + 1e-9)
        strict += value < base * (1 - 1e-3)
    assert strict >= 8


def test_scaled_bound_stops_at_its_deadline():
    import time

    enc = _random_enclosure(1, 300, 300)
    start = time.perf_counter()
    value = scaled_bound(enc, iterations=10_000, deadline=start + 1.0)
    assert time.perf_counter() - start < 4.0 and value <= baseline_bound(enc) * (1 + 1e-9)
