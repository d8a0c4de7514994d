"""Claim: the slope remainder bound behind the `streamed` (and `slopes`) local methods (MATH.md section 7; issue 15;
``certify/bounds/local/_streamed.py``, ``slope_sums``; ``certify/bounds/local/_slopes.py``, module docstring).

Setting. One DP head (with biases; for H heads J = sum_h J^h, |d_m J| <= sum_h |d_m J^h|, and the code adds the
heads' sums), a box B of inputs X (N x D), a point X0 in B, and half-widths h_m >= |X_m - X0_m| for every X in B and
every coordinate m = (t, r) (token t, feature r); `slopes` and `streamed` take h_m = max(hi_m - X0_m, X0_m - lo_m)
rounded up, and `streamed` one eta = max_m h_m. Blocks as in proofs/slopes_derivatives.py: P, k~, v~, b, M, WVO,
A_i = sum_l P_il k~_il v~_il^T, T_i; sigma = 1/sqrt(d). For each block Z, |Z| stands for an upper bound on |Z(xi)|
over xi in B (the code uses the magnitudes of interval enclosures).

Claim. For every X in B, with R, C the row and column sums `slope_sums` computes from these magnitudes, in exact
arithmetic:

    sum_{l, E} |J_il[F, E](X) - J_il[F, E](X0)| <= R[i, F],     sum_{i, F} |J_il[F, E](X) - J_il[F, E](X0)| <= C[l, E].

Argument.
(1) Remainder (standard facts, named as lemmas). J is C^1 (indeed C^inf) on B; the segment X0 + tau Delta
    (Delta = X - X0, tau in [0, 1]) lies in B (a box is convex); on it the chain rule gives
    d/dtau J_ab(X0 + tau Delta) = sum_m Delta_m dJ_ab/dX_m(X0 + tau Delta) (proofs/taylor_remainder.py part (I):
    SymPy for a DP head at N = 2, D = 1, re-run here by import; in general the chain rule for C^1 maps). The
    fundamental theorem of calculus and |int_0^1 f| <= int_0^1 |f| <= sup |f| then give, entrywise,
        |J_ab(X) - J_ab(X0)| <= sup_{xi in B} sum_m |Delta_m| |dJ_ab/dX_m(xi)| <= sum_m h_m sup_B |dJ_ab/dX_m|
                              <= eta sum_m sup_B |dJ_ab/dX_m|.
    SymPy checks only the chain rule instance; (1) as a whole is the standard mean-value (integral) form.
(2) Entrywise triangle bound (SymPy, exact). By the product rule on (e) of proofs/slopes_derivatives.py,
        d_m J_il[F, E] = d_m P_il WVO[E, F] + sigma (d_m P_il v~_il[F] b_i[E] + P_il d_m v~_il[F] b_i[E]
                         + P_il v~_il[F] d_m b_i[E]) + delta_il sigma d_m A_i[E, F],
    with (a)-(d) of that proof (PROVED) substituted, A_i and T_i written as their sums over l, and every block
    entry an independent symbol. Expanded, |sum_j c_j mono_j| <= sum_j |c_j| |mono_j| (triangle inequality); this
    polynomial has nonnegative coefficients, so it increases with every |entry| and its value at the magnitudes over
    B bounds |d_m J_il[F, E](xi)| at every xi in B. TB_J[i, l, F, E] := eta sum_m (that value) >= eta sum_m sup_B
    |d_m J_il[F, E]|. The same construction on (a)-(d) alone gives the blocks' entrywise bounds TB_P, TB_v, TB_b,
    TB_A.
(3) The code's sums dominate (SymPy, exact). The shipped `slope_sums` is run on polynomials: its magnitudes (from
    head_blocks_d, point_einsum, interval_einsum), sigma (const) and eta are generators of a polynomial ring over QQ,
    its rounding helpers (_mul, _add, _einsum_up, sum_up) exact products and sums. Then R_code[i, F] -
    sum_{l, E} TB_J and C_code[l, E] - sum_{i, F} TB_J have nonnegative coefficients, so they are >= 0 wherever the
    generators are: with (1) and (2), the claim.
(4) The docstring's assembly is an identity (SymPy, exact). With S_P, S_v, S_b as slope_sums's docstring states them
    and S_A[i, E, F] = TB_A[i, E, F], S_il[F, E] = S_P[i, l] |WVO[E, F]| + sigma (S_P[i, l] |v~_il[F]|
    + P_il S_v[i, F]) |b_i[E]| + sigma P_il |v~_il[F]| S_b[E] + delta_il sigma S_A[i, E, F] summed over (l, E) minus
    R_code, and over (i, F) minus C_code, are the zero polynomial; and S_P - TB_P, S_v - TB_v, S_b - TB_b have
    nonnegative coefficients (the evidence says which are equalities).

Status: PROVED-MODULO the lemmas (slopes_derivatives, and the standard facts of (1)), for the stated (N, D) per
head (sigma, eta and every magnitude free symbols, so any d = D / H). Cross-check (numeric, SAMPLED: can only lower
the status): the shipped float `slope_sums` on random biased layers (H in 1..3) and boxes, and on random nonnegative
magnitudes fed to it directly, against the symbolic R, C of (4) (sum of S_il) and of (3) (the symbolic run), both
evaluated at the magnitudes the float run used, to 1e-12 relative.

Found on the way (neither is a soundness bug of the certificates):
- S_P was looser than the triangle bound by exactly sigma eta P_il |b_i|_1: sum_t |delta_lt - P_it| <= 1 + s_P[i]
  suffices where the code used 2 + s_P[i]; the code now uses 1 + s_P[i] (S_P = TB_P), which cut the streamed
  remainder by 11% (nn.MultiheadAttention(64, 4), N = 128, eps = 1e-3).
- slope_sums's docstring says its S bounds |J(X) - J(X0)| "for all X, X0 in the box, when every half-width of the
  box is at most eta". The bound needs |X_m - X0_m| <= eta, as the claim above states: with X0 a corner of the box
  c +- eps and X the opposite corner, sampled row sums of |J(X) - J(X0)| reach 1.95 R (N = 2, D = 1). Its caller
  `streamed_bound` is sound: X0 is the fixed centre and eta = max_m max(hi_m - X0_m, X0_m - lo_m).

Not covered: the interval enclosures of the blocks over B, which enclosure each magnitude is taken from (the
symbolic run maps slope_sums's point_einsum / interval_einsum calls to the blocks by their subscripts), and the
code's outward rounding (tests/test_streamed.py, tests/test_local_slopes.py; proofs/taylor_remainder.py part (II),
SAMPLED); and the interval assembly of `_slopes.dp_slopes` (the `slopes` method), to which (1) applies with
per-coordinate h_m but whose code is not run here.
"""

