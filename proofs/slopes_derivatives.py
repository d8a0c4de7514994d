"""Claim: the closed-form coordinate derivatives of the DP Jacobian's building blocks (MATH.md section 7;
``certify/bounds/local/_slopes.py``, module docstring and ``_product_slope``).

Setting. One head of dot-product attention with biases: tokens x_i in R^D (i = 1..N), W_Q, W_K, W_V (D x d),
W_O (d x D), b_Q, b_K, b_V in R^d, sigma = 1/sqrt(d),

    q_i = W_Q^T x_i + b_Q,  k_i = W_K^T x_i + b_K,  v_i = W_V^T x_i + b_V,  P = softmax_rows(sigma q k^T),
    kbar_i = sum_k P_ik k_k,  vbar_i = sum_k P_ik v_k,  F_i = sum_l P_il W_O^T v_l (+ b_O),

and the blocks k~_il = W_Q (k_l - kbar_i), v~_il = W_O^T (v_l - vbar_i), b_i = W_K q_i (D-vectors), M = W_K W_Q^T,
WVO = W_V W_O, A_i[r, F] = sum_l P_il k~_il[r] v~_il[F], T_i[s, r, F] = sum_l P_il k~_il[s] k~_il[r] v~_il[F].

Claim. With d_{t,r} = d / d x_t[r] and delta the Kronecker delta,

    (a) d_{t,r} P_il     = sigma P_il [delta_it k~_il[r] + (delta_lt - P_it) b_i[r]],
    (b) d_{t,r} b_i[E]   = delta_it M[E, r],
    (c) d_{t,r} v~_il[F] = (delta_lt - P_it) WVO[r, F] - sigma [delta_it A_i[r, F] + b_i[r] P_it v~_it[F]],
    (d) d_{t,s} A_i[r,F] = delta_it sigma T_i[s, r, F] + P_it {sigma b_i[s] (k~_it[r] v~_it[F] - A_i[r, F])
                                                             + M[s, r] v~_it[F] + k~_it[r] WVO[s, F]},
    (e) J_il[F, E] := d F_i[F] / d x_l[E] = P_il WVO[E, F] + sigma P_il v~_il[F] b_i[E] + delta_il sigma A_i[E, F],
    (f) d_{t,r} (P_il v~_il[F]) = P_il {delta_it sigma (k~_il[r] v~_il[F] - A_i[r, F])
                                        + (delta_lt - P_it) (sigma b_i[r] v~_il[F] + WVO[r, F])
                                        - sigma b_i[r] P_it v~_it[F]}.

Checks. Every entry at the stated sizes, with independent symbols for X, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V and
sigma (so the identities hold for every sigma, 1/sqrt(d) included). The softmax is written through independent
symbols e_ij (j >= 1) for exp(s_ij), s_ij = sigma q_i . k_j, and w_i for 1 / sum_j exp(s_ij):

    P_ij = w_i e_ij (j >= 1),   P_i0 = 1 - w_i sum_{j >= 1} e_ij,

so every block is a polynomial with integer coefficients in independent symbols (SymPy's sparse polynomial ring).
The derivative (`SymbolicHead.deriv`) is the exact chain rule d_{t,r} f(X, w, e) = df/dx_t[r] + sum_i df/dw_i dw_i
+ sum_{i, j >= 1} df/de_ij de_ij with de_ij = e_ij ds_ij and dw_i = -w_i^2 sum_j exp(s_ij) ds_ij = -w_i sum_j P_ij
ds_ij (ds_ij = d s_ij / d x_t[r], a polynomial). Derivative minus closed form is then the zero polynomial at every
entry; a polynomial identity in independent symbols holds at every value, in particular at e_ij = exp(s_ij),
w_i = 1 / sum_j exp(s_ij): PROVED for the stated sizes. A difference that is not the zero polynomial is evaluated
exactly at random rational points (e_ij > 0, P_i0 > 0): UNPROVED with the point if nonzero there.

Cross-check of the shipped code (SAMPLED; it can only lower the status): (e) evaluated in float64 on random biased
layers against `certify.jacobian.jacobian` (the torch closed form certify uses).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp
from sympy.polys.rings import ring

from proofs._check import Check, numeric
from proofs._result import ProofResult, Status, combine

CLAIM = ("closed-form coordinate derivatives of the DP blocks (certify/bounds/local/_slopes.py): d P_il, d b_i, "
         "d v~_il, d A_i, d (P_il v~_il) and J_il = P_il WVO^T + sigma P_il v~_il b_i^T + delta_il sigma A_i^T "
         "(one head, biases b_Q, b_K, b_V; generic symbols)")

SIZES = ((3, 2, 2), (4, 2, 1), (2, 3, 2))
"""(N, D, d) at which SymPy proves every entry of (a)-(f)."""

SCOPE = {"(N, D, d)": "in {(3, 2, 2), (4, 2, 1), (2, 3, 2)} (SymPy, every entry of (a)-(f)); one head, biases "
                      "b_Q, b_K, b_V, sigma a free symbol",
         "shipped J": "float64, 3 random biased layers"}
REQUIRES = Status.PROVED


def delta(a: int, b: int) -> int:
    return int(a == b)


def t_tensor(P, kt, vt, N: int, D: int) -> list:
    """T_i[s, r, F] = sum_l P_il k~_il[s] k~_il[r] v~_il[F], as nested lists over (i, s, r, F)."""
    return [[[[sum(P[i][l] * kt[i][l][s] * kt[i][l][r] * vt[i][l][F] for l in range(N))
               for F in range(D)] for r in range(D)] for s in range(D)] for i in range(N)]


class Head:
    """The blocks of one DP head from the entries of X, the weights and a row softmax `softmax(s) -> P`: floats
    (the default softmax, exp and normalise), or polynomials of `symbolic_head`'s ring."""

    def __init__(self, X, WQ, WK, WV, WO, bQ, bK, bV, sigma, softmax: Callable | None = None):
        N, D, d = len(X), len(WQ), len(WQ[0])
        self.N, self.D, self.d = N, D, d
        self.X, self.sigma = X, sigma
        lin = lambda W, b, x: [sum(W[r][c] * x[r] for r in range(D)) + b[c] for c in range(d)]  # noqa: E731
        self.q = [lin(WQ, bQ, X[i]) for i in range(N)]
        self.k = [lin(WK, bK, X[i]) for i in range(N)]
        self.v = [lin(WV, bV, X[i]) for i in range(N)]
        self.s = [[sigma * sum(self.q[i][c] * self.k[j][c] for c in range(d)) for j in range(N)] for i in range(N)]
        self.P = softmax(self.s) if softmax else [[math.exp(x) / sum(map(math.exp, row)) for x in row]
                                                  for row in self.s]
        kbar = [[sum(self.P[i][m] * self.k[m][c] for m in range(N)) for c in range(d)] for i in range(N)]
        vbar = [[sum(self.P[i][m] * self.v[m][c] for m in range(N)) for c in range(d)] for i in range(N)]
        self.kt = [[[sum(WQ[r][c] * (self.k[l][c] - kbar[i][c]) for c in range(d)) for r in range(D)]
                    for l in range(N)] for i in range(N)]
        self.vt = [[[sum((self.v[l][a] - vbar[i][a]) * WO[a][F] for a in range(d)) for F in range(D)]
                    for l in range(N)] for i in range(N)]
        self.b = [[sum(WK[E][c] * self.q[i][c] for c in range(d)) for E in range(D)] for i in range(N)]
        self.M = [[sum(WK[E][c] * WQ[r][c] for c in range(d)) for r in range(D)] for E in range(D)]
        self.WVO = [[sum(WV[r][a] * WO[a][F] for a in range(d)) for F in range(D)] for r in range(D)]
        self.A = [[[sum(self.P[i][l] * self.kt[i][l][r] * self.vt[i][l][F] for l in range(N)) for F in range(D)]
                   for r in range(D)] for i in range(N)]
        self.output = [[sum(self.P[i][l] * sum(self.v[l][a] * WO[a][F] for a in range(d)) for l in range(N))
                        for F in range(D)] for i in range(N)]

    @functools.cached_property
    def T(self):
        """T_i[s, r, F] (`t_tensor`, built on first use: N D^3 entries)."""
        return t_tensor(self.P, self.kt, self.vt, self.N, self.D)


