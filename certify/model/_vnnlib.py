"""VNNLIB properties (VNN-COMP): read the SMT-LIB-like text into input boxes and linear unsafe sets, and decide a
property given a sound bounding function.

A property declares inputs X_0 .. X_{n-1} and outputs Y_0 .. Y_{m-1} (x = vec(input), y = vec(model(x)), both
row-major) and asserts constraints whose conjunction describes a counterexample. It is read as a disjunction of
cases, each an input box with a disjunction of polyhedra on the output:

.. math::

    \\text{unsafe} = \\bigvee_c \\Big( x \\in [l_c, u_c] \\wedge \\bigvee_d A_{cd}\\, y(x) \\le b_{cd} \\Big),

and the property holds (VNN-COMP "unsat") when no x reaches it. `decide` proves that by refuting every disjunct:

.. math::

    \\forall c, d\\ \\exists k: \\quad \\underline{m}_k \\le \\min_{x \\in [l_c, u_c]} (A_{cd}\\, y(x))_k
    \\quad\\text{and}\\quad \\underline{m}_k > (b_{cd})_k,

with m a sound lower bound from the caller (then no x of the box has A y <= b, as row k fails; for a strict row,
A y < b, m_k >= b_k suffices).

Supported subset (anything else raises `InvalidInputError` naming the line and the expression):

- commands: ``(declare-const X_i Real)``, ``(declare-const Y_j Real)`` (also ``declare-fun NAME () Real``),
  ``(assert F)``; ``set-logic``, ``set-info``, ``set-option``, ``check-sat``, ``get-model`` and ``exit`` are
  ignored; ``;`` starts a comment. Inputs and outputs must be numbered 0 .. n-1 without gaps.
- formulas F: ``(and F ...)``, ``(or F ...)`` (nested freely; the asserts are conjoined, and the whole is expanded
  to a disjunction of conjunctions, the cross product of the ors, at most `MAX_TERMS` terms), and comparisons
  ``(<= s t ...)``, ``(>= ...)``, ``(< ...)``, ``(> ...)`` (chained pairwise) and ``(= s t ...)``.
- terms s, t: numerals (``1``, ``-0.5``, ``.5``, ``1e-3``), X_i, Y_j, ``(+ s ...)``, ``(- s)``, ``(- s t ...)``,
  ``(* s ...)`` with at most one non-constant factor, ``(/ s c ...)`` with constant non-zero divisors.
- each comparison involves only outputs (a row of A y <= b: Y against Y or against constants), only one input
  (a bound on X_i), or only constants (true or false). A comparison mixing inputs and outputs, or linking two
  inputs, is not supported; every input must end with a finite lower and upper bound in every case.

Numbers and soundness. Numerals are read exactly (as fractions) and combined exactly; the float64 box is rounded
outward and b upward, so the float sets contain the file's whenever A's coefficients are binary64 numbers
(integers, halves, ...; the usual robustness properties have only 1 and -1; other coefficients are rounded to
nearest, the one approximation). Strict inequalities are read as non-strict: the non-strict unsafe set contains the strict one, so
proving it empty is stronger. A bound that is strict or was rounded is flagged (`Case.open_lo`, `open_hi`,
`strict`), and a counterexample is searched for and checked inside the float64 sets that lie within the file's.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import math
import os
import re
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import torch

from .._errors import InvalidInputError
from ._blocks import Model
from ._forward import forward

MAX_TERMS = 100_000  # conjunctions after expanding the ors (the cross product can explode)
IGNORED = ("set-logic", "set-info", "set-option", "check-sat", "get-model", "exit")
COMPARISONS = ("<=", ">=", "<", ">", "=")
_NUMERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_NAME = re.compile(r"([XY])_(\d+)")
_TOKEN = re.compile(r";[^\n]*|\(|\)|[^\s();]+")

LowerBounds = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
Search = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], "np.ndarray | None"]
Forward = Callable[[np.ndarray], np.ndarray]


# ---------------------------------------------------------------------------------------------------- the property

def _flags(value: np.ndarray | None, n: int, name: str) -> np.ndarray:
    flags = np.zeros(n, dtype=bool) if value is None else np.array(value, dtype=bool).reshape(-1)
    if flags.shape != (n,):
        raise InvalidInputError(f"{name} must have {n} entries, got shape {np.shape(value)}")
    flags.setflags(write=False)
    return flags


def _frozen(value: Any, name: str, shape: tuple) -> np.ndarray:
    array = np.array(value, dtype=np.float64)
    if array.shape != shape or np.isnan(array).any():
        raise InvalidInputError(f"{name} must have shape {shape} without NaN, got {array.shape}")
    array.setflags(write=False)
    return array


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """One input box [input_lo, input_hi] (n_in,) and the unsafe output sets OR_d {y : A_d y <= b_d}
    (``disjuncts``: pairs A_d (k_d, n_out), b_d (k_d,); k_d = 0 means every output is unsafe).

    The float64 sets contain the file's (module docstring). ``open_lo``/``open_hi`` (n_in,) and ``strict`` (one
    (k_d,) array per disjunct) are True where the file's bound is strict or was rounded: the file's set then lies
    in x > input_lo, x < input_hi, (A_d y)_k < (b_d)_k. They default to all False (closed, exact).
    """

    input_lo: np.ndarray
    input_hi: np.ndarray
    disjuncts: tuple[tuple[np.ndarray, np.ndarray], ...]
    open_lo: np.ndarray | None = None
    open_hi: np.ndarray | None = None
    strict: tuple[np.ndarray, ...] | None = None

    def __post_init__(self) -> None:
        lo = np.array(self.input_lo, dtype=np.float64).reshape(-1)
        n = lo.shape[0]
        object.__setattr__(self, "input_lo", _frozen(lo, "input_lo", (n,)))
        object.__setattr__(self, "input_hi", _frozen(np.reshape(self.input_hi, -1), "input_hi", (n,)))
        if not (np.isfinite(self.input_lo).all() and np.isfinite(self.input_hi).all()):
            raise InvalidInputError("every input needs a finite lower and upper bound")
        if (self.input_lo > self.input_hi).any():
            raise InvalidInputError(f"input_lo > input_hi at X_{int(np.argmax(self.input_lo > self.input_hi))}")
        disjuncts = []
        for A, b in self.disjuncts:
            A = np.array(A, dtype=np.float64)
            if A.ndim != 2:
                raise InvalidInputError(f"a disjunct's A must be a matrix, got shape {A.shape}")
            disjuncts.append((_frozen(A, "A", A.shape), _frozen(np.reshape(b, -1), "b", (A.shape[0],))))
        if len({A.shape[1] for A, _ in disjuncts}) > 1:
            raise InvalidInputError(f"disjuncts have different output counts {[A.shape[1] for A, _ in disjuncts]}")
        object.__setattr__(self, "disjuncts", tuple(disjuncts))
        object.__setattr__(self, "open_lo", _flags(self.open_lo, n, "open_lo"))
        object.__setattr__(self, "open_hi", _flags(self.open_hi, n, "open_hi"))
        strict = (None,) * len(disjuncts) if self.strict is None else tuple(self.strict)
        if len(strict) != len(disjuncts):
            raise InvalidInputError(f"strict has {len(strict)} entries for {len(disjuncts)} disjuncts")
        object.__setattr__(self, "strict", tuple(_flags(s, A.shape[0], "strict") for s, (A, _) in
                                                 zip(strict, disjuncts)))

    def search_box(self) -> tuple[np.ndarray, np.ndarray]:
        """The closed float64 box inside the file's: open ends moved one ulp inwards (empty if lo > hi)."""
        return (np.where(self.open_lo, np.nextafter(self.input_lo, np.inf), self.input_lo),
                np.where(self.open_hi, np.nextafter(self.input_hi, -np.inf), self.input_hi))

    def search_rhs(self, d: int) -> np.ndarray:
        """b_d with strict rows moved one ulp down: float A y <= this implies the file's row (exact A y)."""
        b = self.disjuncts[d][1]
        return np.where(self.strict[d], np.nextafter(b, -np.inf), b)


