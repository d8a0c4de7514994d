"""VNNLIB properties (certify.model._vnnlib, issue 17 item 4): every supported form parses to the boxes and rows it
means, the cross product of ors, each refusal with its message, the write/read round trip, and `decide` on a
Linear model with an exact interval bound: verified on a robust box, falsified with a witness that really violates
on a non-robust one, and never verified when a sampled input reaches the unsafe set."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from certify._errors import InvalidInputError
from certify.model import (Activation, Case, FeedForward, Linear, Model, VnnlibProperty, check_witness, decide,
                           model_output, pgd_counterexample, read_vnnlib, write_vnnlib)

torch.set_num_threads(1)


def header(n_in: int, n_out: int) -> str:
    return "".join(f"(declare-const X_{i} Real)\n" for i in range(n_in)) + "".join(
        f"(declare-const Y_{j} Real)\n" for j in range(n_out))


def box(lo: list, hi: list) -> str:
    return "".join(f"(assert (>= X_{i} {a}))\n(assert (<= X_{i} {z}))\n" for i, (a, z) in enumerate(zip(lo, hi)))


def rows(case: Case) -> list[list[tuple]]:
    """Each disjunct as a sorted list of (row of A, b) for order-free comparison."""
    return [sorted((tuple(a), float(bk)) for a, bk in zip(A, b)) for A, b in case.disjuncts]


# ------------------------------------------------------------------------------------------------------ reading

def test_bounds_and_the_usual_robustness_or():
    text = header(2, 3) + """; a comment (with parentheses)
(assert (<= X_0 0.5))
(assert (>= X_0 -0.5))
(assert (<= X_1 .25)) (assert (>= X_1 (- 0.25)))
(assert (or (and (>= Y_1 Y_0)) (and (>= Y_2 Y_0))))
"""
    prop = read_vnnlib(text, n_inputs=2, n_outputs=3)
    assert (prop.n_inputs, prop.n_outputs, len(prop.cases)) == (2, 3, 1)
    case = prop.cases[0]
    np.testing.assert_array_equal(case.input_lo, [-0.5, -0.25])
    np.testing.assert_array_equal(case.input_hi, [0.5, 0.25])
    assert not case.open_lo.any() and not case.open_hi.any()  # exact binary64 numbers, non-strict
    assert rows(case) == [[((1.0, -1.0, 0.0), 0.0)], [((1.0, 0.0, -1.0), 0.0)]]  # Y_0 - Y_j <= 0
    assert not any(s.any() for s in case.strict)


@pytest.mark.parametrize("constraint,expected", [
    ("(<= Y_0 Y_1)", [((1.0, -1.0, 0.0), 0.0)]),
    ("(<= (+ Y_0 (* -1.0 Y_1)) 0.0)", [((1.0, -1.0, 0.0), 0.0)]),
    ("(>= Y_2 0.25)", [((0.0, 0.0, -1.0), -0.25)]),
    ("(<= (- Y_0 Y_1 Y_2) 1)", [((1.0, -1.0, -1.0), 1.0)]),
    ("(>= (- Y_0) 2)", [((1.0, 0.0, 0.0), -2.0)]),
    ("(<= (* 2 Y_0 0.5) (/ Y_1 4))", [((1.0, -0.25, 0.0), 0.0)]),
    ("(<= (* 3 (+ Y_0 1)) (- Y_1 1.5))", [((3.0, -1.0, 0.0), -4.5)]),
    ("(<= Y_0 Y_1 2)", [((0.0, 1.0, 0.0), 2.0), ((1.0, -1.0, 0.0), 0.0)]),  # chained
    ("(= Y_0 1)", [((-1.0, 0.0, 0.0), -1.0), ((1.0, 0.0, 0.0), 1.0)]),
    ("(and (<= Y_0 Y_1) (<= 1 2))", [((1.0, -1.0, 0.0), 0.0)]),  # a true constant comparison drops out
    # -1/1000 is no binary64 number and float(-0.001) lies below it: b is rounded up to the next float
    ("(<= 1e-3 (+ Y_1 Y_1))", [((0.0, -2.0, 0.0), float(np.nextafter(-0.001, 0)))]),
])
def test_output_constraint_forms(constraint, expected):
    prop = read_vnnlib(header(1, 3) + box([0], [1]) + f"(assert {constraint})\n")
    assert rows(prop.cases[0]) == [sorted(expected)]


def test_strict_and_rounded_bounds_are_flagged_and_rounded_outward():
    text = header(2, 2) + """(assert (> X_0 0.1)) (assert (<= X_0 0.5))