class SymbolicHead(Head):
    """A head over the polynomial ring ZZ[sigma, X, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, w, e] (independent symbols),
    with e_ij (j >= 1) standing for exp(s_ij) and w_i for 1 / sum_j exp(s_ij), so that

        P_ij = w_i e_ij (j >= 1),   P_i0 = 1 - w_i sum_{j >= 1} e_ij        (polynomials),

    and `deriv` the chain rule through them: de_ij = e_ij ds_ij, dw_i = -w_i^2 sum_j exp(s_ij) ds_ij
    = -w_i sum_j P_ij ds_ij."""

    def __init__(self, N: int, D: int, d: int):
        names = {"x": (N, D), "wq": (D, d), "wk": (D, d), "wv": (D, d), "wo": (d, D)}
        vectors = {"bq": d, "bk": d, "bv": d}
        gens = (["sigma"] + [f"{n}_{a}{b}" for n, (p, q) in names.items() for a in range(p) for b in range(q)]
                + [f"{n}_{a}" for n, m in vectors.items() for a in range(m)] + [f"w_{i}" for i in range(N)]
                + [f"e_{i}{j}" for i in range(N) for j in range(1, N)])
        self.ring, *symbols = ring(gens, sp.ZZ)
        by_name = dict(zip(gens, symbols))
        matrix = lambda n: [[by_name[f"{n}_{a}{b}"] for b in range(names[n][1])]  # noqa: E731
                            for a in range(names[n][0])]
        vector = lambda n: [by_name[f"{n}_{a}"] for a in range(vectors[n])]  # noqa: E731
        self.w = [by_name[f"w_{i}"] for i in range(N)]
        self.e = [[None] + [by_name[f"e_{i}{j}"] for j in range(1, N)] for i in range(N)]

        def softmax(s):
            return [[1 - self.w[i] * sum(self.e[i][1:])] + [self.w[i] * e for e in self.e[i][1:]] for i in range(N)]

        self._chain: dict = {}
        super().__init__(matrix("x"), matrix("wq"), matrix("wk"), matrix("wv"), matrix("wo"), vector("bq"),
                         vector("bk"), vector("bv"), by_name["sigma"], softmax)

    def deriv(self, expr, t: int, r: int):
        """d expr / d x_t[r] (module docstring: exact chain rule through w_i and e_ij)."""
        x = self.X[t][r]
        if (t, r) not in self._chain:  # the derivatives of the w_i and e_ij along x_t[r]
            ds = [[s.diff(x) for s in row] for row in self.s]
            N = self.N
            self._chain[t, r] = ([-self.w[i] * sum(self.P[i][j] * ds[i][j] for j in range(N)) for i in range(N)],
                                 [[None] + [self.e[i][j] * ds[i][j] for j in range(1, N)] for i in range(N)])
        dw, de = self._chain[t, r]
        out = expr.diff(x)
        for i in range(self.N):
            out += expr.diff(self.w[i]) * dw[i]
            for j in range(1, self.N):
                out += expr.diff(self.e[i][j]) * de[i][j]
        return out


