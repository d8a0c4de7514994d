"""Running a chain of inequalities over test instances: each step lhs <= rhs, with the worst ratio and a
counterexample if any step fails."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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
            return Status.FAILED, f"{self.name}: violated, {self.counterexample}"
        return Status.CHECKED, f"{self.name}: holds on {self.count} checks (max lhs/rhs {self.worst:.4f})"


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