(assert (>= X_1 0)) (assert (< X_1 1))
(assert (or (and (< Y_0 Y_1)) (and (<= Y_0 0.1)) (and (<= Y_1 0.5))))"""
    case = read_vnnlib(text).cases[0]
    assert Fraction(case.input_lo[0]) < Fraction("0.1") and case.open_lo.tolist() == [True, False]
    assert case.input_hi.tolist() == [0.5, 1.0] and case.open_hi.tolist() == [False, True]
    (A0, b0), (A1, b1), (A2, b2) = case.disjuncts
    assert A0.tolist() == [[1.0, -1.0]] and b0.tolist() == [0.0] and case.strict[0].tolist() == [True]
    assert Fraction(b1[0]) > Fraction("0.1") and case.strict[1].tolist() == [True]  # rounded up: open in float
    assert b2.tolist() == [0.5] and case.strict[2].tolist() == [False]
    lo, hi = case.search_box()  # the closed float box inside the file's
    assert Fraction(lo[0]) > Fraction("0.1") and hi[1] < 1.0 and lo[1] == 0.0 and hi[0] == 0.5
    assert Fraction(case.search_rhs(1)[0]) < Fraction("0.1") and case.search_rhs(2).tolist() == [0.5]


def test_cross_product_of_input_boxes_and_output_disjuncts():
    text = header(1, 2) + """
(assert (or (and (>= X_0 0) (<= X_0 1) (<= Y_0 Y_1))
            (and (>= X_0 2) (<= X_0 3) (<= Y_1 Y_0))))
(assert (or (<= Y_0 5) (and (<= Y_1 6) (<= Y_1 7))))
(assert (<= X_0 2.5))
"""
    cases = read_vnnlib(text).cases
    assert [(c.input_lo.tolist(), c.input_hi.tolist()) for c in cases] == [([0.0], [1.0]), ([2.0], [2.5])]
    assert rows(cases[0]) == [[((1.0, -1.0), 0.0), ((1.0, 0.0), 5.0)],
                              [((0.0, 1.0), 6.0), ((0.0, 1.0), 7.0), ((1.0, -1.0), 0.0)]]
    assert rows(cases[1]) == [[((-1.0, 1.0), 0.0), ((1.0, 0.0), 5.0)],
                              [((-1.0, 1.0), 0.0), ((0.0, 1.0), 6.0), ((0.0, 1.0), 7.0)]]


def test_terms_with_one_box_merge_and_unsatisfiable_terms_drop():
    text = header(1, 2) + """