def symbolic_head(N: int, D: int, d: int) -> SymbolicHead:
    return SymbolicHead(N, D, d)


# The closed forms (module docstring), as certify/bounds/local/_slopes.py states them.

def dP_formula(h: Head, i: int, l: int, t: int, r: int):
    """(a) d_{t,r} P_il."""
    return h.sigma * h.P[i][l] * (delta(i, t) * h.kt[i][l][r] + (delta(l, t) - h.P[i][t]) * h.b[i][r])


def db_formula(h: Head, i: int, E: int, t: int, r: int):
    """(b) d_{t,r} b_i[E]."""
    return delta(i, t) * h.M[E][r]


def dv_formula(h: Head, i: int, l: int, F: int, t: int, r: int):
    """(c) d_{t,r} v~_il[F]."""
    return ((delta(l, t) - h.P[i][t]) * h.WVO[r][F]
            - h.sigma * (delta(i, t) * h.A[i][r][F] + h.b[i][r] * h.P[i][t] * h.vt[i][t][F]))


def dA_formula(h: Head, i: int, r: int, F: int, t: int, s: int):
    """(d) d_{t,s} A_i[r, F]."""
    return (delta(i, t) * h.sigma * h.T[i][s][r][F]
            + h.P[i][t] * (h.sigma * h.b[i][s] * (h.kt[i][t][r] * h.vt[i][t][F] - h.A[i][r][F])
                           + h.M[s][r] * h.vt[i][t][F] + h.kt[i][t][r] * h.WVO[s][F]))


