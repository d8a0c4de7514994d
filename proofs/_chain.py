"""Running a chain of inequalities over test instances: each step lhs <= rhs, with the worst ratio and a
counterexample if any step fails."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace

import sympy as sp

from proofs._check import Check
from proofs._result import Status

RELATIVE, ABSOLUTE = 1e-9, 1e-12


@dataclasses.dataclass
class Step:
    """Accumulates the checks of one inequality."""

    name: str
    count: int = 0
    worst: float = 0.0
    counterexample: str = ""

    def check(self, lhs: float, rhs: float, where: str) -> None:
        self.count += 1
        ratio = lhs / rhs if rhs > 0 else (0.0 if lhs <= 0 else float("inf"))
        self.worst = max(self.worst, ratio)
        if not lhs <= rhs * (1 + RELATIVE) + ABSOLUTE and not self.counterexample:
            self.counterexample = f"{lhs:.6g} > {rhs:.6g} at {where}"

    def result(self) -> Check:
        if self.counterexample:
            return Status.UNPROVED, f"{self.name}: violated, {self.counterexample}"
        return Status.SAMPLED, f"{self.name}: holds on {self.count} checks (max lhs/rhs {self.worst:.4f})"


def expression_bound(expression: object) -> Callable[[object, int], float]:
    """Numeric bound(layer, N) from a `certify.symbolic.BoundExpression` (norms from `weight_norms`)."""
    import sympy as sp

    from certify.symbolic import N, d, weight_norms

    keys = sorted(expression.norms)
    f = sp.lambdify([N, d] + [expression.norms[k] for k in keys], expression.expr, modules="mpmath")

    def bound(layer: object, N_value: int) -> float:
        values = weight_norms(layer, expression.norm)
        return float(f(N_value, layer.W_Q.shape[2], *(values[k] for k in keys)))

    return bound


# --- the shipped closed-form constants, called on SymPy symbols, and the exact assembly of the chains -------------

PHI_INV = sp.Function("phi_inv")  # stands for certify's phi_inverse(n) = W_0(n/e) (proved and cross-checked in phi_inverse)
SYMPY_MATH = SimpleNamespace(sqrt=sp.sqrt)
N_SYMBOL, D_SYMBOL = sp.symbols("N d", positive=True, integer=True)


@contextlib.contextmanager
def symbolic_globals(module: ModuleType, **values: object) -> Iterator[None]:
    """Temporarily replace globals of a shipped module (e.g. its `math` by SymPy's sqrt), so that calling one of its
    functions on SymPy symbols returns the formula it computes. Restored on exit."""
    saved = {k: module.__dict__[k] for k in values}
    module.__dict__.update(values)
    try:
        yield
    finally:
        module.__dict__.update(saved)


def shipped_paper_constant(norm: str) -> sp.Expr:
    """`certify.bounds.paper_constant(N, d, norm)` evaluated on the symbols N, d (phi_inverse -> phi_inv)."""
    from certify.bounds.closed_form import _paper

    with symbolic_globals(_paper, phi_inverse=PHI_INV, math=SYMPY_MATH):
        return sp.sympify(_paper.paper_constant(N_SYMBOL, D_SYMBOL, norm))


def shipped_default_constant(norm: str) -> sp.Expr:
    """`certify.bounds.default_constant(N, d, norm)` (the proven c_p(N, d) bound the factorised bound falls back to)
    evaluated on the symbols N, d, without its final round_up."""
    from certify.bounds.closed_form import _universal

    with symbolic_globals(_universal, phi_inverse=PHI_INV, math=SYMPY_MATH, round_up=lambda x: x):
        return sp.sympify(_universal.default_constant(N_SYMBOL, D_SYMBOL, norm))


def assembled_constant(kind: str, norm: str) -> tuple[sp.Expr, str]:
    """The constant the chain's step inequalities give, assembled in SymPy (kind "paper": Theorem 3.2 per unit of the
    weight factor; kind "core": the bound on c_p(N, d) = sup ||M(Y)||_p in projected coordinates, A = I).

    Per block row i of one head (steps s4-s8): ||J_i:|| <= a + 2 k S1 + 2 k S2 with S1 = sum_k P_ik ||v_k||^2 and
    S2 = sum_j P_ij ||v_j|| ||u_j|| both <= z W (Corollary; z = sqrt(d) for the paper's logits / sqrt(d), z = 1 for
    M), with a and k per case below; SymPy checks that the coefficients of S1, S2 are >= 0, so substituting the upper
    bounds is valid. The 2-norm multiplies by sqrt(N) (step s1)."""
    W, s = PHI_INV(N_SYMBOL - 1), sp.sqrt(D_SYMBOL)
    S1, S2, c = sp.symbols("S1 S2 c_Q", nonnegative=True)
    if kind == "paper" and norm == "inf":  # ||A|| <= c_Q/s; inf terms <= (c_Q/s) S (s6, s7)
        row, z, unit = c / s + 2 * (c / s) * S1 + 2 * (c / s) * S2, s, c
    elif kind == "paper":  # ||P_i|| ||A|| <= q^2/s; 2-norm terms <= (q^2/d) S; q^2 = c
        row, z, unit = c / s + 2 * (c / D_SYMBOL) * S1 + 2 * (c / D_SYMBOL) * S2, s, c
    elif norm == "inf":  # M: ||P_i I||_inf <= 1, ||a b^T||_inf <= sqrt(d) ||a|| ||b||
        row, z, unit = 1 + 2 * s * S1 + 2 * s * S2, 1, 1
    else:
        row, z, unit = 1 + 2 * S1 + 2 * S2, 1, 1
    monotone = all(sp.diff(row, v).is_nonnegative for v in (S1, S2))
    constant = sp.simplify(row.subs({S1: z * W, S2: z * W}) / unit)
    if norm == "2":
        constant = sp.sqrt(N_SYMBOL) * constant
    how = (f"row bound {sp.sstr(row)} increasing in S1, S2 (SymPy: {monotone}); S1, S2 <= {sp.sstr(z)} W (Corollary)"
           + (", times sqrt(N) (s1)" if norm == "2" else ""))
    return (constant if monotone else sp.nan), how


def check_assembly(kind: str, norm: str) -> Check:
    """PROVED if the shipped constant (paper_constant or default_constant, called on SymPy symbols) equals the
    constant assembled from the chain's steps; UNPROVED with both formulas otherwise."""
    from proofs._check import fact

    assembled, how = assembled_constant(kind, norm)
    shipped = shipped_paper_constant(norm) if kind == "paper" else shipped_default_constant(norm)
    name = "paper_constant" if kind == "paper" else "default_constant"
    same = sp.simplify(shipped - assembled) == 0
    return fact(same, f"assembly ({norm}): {how} gives {sp.sstr(assembled)}; shipped certify.bounds.{name}(N, d, "
                      f"'{norm}') called on SymPy symbols is {sp.sstr(shipped)}: "
                      + ("identical" if same else "DIFFERENT"))


