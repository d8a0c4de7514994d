"""Soundness of the global L2 branch and bound and of the shipped table of universal constants (MATH.md section 7).

Every certified number is tested against values that do not come from the code under test: the exact N = 2 constant
(certify.symbolic, interval arithmetic in mpmath), ||M(Y)||_p at random and optimised Y computed by
certify.jacobian.l2_core_jacobian (torch), and sampled points of boxes. Each check is a function, and the last tests
show that the same checks catch an enclosure, or a table, that is 10% too narrow.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from certify.bounds.global_l2 import _mean_value as mvf
from certify.bounds import universal_constant
from certify.bounds.global_l2._search import DEFAULT_R, R_GRID, choose_r, domain, global_l2_constant
from certify.bounds.global_l2._domain import bottleneck_distance, pair_sq_distances
from certify import interval as iv
from certify.bounds.global_l2._enclosure import Dual, core_jacobian_float, dual_exp, dual_square, enclose_core_jacobian
from certify.bounds.global_l2._lower import search_lower
from certify.bounds.global_l2._tail import tail_bound, tail_bound_lookup, tail_bound_table
from certify.interval import Interval
from certify.jacobian import l2_core_jacobian
from certify.symbolic import exact_constant_n2

TABLE = Path(__file__).resolve().parents[1] / "certify" / "data" / "universal_constants.json"


def reference_norm(Y: np.ndarray, norm: str) -> np.ndarray:
    """||M(Y)||_p by the foundation's torch implementation (independent of the code under test); Y (B, N, d)."""
    Y = torch.as_tensor(np.asarray(Y, dtype=np.float64))
    B, N, d = Y.shape
    M = l2_core_jacobian(Y).reshape(B, N * d, N * d)
    return torch.linalg.matrix_norm(M, ord=float("inf") if norm == "inf" else 2).numpy()


def entries() -> list[dict]:
    return json.loads(TABLE.read_text())["entries"]


def sample_boxes(rng: np.random.Generator, N: int, d: int, width: float, B: int,
                 norm: str = "2") -> tuple[np.ndarray, np.ndarray]:
    L = domain(N, d, norm, 3.5).par.L
    lo = rng.uniform(-1.0 if d == 2 else 0.0, 2.0, size=(B, L))
    if d == 2:
        lo[:, 0] = np.abs(lo[:, 0])
    return lo, lo + width * rng.uniform(0.2, 1.0, size=(B, L))


# -- checks (each returns a list of violations; the tests below assert they are empty, and that wrong inputs are not)

def enclosure_violations(enclosure: Dual, lo: np.ndarray, hi: np.ndarray, par, rng, samples: int = 20) -> list[str]:
    """Sampled M(theta) and central finite differences of M outside the enclosure (value and gradient)."""
    bad = []
    L = lo.shape[1]
    for _ in range(samples):
        th = lo + rng.uniform(size=lo.shape) * (hi - lo)
        M = core_jacobian_float(par.points(th))
        if not np.all((enclosure.v.lo <= M + 1e-12) & (M <= enclosure.v.hi + 1e-12)):
            bad.append("value")
        if enclosure.g is not None:
            step = 1e-6 * np.maximum(hi - lo, 1e-3)
            for l in range(L):
                t_hi, t_lo = th.copy(), th.copy()
                t_hi[:, l] = np.minimum(th[:, l] + step[:, l], hi[:, l])
                t_lo[:, l] = np.maximum(th[:, l] - step[:, l], lo[:, l])
                dM = (core_jacobian_float(par.points(t_hi)) - core_jacobian_float(par.points(t_lo))) / (
                    (t_hi[:, l] - t_lo[:, l])[:, None, None])
                if not np.all((enclosure.g.lo[..., l] <= dM + 1e-5) & (dM <= enclosure.g.hi[..., l] + 1e-5)):
                    bad.append(f"gradient {l}")
        if enclosure.h is not None:
            bad += [f"Hessian {l}, {m}" for l, m in hessian_outside(enclosure.h, th, lo, hi, par)]
    return bad


def finite_difference_hessian(th: np.ndarray, par, step: float = 1e-4) -> np.ndarray:
    """Central second differences of M at theta (B, L): (B, n, n, L, L)."""
    L = th.shape[1]
    out = []
    for l in range(L):
        row = []
        for m in range(L):
            def at(a: float, b: float) -> np.ndarray:
                t = th.copy()
                t[:, l] += a * step
                t[:, m] += b * step
                return core_jacobian_float(par.points(t))
            row.append((at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * step * step))
        out.append(np.stack(row, axis=-1))
    return np.stack(out, axis=-2)


def hessian_outside(h: Interval, th: np.ndarray, lo: np.ndarray, hi: np.ndarray, par) -> list[tuple[int, int]]:
    """(l, m) where the second differences at theta (inside the box, away from its faces) leave the enclosure h."""
    inner = np.clip(th, lo + 2e-4, hi - 2e-4)
    H = finite_difference_hessian(inner, par)
    tol = 1e-4 * (1 + np.abs(H))
    outside = (h.lo > H + tol) | (H > h.hi + tol)
    return [(l, m) for l in range(H.shape[-2]) for m in range(H.shape[-1]) if outside[..., l, m].any()]


def box_bound_violations(upper: np.ndarray, lo: np.ndarray, hi: np.ndarray, par, norm: str, rng,
                         samples: int = 40) -> list[str]:
    """Sampled ||M(theta)||_p (reference implementation) above the box bound, box corners included."""
    bad = []
    for s in range(samples):
        t = rng.uniform(size=lo.shape) if s >= 2 else np.full(lo.shape, float(s))
        th = lo + t * (hi - lo)
        values = reference_norm(par.points(th), norm)
        if np.any(values > upper):
            bad.append(f"sample {s}: {values.max():.6f} > bound")
    return bad