def jacobian_formula(h: Head, i: int, l: int, F: int, E: int):
    """(e) J_il[F, E] = d F_i[F] / d x_l[E]."""
    return (h.P[i][l] * h.WVO[E][F] + h.sigma * h.P[i][l] * h.vt[i][l][F] * h.b[i][E]
            + delta(i, l) * h.sigma * h.A[i][E][F])


def product_formula(h: Head, i: int, l: int, F: int, t: int, r: int):
    """(f) d_{t,r} (P_il v~_il[F]) (`_product_slope`'s docstring)."""
    return h.P[i][l] * (delta(i, t) * h.sigma * (h.kt[i][l][r] * h.vt[i][l][F] - h.A[i][r][F])
                        + (delta(l, t) - h.P[i][t]) * (h.sigma * h.b[i][r] * h.vt[i][l][F] + h.WVO[r][F])
                        - h.sigma * h.b[i][r] * h.P[i][t] * h.vt[i][t][F])


def _entries(h: Head, part: str) -> list[tuple[sp.Expr, sp.Expr]]:
    """(derivative of the definition, closed form) for every entry of one part, by name."""
    N, D = h.N, h.D
    pairs = []
    if part == "a":
        for i, l, t, r in itertools.product(range(N), range(N), range(N), range(D)):
            pairs.append((h.deriv(h.P[i][l], t, r), dP_formula(h, i, l, t, r)))
    elif part == "b":
        for i, E, t, r in itertools.product(range(N), range(D), range(N), range(D)):
            pairs.append((h.deriv(h.b[i][E], t, r), db_formula(h, i, E, t, r)))
    elif part == "c":
        for i, l, F, t, r in itertools.product(range(N), range(N), range(D), range(N), range(D)):
            pairs.append((h.deriv(h.vt[i][l][F], t, r), dv_formula(h, i, l, F, t, r)))
    elif part == "d":
        for i, r, F, t, s in itertools.product(range(N), range(D), range(D), range(N), range(D)):
            pairs.append((h.deriv(h.A[i][r][F], t, s), dA_formula(h, i, r, F, t, s)))
    elif part == "e":
        for i, l, F, E in itertools.product(range(N), range(N), range(D), range(D)):
            pairs.append((h.deriv(h.output[i][F], l, E), jacobian_formula(h, i, l, F, E)))
    elif part == "f":
        for i, l, F, t, r in itertools.product(range(N), range(N), range(D), range(N), range(D)):
            pairs.append((h.deriv(h.P[i][l] * h.vt[i][l][F], t, r), product_formula(h, i, l, F, t, r)))
    else:
        raise ValueError(part)
    return pairs


def _vanishes(expr) -> bool:
    """Exact zero test: expr is a polynomial of the ring (independent symbols); it is the zero polynomial."""
    return expr == 0


def _nonzero_at(expr, h: SymbolicHead, rng: np.random.Generator, points: int = 3) -> str | None:
    """The first of `points` random rational points where the polynomial expr is exactly nonzero, as text, else None.
    The point is a possible one: e_ij > 0 and 0 < w_i < 1 / sum_{j >= 1} e_ij (so P_i0 > 0)."""
    gens = h.ring.gens
    for _ in range(points):
        values = {}
        for g in gens:
            name = str(g)
            values[g] = sp.Rational(int(rng.integers(1, 21) if name.startswith("e_") else rng.integers(-20, 21)),
                                    int(rng.integers(5, 15)))
        for i, w in enumerate(h.w):
            values[w] = 1 / (sum(values[e] for e in h.e[i][1:]) + sp.Rational(int(rng.integers(1, 21)), 7))
        value = expr.as_expr().xreplace({g.as_expr(): v for g, v in values.items()})
        if value != 0:
            shown = ", ".join(f"{g}={v}" for g, v in list(values.items())[:6])
            return f"{value} at {{{shown}, ...}}"
    return None