(assert (or (and (>= X_0 0) (<= X_0 1) (<= Y_0 Y_1))
            (and (>= X_0 0) (<= X_0 1) (<= Y_1 Y_0))
            (and (>= X_0 0) (<= X_0 1) (<= 1 0))
            (and (>= X_0 0) (<= X_0 1) (< 1 1) (<= Y_0 4))
            (and (>= X_0 2) (<= X_0 1) (<= Y_0 3))
            (and (> X_0 1) (<= X_0 1) (<= Y_0 3))))"""
    (case,) = read_vnnlib(text).cases
    assert case.input_lo.tolist() == [0.0] and len(case.disjuncts) == 2


def test_no_output_constraint_leaves_a_disjunct_without_rows():
    (case,) = read_vnnlib(header(1, 2) + box([0], [1])).cases
    assert len(case.disjuncts) == 1 and case.disjuncts[0][0].shape == (0, 2)


def test_declare_fun_ignored_commands_and_gz_files(tmp_path):
    text = ("(set-logic QF_LRA)\n(declare-fun X_0 () Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
            + box([-1], [1]) + "(assert (>= Y_1 Y_0))\n(check-sat)\n(get-model)\n(exit)\n")
    path = tmp_path / "p.vnnlib.gz"
    path.write_bytes(gzip.compress(text.encode()))
    for source in (text, path, str(path)):
        prop = read_vnnlib(source)
        assert prop.cases[0].input_hi.tolist() == [1.0] and rows(prop.cases[0]) == [[((1.0, -1.0), 0.0)]]


ERRORS = [
    (header(1, 1) + box([0], [1]) + "(assert (<= X_0 Y_0))", r"line 5: a comparison mixing inputs X and outputs "
     r"Y is not supported: \(<= X_0 Y_0\)"),
    (header(2, 1) + box([0, 0], [1, 1]) + "(assert (<= (+ X_0 X_1) 1))", r"line 8: an input constraint must bound "
     r"one X_i \(a box\); this links X_0, X_1"),
    (header(1, 2) + box([0], [1]) + "(assert (<= (* Y_0 Y_1) 1))", r"line 6: nonlinear term \(a product of two "
     r"non-constant factors\): \(\* Y_0 Y_1\)"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Z_0 1))", r"line 5: unknown symbol 'Z_0': Z_0"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0 nan))", r"unknown symbol 'nan'"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0 inf))", r"unknown symbol 'inf'"),
    (header(2, 1) + "(assert (>= X_0 0)) (assert (<= X_0 1)) (assert (>= X_1 0))",
     r"X_1 has no upper bound \(in term 0"),
    (header(1, 1) + "(assert (<= X_0 1))", r"X_0 has no lower bound"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0 1)", r"line 5: '\(' is never closed"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0 1)))", r"line 5: unexpected '\)'"),
    (header(1, 1) + "assert", r"line 3: expected '\(' at the top level, got 'assert'"),
    (header(1, 1) + box([0], [1]) + "(assert (not (<= Y_0 1)))", r"unsupported formula \(expected and, or"),
    (header(1, 1) + box([0], [1]) + "(assert (<= (abs Y_0) 1))", r"unsupported term .*: \(abs Y_0\)"),
    (header(1, 1) + box([0], [1]) + "(assert (<= (/ 1 Y_0) 1))", r"division needs constant non-zero divisors"),
    (header(1, 1) + box([0], [1]) + "(assert (<= (/ Y_0 0) 1))", r"division needs constant non-zero divisors"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0))", r"<= needs at least two terms"),
    (header(1, 1) + box([0], [1]) + "(assert (<= Y_0 1e999))", r"a number is out of the float64 range"),
    ("(declare-const Z Real)", r"line 1: VNNLIB names inputs X_i and outputs Y_j; unsupported name 'Z'"),
    ("(declare-const X_0 Int)", r"only Real variables are supported, got sort Int"),
    ("(declare-const X_0 Real)\n(declare-const X_0 Real)", r"line 2: X_0 is declared twice"),
    ("(declare-const X_0)", r"malformed declaration"),
    ("(declare-const X_0 Real) (declare-const X_2 Real) (declare-const Y_0 Real)",
     r"the declared X are not numbered 0 \.\. 1: X_1 is missing"),
    ("(declare-const X_0 Real)", r"no Y_i is declared"),
    (header(1, 1) + box([0], [1]) + "(push 1)", r"line 5: unsupported command .*: \(push 1\)"),
    (header(1, 1) + "(assert (<= X_0 1) (<= X_0 2))", r"assert takes one formula"),
    (header(1, 1) + "(assert (or (and (<= X_0 1) (>= X_0 2)) (and (<= 1 0) (<= X_0 1) (>= X_0 0))))",
     r"every term of the property is unsatisfiable"),
]


@pytest.mark.parametrize("text,message", ERRORS)
def test_refusals_name_the_line_and_the_expression(text, message):
    with pytest.raises(InvalidInputError, match=message):
        read_vnnlib(text)


def test_refusals_of_sizes_files_and_explosions(tmp_path):
    text = header(2, 3) + box([0, 0], [1, 1])
    with pytest.raises(InvalidInputError, match=r"declares 2 inputs X_0 \.\. X_1, expected 3"):
        read_vnnlib(text, n_inputs=3)
    with pytest.raises(InvalidInputError, match=r"declares 3 outputs Y_0 \.\. Y_2, expected 10"):
        read_vnnlib(text, n_outputs=10)
    with pytest.raises(InvalidInputError, match=r"cannot read the VNNLIB file .*missing\.vnnlib"):
        read_vnnlib(tmp_path / "missing.vnnlib")
    (tmp_path / "bad.vnnlib").write_bytes(b"\xff\xfe(")
    with pytest.raises(InvalidInputError, match=r"cannot read the VNNLIB file .*bad\.vnnlib.*utf-8"):
        read_vnnlib(str(tmp_path / "bad.vnnlib"))
    with pytest.raises(InvalidInputError, match="expected a VNNLIB path or text, got int"):
        read_vnnlib(3)
    ors = "".join("(assert (or (<= Y_0 1) (<= Y_0 2) (<= Y_0 3) (<= Y_0 4) (<= Y_0 5) (<= Y_0 6)))\n"
                  for _ in range(8))  # 6^8 > MAX_TERMS
    with pytest.raises(InvalidInputError, match=r"VNNLIB text: the asserts' ors expand to more than 100000 terms$"):
        read_vnnlib(text + ors)


# ---------------------------------------------------------------------------------------------------- writing

def test_write_then_read_gives_the_box_and_the_robustness_rows(tmp_path):
    rng = np.random.default_rng(0)
    lo = rng.normal(size=(2, 3)) / 7  # no short decimals: written as exact expansions, read back exactly
    hi = lo + rng.uniform(0, 1e-3, size=lo.shape)
    lo[0, 0], hi[0, 0] = -0.0, 1e-300  # a signed zero and a tiny number (exponent notation)
    path = write_vnnlib(tmp_path / "robust.vnnlib", lo, hi, label=2, n_outputs=4)
    (case,) = read_vnnlib(path, n_inputs=6, n_outputs=4).cases
    np.testing.assert_array_equal(case.input_lo, lo.reshape(-1))
    np.testing.assert_array_equal(case.input_hi, hi.reshape(-1))
    assert not case.open_lo.any() and not case.open_hi.any()
    expected = [[(tuple(np.eye(4)[2] - np.eye(4)[j]), 0.0)] for j in (0, 1, 3)]  # Y_label - Y_j <= 0
    assert rows(case) == expected


@pytest.mark.parametrize("args,message", [
    (([0.0], [-1.0], 0, 2), "finite bounds with lo <= hi"),
    (([0.0], [math.inf], 0, 2), "finite bounds"),
    (([0.0, 1.0], [1.0], 0, 2), "same size"),
    (([0.0], [1.0], 2, 2), r"label must be an integer in \[0, 2\)"),
    (([0.0], [1.0], 0, 1), "n_outputs must be an integer >= 2"),
])
def test_write_refusals(tmp_path, args, message):
    with pytest.raises(InvalidInputError, match=message):
        write_vnnlib(tmp_path / "p.vnnlib", *args)


# --------------------------------------------------------------------------------------------------- deciding

def linear_model(W: np.ndarray, bias: np.ndarray) -> Model:
    """y = W^T x + bias (state x^T of shape (1, n), Linear's S W + b)."""
    return Model((Linear(W, bias),), input_shape=(W.shape[0],))


def round_down(q: Fraction) -> float:
    f = float(q)
    return float(np.nextafter(f, -np.inf)) if Fraction(f) > q else f


def exact_y(W: np.ndarray, bias: np.ndarray, x) -> list[Fraction]:
    return [sum((Fraction(x[i]) * Fraction(W[i, j]) for i in range(W.shape[0])), Fraction(bias[j]))
            for j in range(W.shape[1])]


def exact_lower_bounds(W: np.ndarray, bias: np.ndarray):
    """min over the box of (A (W^T x + bias))_k, exact in rationals then rounded down: the tightest sound bound."""
    def lower_bounds(lo: np.ndarray, hi: np.ndarray, A: np.ndarray) -> np.ndarray:
        out = []
        for a in A:
            g = [sum((Fraction(a[j]) * Fraction(W[i, j]) for j in range(W.shape[1])), Fraction(0))
                 for i in range(W.shape[0])]
            q = sum((Fraction(a[j]) * Fraction(bias[j]) for j in range(W.shape[1])), Fraction(0))
            q += sum((gi * Fraction(lo[i] if gi > 0 else hi[i]) for i, gi in enumerate(g)), Fraction(0))
            out.append(round_down(q))
        return np.array(out)
    return lower_bounds


def reaches(prop: VnnlibProperty, W: np.ndarray, bias: np.ndarray, x: np.ndarray) -> bool:
    """x lies in some case's box and y(x), exactly, satisfies one of its disjuncts (strict rows strictly; the tests'
    numbers are binary64, so the flags are the file's strictness)."""
    y = exact_y(W, bias, x)
    for case in prop.cases:
        if (case.input_lo <= x).all() and (x <= case.input_hi).all():
            for (A, b), strict in zip(case.disjuncts, case.strict):
                values = [sum((Fraction(A[k, j]) * y[j] for j in range(len(y))), Fraction(0))
                          for k in range(A.shape[0])]
                if all(v < b[k] if strict[k] else v <= b[k] for k, v in enumerate(values)):
                    return True
    return False


W0 = np.array([[2.0, -1.0, 0.5], [1.0, 1.0, -1.0]])  # 2 inputs, 3 outputs
B0 = np.array([0.5, 0.0, 0.0])
X0 = np.array([1.0, 0.0])  # y = (2.5, -1, 0.5): label 0 wins by 2


def test_decide_verifies_a_robust_box_on_a_linear_model(tmp_path):
    prop = read_vnnlib(write_vnnlib(tmp_path / "p.vnnlib", X0 - 0.3, X0 + 0.3, 0, 3))
    result = decide(prop, exact_lower_bounds(W0, B0))
    assert result.status == "verified" and result.vnncomp == "unsat"
    (case,) = result.cases
    assert case.verified and all(d.refuted and d.row == 0 for d in case.disjuncts)
    # the unsafe rows are y_0 - y_j <= 0: y_0 - y_1 = 3 x_0 + 0.5 >= 2.6 and y_0 - y_2 = 1.5 x_0 + 2 x_1 + 0.5
    # >= 0.95 on the box (1, 0) +- 0.3, so those minima are the slacks
    assert [d.slack for d in case.disjuncts] == pytest.approx([2.6, 0.95])
    assert json.loads(json.dumps(result.to_json()))["status"] == "verified"


def test_decide_is_unknown_then_falsified_on_a_non_robust_box(tmp_path):
    model = linear_model(W0, B0)
    prop = read_vnnlib(write_vnnlib(tmp_path / "p.vnnlib", X0 - 1.5, X0 + 1.5, 0, 3))
    bounds = exact_lower_bounds(W0, B0)
    unknown = decide(prop, bounds)
    assert unknown.status == "unknown" and unknown.witness is None and unknown.vnncomp == "unknown"
    assert not unknown.cases[0].verified
    result = decide(prop, bounds, functools.partial(pgd_counterexample, model), functools.partial(model_output, model))
    assert result.status == "falsified" and result.vnncomp == "sat"
    w = result.witness
    case = prop.cases[w.case]
    assert (case.input_lo <= w.x).all() and (w.x <= case.input_hi).all()
    assert reaches(prop, W0, B0, w.x)  # exact arithmetic: y_j >= y_0 for the disjunct's j
    j = w.disjunct + 1  # disjunct d is Y_{d+1} >= Y_0
    y = exact_y(W0, B0, w.x)
    assert y[j] >= y[0]
    data = json.loads(json.dumps(result.to_json()))
    assert data["vnncomp"] == "sat" and data["witness"]["x"] == w.x.tolist()


def test_never_verified_without_every_disjunct_refuted():
    everything_unsafe = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (<= 1 2))")
    assert decide(everything_unsafe, lambda lo, hi, A: np.full(A.shape[0], np.inf)).status == "unknown"
    prop = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (or (<= Y_0 Y_1) (<= Y_1 Y_0)))")
    nan_bounds = decide(prop, lambda lo, hi, A: np.array([np.nan, 5.0]))
    assert nan_bounds.status == "unknown" and [d.refuted for d in nan_bounds.cases[0].disjuncts] == [False, True]
    assert not nan_bounds.cases[0].verified and "1 disjuncts not refuted (first: case 0, disjunct 0)" in \
        nan_bounds.message
    assert nan_bounds.to_json()["cases"][0]["disjuncts"][0]["slack"] is None  # NaN is no JSON number
    tie = decide(prop, lambda lo, hi, A: np.zeros(2))  # lower bound == b on non-strict rows: not refuted
    assert tie.status == "unknown"
    strict = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (< Y_0 Y_1))")
    assert decide(strict, lambda lo, hi, A: np.zeros(1)).status == "verified"  # A y >= 0 refutes A y < 0