def table_violations(entry: dict, configurations: np.ndarray) -> list[str]:
    """Values ||M(Y)||_p (reference) above the certified upper, lower not attained at the witness, exact N = 2
    constant outside [lower, upper] (d = 1, and the 2-norm for d = 2, where it is the same value)."""
    bad = []
    norm = entry["norm"]
    values = reference_norm(configurations, norm)
    if np.any(values > entry["upper"]):
        bad.append(f"||M(Y)|| = {values.max():.6f} > upper {entry['upper']:.6f}")
    witness = np.asarray(entry["witness"])[None]
    attained = float(reference_norm(witness, norm)[0])
    if abs(attained - entry["lower"]) > 1e-12 * max(1.0, attained):
        bad.append(f"lower {entry['lower']} is not ||M(witness)|| = {attained}")
    if entry["upper"] < entry["lower"]:
        bad.append("upper < lower")
    if entry["N"] == 2 and (entry["d"] == 1 or norm == "2"):
        lo, hi = exact_constant_n2(norm)
        if entry["upper"] < lo:
            bad.append(f"upper {entry['upper']} below the exact N = 2 constant [{lo}, {hi}]")
        if entry["lower"] > hi * (1 + 1e-13):  # the lower bound is a float64 evaluation: rounding allowed
            bad.append(f"lower {entry['lower']} above the exact N = 2 constant [{lo}, {hi}]")
    return bad


def random_configurations(rng: np.random.Generator, N: int, d: int, count: int = 200) -> np.ndarray:
    scales = rng.choice([0.3, 0.7, 1.0, 1.5, 3.0], size=(count, 1, 1))
    Y = rng.normal(size=(count, N, d)) * scales
    clustered = rng.normal(size=(count, N, d)) * 0.02 + 1.4 * rng.integers(0, 3, size=(count, N, 1))
    return np.concatenate([Y, clustered])


# -- enclosures --------------------------------------------------------------------------------------------------

def test_float_core_jacobian_matches_foundation() -> None:
    rng = np.random.default_rng(0)
    for N, d in [(2, 1), (5, 1), (3, 2), (4, 3)]:
        Y = rng.normal(size=(3, N, d))
        ref = l2_core_jacobian(torch.tensor(Y)).reshape(3, N * d, N * d).numpy()
        assert np.allclose(core_jacobian_float(Y), ref, atol=1e-13)


@settings(max_examples=12, deadline=None)
@given(N=st.integers(2, 5), d=st.integers(1, 2), width=st.sampled_from([1e-3, 0.05, 0.3]), seed=st.integers(0, 99))
def test_enclosure_contains_samples_and_derivatives(N: int, d: int, width: float, seed: int) -> None:
    if d == 2 and N > 4:
        N = 4
    rng = np.random.default_rng(seed)
    par = domain(N, d, "2", 3.5).par
    lo, hi = sample_boxes(rng, N, d, width, 8)
    enc = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True)
    assert enclosure_violations(enc, lo, hi, par, rng) == []


@settings(max_examples=10, deadline=None)
@given(N=st.integers(2, 5), d=st.integers(1, 2), width=st.sampled_from([0.01, 0.1, 0.4]), seed=st.integers(0, 99))
def test_second_order_enclosure_contains_finite_differences(N: int, d: int, width: float, seed: int) -> None:
    """The Hessian enclosure (products, the softmax form of d^2 P, the forms of U and Cov) and the centred forms it
    tightens."""
    if d == 2 and N > 4:
        N = 4
    rng = np.random.default_rng(seed)
    par = domain(N, d, "2", 3.5).par
    lo, hi = sample_boxes(rng, N, d, width, 6)
    enc = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=0.5 * (lo + hi), with_hessian=True)
    assert enc.h is not None and enc.h.shape == enc.g.shape + (par.L,)
    assert enclosure_violations(enc, lo, hi, par, rng, samples=6) == []
    # the centre enclosures are those of M and dM/dtheta at the centre
    centre = 0.5 * (lo + hi)
    M = core_jacobian_float(par.points(centre))
    assert np.all((enc.c.v.lo <= M + 1e-12) & (M <= enc.c.v.hi + 1e-12))


def test_second_order_duals_do_not_mix_with_first_order_ones() -> None:
    """A second-order Dual with h = None is exactly linear; a first-order one has an unknown Hessian: combining the
    two would treat the unknown Hessian as zero, so it is refused."""
    x = Interval(np.zeros((1, 2)), np.ones((1, 2)))
    g = Interval.point(np.ones((1, 2, 1)))
    linear = Dual(x, g, second=True)
    first = Dual(x, g)
    with pytest.raises(ValueError, match="second-order"):
        linear * first
    with pytest.raises(ValueError, match="second-order"):
        first + linear
    assert (linear * linear).h is not None  # the product of linear forms has a (constant) Hessian
    with pytest.raises(ValueError, match="first order only"):
        dual_exp(linear)