@dataclasses.dataclass(frozen=True, eq=False)
class VnnlibProperty:
    """unsafe = OR over ``cases`` (module docstring); the property holds when no input reaches it."""

    cases: tuple[Case, ...]
    n_inputs: int
    n_outputs: int


# ---------------------------------------------------------------------------------------------- s-expressions

@dataclasses.dataclass(frozen=True)
class _Node:
    """An atom (``value`` a str) or a list (``value`` a tuple of nodes), and the line it starts on."""

    value: str | tuple
    line: int


def _show(node: _Node, limit: int = 120) -> str:
    def text(n: _Node) -> str:
        return n.value if isinstance(n.value, str) else "(" + " ".join(text(c) for c in n.value) + ")"
    out = text(node)
    return out if len(out) <= limit else out[:limit - 3] + "..."


def _fail(where: str, node: _Node, message: str) -> InvalidInputError:
    return InvalidInputError(f"{where} line {node.line}: {message}: {_show(node)}")


def parse_sexpressions(text: str, where: str = "VNNLIB text") -> list[_Node]:
    """The top-level lists of ``text`` (``;`` comments dropped); unbalanced parentheses or a top-level atom raise."""
    stack: list[tuple[int, list]] = []
    top: list[_Node] = []
    line, pos = 1, 0
    for match in _TOKEN.finditer(text):
        line += text.count("\n", pos, match.start())
        pos = match.start()
        token = match.group()
        if token.startswith(";"):
            continue
        if token == "(":
            stack.append((line, []))
        elif token == ")":
            if not stack:
                raise InvalidInputError(f"{where} line {line}: unexpected ')'")
            start, items = stack.pop()
            node = _Node(tuple(items), start)
            (stack[-1][1] if stack else top).append(node)
        elif stack:
            stack[-1][1].append(_Node(token, line))
        else:
            raise InvalidInputError(f"{where} line {line}: expected '(' at the top level, got {token!r}")
    if stack:
        raise InvalidInputError(f"{where} line {stack[-1][0]}: '(' is never closed")
    return top