from __future__ import annotations

import functools
import itertools
import math
import types
from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp
from sympy.polys.rings import PolyElement, ring

from proofs._check import Check, numeric
from proofs._result import ProofResult, Status, combine
from proofs.slopes_derivatives import db_formula, dA_formula, delta, dP_formula, dv_formula, t_tensor

CLAIM = ("sum_{l,E} |J_il[F,E](X) - J_il[F,E](X0)| <= R[i,F] and sum_{i,F} |...| <= C[l,E] for X in a box B with "
         "|X_m - X0_m| <= eta, R, C the separable row / column sums of certify/bounds/local/_streamed.slope_sums "
         "(exact arithmetic) from the blocks' magnitudes over B (mean-value form + entrywise triangle bound)")

SIZES = ((2, 2), (3, 2), (2, 3))
"""(N, D) of one head at which SymPy checks (2)-(4) at every entry (d = D / H enters only through sigma, a symbol)."""

SCOPE = {"(N, D) per head": "in {(2, 2), (3, 2), (2, 3)} (SymPy, every entry; sigma, eta and all magnitudes free "
                            "nonnegative symbols, so any d)",
         "chain rule": "DP head, N = 2, D = 1 (SymPy, taylor_remainder part (I)); the standard fact otherwise",
         "shipped float slope_sums": "6 random biased layers and boxes, H in 1..3, and 3 sets of random magnitudes "
                                     "(numeric cross-check)"}
REQUIRES = Status.PROVED_MODULO

LEMMAS = ("slopes_derivatives", "chain rule on the segment (taylor_remainder part (I))",
          "fundamental theorem of calculus", "|int f| <= int |f| <= sup |f|", "product rule", "triangle inequality")