def test_second_order_square_of_a_linear_form_is_exact() -> None:
    """(a . theta)^2 has the constant Hessian 2 a a^T; ``dual_square`` gets it without the dependency of x * x
    (value >= 0 and a nonnegative diagonal), and x * x contains it."""
    x = Interval(np.array([[-1.0, 0.5]]), np.array([[2.0, 1.5]]))
    a = np.array([1.0, -3.0])
    linear = Dual(iv.linear_combination(x, a[None]), Interval.point(np.broadcast_to(a, (1, 1, 2))), second=True)
    square = dual_square(linear)
    exact = 2.0 * np.outer(a, a)
    assert np.all((square.h.lo <= exact) & (exact <= square.h.hi))
    assert np.allclose(square.h.hi - square.h.lo, 0.0, atol=1e-12)
    assert square.v.lo.min() >= 0.0
    product = linear * linear
    assert np.all((product.h.lo <= square.h.lo) & (square.h.hi <= product.h.hi))
    assert product.v.lo.min() < 0.0  # the dependency dual_square avoids


def test_narrow_hessian_enclosure_is_caught() -> None:
    """A Hessian enclosure 10% narrower than the range of sampled second differences fails ``hessian_outside``."""
    rng = np.random.default_rng(21)
    par = domain(3, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 3, 1, 0.1, 4)
    samples = np.stack([finite_difference_hessian(lo + rng.uniform(size=lo.shape) * (hi - lo), par)
                        for _ in range(60)])
    width = samples.max(0) - samples.min(0)
    narrow = Interval(samples.min(0) + 0.05 * width, samples.max(0) - 0.05 * width)
    caught = [hessian_outside(narrow, lo + rng.uniform(size=lo.shape) * (hi - lo), lo, hi, par) for _ in range(20)]
    assert any(caught)
    honest = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, with_hessian=True).h
    assert not any(hessian_outside(honest, lo + rng.uniform(size=lo.shape) * (hi - lo), lo, hi, par)
                   for _ in range(20))


def test_taylor_bounds_beat_the_mean_value_form_on_small_boxes() -> None:
    """On boxes of half-width 0.02 around maximisers the second-order bound is the tighter one, and it closes
    to within 1% of the sampled maximum (the remainder is quadratic in the width)."""
    for N, norm in [(4, "2"), (5, "inf")]:
        entry = next(e for e in entries() if (e["N"], e["d"], e["norm"]) == (N, 1, norm))
        gaps = np.diff(np.sort(np.asarray(entry["witness"]).ravel()))
        lo, hi = np.maximum(gaps - 0.02, 0.0)[None], (np.maximum(gaps - 0.02, 0.0) + 0.04)[None]
        par = domain(N, 1, norm, 3.5).par
        first, _, _ = mvf.box_bounds(lo, hi, par, norm, second_order=False)
        second, _ = mvf.taylor_bounds(lo, hi, par, norm)
        assert second[0] < first[0]
        assert second[0] <= 1.01 * entry["lower"]


def finite_difference_third(th: np.ndarray, par, step: float = 1e-3) -> np.ndarray:
    """Central differences of the second differences: (B, n, n, L, L, L)."""
    return np.stack([(finite_difference_hessian(th + step * np.eye(th.shape[1])[n], par)
                      - finite_difference_hessian(th - step * np.eye(th.shape[1])[n], par)) / (2 * step)
                     for n in range(th.shape[1])], axis=-1)


def third_outside(k: Interval, th: np.ndarray, lo: np.ndarray, hi: np.ndarray, par) -> bool:
    T = finite_difference_third(np.clip(th, lo + 2e-3, hi - 2e-3), par)
    tol = 1e-4 * (1 + np.abs(T))
    return bool(np.any((k.lo > T + tol) | (T > k.hi + tol)))


@settings(max_examples=10, deadline=None)
@given(N=st.integers(2, 4), d=st.integers(1, 2), width=st.sampled_from([0.01, 0.05, 0.1]), seed=st.integers(0, 99))
def test_third_order_enclosure_contains_finite_differences(N: int, d: int, width: float, seed: int) -> None:
    """The third derivatives (the softmax form of proofs/third_order.py and the product rule) contain third
    differences sampled in the box; values, gradients and Hessians are unchanged by tracking them."""
    if d == 2 and N > 3:
        N = 3
    rng = np.random.default_rng(seed)
    par = domain(N, d, "2", 3.5).par
    lo, hi = sample_boxes(rng, N, d, width, 4)
    centre = 0.5 * (lo + hi)
    enc = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=centre, with_hessian=True,
                                with_third=True)
    assert enc.k is not None and enc.k.shape == enc.h.shape + (par.L,)
    assert not any(third_outside(enc.k, lo + rng.uniform(size=lo.shape) * (hi - lo), lo, hi, par) for _ in range(6))
    second = enclose_core_jacobian(Interval(lo, hi), par, with_grad=True, centre=centre, with_hessian=True)
    assert np.array_equal(second.h.lo, enc.h.lo) and np.array_equal(second.v.hi, enc.v.hi)


def test_narrow_third_derivative_enclosure_is_caught() -> None:
    """An enclosure 10% narrower than the range of sampled third differences fails ``third_outside``."""
    rng = np.random.default_rng(23)
    par = domain(3, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 3, 1, 0.1, 3)
    samples = np.stack([finite_difference_third(lo + rng.uniform(size=lo.shape) * (hi - lo), par)
                        for _ in range(40)])
    width = samples.max(0) - samples.min(0)
    narrow = Interval(samples.min(0) + 0.05 * width, samples.max(0) - 0.05 * width)
    assert any(third_outside(narrow, lo + rng.uniform(size=lo.shape) * (hi - lo), lo, hi, par) for _ in range(20))


