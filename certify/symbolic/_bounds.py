"""Bound expressions of Theorem 3.2 and of the factorised bound, in SymPy (MATH.md sections 2 and 4).

With W = phi^{-1}(N-1) = W_0((N-1)/e):

    Lip_inf(F) <= (4 W + 1/sqrt(d)) ||W^O^T||_inf max_h(||W^Q_h||_inf ||W^Q_h^T||_inf) max_h ||W^V_h^T||_inf
    Lip_2(F)   <= sqrt(N)/sqrt(d) (4 W + 1) sqrt(sum_h ||W^Q_h||_2^4 ||W^V_h||_2^2) ||W^O||_2
    Lip_p(F)   <= ||[G_1 ... G_H]||_p c_p(N, d) ||V||_p          (factorised; ||V||_2 = ||[V_1 ... V_H]||_2,
                                                                  ||V||_inf = max_h ||V_h^T||_inf)

with the per-head bound on c_p(N, d) = sup_Y ||M(Y)||_p that the Theorem 3.2 chain gives in projected
coordinates: c_2 <= sqrt(N) (4 W + 1), c_inf <= 1 + 4 sqrt(d) W.
"""

from __future__ import annotations

import dataclasses

import mpmath
import sympy as sp

N, d = sp.symbols("N d", positive=True, integer=True)


def phi_inverse_expr(n: sp.Expr = N - 1) -> sp.Expr:
    """phi^{-1}(n) = W_0(n / e), phi(x) = x e^{x+1} (MATH.md section 4)."""
    return sp.LambertW(n / sp.E)


@dataclasses.dataclass(frozen=True)
class BoundExpression:
    """A bound as a SymPy expression with named norm symbols.

    Attributes:
        name: "paper" or "factorised".
        norm: "2" or "inf".
        expr: the bound, in N, d and the symbols of `norms`.
        norms: {name: symbol}, e.g. {"W_O": ..., "W_Q1": ..., "W_V1": ...}; names match `weight_norms`.
    """

    name: str
    norm: str
    expr: sp.Expr
    norms: dict[str, sp.Symbol]

    def latex(self) -> str:
        """LaTeX of the bound, with norms printed as \\|W^Q_h\\|_p."""
        return sp.latex(self.expr, symbol_names={s: _latex_name(k, self.norm) for k, s in self.norms.items()})

    def evaluate(self, values: dict[str, float], N_value: int, d_value: int, digits: int = 30) -> mpmath.mpf:
        """The bound at the given norms (keyed like `norms`), N and d, to `digits` significant digits."""
        missing = set(self.norms) - set(values)
        if missing:
            raise ValueError(f"missing norm values {sorted(missing)}; expected keys {sorted(self.norms)}")
        subs = {self.norms[k]: sp.Float(values[k], digits) for k in self.norms}
        subs.update({N: N_value, d: d_value})
        return mpmath.mpf(str(sp.N(self.expr.subs(subs), digits)))


def _latex_name(key: str, norm: str) -> str:
    p = r"\infty" if norm == "inf" else "2"
    if key == "c":
        return rf"c_{{{p}}}(N, d)"
    if key in ("G", "V"):
        return rf"\|{key}\|_{{{p}}}"
    transpose = key.endswith("T")
    body = key[2:-1] if transpose else key[2:]
    matrix, index = body[0], body[1:]
    sub = rf"_{{{index}}}" if index else ""
    return rf"\|W^{{{matrix}{' T' if transpose else ''}}}{sub}\|_{{{p}}}"