# ------------------------------------------------------------------------------------------- linear constraints

Var = tuple[str, int]  # ("X", i) or ("Y", j)


@dataclasses.dataclass(frozen=True)
class _Constraint:
    """sum_v coeffs[v] v + const <= 0 (< 0 when strict), exact; ``node`` is the comparison it came from."""

    coeffs: dict
    const: Fraction
    strict: bool
    node: _Node


def _head(node: _Node) -> str | None:
    if isinstance(node.value, tuple) and node.value and isinstance(node.value[0].value, str):
        return node.value[0].value
    return None


def _linear(node: _Node, names: dict[str, Var], where: str) -> tuple[dict, Fraction]:
    """The term as (coefficients {var: q}, constant q), exactly."""
    if isinstance(node.value, str):
        if _NUMERAL.fullmatch(node.value):
            return {}, Fraction(node.value)
        if node.value in names:
            return {names[node.value]: Fraction(1)}, Fraction(0)
        raise _fail(where, node, f"unknown symbol {node.value!r}")
    op, args = _head(node), [_linear(arg, names, where) for arg in node.value[1:]]
    if op not in ("+", "-", "*", "/") or not args:
        raise _fail(where, node, "unsupported term (expected a numeral, X_i, Y_j, +, -, * or /)")
    if op == "+" or op == "-":
        if op == "+":
            signs = [1] * len(args)
        else:
            signs = [1] + [-1] * (len(args) - 1) if len(args) > 1 else [-1]
        coeffs: dict = {}
        for sign, (c, k) in zip(signs, args):
            for var, q in c.items():
                coeffs[var] = coeffs.get(var, 0) + sign * q
        return coeffs, sum((sign * k for sign, (_, k) in zip(signs, args)), Fraction(0))
    if op == "/":
        if len(args) < 2 or any(c for c, _ in args[1:]) or any(k == 0 for _, k in args[1:]):
            raise _fail(where, node, "division needs constant non-zero divisors")
        scale = 1 / math.prod(k for _, k in args[1:])
        return {var: q * scale for var, q in args[0][0].items()}, args[0][1] * scale
    variable = [i for i, (c, _) in enumerate(args) if c]
    if len(variable) > 1:
        raise _fail(where, node, "nonlinear term (a product of two non-constant factors)")
    scale = math.prod((k for i, (_, k) in enumerate(args) if i not in variable), start=Fraction(1))
    c, k = args[variable[0]] if variable else ({}, Fraction(1))
    return {var: q * scale for var, q in c.items()}, k * scale


def _comparison(node: _Node, names: dict[str, Var], where: str) -> list[_Constraint]:
    """(op t_1 ... t_r) as the pairwise constraints t_i - t_{i+1} <= 0 (op <=, <), >= 0 (>=, >), both (=)."""
    op, terms = _head(node), [_linear(arg, names, where) for arg in node.value[1:]]
    if len(terms) < 2:
        raise _fail(where, node, f"{op} needs at least two terms")
    out = []
    for (c1, k1), (c2, k2) in zip(terms, terms[1:]):
        diff = {var: c1.get(var, 0) - c2.get(var, 0) for var in {**c1, **c2}}
        neg = {var: -q for var, q in diff.items()}
        strict = op in ("<", ">")
        if op in ("<=", "<", "="):
            out.append(_Constraint(diff, k1 - k2, strict, node))
        if op in (">=", ">", "="):
            out.append(_Constraint(neg, k2 - k1, strict, node))
    return out