def test_third_order_duals_do_not_mix_with_second_order_ones() -> None:
    x = Interval(np.zeros((1, 2)), np.ones((1, 2)))
    g = Interval.point(np.ones((1, 2, 1)))
    with pytest.raises(ValueError, match="third-order"):
        Dual(x, g, second=True, third=True) * Dual(x, g, second=True)


def test_third_order_bounds_beat_the_second_order_form_near_maximisers() -> None:
    """On boxes of half-width 0.05 around the maximisers the third-order bound is below the second-order one, and
    at half-width 0.02 within 1% of the table's lower bound."""
    for N, norm in [(4, "2"), (5, "2"), (5, "inf")]:
        entry = next(e for e in entries() if (e["N"], e["d"], e["norm"]) == (N, 1, norm))
        gaps = np.diff(np.sort(np.asarray(entry["witness"]).ravel()))
        par = domain(N, 1, norm, 3.5).par
        for h in (0.05, 0.02):
            lo = np.maximum(gaps - h, 0.0)[None]
            hi = lo + 2 * h
            second, _ = mvf.taylor_bounds(lo, hi, par, norm)
            third, scores = mvf.third_order_bounds(lo, hi, par, norm)
            assert third[0] < second[0], (N, norm, h)
            assert scores.shape == lo.shape and np.all(scores >= 0)
        assert third[0] <= 1.01 * entry["lower"], (N, norm)


def test_narrow_third_order_bounds_are_caught() -> None:
    rng = np.random.default_rng(15)
    par = domain(3, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 3, 1, 0.01, 16)
    upper, _ = mvf.third_order_bounds(lo, hi, par, "2")
    assert box_bound_violations(upper, lo, hi, par, "2", rng, samples=10) == []
    assert box_bound_violations(upper / 1.1, lo, hi, par, "2", rng, samples=10)


def test_narrow_taylor_bounds_are_caught() -> None:
    rng = np.random.default_rng(14)
    par = domain(3, 1, "inf", 3.5).par
    lo, hi = sample_boxes(rng, 3, 1, 0.01, 16)
    upper, _ = mvf.taylor_bounds(lo, hi, par, "inf")
    assert box_bound_violations(upper / 1.1, lo, hi, par, "inf", rng, samples=10)


@settings(max_examples=24, deadline=None)
@given(N=st.integers(2, 5), d=st.integers(1, 2), norm=st.sampled_from(["2", "inf"]),
       width=st.sampled_from([0.005, 0.01, 0.05, 0.1, 0.2, 0.5]),
       form=st.sampled_from(["all", "gated", "taylor", "third"]),
       seed=st.integers(0, 99))
def test_box_bounds_dominate_sampled_norms(N: int, d: int, norm: str, width: float, form: str, seed: int) -> None:
    """box_bounds (all forms; or with a closing threshold, the third-order form only where the first-order bound
    is just above it), taylor_bounds (the second-order form alone) and third_order_bounds are above sampled
    norms."""
    if d == 2 and N > 4:
        N = 4
    rng = np.random.default_rng(seed)
    par = domain(N, d, norm, 3.5).par
    lo, hi = sample_boxes(rng, N, d, width, 16, norm)
    if form in ("taylor", "third"):
        upper, scores = (mvf.taylor_bounds if form == "taylor" else mvf.third_order_bounds)(lo, hi, par, norm)
        assert scores.shape == lo.shape and np.all(scores >= 0)
    else:
        threshold = None
        if form == "gated":  # a threshold inside the spread of first-order bounds, so that some boxes are retried
            first, _, _ = mvf.box_bounds(lo, hi, par, norm, second_order=False)
            threshold = float(np.median(first)) / 1.1
        upper, centre, _ = mvf.box_bounds(lo, hi, par, norm, threshold=threshold)
        assert np.all(upper >= centre)
    assert box_bound_violations(upper, lo, hi, par, norm, rng) == []


def test_box_bounds_are_tight_on_small_boxes() -> None:
    rng = np.random.default_rng(5)
    par = domain(4, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 4, 1, 1e-3, 16)
    upper, centre, _ = mvf.box_bounds(lo, hi, par, "2")
    assert np.all(upper <= centre * 1.01)


def test_vertex_norm_margin_against_high_precision() -> None:
    """The stated SVD margin: the rounded-up 2-norm is >= an mpmath (40 digits) singular value."""
    import mpmath

    rng = np.random.default_rng(1)
    V = rng.normal(size=(20, 6, 6)) * 10.0 ** rng.integers(-3, 3, size=(20, 1, 1))
    up = mvf.norm_upper_point(V, "2")
    with mpmath.workdps(40):
        for k in range(20):
            s = max(mpmath.svd_r(mpmath.matrix(V[k].tolist()), compute_uv=False))
            assert mpmath.mpf(float(up[k])) >= s


def test_bottleneck_distance_is_a_lower_bound_on_the_split() -> None:
    rng = np.random.default_rng(2)
    par = domain(4, 2, "2", 3.5).par
    lo, hi = sample_boxes(rng, 4, 2, 0.5, 32)
    hi[:, 3] += 5.0  # push point 4 far away in some boxes
    lo[:, 3] += 4.0
    r_box = bottleneck_distance(par, lo, hi)
    d2 = pair_sq_distances(par, lo, hi)
    for _ in range(20):
        Y = par.points(lo + rng.uniform(size=lo.shape) * (hi - lo))
        dist = np.linalg.norm(Y[:, :, None] - Y[:, None], axis=-1)
        assert np.all((d2.lo <= dist**2 + 1e-12) & (dist**2 <= d2.hi + 1e-12))
        for b in range(Y.shape[0]):
            # some partition has all cross distances >= r_box: the largest MST edge of the true distances
            assert _mst_largest_edge(dist[b]) >= r_box[b] - 1e-12
    assert np.any(r_box > 1.0)