def paper_bound_expr(norm: str, H: int = 1, q_power: int | None = None) -> BoundExpression:
    """Theorem 3.2 bound (module docstring) for H heads; norm symbols W_O (W_OT for inf), W_Q<h>, W_Q<h>T, W_V<h>T.

    `q_power` is the total power of the W^Q norms: under the square root of the 2-norm bound (theorem: 4), and
    (||W^Q_h||_inf ||W^Q_h^T||_inf)^(q_power/2) in the inf-norm bound (theorem: 2). Change it only to build the
    known-false variants (MATH.md section 4, "Known mistakes": ||W^Q||_2^2) that tests of the checks need.
    """
    w = phi_inverse_expr()
    if norm == "inf":
        names = ["W_OT"] + [f"W_Q{h}" for h in range(1, H + 1)] + [f"W_Q{h}T" for h in range(1, H + 1)] + \
            [f"W_V{h}T" for h in range(1, H + 1)]
        s = {k: sp.Symbol(k, nonnegative=True) for k in names}
        power = sp.Rational(2 if q_power is None else q_power, 2)
        q = sp.Max(*((s[f"W_Q{h}"] * s[f"W_Q{h}T"]) ** power for h in range(1, H + 1)))
        v = sp.Max(*(s[f"W_V{h}T"] for h in range(1, H + 1)))
        return BoundExpression("paper", norm, (4 * w + 1 / sp.sqrt(d)) * s["W_OT"] * q * v, s)
    if norm == "2":
        names = ["W_O"] + [f"W_Q{h}" for h in range(1, H + 1)] + [f"W_V{h}" for h in range(1, H + 1)]
        s = {k: sp.Symbol(k, nonnegative=True) for k in names}
        total = sum(s[f"W_Q{h}"] ** (4 if q_power is None else q_power) * s[f"W_V{h}"] ** 2 for h in range(1, H + 1))
        return BoundExpression("paper", norm, sp.sqrt(N) / sp.sqrt(d) * (4 * w + 1) * sp.sqrt(total) * s["W_O"], s)
    raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")


def universal_constant_bound_expr(norm: str) -> sp.Expr:
    """Theorem 3.2's chain in projected coordinates: c_2(N, d) <= sqrt(N)(4 W + 1), c_inf(N, d) <= 1 + 4 sqrt(d) W."""
    w = phi_inverse_expr()
    if norm == "2":
        return sp.sqrt(N) * (4 * w + 1)
    if norm == "inf":
        return 1 + 4 * sp.sqrt(d) * w
    raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")


def factorised_bound_expr(norm: str, constant: sp.Expr | None = None) -> BoundExpression:
    """||[G_1 ... G_H]||_p c ||V||_p with norm symbols G and V; c defaults to the symbol c (the universal constant).

    Pass `constant=universal_constant_bound_expr(norm)` for the closed-form factorised bound.
    """
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    s = {"G": sp.Symbol("G", nonnegative=True), "V": sp.Symbol("V", nonnegative=True)}
    if constant is None:
        s["c"] = sp.Symbol("c", positive=True)
        constant = s["c"]
    return BoundExpression("factorised", norm, s["G"] * constant * s["V"], s)


def weight_norms(weights: object, norm: str) -> dict[str, float]:
    """Numeric values (float64) of the norm symbols of `paper_bound_expr` and `factorised_bound_expr`.

    `weights` is a `certify.attention.AttentionWeights` (or any object with W_Q, W_V, W_O arrays); G_h = W^O_h^T W^{V,h T} V_h, V_h = W^Q_h / d^{1/4}.
    """
    import numpy as np

    def array(value: object) -> np.ndarray:
        return np.asarray(value.detach().cpu().double() if hasattr(value, "detach") else value, dtype=np.float64)

    W_Q, W_V, W_O = (array(getattr(weights, k)) for k in ("W_Q", "W_V", "W_O"))
    H, D, dd = W_Q.shape

    def p(M: np.ndarray) -> float:
        return float(np.linalg.norm(M, 2)) if norm == "2" else float(np.abs(M).sum(axis=1).max())

    V = W_Q / dd**0.25
    G = [W_O[h * dd:(h + 1) * dd].T @ W_V[h].T @ V[h] for h in range(H)]
    out = {"G": p(np.concatenate(G, axis=1))}
    out["V"] = p(np.concatenate(list(V), axis=1)) if norm == "2" else max(p(V[h].T) for h in range(H))
    if norm == "2":
        out["W_O"] = p(W_O)
        out.update({f"W_Q{h + 1}": p(W_Q[h]) for h in range(H)})
        out.update({f"W_V{h + 1}": p(W_V[h]) for h in range(H)})
    else:
        out["W_OT"] = p(W_O.T)
        out.update({f"W_Q{h + 1}": p(W_Q[h]) for h in range(H)})
        out.update({f"W_Q{h + 1}T": p(W_Q[h].T) for h in range(H)})
        out.update({f"W_V{h + 1}T": p(W_V[h].T) for h in range(H)})
    return out