def _conjoin(dnfs: list[list[list]], where: str, node: _Node | None) -> list[list]:
    """AND of formulas in disjunctive normal form: the cross product of their terms (one-term formulas shared);
    ``node`` is the and (None: the conjunction of the asserts)."""
    if any(not dnf for dnf in dnfs):
        return []
    common = [c for dnf in dnfs if len(dnf) == 1 for c in dnf[0]]
    multi = [dnf for dnf in dnfs if len(dnf) > 1]
    if math.prod(len(dnf) for dnf in multi) > MAX_TERMS:
        message = f"ors expand to more than {MAX_TERMS} terms"
        if node is None:
            raise InvalidInputError(f"{where}: the asserts' {message}")
        raise _fail(where, node, "the " + message)
    return [common + [c for term in terms for c in term] for terms in itertools.product(*multi)]


def _dnf(node: _Node, names: dict[str, Var], where: str) -> list[list[_Constraint]]:
    """The formula as a disjunction (outer list) of conjunctions of constraints."""
    op = _head(node)
    if op == "and":
        return _conjoin([_dnf(arg, names, where) for arg in node.value[1:]], where, node)
    if op == "or":
        terms = [term for arg in node.value[1:] for term in _dnf(arg, names, where)]
        if len(terms) > MAX_TERMS:
            raise _fail(where, node, f"the ors expand to more than {MAX_TERMS} terms")
        return terms
    if op in COMPARISONS:
        return [_comparison(node, names, where)]
    raise _fail(where, node, "unsupported formula (expected and, or, <=, >=, <, >, =)")


# ------------------------------------------------------------------------------------- terms -> float64 cases

def _float(q: Fraction, direction: int, where: str, node: _Node) -> tuple[float, bool]:
    """q rounded to nearest (direction 0), up (1) or down (-1), and whether it was inexact."""
    try:
        f = float(q)
    except OverflowError:
        raise _fail(where, node, "a number is out of the float64 range") from None
    exact = Fraction(f) == q
    if not exact and direction and (Fraction(f) < q) == (direction > 0):
        f = float(np.nextafter(f, math.inf * direction))
    if not math.isfinite(f):
        raise _fail(where, node, "a number is out of the float64 range")
    return f, not exact


def _term_case(term: list[_Constraint], n_in: int, n_out: int, where: str, index: int):
    """One conjunction as (lo, hi, open_lo, open_hi, A, b, strict), or None when it is unsatisfiable."""
    lo: list = [None] * n_in  # (bound q, open) per input
    hi: list = [None] * n_in
    rows, rhs, strict = [], [], []
    for con in term:
        coeffs = {var: q for var, q in con.coeffs.items() if q != 0}
        kinds = {kind for kind, _ in coeffs}
        if not coeffs:
            if con.const > 0 or (con.strict and con.const == 0):
                return None  # a false constant comparison: the term is empty
            continue
        if kinds == {"X", "Y"}:
            raise _fail(where, con.node, "a comparison mixing inputs X and outputs Y is not supported")
        if kinds == {"X"}:
            if len(coeffs) > 1:
                raise _fail(where, con.node, "an input constraint must bound one X_i (a box); this links "
                                             + ", ".join(f"X_{i}" for _, i in sorted(coeffs)))
            ((_, i), a), = coeffs.items()
            bound, table = -con.const / a, (hi if a > 0 else lo)  # a x + const <= 0
            old = table[i]
            if old is None or (bound < old[0] if a > 0 else bound > old[0]):
                table[i] = (bound, con.strict, con.node)
            elif bound == old[0]:
                table[i] = (bound, old[1] or con.strict, old[2])
            continue
        row = np.zeros(n_out)
        for (_, j), q in coeffs.items():
            row[j] = _float(q, 0, where, con.node)[0]
        b, inexact = _float(-con.const, 1, where, con.node)
        rows.append(row), rhs.append(b), strict.append(con.strict or inexact)
    for i in range(n_in):
        for table, side in ((lo, "lower"), (hi, "upper")):
            if table[i] is None:
                raise InvalidInputError(f"{where}: X_{i} has no {side} bound (in term {index} of the property "
                                        "after expanding its ors); VNNLIB inputs must lie in a box")
    if any(l[0] > h[0] or (l[0] == h[0] and (l[1] or h[1])) for l, h in zip(lo, hi)):
        return None  # an empty box
    lo_f = [_float(q, -1, where, node) for q, _, node in lo]
    hi_f = [_float(q, 1, where, node) for q, _, node in hi]
    return (np.array([f for f, _ in lo_f]), np.array([f for f, _ in hi_f]),
            np.array([s or x for (_, s, _), (_, x) in zip(lo, lo_f)]),
            np.array([s or x for (_, s, _), (_, x) in zip(hi, hi_f)]),
            np.array(rows).reshape(len(rows), n_out), np.array(rhs), np.array(strict, dtype=bool))