def test_decide_checks_every_counterexample():
    identity = lambda x: np.array([x[0], 1.0 - x[0]])  # noqa: E731  y_0 <= y_1 iff x <= 0.5
    prop = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (and (< Y_0 Y_1) (>= X_0 0.5)))")
    unsure = lambda lo, hi, A: np.full(A.shape[0], -np.inf)  # noqa: E731
    for guess in ([0.5], [0.2], [1.5], [np.nan]):  # on the strict row's tie, outside the case's box, NaN
        assert decide(prop, unsure, lambda *a, g=guess: np.array(g), identity).status == "unknown"
    assert decide(prop, unsure, lambda *a: None, identity).status == "unknown"
    both = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (and (<= Y_0 Y_1) (>= Y_0 0.875)))")
    assert decide(both, unsure, lambda *a: np.array([0.25]), identity).status == "unknown"  # only row 0 holds
    wide = read_vnnlib(header(1, 2) + box([0], [1]) + "(assert (< Y_0 Y_1))")
    found = decide(wide, unsure, lambda *a: np.array([0.25]), identity)
    assert found.status == "falsified" and found.witness.y.tolist() == [0.25, 0.75]
    with pytest.raises(InvalidInputError, match="must have 1 entries, got 2"):
        decide(wide, unsure, lambda *a: np.zeros(2), identity)
    with pytest.raises(InvalidInputError, match="forward must return 2 outputs"):
        decide(wide, unsure, lambda *a: np.zeros(1), lambda x: np.zeros(3))
    with pytest.raises(InvalidInputError, match="needs forward"):
        decide(wide, unsure, lambda *a: np.zeros(1))
    with pytest.raises(InvalidInputError, match=r"lower_bounds must return 1 bounds .*got shape \(2,\)"):
        decide(wide, lambda lo, hi, A: np.zeros(2))
    assert check_witness(wide.cases[0], 0, 0, [0.5], identity, 2) is None  # y_0 = y_1: not strictly below