def attention_weights(layer: object) -> object:
    """`certify.attention.AttentionWeights` (tied L2, float64) of a `proofs._l2numeric.Layer`."""
    import torch

    from certify.attention import AttentionWeights

    W_Q = torch.tensor(layer.W_Q)
    return AttentionWeights("l2", W_Q, W_Q, torch.tensor(layer.W_V), torch.tensor(layer.W_O))


def shipped_paper_bound(norm: str) -> Callable[[int], Callable[[object, int], float]]:
    """bound_for_heads(H) -> bound(layer, N): the certified value of the shipped `certify.bounds.paper_bound`."""
    from certify.bounds.closed_form import _paper

    return lambda H: lambda layer, N: _paper.paper_bound(attention_weights(layer), N, norm).value


def check_weight_factor(norm: str, count: int = 24) -> Check:
    """Cross-check of the shipped code: `certify.bounds.paper_weight_factor` equals Theorem 3.2's weight factor,
    computed here in numpy (inf: ||W^O^T|| max_h ||W^Q_h|| ||W^Q_h^T|| max_h ||W^V_h^T||; 2: sqrt(sum_h ||W^Q_h||^4
    ||W^V_h||^2) ||W^O||), to 1e-12 relative, on `count` test layers (SAMPLED)."""
    import numpy as np

    from certify.bounds.closed_form import _paper
    from proofs._check import numeric
    from proofs._l2numeric import instances, op_norm

    worst = 0.0
    for _, layer, label in instances(norm, count, seed=3, climb=0):
        H = layer.H
        if norm == "inf":
            reference = (op_norm(layer.W_O.T, norm) * max(op_norm(layer.W_Q[h], norm) * op_norm(layer.W_Q[h].T, norm)
                                                          for h in range(H)) * max(op_norm(layer.W_V[h].T, norm) for h in range(H)))
        else:
            reference = float(np.sqrt(sum(op_norm(layer.W_Q[h], norm) ** 4 * op_norm(layer.W_V[h], norm) ** 2
                                          for h in range(H)))) * op_norm(layer.W_O, norm)
        shipped = float(_paper.paper_weight_factor(attention_weights(layer), norm))
        gap = abs(shipped / reference - 1)
        worst = max(worst, gap)
        if not gap <= 1e-12:
            return numeric(False, f"shipped paper_weight_factor({norm}) = {shipped:.12g} != {reference:.12g} at {label}")
    return numeric(True, f"shipped certify.bounds.paper_weight_factor({norm}) = Theorem 3.2's weight factor on {count} "
                         f"layers (largest relative gap {worst:.2g})")


def constant_text(kind: str, norm: str) -> str:
    """The assembled constant as printed in a claim (phi_inv(n) = W_0(n/e)): generated from the SymPy expression."""
    return sp.sstr(assembled_constant(kind, norm)[0]).replace("phi_inv(N - 1)", "W_0((N-1)/e)")