def _mst_largest_edge(dist: np.ndarray) -> float:
    N = dist.shape[0]
    in_tree, best, largest = {0}, dist[0].copy(), 0.0
    while len(in_tree) < N:
        k = min((j for j in range(N) if j not in in_tree), key=lambda j: best[j])
        largest = max(largest, best[k])
        in_tree.add(k)
        best = np.minimum(best, dist[k])
    return largest


def test_tail_bound_lookup_is_conservative() -> None:
    table = tail_bound_table(5, 1, "2", 3.5)
    r = np.array([0.5, 1.0, 1.234, 2.999, 3.5])
    looked = tail_bound_lookup(table, r)
    assert np.isinf(looked[0])
    for k in range(1, 5):
        assert looked[k] >= tail_bound(float(r[k]), 5, 1, "2")


def test_choose_r_keeps_the_tail_term_below_the_threshold() -> None:
    """The chosen radius is the smallest on the grid whose tail term is at most lower (1 + tol / 2): the tail term is
    computed here from ``tail_bound`` directly."""
    for N, d, norm, smaller, lower, tol in [(6, 1, "2", 2.3036, 2.3585, 0.04), (4, 2, "inf", 2.88, 3.16, 0.04),
                                            (2, 1, "2", 1.0, 1.6016, 0.004), (3, 1, "inf", 1.6077, 1.6077, 0.0)]:
        r = choose_r(N, d, norm, smaller, lower, tol)
        fits = [x for x in R_GRID if smaller + tail_bound(x, N, d, norm) <= lower * (1 + tol / 2)]
        assert r == (min(fits) if fits else DEFAULT_R)
        if fits:
            assert smaller + tail_bound(r, N, d, norm) <= lower * (1 + tol)


def test_tail_bound_on_two_clusters() -> None:
    from proofs.tail_bound import check_tail

    status, evidence = check_tail(lambda r, N, d, p: tail_bound(r, N, d, p), samples=60, seed=3)
    assert status.value == "SAMPLED", evidence


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="norm"):
        global_l2_constant(2, 1, "1")
    with pytest.raises(ValueError, match="N must be"):
        global_l2_constant(1, 1, "2")
    with pytest.raises(ValueError, match="r >= 1"):
        tail_bound(0.5, 3, 1, "2")
    with pytest.raises(ValueError, match="d in"):  # 2-norm, d = 3 < N: no domain, no reduction
        global_l2_constant(4, 3, "2")
    with pytest.raises(ValueError, match="N = 2..6"):
        global_l2_constant(7, 3, "inf")


# -- the branch and bound end to end -----------------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["2", "inf"])
def test_branch_and_bound_n2_contains_exact_constant(norm: str) -> None:
    res = global_l2_constant(2, 1, norm, tol=0.002, time_budget=60, lower_restarts=4)
    lo, hi = exact_constant_n2(norm)
    assert res.complete
    assert res.lower <= hi * (1 + 1e-13) and res.upper >= lo  # lower: float64 evaluation, rounding allowed
    assert res.upper <= 1.003 * hi


@settings(max_examples=4, deadline=None)
@given(norm=st.sampled_from(["2", "inf"]), seed=st.integers(0, 50))
def test_branch_and_bound_n3_dominates_random_and_optimised(norm: str, seed: int) -> None:
    res = global_l2_constant(3, 1, norm, tol=0.01, time_budget=60, lower_restarts=2, seed=seed,
                             smaller={2: 1.6077})
    rng = np.random.default_rng(seed)
    Y = random_configurations(rng, 3, 1, 100)
    assert np.all(reference_norm(Y, norm) <= res.upper)
    best, _ = search_lower(3, 1, norm, restarts=4, seed=seed + 1)
    assert best <= res.upper
    assert res.upper <= res.lower * 1.0101


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_third_order_branch_and_bound_certifies_n4(norm: str) -> None:
    """third_order=True: the same guarantees (random and optimised configurations below the bound, the ratio
    reached) with fewer boxes than the default second-order search."""
    smaller = {2: 1.6077, 3: 1.9525 if norm == "2" else 2.3014}
    default = global_l2_constant(4, 1, norm, tol=0.01, time_budget=120, lower_restarts=2, smaller=smaller)
    third = global_l2_constant(4, 1, norm, tol=0.01, time_budget=120, lower_restarts=2, smaller=smaller,
                               third_order=True)
    assert third.complete and "third-order" in third.method
    rng = np.random.default_rng(3)
    assert np.all(reference_norm(random_configurations(rng, 4, 1, 100), norm) <= third.upper)
    best, _ = search_lower(4, 1, norm, restarts=4, seed=1)
    assert best <= third.upper <= third.lower * 1.0101
    assert third.boxes < default.boxes


def test_worker_processes_give_the_same_certificate() -> None:
    """Two forked workers evaluate the same boxes: the N = 3 bound is complete, within tol of the one-process run,
    and above random configurations; bad worker counts are refused."""
    one = global_l2_constant(3, 1, "2", tol=0.01, time_budget=60, lower_restarts=2, smaller={2: 1.6077})
    two = global_l2_constant(3, 1, "2", tol=0.01, time_budget=60, lower_restarts=2, smaller={2: 1.6077}, workers=2)
    assert one.complete and two.complete
    assert abs(two.upper / one.upper - 1) <= 0.01
    Y = random_configurations(np.random.default_rng(0), 3, 1, 100)
    assert np.all(reference_norm(Y, "2") <= two.upper)
    with pytest.raises(ValueError, match="workers"):
        global_l2_constant(3, 1, "2", workers=0)