def test_pgd_finds_a_counterexample_through_a_relu_network():
    rng = np.random.default_rng(3)
    model = Model((FeedForward(rng.normal(size=(3, 8)), rng.normal(size=8), "relu", rng.normal(size=(8, 2)), None),
                   Activation("relu")), input_shape=(3,))
    y0 = model_output(model, np.zeros(3))
    label = int(np.argmax(y0))
    text = header(3, 2) + box([-2] * 3, [2] * 3) + f"(assert (>= Y_{1 - label} (+ Y_{label} 0.1)))"
    prop = read_vnnlib(text)
    result = decide(prop, lambda lo, hi, A: np.full(A.shape[0], -np.inf),
                    functools.partial(pgd_counterexample, model, restarts=8), functools.partial(model_output, model))
    assert result.status == "falsified"
    y = model_output(model, result.witness.x)
    assert y[1 - label] >= y[label] + 0.1 and (np.abs(result.witness.x) <= 2).all()
    assert pgd_counterexample(model, -np.ones(3) * 1e-9, np.ones(3) * 1e-9, np.array([[1.0, 0.0]]),
                              np.array([-1e6])) is None  # unreachable: y_0 >= 0 after the ReLU


# ------------------------------------------------------------------------------------------------ properties

@st.composite
def linear_problems(draw):
    """A Linear model with 1-3 inputs and 2-4 outputs, entries multiples of 1/8 in [-2, 2], and a box."""
    n, m = draw(st.integers(1, 3)), draw(st.integers(2, 4))
    eighths = st.integers(-16, 16).map(lambda k: k / 8)
    W = np.array(draw(st.lists(eighths, min_size=n * m, max_size=n * m))).reshape(n, m)
    bias = np.array(draw(st.lists(eighths, min_size=m, max_size=m)))
    lo = np.array(draw(st.lists(eighths, min_size=n, max_size=n)))
    width = np.array(draw(st.lists(st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0, 3.0]), min_size=n, max_size=n)))
    return W, bias, lo, lo + width