class Magnitudes:
    """One head's blocks as generators of a polynomial ring over QQ (N, D): read as signed entries in (2) and as
    the nonnegative magnitudes over B in (3), (4). Attribute names follow proofs.slopes_derivatives.Head, so its
    closed forms (a)-(d) evaluate on it; A and T are the sums over l of their definitions."""

    def __init__(self, N: int, D: int):
        self.N, self.D = N, D
        cells = {"p": (N, N), "k": (N, N, D), "v": (N, N, D), "b": (N, D), "w": (D, D), "m": (D, D)}
        names = ["sigma", "eta"] + [f"{n}_{'_'.join(map(str, idx))}" for n, shape in cells.items()
                                    for idx in itertools.product(*map(range, shape))]
        self.ring, *gens = ring(names, sp.QQ)
        by_name = dict(zip(names, gens))
        self.sigma, self.eta = by_name["sigma"], by_name["eta"]

        def array(n: str) -> np.ndarray:
            out = np.empty(cells[n], dtype=object)
            for idx in np.ndindex(*cells[n]):
                out[idx] = by_name[f"{n}_{'_'.join(map(str, idx))}"]
            return out

        self.arrays = {n: array(n) for n in cells}  # numpy object arrays, for the shipped code
        self.P, self.kt, self.vt, self.b, self.WVO, self.M = (self.arrays[n].tolist() for n in "pkvbwm")
        self.A = [[[sum(self.P[i][l] * self.kt[i][l][r] * self.vt[i][l][F] for l in range(N)) for F in range(D)]
                   for r in range(D)] for i in range(N)]

    @functools.cached_property
    def T(self):
        return t_tensor(self.P, self.kt, self.vt, self.N, self.D)

    def exact(self, x) -> np.ndarray:
        """An object array of ring elements from ring elements or exactly representable floats (no rounding)."""
        if isinstance(x, PolyElement):  # as shape (1,): numpy returns a 0-d product as a bare ring element
            a = np.empty(1, dtype=object)
            a[0] = x
        else:
            a = x if isinstance(x, np.ndarray) and x.dtype == object else np.asarray(x, dtype=object)
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(*a.shape):
            v = a[idx]
            out[idx] = v if isinstance(v, PolyElement) else self.ring(sp.Rational(float(v)))
        return out


def triangle(poly: PolyElement) -> PolyElement:
    """sum_j |c_j| mono_j for poly = sum_j c_j mono_j: with the generators read as magnitudes, an upper bound on
    |poly| (triangle inequality), nondecreasing in each magnitude (nonnegative coefficients)."""
    return poly.ring.from_dict({monom: abs(c) for monom, c in poly.terms()})


def entrywise_bounds(h: Magnitudes) -> dict[str, np.ndarray]:
    """TB_P [i, l], TB_v [i, l, F], TB_b [i, E], TB_A [i, r, F] and TB_J [i, l, F, E]: eta sum_m of the triangle
    bound of the closed-form derivative d_m (module docstring (2)), m = (t, r) over all coordinates."""
    N, D, eta, sigma = h.N, h.D, h.eta, h.sigma
    coords = list(itertools.product(range(N), range(D)))
    out = {"P": np.empty((N, N), dtype=object), "v": np.empty((N, N, D), dtype=object),
           "b": np.empty((N, D), dtype=object), "A": np.empty((N, D, D), dtype=object),
           "J": np.empty((N, N, D, D), dtype=object)}
    for i, l in itertools.product(range(N), repeat=2):
        out["P"][i, l] = eta * sum(triangle(dP_formula(h, i, l, t, r)) for t, r in coords)
        for F in range(D):
            out["v"][i, l, F] = eta * sum(triangle(dv_formula(h, i, l, F, t, r)) for t, r in coords)
    for i, E in itertools.product(range(N), range(D)):
        out["b"][i, E] = eta * sum(triangle(db_formula(h, i, E, t, r)) for t, r in coords)
    for i, r, F in itertools.product(range(N), range(D), range(D)):
        out["A"][i, r, F] = eta * sum(triangle(dA_formula(h, i, r, F, t, s)) for t, s in coords)
    for i, l, F, E in itertools.product(range(N), range(N), range(D), range(D)):
        total = h.ring.zero
        for t, r in coords:  # product rule on J_il[F, E] = P WVO[E, F] + sigma P v~[F] b[E] + delta sigma A_i[E, F]
            dP = dP_formula(h, i, l, t, r)
            dJ = (dP * h.WVO[E][F]
                  + sigma * (dP * h.vt[i][l][F] * h.b[i][E] + h.P[i][l] * dv_formula(h, i, l, F, t, r) * h.b[i][E]
                             + h.P[i][l] * h.vt[i][l][F] * db_formula(h, i, E, t, r))
                  + delta(i, l) * sigma * dA_formula(h, i, E, F, t, r))
            total += triangle(dJ)
        out["J"][i, l, F, E] = eta * total
    return out


