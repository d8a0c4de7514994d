"""The exact Lipschitz constant of single-head L2 attention for N = 2, D = H = 1, W_Q = W_V = W_O = 1.

With d = 1, V = W_Q = 1 and G = 1, so J(X) = M(Y) with Y = X (MATH.md section 2). Write g = y_2 - y_1,
q = P_12 = P_21 = 1/(1 + e^{g^2}), p = 1 - q, s = g^2. Then

    M = [[a, b], [b, a]],   a = p + 2 p q s,   b = q - 2 p q s,

a symmetric matrix with eigenvalues a + b = 1 and a - b = h(s/2), where

    h(u) = tanh(u) + 2 u sech^2(u)   (p - q = tanh(s/2), 4 p q = sech^2(s/2)).

Both norms agree: ||M||_2 = max(|a + b|, |a - b|) and ||M||_inf = a + |b| = max(a + b, a - b), so
Lip_2 = Lip_inf = sup_{u >= 0} max(1, h(u)). h'(u) = sech^2(u) (3 - 4 u tanh u), and u tanh u increases strictly on
u > 0, so h has a single maximiser u*, the root of 4 u tanh u = 3, and the constant is h(u*) = 2 u* - 3 / (8 u*)
(about 1.6). `proofs/exact_constant_n2.py` proves these steps; this module encloses the value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mpmath
from mpmath import iv, libmp

NORMS = ("2", "inf")


@contextlib.contextmanager
def _iv_dps(digits: int) -> Iterator[None]:
    saved = iv.prec
    iv.dps = digits
    try:
        yield
    finally:
        iv.prec = saved


def _tanh(u: object) -> object:
    t = iv.exp(-2 * u)
    return (1 - t) / (1 + t)


def _sech2(u: object) -> object:
    t = iv.exp(-2 * u)
    return 4 * t / (1 + t) ** 2


def stationarity(u: object) -> object:
    """k(u) = 4 u tanh(u) - 3 (interval); h'(u) = sech^2(u) (-k(u)), so h is maximal where k = 0."""
    return 4 * u * _tanh(u) - 3


def h(u: object) -> object:
    """h(u) = tanh(u) + 2 u sech^2(u) (interval): the eigenvalue a - b of M at g^2 = 2 u."""
    return _tanh(u) + 2 * u * _sech2(u)


def maximiser_enclosure(digits: int = 40) -> tuple[mpmath.mpf, mpmath.mpf]:
    """[u_lo, u_hi] containing the root u* of 4 u tanh u = 3, verified by interval signs k(u_lo) < 0 < k(u_hi).

    k is continuous and strictly increasing on u > 0, so the root lies between the two points.
    """
    with mpmath.workdps(digits + 10):
        root = mpmath.findroot(lambda u: 4 * u * mpmath.tanh(u) - 3, 1.0)
        width = mpmath.mpf(10) ** (-digits)
        lo, hi = root - width, root + width
    with _iv_dps(digits + 10):
        k_lo, k_hi = stationarity(iv.mpf(lo)), stationarity(iv.mpf(hi))
        if not (k_lo.b < 0 and k_hi.a > 0):
            raise ArithmeticError(f"interval sign check failed: k({lo}) = {k_lo}, k({hi}) = {k_hi}")
    return lo, hi


def exact_constant_n2_interval(digits: int = 40) -> tuple[mpmath.mpf, mpmath.mpf]:
    """[lo, hi] (mpmath numbers) containing h(u*), the exact constant, from interval evaluation on [u_lo, u_hi]."""
    lo, hi = maximiser_enclosure(digits)
    with _iv_dps(digits + 10):
        value = h(iv.mpf([lo, hi]))
        if not value.a > 1:
            raise ArithmeticError(f"expected h(u*) > 1 (so the constant is h(u*), not 1), got {value}")
        # the raw endpoints, exactly (no rounding to mpmath's working precision)
        return mpmath.mp.make_mpf(value._mpi_[0]), mpmath.mp.make_mpf(value._mpi_[1])


def exact_constant_n2(norm: str) -> tuple[float, float]:
    """Rigorous enclosure [lo, hi] (floats, rounded outward) of Lip_norm(F) for N = 2, D = H = 1, unit weights.

    F is single-head tied L2 attention with W_Q = W_K = W_V = W_O = 1 (no biases). The value is the same for
    norm "2" and "inf" (module docstring): h(u*) = 2 u* - 3/(8 u*) with 4 u* tanh u* = 3, about 1.6017.
    Every certified upper bound for this layer must be >= lo; every lower bound must be <= hi.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    lo, hi = exact_constant_n2_interval()
    return libmp.to_float(lo._mpf_, rnd=libmp.round_floor), libmp.to_float(hi._mpf_, rnd=libmp.round_ceiling)