def samples(lo: np.ndarray, hi: np.ndarray, seed: int) -> list[np.ndarray]:
    corners = [np.where(np.array(bits), hi, lo) for bits in itertools.product((0, 1), repeat=lo.size)]
    rng = np.random.default_rng(seed)
    return corners + list(rng.uniform(lo, hi, size=(16, lo.size)))


@given(linear_problems(), st.integers(0, 3), st.integers(0, 2**16))
def test_robustness_is_never_verified_when_a_sample_reaches_the_unsafe_set(tmp_path_factory, problem, label, seed):
    W, bias, lo, hi = problem
    label %= W.shape[1]
    path = write_vnnlib(tmp_path_factory.mktemp("h") / "p.vnnlib", lo, hi, label, W.shape[1])
    prop = read_vnnlib(path)
    model = linear_model(W, bias)
    result = decide(prop, exact_lower_bounds(W, bias), functools.partial(pgd_counterexample, model, steps=20),
                    functools.partial(model_output, model))
    if any(reaches(prop, W, bias, x) for x in samples(lo, hi, seed)):
        assert result.status != "verified"
    if result.status == "falsified":
        assert reaches(prop, W, bias, result.witness.x)


@st.composite
def linear_texts(draw):
    """Properties in VNNLIB text: 1-3 boxes in an or, and an or of 1-3 conjunctions of integer-coefficient rows."""
    def row(m: int) -> str:
        coeffs = draw(st.lists(st.integers(-2, 2), min_size=m, max_size=m))
        lhs = "(+ " + " ".join(f"(* {c} Y_{j})" for j, c in enumerate(coeffs)) + ")"
        return f"({draw(st.sampled_from(['<=', '>=', '<', '>']))} {lhs} {draw(st.integers(-3, 3))})"
    W, bias, _, _ = draw(linear_problems())
    n, m = W.shape
    boxes = []
    for _ in range(draw(st.integers(1, 3))):
        lo = draw(st.lists(st.integers(-8, 8), min_size=n, max_size=n))
        width = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
        boxes.append("(and " + " ".join(f"(>= X_{i} {a / 4}) (<= X_{i} {(a + w) / 4})"
                                        for i, (a, w) in enumerate(zip(lo, width))) + ")")
    disjuncts = ["(and " + " ".join(row(m) for _ in range(draw(st.integers(1, 2)))) + ")"
                 for _ in range(draw(st.integers(1, 3)))]
    text = header(n, m) + f"(assert (or {' '.join(boxes)}))\n(assert (or {' '.join(disjuncts)}))\n"
    return W, bias, text


@given(linear_texts(), st.integers(0, 2**16))
def test_general_properties_are_never_verified_when_a_sample_reaches(problem, seed):
    W, bias, text = problem
    prop = read_vnnlib(text)
    result = decide(prop, exact_lower_bounds(W, bias))
    reached = any(reaches(prop, W, bias, x) for case in prop.cases
                  for x in samples(case.input_lo, case.input_hi, seed))
    if reached:
        assert result.status != "verified", text
    assert result.status != "falsified"
    for case, case_result in zip(prop.cases, result.cases):  # the reported row and slack are the refuting ones
        for (A, b), strict, d in zip(case.disjuncts, case.strict, case_result.disjuncts):
            if d.refuted:
                lb = exact_lower_bounds(W, bias)(case.input_lo, case.input_hi, A[d.row:d.row + 1])[0]
                assert d.slack == lb - b[d.row] and (lb > b[d.row] or (strict[d.row] and lb == b[d.row]))