def _declared(kind: str, found: dict[int, _Node], given: int | None, where: str) -> int:
    n = len(found)
    missing = sorted(set(range(n)) - set(found))
    if missing:
        raise InvalidInputError(f"{where}: the declared {kind} are not numbered 0 .. {n - 1}: {kind}_{missing[0]} "
                                "is missing")
    if n == 0:
        raise InvalidInputError(f"{where}: no {kind}_i is declared")
    if given is not None and given != n:
        label = "inputs" if kind == "X" else "outputs"
        raise InvalidInputError(f"{where}: declares {n} {label} {kind}_0 .. {kind}_{n - 1}, expected {given}")
    return n


def _source(path_or_text: str | os.PathLike) -> tuple[str, str]:
    """(text, where): a str holding '(' is the text itself, anything else a path (``.gz`` is decompressed)."""
    if isinstance(path_or_text, str) and "(" in path_or_text:
        return path_or_text, "VNNLIB text"
    if not isinstance(path_or_text, (str, os.PathLike)):
        raise InvalidInputError(f"expected a VNNLIB path or text, got {type(path_or_text).__name__}")
    path = os.fspath(path_or_text)
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        return raw.decode("utf-8"), path
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"cannot read the VNNLIB file {path!r}: {error}") from None


def read_vnnlib(path_or_text: str | os.PathLike, n_inputs: int | None = None,
                n_outputs: int | None = None) -> VnnlibProperty:
    """The property in a VNNLIB file (or text) as boxes and unsafe polyhedra (module docstring for the subset).

    Args:
        path_or_text: a path (``.gz`` allowed), or the text itself (a str holding '(').
        n_inputs, n_outputs: the model's sizes; the declared X_i and Y_j must match them when given.

    Returns:
        `VnnlibProperty`: the conjoined asserts expanded to terms, grouped by input box into `Case`s (terms with
        the same box become disjuncts of one case; unsatisfiable terms are dropped).
    """
    text, where = _source(path_or_text)
    commands = parse_sexpressions(text, where)
    names: dict[str, Var] = {}
    found: dict[str, dict[int, _Node]] = {"X": {}, "Y": {}}
    asserts = []
    for node in commands:
        op, args = _head(node), node.value[1:]
        if op in ("declare-const", "declare-fun"):
            sort = args[-1].value if args else None
            params_ok = op == "declare-const" and len(args) == 2 or (
                op == "declare-fun" and len(args) == 3 and args[1].value == ())
            if not params_ok or not isinstance(args[0].value, str):
                raise _fail(where, node, "malformed declaration")
            match = _NAME.fullmatch(args[0].value)
            if match is None:
                raise _fail(where, node, "VNNLIB names inputs X_i and outputs Y_j; unsupported name "
                                         f"{args[0].value!r}")
            if sort != "Real":
                raise _fail(where, node, f"only Real variables are supported, got sort {_show(args[-1])}")
            kind, i = match.group(1), int(match.group(2))
            if i in found[kind]:
                raise _fail(where, node, f"{args[0].value} is declared twice")
            found[kind][i] = node
            names[args[0].value] = (kind, i)
        elif op == "assert":
            if len(args) != 1:
                raise _fail(where, node, "assert takes one formula")
            asserts.append(args[0])
        elif op not in IGNORED:
            raise _fail(where, node, "unsupported command (expected declare-const or assert)")
    n_in = _declared("X", found["X"], n_inputs, where)
    n_out = _declared("Y", found["Y"], n_outputs, where)
    terms = _conjoin([_dnf(node, names, where) for node in asserts], where, None)
    groups: dict[bytes, list] = {}
    for index, term in enumerate(terms):
        case = _term_case(term, n_in, n_out, where, index)
        if case is None:
            continue
        lo, hi, open_lo, open_hi, A, b, strict = case
        key = b"".join(a.tobytes() for a in (lo, hi, open_lo, open_hi))
        groups.setdefault(key, [lo, hi, open_lo, open_hi, [], []])
        groups[key][4].append((A, b))
        groups[key][5].append(strict)
    if not groups:
        raise InvalidInputError(f"{where}: every term of the property is unsatisfiable (an empty input box or a "
                                "false constant comparison): nothing to verify")
    cases = tuple(Case(lo, hi, tuple(d), open_lo, open_hi, tuple(s)) for lo, hi, open_lo, open_hi, d, s in
                  groups.values())
    return VnnlibProperty(cases, n_in, n_out)


