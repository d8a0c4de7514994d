"""GELU and GELU' enclosures of the whole-model code (`certify.model._enclosure`): they contain the exact values
(mpmath, 30 digits) everywhere, including where GELU' cancels (near GELU's minimum) and near GELU''s zeros at
+-sqrt 2, and they stay narrow for narrow inputs."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certify.interval import Interval
from certify.model._enclosure import activation_interval, derivative_interval

mpmath.mp.dps = 30
X_MIN = -0.7517915246935645  # argmin of GELU (mpmath)
SPECIAL = [X_MIN, -math.sqrt(2), math.sqrt(2), 0.0]


def gelu(x: float) -> mpmath.mpf:
    return mpmath.mpf(x) * mpmath.ncdf(x)


def gelu_prime(x: float) -> mpmath.mpf:
    return mpmath.ncdf(x) + mpmath.mpf(x) * mpmath.npdf(x)


def enclosures(lo: float, hi: float) -> tuple[Interval, Interval]:
    x = Interval(np.array([lo]), np.array([hi]))
    return activation_interval("gelu", x), derivative_interval("gelu", x)


@settings(max_examples=300, deadline=None)
@given(special=st.sampled_from(SPECIAL + [None]), offset=st.floats(-1e-3, 1e-3), far=st.floats(-6, 6),
       log_width=st.floats(-16, 0.5), share=st.floats(0, 1))
def test_enclosures_contain_the_exact_values(special, offset, far, log_width, share):
    centre = far if special is None else special + offset
    width = 10.0**log_width
    lo, hi = centre - share * width, centre + (1 - share) * width
    value, slope = enclosures(lo, hi)
    for t in np.linspace(lo, hi, 9):
        assert value.lo[0] <= gelu(t) <= value.hi[0], (lo, hi, t)
        assert slope.lo[0] <= gelu_prime(t) <= slope.hi[0], (lo, hi, t)


def test_derivative_where_its_terms_cancel():
    # Phi(x) and x phi(x) are about 0.226 each and cancel to 2.4e-5: a margin relative to the sum missed the exact
    # value by 6e-17 here
    x = -0.7517365159297208
    _, slope = enclosures(x, x)
    assert slope.lo[0] <= gelu_prime(x) <= slope.hi[0]


@pytest.mark.parametrize("centre", SPECIAL + [1.3, -2.0])
@pytest.mark.parametrize("radius", [0.0, 1e-14, 1e-9, 1e-6])
def test_narrow_inputs_give_narrow_enclosures(centre, radius):
    # before: a point within 1e-4 of GELU's minimum got [-0.17, GELU(x)] (width up to 3e-5), and a point within 1e-3
    # of +-sqrt 2 a derivative enclosure reaching the rounded extremum; both fed the whole-model chain, where a
    # digits-ViT test image's certificate at eps = 1e-5 grew to 5.9e7 (now 152, attained 87)
    value, slope = enclosures(centre - radius, centre + radius)
    assert value.hi[0] - value.lo[0] <= 2 * 1.13 * radius + 1e-11
    assert slope.hi[0] - slope.lo[0] <= 2 * 0.8 * radius + 1e-11


def test_infinite_and_wide_inputs_stay_sound():
    value, slope = enclosures(-math.inf, math.inf)
    assert value.lo[0] <= -0.1699712074 and value.hi[0] == math.inf
    assert slope.lo[0] <= -0.1289041451 and slope.hi[0] >= 1.1289041451
    value, slope = enclosures(-3.0, 3.0)
    assert value.lo[0] <= gelu(X_MIN) and value.hi[0] >= gelu(3.0)