def documented_sums(h: Magnitudes, S_A: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """S_P, S_v, S_b as slope_sums's docstring states them, and the row / column sums of the docstring's S_il[F, E]
    with S_A[i, E, F] (the entrywise bound TB_A) for the diagonal term."""
    N, D = h.N, h.D
    eta, sigma = h.exact(h.eta), h.exact(h.sigma)  # shape (1,): a bare ring element times an array is not elementwise
    P, K, V, B, W, M = (h.arrays[n] for n in "pkvbwm")
    k1, b1, sP = K.sum(axis=2), B.sum(axis=1), P.sum(axis=1)
    S_P = sigma * eta * P * (k1 + (1 + sP[:, None]) * b1[:, None])
    a = np.einsum("il,ilF->iF", P * k1, V)  # >= sum_r |A_i[r, F]|
    S_v = eta * ((1 + sP[:, None]) * W.sum(axis=0)[None, :] + sigma * a
                 + sigma * b1[:, None] * np.einsum("it,itF->iF", P, V))
    S_b = eta * M.sum(axis=1)
    S = np.empty((N, N, D, D), dtype=object)  # [i, l, F, E]
    for i, l, F, E in itertools.product(range(N), range(N), range(D), range(D)):
        s = h.sigma
        S[i, l, F, E] = (S_P[i, l] * W[E, F] + s * (S_P[i, l] * V[i, l, F] + P[i, l] * S_v[i, F]) * B[i, E]
                         + s * P[i, l] * V[i, l, F] * S_b[E] + delta(i, l) * s * S_A[i, E, F])
    return {"P": S_P, "v": S_v, "b": S_b}, S.sum(axis=(1, 3)), S.sum(axis=(0, 2))


BY_SUBSCRIPTS = {"ilc,rc->ilr": "k", "ila,aF->ilF": "v", "ic,Ec->iE": "b", "ra,aF->rF": "w", "Ec,rc->Er": "m"}
"""The magnitude each point_einsum / interval_einsum call of slope_sums forms, by its subscripts."""


def _slope_sums() -> Callable:
    from certify.bounds.local import _streamed

    return _streamed.slope_sums  # looked up at call time (tests/test_mutations.py rebinds it)


def _with_globals(f: Callable, overrides: dict) -> Callable:
    """f with some of its globals replaced (a fresh function: the module is left alone)."""
    return types.FunctionType(f.__code__, {**f.__globals__, **overrides}, f.__name__, f.__defaults__, f.__closure__)


def shipped_symbolic(h: Magnitudes, slope_sums: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(R, C) of the shipped slope_sums run on the ring's generators, one head, rounding replaced by exact
    arithmetic (module docstring (3))."""
    f = slope_sums or _slope_sums()
    N, D = h.N, h.D
    ns = types.SimpleNamespace

    def product(*factors):
        out = h.exact(factors[0])
        for x in factors[1:]:
            out = out * h.exact(x)
        return out

    def total(*terms):
        out = h.exact(terms[0])
        for x in terms[1:]:
            out = out + h.exact(x)
        return out

    overrides = {
        "float": lambda x: x, "const": lambda x: ns(hi=h.sigma), "Interval": ns(point=lambda x: x),
        "head_blocks_d": lambda box, w, head, chunk: (None, ns(mag=h.arrays["p"]), None, None, None),
        "point_einsum": lambda subscripts, *operands: ns(mag=h.arrays[BY_SUBSCRIPTS[subscripts]]),
        "interval_einsum": lambda subscripts, *operands: ns(mag=h.arrays[BY_SUBSCRIPTS[subscripts]]),
        "_mul": product, "_add": total, "sum_up": lambda x, axis=None: np.sum(h.exact(x), axis=axis),
        "_einsum_up": lambda subscripts, *operands: np.einsum(subscripts, *map(h.exact, operands)),
    }
    weights = ns(H=1, d=1, W_Q=[None], W_K=[None], W_V=[None], W_O=[None])
    R, C = _with_globals(f, overrides)(ns(shape=(N, D)), weights, h.eta, 1)
    return h.exact(R), h.exact(C)


def _show(poly: PolyElement, terms: int = 4) -> str:
    shown = poly.ring.from_dict(dict(list(poly.terms())[:terms])).as_expr()
    return f"{shown}{' + ...' if len(poly.terms()) > terms else ''}"


def _dominates(upper: np.ndarray, lower: np.ndarray, what: str) -> tuple[bool, str]:
    """Every entry of upper - lower has nonnegative coefficients (so it is >= 0 for nonnegative generators)."""
    for idx in np.ndindex(*upper.shape):
        difference = upper[idx] - lower[idx]
        negative = {m: c for m, c in difference.terms() if c < 0}
        if negative:
            part = difference.ring.from_dict(negative)
            return False, f"{what}{list(idx)}: the difference has negative terms {_show(part)}"
    return True, ""


def check_size(N: int, D: int, slope_sums: Callable | None = None) -> dict[str, tuple[bool, str]]:
    """(2)-(4) at one (N, D): {"entrywise", "identity", "dominates"} -> (holds, detail)."""
    h = Magnitudes(N, D)
    tb = entrywise_bounds(h)
    R, C = shipped_symbolic(h, slope_sums)
    documented, R_doc, C_doc = documented_sums(h, tb["A"])
    out = {}
    details, holds = [], True
    for name in ("P", "v", "b"):
        doc = {"P": documented["P"], "v": documented["v"][:, None, :], "b": documented["b"][None, :]}[name]
        doc = np.broadcast_to(doc, tb[name].shape)  # S_v[i, F] for every l, S_b[E] for every i
        ok, why = _dominates(doc, tb[name], f"S_{name} - TB_{name} at ")
        if not ok:
            holds, details = False, [why]
            break
        equal = all(doc[idx] == tb[name][idx] for idx in np.ndindex(*doc.shape))
        details.append(f"S_{name} {'=' if equal else '>='} TB_{name}")
    out["entrywise"] = (holds, ", ".join(details))
    mismatch = [f"{name}{list(idx)}: docstring - code = {_show(doc[idx] - code[idx])}"
                for name, doc, code in (("R", R_doc, R), ("C", C_doc, C)) for idx in np.ndindex(*doc.shape)
                if doc[idx] != code[idx]]
    out["identity"] = (not mismatch, mismatch[0] if mismatch else "")
    rows_TB, columns_TB = tb["J"].sum(axis=(1, 3)), tb["J"].sum(axis=(0, 2))
    ok_R, why_R = _dominates(R, rows_TB, "R_code - sum_{l,E} TB_J at [i, F] = ")
    ok_C, why_C = _dominates(C, columns_TB, "C_code - sum_{i,F} TB_J at [l, E] = ")
    out["dominates"] = (ok_R and ok_C, why_R or why_C)
    out["_polys"] = (h, R, C, R_doc, C_doc)  # for the numeric cross-check
    return out


def check_assembly(sizes: Sequence[tuple[int, int]] = SIZES,
                   slope_sums: Callable | None = None) -> tuple[list[Check], dict]:
    """Parts (2)-(4) at every size: PROVED each when it holds at every entry of every size, else UNPROVED with the
    first failing entry. Also returns the polynomials per size (for `check_shipped_float`)."""
    results = {(N, D): check_size(N, D, slope_sums) for N, D in sizes}
    texts = {
        "dominates": "(2)+(3) R_code - sum_{l,E} TB_J and C_code - sum_{i,F} TB_J have nonnegative coefficients "
                     "(TB_J = eta sum_m of the triangle bound of the product-rule derivative of J with (a)-(d) "
                     "substituted; R_code, C_code: the shipped slope_sums run on ring generators, exact arithmetic)",
        "identity": "(4) sum_{l,E} S_il[F,E] - R_code[i,F] and sum_{i,F} S_il[F,E] - C_code[l,E] are the zero "
                    "polynomial (S_il from the docstring's S_P, S_v, S_b and the entrywise S_A = TB_A)",
        "entrywise": "(4) the docstring's block slopes dominate the entrywise triangle bounds of (a)-(c) "
                     "(difference has nonnegative coefficients)",
    }
    checks = []
    for key, text in texts.items():
        failed = [(size, r[key][1]) for size, r in results.items() if not r[key][0]]
        if failed:
            size, why = failed[0]
            checks.append((Status.UNPROVED, f"{text}: fails at (N, D) = {size}: {why}"))
        else:
            detail = results[sizes[-1]][key][1] if key == "entrywise" else ""
            checks.append((Status.PROVED, f"{text}: holds at every entry, (N, D) in {list(sizes)}"
                                          + (f" ({detail})" if detail else "")))
    return checks, {size: r["_polys"] for size, r in results.items()}


def check_sums_dominate(sizes: Sequence[tuple[int, int]] = SIZES, slope_sums: Callable | None = None) -> Check:
    """Part (2)+(3) alone: the shipped sums dominate the entrywise triangle bound (soundness; test_mutations.py)."""
    return check_assembly(sizes, slope_sums)[0][0]


def _evaluate(h: Magnitudes, polys: np.ndarray, values: dict[str, np.ndarray], sigma: float, eta: float) -> np.ndarray:
    """The polynomials at float values of the generators (sigma, eta, and the magnitude arrays by name)."""
    point = [sigma, eta] + [float(x) for n in "pkvbwm" for x in np.asarray(values[n]).reshape(-1)]
    out = np.empty(polys.shape)
    for idx in np.ndindex(*polys.shape):
        out[idx] = sum(float(c) * math.prod(x**e for x, e in zip(point, monom) if e)
                       for monom, c in polys[idx].terms())
    return out


def _gap(polys: tuple, heads: list[dict[str, np.ndarray]], sigma: float, eta: float, R_float: np.ndarray,
         C_float: np.ndarray) -> dict[str, float]:
    """Largest relative gap of the float R, C to the symbolic ones of (4) and (3), summed over the heads' values."""
    h, R_code, C_code, R_doc, C_doc = polys
    gaps = {}
    for label, (R_sym, C_sym) in (("docstring", (R_doc, C_doc)), ("symbolic run", (R_code, C_code))):
        R_num = sum(_evaluate(h, R_sym, head, sigma, eta) for head in heads)
        C_num = sum(_evaluate(h, C_sym, head, sigma, eta) for head in heads)
        gaps[label] = max(float(np.max(np.abs(R_float - R_num) / R_num)),
                          float(np.max(np.abs(C_float - C_num) / C_num)))
    return gaps


def check_shipped_float(polys: dict, layers: int = 6, seed: int = 0) -> Check:
    """The shipped float slope_sums (rounding up) against the symbolic R, C of (4) (docstring sums) and (3) (the
    symbolic run), evaluated at the magnitudes it used (summed over heads): relative gap <= 1e-12. Two kinds of
    input: random biased DP layers and boxes (the magnitudes of the real enclosures, recorded), and random
    nonnegative magnitudes, sigma and eta fed to it directly. SAMPLED."""
    import torch

    from certify.attention import AttentionWeights
    from certify.bounds.local._enclosure import const, numpy_weights
    from certify.interval import Interval

    rng = np.random.default_rng(seed)
    sizes = list(polys)
    cases = [(N, D, H) for H in (1, 2, 3) for N, D in sizes if D % H == 0][:layers]
    worst = {"docstring": 0.0, "symbolic run": 0.0}
    f = _slope_sums()
    g = f.__globals__

    def record(gaps: dict[str, float], what: str) -> Check | None:
        for label, gap in gaps.items():
            worst[label] = max(worst[label], gap)
            if not gap <= 1e-12:
                return numeric(False, f"shipped float slope_sums differs from the {label} R, C by {gap:.3g} "
                                      f"(relative; {what})")
        return None

    for case, (N, D, H) in enumerate(cases):
        d = D // H
        t = lambda *shape: torch.from_numpy(rng.standard_normal(shape) / math.sqrt(D))  # noqa: E731
        weights = AttentionWeights("dp", t(H, D, d), t(H, D, d), t(H, D, d), t(D, D), b_Q=t(H, d), b_K=t(H, d),
                                   b_V=t(H, d), b_O=t(D))
        x0, eta = rng.standard_normal((N, D)), [1e-3, 0.1, 1.0][case % 3]
        heads: list[dict[str, np.ndarray]] = []

        def recording(original: Callable, key: Callable) -> Callable:
            def wrapper(*args):
                value = original(*args)
                name, mag = key(args, value)
                if name == "p":  # head_blocks_d: a new head
                    heads.append({})
                heads[-1][name] = mag
                return value
            return wrapper

        overrides = {
            "head_blocks_d": recording(g["head_blocks_d"], lambda a, v: ("p", v[1].mag)),
            "point_einsum": recording(g["point_einsum"], lambda a, v: (BY_SUBSCRIPTS[a[0]], v.mag)),
            "interval_einsum": recording(g["interval_einsum"], lambda a, v: (BY_SUBSCRIPTS[a[0]], v.mag)),
        }
        R_float, C_float = _with_globals(f, overrides)(Interval(x0 - eta, x0 + eta), numpy_weights(weights), eta, 2)
        what = f"(N, D, H) = {(N, D, H)}, eta = {eta:g}, {len(heads)} heads recorded"
        if len(heads) != H:
            return numeric(False, f"recorded {len(heads)} heads for H = {H}: the cross-check's stubs are stale")
        failure = record(_gap(polys[N, D], heads, float(const(1.0 / math.sqrt(d)).hi), eta, R_float, C_float), what)
        if failure:
            return failure
    ns = types.SimpleNamespace
    for N, D in sizes:  # random nonnegative magnitudes (no layer behind them), one head
        shapes = {"p": (N, N), "k": (N, N, D), "v": (N, N, D), "b": (N, D), "w": (D, D), "m": (D, D)}
        values = {n: rng.uniform(0.0, 2.0, shape) for n, shape in shapes.items()}
        sigma, eta = float(rng.uniform(0.2, 1.0)), float(rng.uniform(1e-3, 1.0))
        overrides = {
            "const": lambda x, sigma=sigma: ns(hi=sigma), "Interval": ns(point=lambda x: x),
            "head_blocks_d": lambda box, w, head, chunk, values=values: (None, ns(mag=values["p"]), None, None, None),
            "point_einsum": lambda sub, *operands, values=values: ns(mag=values[BY_SUBSCRIPTS[sub]]),
            "interval_einsum": lambda sub, *operands, values=values: ns(mag=values[BY_SUBSCRIPTS[sub]]),
        }
        weights = ns(H=1, d=1, W_Q=[None], W_K=[None], W_V=[None], W_O=[None])
        R_float, C_float = _with_globals(f, overrides)(ns(shape=(N, D)), weights, eta, 1)
        failure = record(_gap(polys[N, D], [values], sigma, eta, R_float, C_float),
                         f"random magnitudes, (N, D) = {(N, D)}")
        if failure:
            return failure
    return numeric(True, f"shipped float slope_sums (rounded up) = the symbolic R, C at the magnitudes it used, on "
                         f"{len(cases)} random biased DP layers and boxes ((N, D, H) in {cases}, eta in 1e-3..1; the "
                         f"enclosures' magnitudes recorded) and on {len(sizes)} sets of random magnitudes in [0, 2] "
                         f"fed to it directly: largest relative gap {worst['docstring']:.2g} (docstring sums of "
                         f"(4)), {worst['symbolic run']:.2g} (symbolic run of the code, (3))")


def check_chain_rule() -> Check:
    """(1): the chain rule on the segment, proofs/taylor_remainder.py part (I) (imported, not duplicated)."""
    from proofs.taylor_remainder import check_chain_rule as chain_rule

    status, text = chain_rule()
    return status, (f"(1) {text} (taylor_remainder part (I)); with the fundamental theorem of calculus and |int f| "
                    "<= int |f| <= sup |f| (standard facts, not checked by SymPy) this is the mean-value bound "
                    "|J_ab(X) - J_ab(X0)| <= sum_m h_m sup_B |dJ_ab/dX_m| <= eta sum_m sup_B |dJ_ab/dX_m|")


def prove() -> ProofResult:
    checks, polys = check_assembly()
    return combine(CLAIM, [check_chain_rule(), *checks], scope=SCOPE, lemmas=LEMMAS,
                   cross_checks=[check_shipped_float(polys)])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
