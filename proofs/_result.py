"""The result every proof returns: one claim, its scope, one status, the evidence behind it."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    """How a claim was established, strongest first (see proofs/README.md).

    PROVED: SymPy proved it exactly for the stated scope (an identity simplified to zero, a sign proven from the
        symbols' assumptions, a limit computed).
    PROVED_MODULO ("PROVED-MODULO"): proved exactly from the named lemmas (other proofs, or standard facts named in
        the evidence), with the step that combines them into the stated constant checked by SymPy.
    VERIFIED: established by rigorous interval arithmetic (mpmath.iv, certify.interval) on the stated scope.
    SAMPLED: numeric evidence only (float64 or mpmath points); the evidence gives the counts.
    UNPROVED: not established: SymPy did not prove it, a sample contradicted it in floating point, or the proof
        raised. Never a claim that the statement is false.
    REFUTED: a rigorous counterexample (exact, or interval-verified) is given: the statement is false.

    Proof modules written before these statuses may use the old names: CHECKED is SAMPLED, FAILED is UNPROVED.
    """

    PROVED = "PROVED"
    PROVED_MODULO = "PROVED-MODULO"
    VERIFIED = "VERIFIED"
    SAMPLED = "SAMPLED"
    UNPROVED = "UNPROVED"
    REFUTED = "REFUTED"
    CHECKED = "SAMPLED"  # deprecated: the old name of SAMPLED
    FAILED = "UNPROVED"  # deprecated: the old name of UNPROVED (a failure is not a proof of falsity)

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        return {"CHECKED": cls.SAMPLED, "FAILED": cls.UNPROVED, "PROVED_MODULO": cls.PROVED_MODULO}.get(str(value))

    @property
    def strength(self) -> int:
        """Order of the statuses that assert a claim holds: PROVED 4 > PROVED-MODULO 3 > VERIFIED 2 > SAMPLED 1;
        UNPROVED 0; REFUTED -1 (the claim is false)."""
        return _STRENGTH[self]

    @property
    def holds(self) -> bool:
        """True for PROVED, PROVED-MODULO, VERIFIED and SAMPLED (evidence that the claim holds)."""
        return self.strength > 0


_STRENGTH = {Status.PROVED: 4, Status.PROVED_MODULO: 3, Status.VERIFIED: 2, Status.SAMPLED: 1, Status.UNPROVED: 0,
             Status.REFUTED: -1}

Scope = Mapping[str, str]


def scope_text(scope: Scope | str) -> str:
    """{"N": ">= 2", "d": ">= 1"} -> "N >= 2, d >= 1"; a plain string is returned as is; empty -> "(scope not stated)"."""
    if isinstance(scope, str):
        return scope or "(scope not stated)"
    if not scope:
        return "(scope not stated)"
    return ", ".join(f"{k} {v}" if v[:1] in "<>=!" or v.startswith("in ") else f"{k} = {v}" for k, v in scope.items())


@dataclass(frozen=True)
class ProofResult:
    """Outcome of one claim.

    Attributes:
        claim: the statement checked, in words and formulas (MATH.md names).
        status: one of `Status` (PROVED, PROVED-MODULO, VERIFIED, SAMPLED, UNPROVED, REFUTED).
        evidence: how: the identity that simplified to zero, the number of samples and the largest violation, the
            interval enclosure, or the counterexample.
        name: the proof module's name (filled in by the runner when empty).
        seconds: wall time of the check (filled in by the runner).
        scope: where the claim is established, e.g. {"N": ">= 2", "d": ">= 1"} or {"(N, D)": "in {(2, 1), (3, 2)}"}.
        lemmas: names of the proof modules (or standard facts) a PROVED-MODULO claim rests on.
    """

    claim: str
    status: Status
    evidence: str
    name: str = ""
    seconds: float = 0.0
    scope: Scope | str = field(default_factory=dict)
    lemmas: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Evidence that the claim holds (PROVED, PROVED-MODULO, VERIFIED or SAMPLED)."""
        return self.status.holds

    @property
    def scope_text(self) -> str:
        return scope_text(self.scope)


def weakest(statuses: Sequence[Status]) -> Status:
    """The status of a claim made of parts that must all hold: REFUTED if any part is refuted, else the weakest."""
    if not statuses:
        return Status.UNPROVED
    return min(statuses, key=lambda s: s.strength)


def combine(claim: str, parts: list[tuple[Status, str]], scope: Scope | str | None = None,
            lemmas: Sequence[str] = (), cross_checks: Sequence[tuple[Status, str]] = ()) -> ProofResult:
    """Join the sub-checks of one claim: REFUTED if any part is refuted, else the weakest part's status.

    With `lemmas`, a claim whose parts are all PROVED is PROVED-MODULO those lemmas. `cross_checks` (e.g. a numeric
    grid next to an interval enclosure) are reported, and can only lower the status (to UNPROVED or REFUTED when they
    fail); passing, they never raise it.
    """
    status = weakest([s for s, _ in parts])
    if lemmas and status is Status.PROVED:
        status = Status.PROVED_MODULO
    failed = [s for s, _ in cross_checks if not s.holds]
    if failed:
        status = weakest([status, *failed])
    evidence = "; ".join(f"[{s.value}] {text}" for s, text in parts)
    if cross_checks:
        evidence += "; cross-checks: " + "; ".join(f"[{s.value}] {text}" for s, text in cross_checks)
    if lemmas:
        evidence += f"; lemmas: {', '.join(lemmas)}"
    return ProofResult(claim=claim, status=status, evidence=evidence, scope={} if scope is None else scope,
                       lemmas=tuple(lemmas))