def write_vnnlib(path: str | os.PathLike, lo: Any, hi: Any, label: int, n_outputs: int) -> str:
    """Write the local-robustness property: inputs in [lo, hi] (flattened), unsafe when some Y_j >= Y_label (j !=
    label). Bounds are written as their exact decimal expansions (every binary64 number has one; the shortest
    round-trip decimal would name a different real, which the reader would then round outward), so `read_vnnlib`
    returns this box exactly, closed. Returns the path."""
    lo, hi = np.asarray(lo, dtype=np.float64).reshape(-1), np.asarray(hi, dtype=np.float64).reshape(-1)
    if lo.shape != hi.shape or lo.size == 0:
        raise InvalidInputError(f"lo {lo.shape} and hi {hi.shape} must be non-empty with the same size")
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()) or (lo > hi).any():
        raise InvalidInputError("the box needs finite bounds with lo <= hi")
    if not (isinstance(n_outputs, (int, np.integer)) and n_outputs >= 2):
        raise InvalidInputError(f"n_outputs must be an integer >= 2, got {n_outputs!r}")
    if not (isinstance(label, (int, np.integer)) and 0 <= label < n_outputs):
        raise InvalidInputError(f"label must be an integer in [0, {n_outputs}), got {label!r}")
    lines = [f"; local robustness: every input in the box keeps Y_{label} strictly largest"]
    lines += [f"(declare-const X_{i} Real)" for i in range(lo.size)]
    lines += [f"(declare-const Y_{j} Real)" for j in range(n_outputs)]
    for i, (a, z) in enumerate(zip(lo, hi)):
        lines += [f"(assert (>= X_{i} {Decimal(float(a))}))", f"(assert (<= X_{i} {Decimal(float(z))}))"]
    unsafe = " ".join(f"(and (>= Y_{j} Y_{label}))" for j in range(n_outputs) if j != label)
    lines.append(f"(assert (or {unsafe}))")
    try:
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
    except OSError as error:
        raise InvalidInputError(f"cannot write the VNNLIB file {os.fspath(path)!r}: {error}") from None
    return os.fspath(path)


# -------------------------------------------------------------------------------------------------- deciding

