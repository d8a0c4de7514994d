"""Claim, a known-false variant (MATH.md section 4, "Known mistakes"): dividing the whole inf-norm constant by
sqrt(d), i.e.

    Lip_inf(F) <= (4 W + 1) / sqrt(d) ||W^O^T||_inf max_h ||W^Q_h||_inf ||W^Q_h^T||_inf max_h ||W^V_h^T||_inf.

REFUTED by a counterexample: N = 5, D = d = 4, H = 1, identity weights (every weight factor is 1), at the input X
below (found by gradient ascent: Adam, 128 restarts, 400 steps), ||J(X)||_inf >= 2.2595 > (4 W_0(4/e) + 1)/2 = 1.94.

Rigour: row (i, a) of J(X) = d f_{i,a} / d X is SymPy's derivative of the definition (f = P X A, P_ij =
softmax_j(-||x_i - x_j||^2 / sqrt(d)), A = I/sqrt(d), no closed form used), evaluated in mpmath interval arithmetic
at the float64 point X (30 digits); the sum of the entries' mignitudes bounds that row sum of |J| from below, hence
||J(X)||_inf. W_0(4/e) is enclosed by the sign change of w e^w - 4/e (increasing). Both sides are intervals, and the
lower end of the left exceeds the upper end of the right: VERIFIED counterexample, status REFUTED. The correct
constant 4 W + 1/sqrt(d) = 3.37 is also checked to hold there (a cross-check).
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp
from mpmath import iv

from certify.symbolic import softmax_rows, squared_distance_logits, symbolic_input
from proofs._check import Check, refuted, verified
from proofs._result import ProofResult, Status, combine

CLAIM = ("Lip_inf(F) <= (4 W_0((N-1)/e) + 1)/sqrt(d) ||W^O^T||_inf max_h ||W^Q_h||_inf ||W^Q_h^T||_inf "
         "max_h ||W^V_h^T||_inf (the 1/sqrt(d)-on-everything variant of Theorem 3.2)")
SCOPE = "counterexample at N = 5, D = d = 4, H = 1, identity weights"
REQUIRES = Status.REFUTED  # certify must not use this variant: the proof must refute it

WITNESS = np.array([[-2.194685, 0.63495, 0.0166, 0.368773], [-2.194685, 0.63495, 0.0166, 0.368773],
                    [1.199295, -0.496377, 1.147926, -0.762553], [-0.497695, 0.069286, 0.582263, -0.19689],
                    [1.199295, -0.496377, 1.147926, -0.762553]])
ROW = (3, 0)  # the row (token i, output coordinate a) of J(X) with the largest absolute sum


def row_sum_enclosure(X: np.ndarray, row: tuple[int, int], digits: int = 30) -> object:
    """Interval containing a lower bound of sum_{j, c} |d f_{i,a} / d x_{jc}| at X (identity weights, d = D)."""
    N, D = X.shape
    i, a = row
    Xs, s = symbolic_input(N, D), sp.Symbol("s", positive=True)  # s = sqrt(d), passed as an interval
    f = (softmax_rows(squared_distance_logits(Xs, Xs, s)) * Xs / s)[i, a]
    gradient = sp.lambdify([list(Xs), s], [sp.diff(f, x) for x in Xs], modules=[{"exp": iv.exp}, "mpmath"])
    saved = iv.prec
    iv.dps = digits
    try:
        entries = gradient([iv.mpf(float(v)) for v in X.reshape(-1)], iv.sqrt(iv.mpf(D)))
        mignitudes = [iv.mpf(0) if e.a <= 0 <= e.b else iv.mpf(min(abs(e.a), abs(e.b))) for e in entries]
        return sum(mignitudes, iv.mpf(0))
    finally:
        iv.prec = saved


def lambert_enclosure(n: int) -> object:
    """Interval containing W_0(n/e): w e^w - n/e changes sign on it (interval evaluation), and it is increasing."""
    with mpmath.workdps(40):
        w = mpmath.lambertw(mpmath.mpf(n) / mpmath.e).real
        lo, hi = w - mpmath.mpf(10) ** -25, w + mpmath.mpf(10) ** -25
    saved = iv.prec
    iv.dps = 40
    try:
        g = lambda x: iv.mpf(x) * iv.exp(iv.mpf(x)) - iv.mpf(n) / iv.e  # noqa: E731
        if not (g(lo).b < 0 < g(hi).a):
            raise ArithmeticError(f"W_0({n}/e) not bracketed by [{lo}, {hi}]")
        return iv.mpf([lo, hi])
    finally:
        iv.prec = saved


def prove() -> ProofResult:
    N, D = WITNESS.shape
    row = row_sum_enclosure(WITNESS, ROW)
    W = lambert_enclosure(N - 1)
    variant = (4 * W + 1) / iv.sqrt(iv.mpf(D))
    theorem = 4 * W + 1 / iv.sqrt(iv.mpf(D))
    parts: list[Check] = [refuted(row.a > variant.b, (
        f"N={N}, D=d={D}, identity weights, X = WITNESS: ||J(X)||_inf >= row {ROW} sum in {mpmath.nstr(row, 12)} "
        f"> (4W + 1)/sqrt(d) in {mpmath.nstr(variant, 12)} (mpmath intervals; J by SymPy differentiation of the "
        "definition)"))]
    cross = [verified(row.b <= theorem.a, f"that row sum <= 4W + 1/sqrt(d) in {mpmath.nstr(theorem, 12)} (the "
                                          "theorem's constant holds there)")]
    return combine(CLAIM, parts, scope=SCOPE, cross_checks=cross)


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