@pytest.mark.parametrize("calls", [1, 3, 8])
def test_interrupted_branch_and_bound_keeps_a_certified_bound(monkeypatch, calls: int) -> None:
    """Ctrl-C in the middle of the search returns the bound certified so far, which still dominates the exact
    N = 2 constant and every sampled value (N = 3), and says it is incomplete."""
    import certify.bounds.global_l2._search as driver

    real = driver.box_bounds
    count = {"n": 0}

    def interrupt_after(*args, **kwargs):
        count["n"] += 1
        if count["n"] > calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "box_bounds", interrupt_after)
    res = global_l2_constant(2, 1, "2", tol=1e-7, time_budget=60, lower_restarts=2)
    assert not res.complete and res.details["interrupted"]
    assert res.upper >= exact_constant_n2("2")[0] and res.upper >= res.lower
    count["n"] = 0
    res3 = global_l2_constant(3, 1, "inf", tol=1e-7, time_budget=60, lower_restarts=2, smaller={2: 1.6077})
    assert not res3.complete
    Y = random_configurations(np.random.default_rng(calls), 3, 1, 100)
    assert np.all(reference_norm(Y, "inf") <= res3.upper)
    assert res3.upper >= search_lower(3, 1, "inf", restarts=2)[0]


# -- the shipped table ---------------------------------------------------------------------------------------------

def test_table_shape() -> None:
    table = json.loads(TABLE.read_text())
    assert table["version"] == 1 and table["description"]
    keys = {(e["N"], e["d"], e["norm"]) for e in table["entries"]}
    expected = ({(N, 1, p) for N in range(2, 7) for p in ("2", "inf")} | {(N, 2, p) for N in range(2, 5) for p in ("2", "inf")}
                | {(2, 3, "2"), (3, 3, "2"), (2, 3, "inf")})
    assert expected <= keys
    for e in table["entries"]:
        for key in ("upper", "lower", "seconds", "boxes", "method", "command", "witness"):
            assert key in e
        assert e["command"].startswith(
            f"python benchmarks/universal_constants.py --N {e['N']} --d {e['d']} --norm {e['norm']}")
        assert np.asarray(e["witness"]).shape == (e["N"], e["d"])
        assert isinstance(e["upper"], float) and np.isfinite(e["upper"])


@pytest.mark.parametrize("index", range(len(entries())))
def test_table_entry_is_sound(index: int) -> None:
    entry = entries()[index]
    rng = np.random.default_rng(index)
    configurations = random_configurations(rng, entry["N"], entry["d"], 150)
    best, Y = search_lower(entry["N"], entry["d"], entry["norm"], restarts=2, seed=index)
    configurations = np.concatenate([configurations, Y[None]])
    assert table_violations(entry, configurations) == []


@settings(max_examples=20, deadline=None)
@given(index=st.integers(0, len(entries()) - 1), scale=st.floats(0.05, 4.0), seed=st.integers(0, 10_000))
def test_table_dominates_random_configurations(index: int, scale: float, seed: int) -> None:
    entry = entries()[index]
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(64, entry["N"], entry["d"])) * scale
    assert np.all(reference_norm(Y, entry["norm"]) <= entry["upper"])


def test_table_meets_the_tightness_targets() -> None:
    """Issue targets met by the shipped table: upper / lower <= 1.01 for N <= 4, d = 1, and <= 1.05 for N = 5, 6,
    d = 1 and N <= 3, d = 2, both norms, each certified completely in under 10 minutes (N = 6 with two processes)."""
    table = {(e["N"], e["d"], e["norm"]): e for e in entries()}
    for (N, d, norm), e in table.items():
        target = (1.01 if (d == 1 and N <= 4) else
                  1.05 if (d == 1 and N in (5, 6)) or (d == 2 and N <= 3) else None)
        if target is not None:
            assert e["upper"] / e["lower"] <= target, (N, d, norm)
            assert e["complete"], (N, d, norm)
            assert e["seconds"] <= 600, (N, d, norm)


def test_table_beats_the_paper_constant() -> None:
    from certify.bounds.closed_form._lambert import phi_inverse

    for e in entries():
        w = phi_inverse(e["N"] - 1)
        paper = np.sqrt(e["N"]) * (4 * w + 1) if e["norm"] == "2" else 1 + 4 * np.sqrt(e["d"]) * w
        assert e["upper"] <= paper * (1 + 1e-8)
        if e["upper"] / e["lower"] < 1.1:
            assert e["upper"] < paper


# -- the same checks catch an enclosure or a table 10% too narrow ---------------------------------------------------

def test_narrow_enclosure_is_caught() -> None:
    """An enclosure 10% narrower than the sampled range of M (5% cut at each end) fails ``enclosure_violations``.

    (The interval enclosures themselves are wider than the true range, so cutting 10% off them is not always an
    error; the sampled hull is the tightest enclosure the samples allow, so 10% less than it must be caught.)
    """
    rng = np.random.default_rng(11)
    par = domain(4, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 4, 1, 0.05, 16)
    samples = np.stack([core_jacobian_float(par.points(lo + rng.uniform(size=lo.shape) * (hi - lo)))
                        for _ in range(200)])
    width = samples.max(0) - samples.min(0)
    narrow = Dual(Interval(samples.min(0) + 0.05 * width, samples.max(0) - 0.05 * width), None)
    assert enclosure_violations(narrow, lo, hi, par, np.random.default_rng(12), samples=40)
    honest = enclose_core_jacobian(Interval(lo, hi), par, with_grad=False)
    assert enclosure_violations(honest, lo, hi, par, np.random.default_rng(12), samples=40) == []


