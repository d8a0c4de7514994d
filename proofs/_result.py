"""The result every proof returns: one claim, one status, the evidence behind it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(str, enum.Enum):
    """How a claim was established.

    PROVED: SymPy proved it symbolically (a difference simplified to zero, a sign was proven, a limit computed).
    CHECKED: verified numerically or with interval arithmetic on stated samples; the evidence says how many.
    FAILED: the check found a counterexample (given in the evidence) or the proof raised.
    """

    PROVED = "PROVED"
    CHECKED = "CHECKED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class ProofResult:
    """Outcome of one claim.

    Attributes:
        claim: the statement checked, in words and formulas (MATH.md names).
        status: PROVED, CHECKED or FAILED.
        evidence: how: the identity that simplified to zero, the number of samples and the largest violation,
            the interval enclosure, or the counterexample when FAILED.
        name: the proof module's name (filled in by the runner when empty).
        seconds: wall time of the check (filled in by the runner).
    """

    claim: str
    status: Status
    evidence: str
    name: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAILED


def combine(claim: str, parts: list[tuple[Status, str]]) -> ProofResult:
    """Join sub-checks of one claim: FAILED if any failed, else CHECKED if any was numeric, else PROVED."""
    statuses = [status for status, _ in parts]
    if Status.FAILED in statuses:
        status = Status.FAILED
    elif Status.CHECKED in statuses:
        status = Status.CHECKED
    else:
        status = Status.PROVED
    evidence = "; ".join(f"[{s.value}] {text}" for s, text in parts)
    return ProofResult(claim=claim, status=status, evidence=evidence)
