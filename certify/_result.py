"""The result type: one frozen `Certificate` per bound, whatever computed it.

Like `scipy.optimize.OptimizeResult`, but with fixed fields:

- ``value``: the bound on the Lipschitz constant (an operator norm of the Jacobian, MATH.md section 0);
- ``kind``: ``"upper"`` or ``"lower"``;
- ``certified``: True only for an upper bound proven by a theorem (MATH.md / `proofs/`) and computed with
  outward rounding or a verified margin. Lower bounds are attained at a stored input (``details["witness"]``)
  and are never marked certified; estimates are never certified;
- ``method``, ``scope`` (``"global"`` or the local domain), ``norm`` (``"2"`` or ``"inf"``), ``seconds``;
- ``message``: one human sentence (the guarantee, or why it is only an estimate);
- ``details``: method-specific data (witness inputs, constants used, solver statistics).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Kind = Literal["upper", "lower"]
Norm = Literal["2", "inf"]
NORMS: tuple[str, ...] = ("2", "inf")


@dataclasses.dataclass(frozen=True)
class Certificate:
    value: float
    kind: Kind
    certified: bool
    method: str
    scope: str
    norm: Norm
    seconds: float = 0.0
    message: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("upper", "lower"):
            raise ValueError(f"kind must be 'upper' or 'lower', got {self.kind!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.certified and self.kind != "upper":
            raise ValueError("only upper bounds can be certified")

    def as_row(self) -> dict[str, Any]:
        """The JSON row of README's schema: method, kind, scope, value, certified, seconds."""
        return {
            "method": self.method,
            "kind": self.kind,
            "scope": self.scope,
            "value": self.value,
            "certified": self.certified,
            "seconds": self.seconds,
        }
