"""Inclusion property of certify.interval: every enclosure contains the values sampled from its operands,
computed in high precision (mpmath, 50 digits), so a one-ulp rounding slip is caught."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certify import interval as iv

mpmath.mp.dps = 50

finite = st.floats(min_value=-30.0, max_value=30.0, allow_nan=False, allow_infinity=False)


def _box(rng: np.random.Generator, n: int, scale: float, positive: bool = False) -> tuple[iv.Interval, np.ndarray]:
    c = rng.normal(size=n) * scale
    if positive:
        c = np.abs(c) + 0.1
    r = np.abs(rng.normal(size=n)) * scale * 0.1
    if positive:
        r = np.minimum(r, 0.5 * c)
    box = iv.Interval(c - r, c + r)
    t = rng.uniform(size=(64, n))
    samples = box.lo + t * (box.hi - box.lo)
    return box, samples


def _contains_exact(enclosure: iv.Interval, exact_values) -> bool:
    """lo <= exact <= hi compared in mpmath (no float rounding of the exact value)."""
    lo, hi = enclosure.lo.ravel(), enclosure.hi.ravel()
    for k, v in enumerate(exact_values):
        if not (mpmath.mpf(float(lo[k])) <= v <= mpmath.mpf(float(hi[k]))):
            return False
    return True


OPS = {
    "add": (lambda a, b: a + b, lambda x, y: x + y, False),
    "sub": (lambda a, b: a - b, lambda x, y: x - y, False),
    "mul": (lambda a, b: a * b, lambda x, y: x * y, False),
    "div": (lambda a, b: a / b, lambda x, y: x / y, True),
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_binary_ops_contain_samples(op: str, scale: float) -> None:
    f_iv, f_mp, positive_b = OPS[op]
    rng = np.random.default_rng(hash((op, scale)) % 2**32)
    a, xa = _box(rng, 8, scale)
    b, xb = _box(rng, 8, scale, positive=positive_b)
    out = f_iv(a, b)
    assert np.all(out.lo <= out.hi)
    for s in range(xa.shape[0]):
        exact = [f_mp(mpmath.mpf(float(x)), mpmath.mpf(float(y))) for x, y in zip(xa[s], xb[s])]
        assert _contains_exact(out, exact), (op, s)


def test_point_operations_are_outward_rounded() -> None:
    # 0.1 + 0.2 is not exact in float64; the enclosure must contain the exact sum of the two floats.
    a, b = iv.Interval.point(0.1), iv.Interval.point(0.2)
    s = a + b
    exact = mpmath.mpf(0.1) + mpmath.mpf(0.2)
    assert mpmath.mpf(float(s.lo)) <= exact <= mpmath.mpf(float(s.hi))
    assert float(s.lo) < float(s.hi)  # really widened
    p = iv.Interval.point(1.0 / 3.0) * 3.0
    assert float(p.lo) < 1.0 < float(p.hi) or float(p.lo) <= 1.0 <= float(p.hi)


@settings(max_examples=200, deadline=None)
@given(x=finite, w=st.floats(min_value=0.0, max_value=2.0), t=st.floats(min_value=0.0, max_value=1.0))
def test_exp_contains(x: float, w: float, t: float) -> None:
    box = iv.Interval(np.array([x]), np.array([x + w]))
    e = iv.exp(box)
    y = x + t * w
    assert _contains_exact(e, [mpmath.exp(mpmath.mpf(y))])


def test_exp_extreme_arguments() -> None:
    box = iv.Interval(np.array([-800.0, -745.0, -700.0, 700.0]), np.array([-790.0, -740.0, -699.0, 710.0]))
    e = iv.exp(box)
    exact_lo = [mpmath.exp(mpmath.mpf(v)) for v in box.lo]
    exact_hi = [mpmath.exp(mpmath.mpf(v)) for v in box.hi]
    assert _contains_exact(e, exact_lo) and _contains_exact(e, exact_hi)
    assert np.isinf(e.hi[-1])  # overflow becomes +inf, never a finite wrong number


@settings(max_examples=100, deadline=None)
@given(x=finite, w=st.floats(min_value=0.0, max_value=5.0), t=st.floats(min_value=0.0, max_value=1.0))
def test_square_contains_and_is_tight(x: float, w: float, t: float) -> None:
    box = iv.Interval(np.array([x]), np.array([x + w]))
    sq = iv.square(box)
    y = mpmath.mpf(x) + mpmath.mpf(t) * mpmath.mpf(w)
    assert _contains_exact(sq, [y * y])
    assert sq.lo[0] >= 0.0
    if x < 0 < x + w:
        assert sq.lo[0] == 0.0  # no dependency blow-up below 0


def test_sqrt_and_reciprocal() -> None:
    rng = np.random.default_rng(1)
    box, xs = _box(rng, 6, 2.0, positive=True)
    s, r = iv.sqrt(box), iv.reciprocal(box)
    for row in xs:
        assert _contains_exact(s, [mpmath.sqrt(mpmath.mpf(float(v))) for v in row])
        assert _contains_exact(r, [1 / mpmath.mpf(float(v)) for v in row])
    with pytest.raises(ValueError):
        iv.reciprocal(iv.Interval(np.array([-1.0]), np.array([1.0])))


@pytest.mark.parametrize("n", [2, 17, 1000])
def test_sum_contains_exact_sum(n: int) -> None:
    rng = np.random.default_rng(n)
    # terms of mixed magnitude, so float summation really loses digits
    x = rng.normal(size=(3, n)) * 10.0 ** rng.integers(-8, 8, size=(3, n))
    s = iv.isum(iv.Interval.point(x), axis=1)
    for row in range(3):
        exact = mpmath.fsum([mpmath.mpf(float(v)) for v in x[row]])
        assert mpmath.mpf(float(s.lo[row])) <= exact <= mpmath.mpf(float(s.hi[row]))


def test_inf_norm_upper_is_max_over_matrices() -> None:
    rng = np.random.default_rng(3)
    c = rng.normal(size=(5, 4, 4))
    m = iv.Interval.centred(c, 0.1 * np.abs(rng.normal(size=(5, 4, 4))))
    bound = iv.inf_norm_upper(m)
    for _ in range(50):
        a = m.lo + rng.uniform(size=m.shape) * (m.hi - m.lo)
        assert np.all(np.abs(a).sum(axis=-1).max(axis=-1) <= bound)
    # attained at the sign pattern of the largest row: the bound is exact up to rounding
    vertex = np.where(np.abs(m.lo) > np.abs(m.hi), m.lo, m.hi)
    assert np.allclose(np.abs(vertex).sum(-1).max(-1), bound, rtol=1e-14)


def test_composite_expression_contains_samples() -> None:
    """A softmax entry 1 / sum_k exp(a_k) over a box: composite enclosures stay valid."""
    rng = np.random.default_rng(7)
    box, xs = _box(rng, 5, 1.0)
    p = iv.reciprocal(iv.isum(iv.exp(box), axis=0))
    for row in xs:
        exact = 1 / mpmath.fsum([mpmath.exp(mpmath.mpf(float(v))) for v in row])
        assert mpmath.mpf(float(p.lo)) <= exact <= mpmath.mpf(float(p.hi))


def test_rejects_inverted_interval() -> None:
    with pytest.raises(ValueError, match="lo <= hi"):
        iv.Interval(np.array([1.0]), np.array([0.0]))


def test_nan_becomes_whole_line() -> None:
    a = iv.Interval(np.array([0.0]), np.array([0.0]))
    b = iv.Interval(np.array([-np.inf]), np.array([np.inf]))
    prod = a * b
    assert prod.lo[0] == -np.inf and prod.hi[0] == np.inf


any_float = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)


@settings(max_examples=500, deadline=None)
@given(x=any_float)
def test_rounding_moves_at_least_one_ulp_and_at_most_three(x: float) -> None:
    up, down = float(iv.round_up(np.array(x))), float(iv.round_down(np.array(x)))
    with np.errstate(over="ignore"):
        assert np.nextafter(x, np.inf) <= up <= np.nextafter(np.nextafter(np.nextafter(x, np.inf), np.inf), np.inf)
        assert (np.nextafter(np.nextafter(np.nextafter(x, -np.inf), -np.inf), -np.inf) <= down
                <= np.nextafter(x, -np.inf))


def test_rounding_at_the_edges_of_the_float_range() -> None:
    tiny, biggest = 5e-324, np.finfo(np.float64).max
    x = np.array([0.0, -0.0, tiny, -tiny, 2.0**-1022, -(2.0**-1022), 1.0, -1.0, biggest, -biggest])
    assert np.all(iv.round_up(x) > x) and np.all(iv.round_down(x) < x)
    assert iv.round_up(np.array(biggest)) == np.inf and iv.round_down(np.array(-biggest)) == -np.inf
    assert iv.round_up(np.array(np.inf)) == np.inf and iv.round_down(np.array(-np.inf)) == -np.inf


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("nonnegative_first", [False, True])
def test_product_with_a_nonnegative_operand_contains_samples(scale: float, nonnegative_first: bool) -> None:
    """The two-product rule for a >= 0 (including a.lo = 0 and point operands) against exact products."""
    rng = np.random.default_rng(int(scale * 1000) + nonnegative_first)
    x, xs = _box(rng, 8, scale)
    a, a_samples = _box(rng, 8, scale, positive=True)
    lo = a.lo.copy()
    lo[:3] = 0.0  # touching zero
    a = iv.Interval(lo, a.hi)
    a_samples = a.lo + rng.uniform(size=a_samples.shape) * (a.hi - a.lo)
    a_samples[0] = a.lo
    out = a * x if nonnegative_first else x * a
    assert np.all(out.lo <= out.hi)
    for s in range(xs.shape[0]):
        exact = [mpmath.mpf(float(u)) * mpmath.mpf(float(v)) for u, v in zip(xs[s], a_samples[s])]
        assert _contains_exact(out, exact), s
    point = x * iv.Interval.point(np.abs(xs[0]))  # nonnegative point operand
    for s in range(xs.shape[0]):
        exact = [mpmath.mpf(float(u)) * mpmath.mpf(float(v)) for u, v in zip(xs[s], np.abs(xs[0]))]
        assert _contains_exact(point, exact), s


@pytest.mark.parametrize("scale", [1e-300, 1e-3, 1.0, 1e3])
def test_linear_combination_contains_exact_sums(scale: float) -> None:
    rng = np.random.default_rng(5)
    B, L = 4, 7
    c = rng.normal(size=(B, L)) * scale * 10.0 ** rng.integers(-6, 6, size=(B, L))
    x = iv.Interval.centred(c, np.abs(c) * 1e-3)
    coef = rng.integers(-3, 4, size=(3, 5, L)).astype(float)
    out = iv.linear_combination(x, coef)
    assert out.shape == (B, 3, 5)
    for _ in range(16):
        theta = x.lo + rng.uniform(size=(B, L)) * (x.hi - x.lo)
        for b in range(B):
            exact = [mpmath.fsum(mpmath.mpf(float(k)) * mpmath.mpf(float(t)) for k, t in zip(row, theta[b]))
                     for row in coef.reshape(-1, L)]
            assert _contains_exact(out[b].reshape(-1), exact)
    # no looser than the elementwise products and sums it replaces (up to the margins)
    reference = iv.isum(x.reshape(B, 1, 1, L) * coef[None], axis=-1)
    width, reference_width = out.hi - out.lo, reference.hi - reference.lo
    assert np.all(width <= reference_width * (1 + 1e-9) + 1e-300)


def _reference_product(a: iv.Interval, b: iv.Interval) -> iv.Interval:
    """The four-corner rule in plain numpy with ``np.nextafter`` (one ulp outward): the compiled kernel must be at
    least as wide, and at most two more ulps wider."""
    p = np.stack(np.broadcast_arrays(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi))
    return iv.Interval(np.nextafter(p.min(axis=0), -np.inf), np.nextafter(p.max(axis=0), np.inf))


@pytest.mark.parametrize("scale", [1e-300, 1e-3, 1.0, 1e300])
def test_compiled_product_matches_the_four_corner_rule(scale: float) -> None:
    rng = np.random.default_rng(11)
    a = iv.Interval(*np.sort(rng.normal(size=(2, 5, 1, 4)) * scale, axis=0))
    b = iv.Interval(*np.sort(rng.normal(size=(2, 1, 3, 4)), axis=0))  # broadcasting
    out, ref = a * b, _reference_product(a, b)
    assert out.shape == (5, 3, 4)
    assert np.all(out.lo <= ref.lo) and np.all(out.hi >= ref.hi)
    step = np.nextafter
    assert np.all(out.lo >= step(step(ref.lo, -np.inf), -np.inf))
    assert np.all(out.hi <= step(step(ref.hi, np.inf), np.inf))


def test_compiled_kernels_on_strided_and_broadcast_operands() -> None:
    """Views with zero or negative strides and transposes give the same results as contiguous copies."""
    rng = np.random.default_rng(12)
    lo = rng.normal(size=(4, 6))
    x = iv.Interval(lo, lo + 1.0)
    view = iv.Interval(x.lo.T[::-1], x.hi.T[::-1])
    copy = iv.Interval(np.ascontiguousarray(view.lo), np.ascontiguousarray(view.hi))
    wide = iv.Interval(np.broadcast_to(x.lo[:, 0], (6, 4)), np.broadcast_to(x.hi[:, 0], (6, 4)))  # zero strides
    for u, v in ((view * view, copy * copy), (view + wide, copy + wide), (view - wide, copy - wide),
                 (iv.isum(view, axis=0), iv.isum(copy, axis=0)), (iv.isum(view, axis=(0, 1)), iv.isum(copy))):
        assert np.array_equal(u.lo, v.lo) and np.array_equal(u.hi, v.hi)


def test_sum_over_several_axes_contains_exact_sums() -> None:
    rng = np.random.default_rng(13)
    x = rng.normal(size=(3, 4, 5)) * 10.0 ** rng.integers(-8, 8, size=(3, 4, 5))
    s = iv.isum(iv.Interval.point(x), axis=(0, 2))
    for j in range(4):
        exact = mpmath.fsum([mpmath.mpf(float(v)) for v in x[:, j, :].ravel()])
        assert mpmath.mpf(float(s.lo[j])) < exact < mpmath.mpf(float(s.hi[j]))
    with pytest.raises(ValueError, match="repeated axis"):
        iv.isum(iv.Interval.point(x), axis=(0, -3))


def test_infinite_and_empty_sums() -> None:
    whole = iv.isum(iv.Interval(np.array([-np.inf, 1.0]), np.array([1.0, np.inf])), axis=0)
    assert whole.lo == -np.inf and whole.hi == np.inf
    scalar = iv.isum(iv.Interval(np.array(-1.0), np.array(2.0)))  # 0-d, axis None: the interval itself, widened
    assert scalar.lo < -1.0 and scalar.hi > 2.0 and scalar.lo > -1.0 - 1e-14
    empty = iv.isum(iv.Interval.point(np.zeros((3, 0))), axis=1)
    assert np.all(empty.lo < 0.0) and np.all(empty.hi > 0.0)
    # inf - inf in a sum of ends: the whole line, never NaN
    both = iv.Interval(np.array([-np.inf]), np.array([np.inf])) + iv.Interval(np.array([-np.inf]), np.array([np.inf]))
    assert both.lo[0] == -np.inf and both.hi[0] == np.inf
    diff = iv.Interval(np.array([np.inf]), np.array([np.inf])) - iv.Interval(np.array([np.inf]), np.array([np.inf]))
    assert diff.lo[0] == -np.inf and diff.hi[0] == np.inf


def test_sum_of_positive_lower_ends_stays_positive() -> None:
    """Each end of a sum gets the margin of its own terms: wide positive intervals (softmax denominators of far
    apart tokens) keep a positive lower end, so their reciprocal exists."""
    x = iv.Interval(np.full(6, 1e-200), np.full(6, 1e200))
    s = iv.isum(x, axis=0)
    assert s.lo > 0.0 and s.hi >= 6e200
    assert np.isfinite(iv.reciprocal(s).hi)


@settings(max_examples=30)
@given(st.integers(0, 2**31 - 1), st.floats(1e-12, 1.0))
def test_interval_einsum_contains_every_member_product(seed, spread):
    from certify.interval import interval_einsum

    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(3, 4, 2)), rng.normal(size=(3,))
    boxes = [iv.Interval(x - spread * rng.random(x.shape), x + spread * rng.random(x.shape)) for x in (a, b, c)]
    result = interval_einsum("ij,ijk,i->jk", *boxes)
    for _ in range(50):
        members = [box.lo + (box.hi - box.lo) * rng.random(box.shape) for box in boxes]
        assert np.all(result.contains(np.einsum("ij,ijk,i->jk", *members)))


def test_interval_einsum_keeps_an_underflowing_product_above_zero():
    """1e-200 * 1e-200 underflows to 0 in float64; the enclosure must still contain the exact 1e-400 > 0."""
    from certify.interval import interval_einsum

    tiny = iv.Interval.point(np.full((2,), 1e-200))
    result = interval_einsum("i,i->", tiny, tiny)
    assert result.lo <= 0 < result.hi


@settings(max_examples=50)
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True),
                          st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=40))
def test_the_compiled_magnitude_is_numpys_exactly(pairs):
    """Interval.mag (one compiled pass) is max(|lo|, |hi|) bit for bit, nan where an end is nan, with no warning."""
    import warnings

    lo = np.array([min(a, b) if a == a and b == b else a for a, b in pairs])
    hi = np.array([max(a, b) if a == a and b == b else b for a, b in pairs])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = iv.Interval(lo, hi).mag
    assert np.array_equal(ours, np.maximum(np.abs(lo), np.abs(hi)), equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1.0, 1e-160, 1e-300, 1e-310, 1e150]), st.sampled_from([1.0, 1e-170, 1e140]),
       st.sampled_from([0.0, 1e-3, 0.5]), st.integers(0, 2**31 - 1))
def test_point_einsum_encloses_the_exact_einsum_of_every_member(x_scale, w_scale, width, seed):
    """`point_einsum` (interval x, exact float matrices; the two compiled passes of its mid-radius form) contains
    the exact einsum, computed in rationals, of members of x (vertices and random points), at scales where the
    products underflow (1e-160 x 1e-170) or the sums would overflow without the power-of-two scaling, and with a
    subnormal x (1e-310: its scaling 2^k is not a float, so the numpy passes run instead of the compiled one)."""
    from fractions import Fraction as Q

    from certify.bounds.local._enclosure import point_einsum

    rng = np.random.default_rng(seed)
    centre = x_scale * rng.normal(size=(2, 3))
    radius = x_scale * width * rng.random((2, 3))
    x = iv.Interval(centre - radius, centre + radius)
    A, B = w_scale * rng.normal(size=(3, 2)), rng.normal(size=(2, 4))
    out = point_einsum("ia,ab,bc->ic", x, A, B)
    members = [x.lo, x.hi, np.where(rng.random((2, 3)) < 0.5, x.lo, x.hi)]
    members += [x.lo + (x.hi - x.lo) * rng.random((2, 3)) for _ in range(3)]
    for X in members:
        X = np.clip(X, x.lo, x.hi)
        for i in range(2):
            for c in range(4):
                exact = sum(Q(X[i, a]) * Q(A[a, b]) * Q(B[b, c]) for a in range(3) for b in range(2))
                assert Q(out.lo[i, c]) <= exact <= Q(out.hi[i, c])
    assert np.all(out.hi - out.lo <= 1e-9 * np.abs(out.hi) + 2 * x_scale * w_scale * (width * 20 + 1e-9) + 1e-300)


@pytest.mark.parametrize("subscripts, shapes", [
    ("...ilZ,aF,Ea->...iFlEZ", [(2, 3, 3, 4), (5, 6), (7, 5)]),
    ("...ilZ,aF,Ea->...iFlEZ", [(3, 3, 4), (5, 6), (7, 5)]),
    ("abk,bq->akq", [(4, 5, 2), (5, 3)]),
    ("...ic,Ec->...iE", [(2, 1, 3, 4), (6, 4)]),
])
def test_point_einsum_writes_the_shape_and_values_of_numpy_einsum(subscripts, shapes):
    """`point_einsum` sums into arrays of the shape it works out itself (`_einsum_sizes`, ellipsis included): the
    same shape as numpy's einsum, and an enclosure of its value; an ellipsis elsewhere than at the start is refused."""
    from certify.bounds.local._enclosure import _einsum_sizes, point_einsum

    rng = np.random.default_rng(0)
    x, *points = [rng.normal(size=shape) for shape in shapes]
    out = point_einsum(subscripts, iv.Interval(x, x), *points)
    value = np.einsum(subscripts, x, *points)
    assert out.shape == value.shape
    assert np.all(out.lo <= value) and np.all(value <= out.hi) and np.all(out.hi - out.lo <= 1e-12 * (1 + np.abs(value)))
    with pytest.raises(ValueError, match="ellipsis"):
        point_einsum("i...,ij->...j", iv.Interval(x, x), points[0])
    with pytest.raises(ValueError, match="ellipsis"):
        point_einsum("...ij,jk->ik", iv.Interval(x, x), points[0])
    # K counts every letter summed over, also one only in the interval operand after an ellipsis (its rounding
    # margin gamma_(K + p) depends on it)
    assert _einsum_sizes("...ila,aF->...iF", (np.zeros((2, 3, 4, 5)), np.zeros((5, 6)))) == (4 * 5, (2, 3, 6))
    assert _einsum_sizes("abk,bq->akq", (np.zeros((4, 5, 2)), np.zeros((5, 3)))) == (5, (4, 2, 3))