def test_narrow_box_bounds_are_caught() -> None:
    rng = np.random.default_rng(13)
    par = domain(3, 1, "2", 3.5).par
    lo, hi = sample_boxes(rng, 3, 1, 0.01, 16)
    upper, _, _ = mvf.box_bounds(lo, hi, par, "2")
    assert box_bound_violations(upper / 1.1, lo, hi, par, "2", rng, samples=10)


def test_table_10_percent_too_low_is_caught() -> None:
    """Every entry whose certified ratio is below 1.1 (at least the d = 1, N <= 4 and d = 2, N <= 3 ones) is caught
    by ``table_violations`` once its upper bound is divided by 1.1."""
    tight = [dict(e) for e in entries() if e["upper"] / e["lower"] < 1.1]
    assert {(e["N"], e["d"]) for e in tight} >= {(2, 1), (3, 1), (4, 1), (2, 2), (3, 2)}
    for index, entry in enumerate(tight):
        entry["upper"] = entry["upper"] / 1.1
        rng = np.random.default_rng(index)
        configurations = np.concatenate([random_configurations(rng, entry["N"], entry["d"], 50),
                                         np.asarray(entry["witness"])[None]])
        assert table_violations(entry, configurations), entry


# -- d = 3: the 2-norm by dimension reduction, the inf-norm on the octant domain ------------------------------------

@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 4), extra=st.integers(0, 4), scale=st.floats(0.05, 4.0), seed=st.integers(0, 10_000))
def test_points_in_fewer_dimensions_split_off_the_weights(N: int, extra: int, scale: float, seed: int) -> None:
    """N points spanning R^(N-1), embedded in R^d (d >= N): ||M||_2 = max(||M in R^(N-1)||_2, ||P||_2), and
    ||P||_2 <= sqrt((N + 1) / 2) (proofs/dimension_reduction.py), by the reference implementation."""
    from certify.bounds.closed_form._dimension_reduction import embed, perpendicular_bound

    rng = np.random.default_rng(seed)
    d = N + extra
    Y = rng.normal(size=(N, N - 1)) * scale
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))  # any rotation: the 2-norm is invariant
    full = float(reference_norm((embed(Y, d) @ Q)[None], "2")[0])
    reduced = float(reference_norm(Y[None], "2")[0])
    P = torch.softmax(-torch.cdist(torch.as_tensor(Y), torch.as_tensor(Y)) ** 2, dim=1).numpy()
    assert np.linalg.norm(P, 2) <= perpendicular_bound(N)
    assert full == pytest.approx(max(reduced, np.linalg.norm(P, 2)), rel=1e-12, abs=1e-12)


@settings(max_examples=10, deadline=None)
@given(N=st.integers(2, 3), d=st.integers(3, 6), scale=st.floats(0.05, 4.0), seed=st.integers(0, 10_000))
def test_reduced_universal_constant_dominates_configurations(N: int, d: int, scale: float, seed: int) -> None:
    """universal_constant(N, d, "2") for d >= N (the table's c_2(N, N - 1) through the reduction, or the table's
    own d = 3 entry) is above ||M(Y)||_2 at random and optimised configurations of R^d, and a 5% smaller value is
    not: the embedded witness of c_2(N, N - 1) breaks it."""
    from certify.bounds.closed_form._dimension_reduction import embed

    from certify.bounds import default_constant

    value = universal_constant(N, d, "2").value
    assert value < default_constant(N, d, "2")
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(64, N, d)) * scale
    assert np.all(reference_norm(Y, "2") <= value)
    best, witness = search_lower(N, d, "2", restarts=1, seed=seed)
    assert best <= value
    table = {(e["N"], e["d"], e["norm"]): e for e in entries()}
    embedded = embed(np.asarray(table[(N, N - 1, "2")]["witness"]), d)
    assert float(reference_norm(embedded[None], "2")[0]) > 0.95 * value


def test_universal_constant_reduces_wide_heads_to_the_table() -> None:
    """A head of width d = 16 with N = 3 gets c_2(3, 2) from the table (1.96), not Theorem 3.2's constant (about
    4.9); the inf-norm, which rotations do not preserve, keeps the default."""
    from certify.bounds import default_constant

    table = {(e["N"], e["d"], e["norm"]): e for e in entries()}
    wide = universal_constant(3, 16, "2")
    assert wide.value == table[(3, 2, "2")]["upper"] and "dimension reduction" in wide.source
    assert universal_constant(3, 16, "inf").value == default_constant(3, 16, "inf")
    # (2, 2): the smaller of the table's own entry and c_2(2, 1) through the reduction
    assert universal_constant(2, 2, "2").value == min(table[(2, 2, "2")]["upper"], table[(2, 1, "2")]["upper"])