PARTS = {"a": "d P_il", "b": "d b_i", "c": "d v~_il", "d": "d A_i", "e": "J_il = d F_i / d x_l",
         "f": "d (P_il v~_il)"}


def check_parts(parts: Sequence[str] = tuple(PARTS), sizes: Sequence[tuple[int, int, int]] = SIZES,
                seed: int = 0) -> list[Check]:
    """Each of `parts` ((a)-(f)) at every entry for each (N, D, d) in `sizes`: PROVED if every difference is the
    zero polynomial; else UNPROVED with an exact nonzero value at a rational point, or SAMPLED if none was found."""
    rng = np.random.default_rng(seed)
    heads = [((N, D, d), symbolic_head(N, D, d)) for N, D, d in sizes]
    checks = []
    for part in parts:
        count, failure = 0, None
        for size, h in heads:
            for index, (derivative, closed) in enumerate(_entries(h, part)):
                count += 1
                difference = derivative - closed
                if _vanishes(difference):
                    continue
                witness = _nonzero_at(difference, h, rng)
                what = f"({part}) {PARTS[part]} at (N, D, d) = {size}, entry {index}"
                failure = ((Status.UNPROVED, f"{what}: derivative - closed form = {witness}") if witness is not None
                           else (Status.SAMPLED, f"{what}: SymPy did not reduce it to 0; exactly 0 at 3 random "
                                                 "rational points"))
                break
            if failure:
                break
        checks.append(failure or (Status.PROVED, f"({part}) {PARTS[part]}: derivative - closed form is the zero "
                                                 f"polynomial at all {count} entries, (N, D, d) in {list(sizes)}"))
    return checks


def check_part(part: str, sizes: Sequence[tuple[int, int, int]] = SIZES, seed: int = 0) -> Check:
    """One of (a)-(f) (`check_parts`)."""
    return check_parts((part,), sizes, seed)[0]


def check_shipped_jacobian(cases: Sequence[tuple[int, int, int]] = ((3, 2, 1), (4, 3, 2), (2, 4, 4)),
                           seed: int = 0) -> Check:
    """(e) in float64 against the shipped `certify.jacobian.jacobian` on random one-head layers with all biases:
    |difference| <= 1e-12 (1 + max |J|). SAMPLED."""
    import torch

    from certify.attention import AttentionWeights
    from certify.jacobian import jacobian

    rng = np.random.default_rng(seed)
    worst = 0.0
    for N, D, d in cases:
        t = lambda *shape: rng.standard_normal(shape) / math.sqrt(D)  # noqa: E731
        WQ, WK, WV, WO, bQ, bK, bV, bO = t(D, d), t(D, d), t(D, d), t(d, D), t(d), t(d), t(d), t(D)
        X = rng.standard_normal((N, D))
        weights = AttentionWeights("dp", *(torch.from_numpy(w)[None] for w in (WQ, WK, WV)), torch.from_numpy(WO),
                                   *(torch.from_numpy(b)[None] for b in (bQ, bK, bV)), torch.from_numpy(bO))
        J = jacobian(torch.from_numpy(X)[None], weights)[0].numpy()
        h = Head(X.tolist(), WQ.tolist(), WK.tolist(), WV.tolist(), WO.tolist(), bQ.tolist(), bK.tolist(), bV.tolist(),
                 1 / math.sqrt(d))
        closed = np.array([[[[jacobian_formula(h, i, l, F, E) for E in range(D)] for l in range(N)] for F in range(D)]
                           for i in range(N)])
        gap = float(np.abs(J - closed).max()) / (1 + float(np.abs(J).max()))
        worst = max(worst, gap)
        if not gap <= 1e-12:
            return numeric(False, f"(e) differs from the shipped certify.jacobian.jacobian by {gap:.3g} (relative) at "
                                  f"(N, D, d) = {(N, D, d)}")
    return numeric(True, f"(e) = shipped certify.jacobian.jacobian (dp, one head, biases b_Q, b_K, b_V, b_O) on "
                         f"{len(cases)} random layers, (N, D, d) in {list(cases)}: largest relative gap {worst:.2g}")


def prove() -> ProofResult:
    return combine(CLAIM, check_parts(), scope=SCOPE, cross_checks=[check_shipped_jacobian()])


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