@dataclasses.dataclass(frozen=True)
class DisjunctResult:
    """Refuted when some row k has lower bound m_k > b_k (>= for a strict row); ``row`` is the row with the largest
    slack m_k - b_k, ``slack`` that value (positive when refuted; None when the disjunct has no rows)."""

    refuted: bool
    row: int | None
    slack: float | None


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """A case is verified when every one of its disjuncts is refuted."""

    verified: bool
    disjuncts: tuple[DisjunctResult, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Witness:
    """A counterexample: input x (n_in,) in case ``case``'s box with A_d y(x) <= b_d, y its output."""

    case: int
    disjunct: int
    x: np.ndarray
    y: np.ndarray


@dataclasses.dataclass(frozen=True)
class VnnlibResult:
    """``status``: "verified" (every disjunct of every case refuted), "falsified" (``witness`` checked), or
    "unknown"; per case and disjunct how it was refuted; ``message`` says why."""

    status: str
    message: str
    cases: tuple[CaseResult, ...]
    seconds: float
    witness: Witness | None = None

    @property
    def vnncomp(self) -> str:
        """The VNN-COMP answer: "unsat" (property holds), "sat" (counterexample) or "unknown"."""
        return {"verified": "unsat", "falsified": "sat"}.get(self.status, "unknown")

    def to_json(self) -> dict[str, Any]:
        def num(v: float | None) -> float | None:
            return v if v is not None and math.isfinite(v) else None
        witness = None if self.witness is None else {
            "case": self.witness.case, "disjunct": self.witness.disjunct, "x": self.witness.x.tolist(),
            "y": self.witness.y.tolist()}
        return {"status": self.status, "vnncomp": self.vnncomp, "message": self.message, "seconds": self.seconds,
                "cases": [{"verified": c.verified, "disjuncts": [{"refuted": d.refuted, "row": d.row,
                                                                  "slack": num(d.slack)} for d in c.disjuncts]}
                          for c in self.cases],
                "witness": witness}


def _exact_rows(A: np.ndarray, y: np.ndarray) -> list[Fraction]:
    """A y in exact arithmetic on the float entries (over the non-zeros of A)."""
    return [sum((Fraction(float(A[k, j])) * Fraction(float(y[j])) for j in np.flatnonzero(A[k])), Fraction(0))
            for k in range(A.shape[0])]


def check_witness(case: Case, c: int, d: int, x: Any, forward: Forward, n_outputs: int) -> Witness | None:
    """Witness(c, d, x, y) if x (n_in,) lies in ``case.search_box()`` and y = forward(x) (float64) has
    A_d y <= ``case.search_rhs(d)`` (exactly, on the float y): then x is a counterexample of the file's property.
    Else None."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    lo, hi = case.search_box()
    if x.shape != lo.shape:
        raise InvalidInputError(f"a counterexample must have {lo.size} entries, got {x.size}")
    if not (np.isfinite(x).all() and (lo <= x).all() and (x <= hi).all()):
        return None
    y = np.asarray(forward(x), dtype=np.float64).reshape(-1)
    if y.shape != (n_outputs,):
        raise InvalidInputError(f"forward must return {n_outputs} outputs, got shape {y.shape}")
    if not np.isfinite(y).all():
        return None
    A, rhs = case.disjuncts[d][0], case.search_rhs(d)
    if all(v <= Fraction(float(r)) for v, r in zip(_exact_rows(A, y), rhs)):
        x.setflags(write=False), y.setflags(write=False)
        return Witness(c, d, x, y)
    return None


def _refute(lb: np.ndarray, b: np.ndarray, strict: np.ndarray) -> DisjunctResult:
    if b.size == 0:
        return DisjunctResult(False, None, None)
    slack = lb - b
    refuting = (slack > 0) | (strict & (slack >= 0))  # NaN compares False: never refutes
    order = np.where(np.isnan(slack), -np.inf, slack)
    row = int(np.argmax(np.where(refuting, order, -np.inf))) if refuting.any() else int(np.argmax(order))
    return DisjunctResult(bool(refuting.any()), row, float(slack[row]))


def decide(prop: VnnlibProperty, lower_bounds: LowerBounds, counterexample: Search | None = None,
           forward: Forward | None = None) -> VnnlibResult:
    """Decide ``prop``: "verified" when every disjunct of every case is refuted by ``lower_bounds`` (module
    docstring), else "falsified" when ``counterexample`` finds a point that `check_witness` accepts, else "unknown".

    Args:
        prop: a `VnnlibProperty`.
        lower_bounds: ``(x_lo, x_hi, A) -> m`` with m_k <= min over the box of (A y(x))_k, a SOUND bound (it is
            trusted; verified is only as sound as it). Called once per case, on its outward-rounded box
            (`Case.input_lo`, `input_hi`), with the rows of all its disjuncts stacked; NaN never refutes.
        counterexample: optional search ``(x_lo, x_hi, A, b) -> x or None`` over the closed box of
            `Case.search_box` for A y(x) <= b (b = `Case.search_rhs`), tried on each disjunct not refuted.
        forward: ``x (n_in,) -> y (n_out,)`` in float64, the model itself; required with ``counterexample``.
    """
    if counterexample is not None and forward is None:
        raise InvalidInputError("decide needs forward (the model) to check a counterexample")
    start = time.perf_counter()
    results = []
    for case in prop.cases:
        A = np.concatenate([A for A, _ in case.disjuncts]) if case.disjuncts else np.zeros((0, prop.n_outputs))
        lb = np.zeros(0)
        if A.shape[0]:
            lb = np.asarray(lower_bounds(case.input_lo.copy(), case.input_hi.copy(), A.copy()), dtype=np.float64)
            if lb.shape != (A.shape[0],):
                raise InvalidInputError(f"lower_bounds must return {A.shape[0]} bounds (one per row of A), got "
                                        f"shape {lb.shape}")
        splits = np.cumsum([a.shape[0] for a, _ in case.disjuncts])[:-1]
        parts = np.split(lb, splits) if case.disjuncts else []
        disjuncts = tuple(_refute(m, b, s) for m, (_, b), s in zip(parts, case.disjuncts, case.strict))
        results.append(CaseResult(all(d.refuted for d in disjuncts), disjuncts))
    open_ = [(c, d) for c, r in enumerate(results) for d, dr in enumerate(r.disjuncts) if not dr.refuted]
    if not open_:
        total = sum(len(r.disjuncts) for r in results)
        return VnnlibResult("verified", f"all {total} disjuncts of {len(results)} cases refuted", tuple(results),
                            time.perf_counter() - start)
    for c, d in open_ if counterexample is not None else ():
        case = prop.cases[c]
        lo, hi = case.search_box()
        if (lo > hi).any():
            continue
        x = counterexample(lo.copy(), hi.copy(), case.disjuncts[d][0].copy(), case.search_rhs(d))
        witness = None if x is None else check_witness(case, c, d, x, forward, prop.n_outputs)
        if witness is not None:
            return VnnlibResult("falsified", f"counterexample in case {c}, disjunct {d}", tuple(results),
                                time.perf_counter() - start, witness)
    c, d = open_[0]
    return VnnlibResult("unknown", f"{len(open_)} disjuncts not refuted (first: case {c}, disjunct {d}) and no "
                        "counterexample found", tuple(results), time.perf_counter() - start)


# ----------------------------------------------------------------------------------------------- the search

def model_output(model: Model, x: Any) -> np.ndarray:
    """y = vec(model(x)) in float64 (n_out,), x the flattened input (VNNLIB's X and Y orders, row-major)."""
    x = np.array(x, dtype=np.float64).reshape(model.input_shape)  # a writable copy (torch warns on read-only)
    with torch.no_grad():
        return forward(model, x).numpy().reshape(-1)


def pgd_counterexample(model: Model, x_lo: np.ndarray, x_hi: np.ndarray, A: np.ndarray, b: np.ndarray, *,
                       restarts: int = 4, steps: int = 60, seed: int = 0) -> np.ndarray | None:
    """Projected (sign-)gradient descent on g(x) = max_k (A y(x) - b)_k over the box, float64, from the box's
    centre and ``restarts - 1`` uniform random points (one batch); step sizes decay from 0.2 to 0.002 of the box
    width. Returns a point with g <= 0 in float64 (the best one seen), or None. A heuristic: None proves nothing.
    """
    n = int(np.prod(model.input_shape))
    lo = torch.tensor(np.asarray(x_lo, dtype=np.float64).reshape(-1))
    hi = torch.tensor(np.asarray(x_hi, dtype=np.float64).reshape(-1))
    At = torch.tensor(np.asarray(A, dtype=np.float64))
    bt = torch.tensor(np.asarray(b, dtype=np.float64).reshape(-1))
    if lo.shape != (n,) or hi.shape != (n,) or At.ndim != 2 or bt.shape != (At.shape[0],):
        raise InvalidInputError(f"pgd_counterexample: box of {n} inputs and A (k, n_out), b (k,) expected, got "
                                f"{tuple(lo.shape)}, {tuple(hi.shape)}, {tuple(At.shape)}, {tuple(bt.shape)}")
    if (lo > hi).any():
        return None
    if At.shape[0] == 0:
        return ((lo + hi) / 2).clamp(lo, hi).numpy()
    generator = torch.Generator().manual_seed(seed)
    width = hi - lo
    x = torch.cat([((lo + hi) / 2)[None], lo + width * torch.rand(max(restarts - 1, 0), n, generator=generator,
                                                                  dtype=torch.float64)]).clamp(lo, hi)
    for t in range(steps + 1):
        x.requires_grad_(True)
        y = forward(model, x.reshape(-1, *model.input_shape)).reshape(x.shape[0], -1)
        if y.shape[1] != At.shape[1]:
            raise InvalidInputError(f"A has {At.shape[1]} columns, the model has {y.shape[1]} outputs")
        g = (y @ At.T - bt).amax(dim=1)
        best = int(torch.argmin(g))
        if g[best] <= 0:
            return x[best].detach().numpy().copy()
        if t == steps:
            return None
        (grad,) = torch.autograd.grad(g.sum(), x)
        step = width * 0.2 * (0.01 ** (t / max(steps - 1, 1)))
        x = torch.minimum(torch.maximum(x.detach() - step * grad.sign(), lo), hi)
    return None