def test_universal_constant_takes_the_smallest_certified_source(monkeypatch) -> None:
    """A direct table entry looser than the reduced one (a row whose search stopped early) does not hide the
    reduction, and Theorem 3.2's constant still caps both."""
    from certify.bounds import default_constant
    from certify.bounds.closed_form import _universal

    loose = {(3, 3, "2"): {"upper": 3.5}, (3, 2, "2"): {"upper": 1.9641}}
    monkeypatch.setattr(_universal, "certified_table", lambda: loose)
    picked = _universal.universal_constant(3, 3, "2")
    assert picked.value == 1.9641 and "dimension reduction" in picked.source
    loose[(3, 2, "2")] = {"upper": 50.0}
    picked = _universal.universal_constant(3, 3, "2")
    assert picked.value == 3.5 and "certified table (" in picked.source
    loose[(3, 3, "2")] = {"upper": 50.0}  # both above the default
    assert _universal.universal_constant(3, 3, "2").value == default_constant(3, 3, "2") < 50.0


def test_global_constant_in_three_dimensions() -> None:
    """c_2(2, 3) by the reduction (witness in R^3, method says so) and c_inf(2, 3) by the octant domain: each
    certified above its attained lower bound, random configurations of R^3 and (monotone in d) c_inf(2, 2)'s
    attained value; the inf-norm constant is above the 2-norm one's lower bound in d = 1 (c_inf(2, 1) = c_2(2, 1))."""
    two = global_l2_constant(2, 3, "2", tol=0.01)
    assert two.witness.shape == (2, 3) and "dimension reduction" in two.method and two.complete
    assert two.lower <= two.upper
    inf = global_l2_constant(2, 3, "inf", tol=0.01)
    assert inf.complete and inf.witness.shape == (2, 3) and inf.lower <= inf.upper <= inf.lower * 1.011
    rng = np.random.default_rng(0)
    Y = random_configurations(rng, 2, 3)
    assert np.all(reference_norm(Y, "2") <= two.upper) and np.all(reference_norm(Y, "inf") <= inf.upper)
    plane = {(e["N"], e["d"], e["norm"]): e for e in entries()}[(2, 2, "inf")]
    assert inf.upper >= plane["lower"]
    assert inf.lower > plane["upper"]  # a third axis lets the inf-norm grow: d = 3 is not d = 2


@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_octant_domain_holds_an_image_of_every_configuration(N: int, seed: int) -> None:
    """Any configuration of N points in R^3 with a closest pair (1, 2) and every point within (N - 1) r of y_1,
    translated to y_1 = 0, moved by the signed axis permutation that sorts |y_2|, tokens 3..N sorted by their first
    coordinate, lies in the octant domain with the same ||M||_inf."""
    from certify.bounds.global_l2._domain import octant_domain

    rng = np.random.default_rng(seed)
    r = 3.5
    dom = octant_domain(N, 3, r)
    Y = rng.normal(size=(N, 3)) * rng.uniform(0.1, 1.0)
    distances = np.linalg.norm(Y[:, None] - Y[None], axis=-1) + np.eye(N) * 1e9
    i, j = np.unravel_index(np.argmin(distances), distances.shape)
    order = [i, j] + [k for k in range(N) if k not in (i, j)]
    Y = Y[order] - Y[order][0]
    signs = np.where(Y[1] < 0, -1.0, 1.0)
    axes = np.argsort(-np.abs(Y[1]))
    Z = (Y * signs)[:, axes]
    Z = np.concatenate([Z[:2], Z[2:][np.argsort(Z[2:, 0])]])
    theta = Z[1:].reshape(-1)
    assert np.all(theta >= dom.lo - 1e-12) and np.all(theta <= dom.hi + 1e-12)
    assert np.all(dom.constraints @ theta <= 1e-12)
    assert np.allclose(dom.par.points(theta[None])[0], Z)
    assert reference_norm(Z[None], "inf")[0] == pytest.approx(reference_norm(Y[None], "inf")[0], rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(N=st.integers(4, 6), seed=st.integers(0, 10_000))
def test_plane_domain_holds_an_image_of_every_configuration(N: int, seed: int) -> None:
    """Any configuration of N points in the plane, normalised as ``plane_domain`` says (closest pair (1, 2) with
    y_1 = 0, y_2 = (a, 0); tokens 3..N sorted by x; x -> a - x with 1, 2 swapped when the x's sum above (N - 2) a / 2;
    y -> -y when y_3 is below the axis), lies in the domain with the same ||M||_2."""
    rng = np.random.default_rng(seed)
    dom = domain(N, 2, "2", 3.5)
    Y = rng.normal(size=(N, 2)) * rng.uniform(0.1, 1.0)
    distances = np.linalg.norm(Y[:, None] - Y[None], axis=-1) + np.eye(N) * 1e9
    i, j = np.unravel_index(np.argmin(distances), distances.shape)
    Z = Y[[i, j] + [k for k in range(N) if k not in (i, j)]] - Y[i]
    a = np.linalg.norm(Z[1])
    c, s = Z[1] / a
    Z = Z @ np.array([[c, -s], [s, c]])  # y_2 onto (a, 0)
    if Z[2:, 0].sum() > (N - 2) * a / 2:
        Z = Z[[1, 0] + list(range(2, N))] * np.array([-1.0, 1.0]) + np.array([a, 0.0])
    Z = np.concatenate([Z[:2], Z[2:][np.argsort(Z[2:, 0])]])
    if Z[2, 1] < 0:
        Z = Z * np.array([1.0, -1.0])
    theta = np.concatenate([[Z[1, 0]], Z[2:].reshape(-1)])
    assert np.all(theta >= dom.lo - 1e-9) and np.all(theta <= dom.hi + 1e-9)
    assert np.all(dom.constraints @ theta <= 1e-9)
    assert np.allclose(dom.par.points(theta[None])[0], Z)
    assert reference_norm(Z[None], "2")[0] == pytest.approx(reference_norm(Y[None], "2")[0], rel=1e-10)
