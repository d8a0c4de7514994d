"""Discover, run and report the proofs in this package (see README.md, "Adding a proof")."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from ._result import ProofResult, Status

PACKAGE = "proofs"


def proof_names() -> list[str]:
    """Names of the proof modules: every public module of the package (no leading underscore), sorted."""
    path = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(path)]) if not m.name.startswith("_"))


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def run_one(name: str, check: Callable[[], ProofResult]) -> ProofResult:
    """Run one check, time it, and turn an exception into a FAILED result with the traceback's last line."""
    start = time.perf_counter()
    try:
        result = check()
        if not isinstance(result, ProofResult):
            raise TypeError(f"proof {name} returned {type(result).__name__}, expected ProofResult")
    except Exception as exc:  # a proof that raises has not proved anything
        tb = traceback.format_exc(limit=3).strip().splitlines()
        result = ProofResult(claim=f"({name} raised)", status=Status.FAILED,
                             evidence=f"{type(exc).__name__}: {exc} | {tb[-2].strip() if len(tb) > 1 else ''}")
    seconds = time.perf_counter() - start
    return dataclasses.replace(result, name=result.name or name, seconds=seconds)


def run_module(name: str, inject: str | None = None) -> ProofResult | None:
    """Run proof module `name`; with `inject`, run its INJECTIONS[inject] instead (None if it has none)."""
    try:
        module = _load(name)
    except Exception as exc:
        return ProofResult(claim=f"(import of {name} failed)", status=Status.FAILED,
                           evidence=f"{type(exc).__name__}: {exc}", name=name)
    if inject is None:
        prove = getattr(module, "prove", None)
        if not callable(prove):
            return ProofResult(claim=f"({name} has no prove())", status=Status.FAILED,
                               evidence="a proof module must define prove() -> ProofResult (see proofs/README.md)",
                               name=name)
        return run_one(name, prove)
    injections: dict[str, Callable[[], ProofResult]] = getattr(module, "INJECTIONS", {})
    if inject not in injections:
        return None
    return run_one(name, injections[inject])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def errata() -> dict[str, str]:
    """Proof modules that check a statement of MATH.md *as written* which certify does not rely on (module-level
    ``ERRATUM = "..."`` says what is wrong and where the corrected claim is proved), by name."""
    found = {}
    for name in proof_names():
        try:
            note = getattr(_load(name), "ERRATUM", None)
        except Exception:  # an unimportable module is reported FAILED by run_module
            continue
        if note:
            found[name] = note
    return found


def counts_as_failure(result: ProofResult, strict: bool = False) -> bool:
    """A FAILED claim fails the run, except a FAILED erratum of MATH.md (unless strict)."""
    return not result.ok and (strict or result.name not in errata())


def markdown_report(results: Sequence[ProofResult], total_seconds: float, inject: str | None = None) -> str:
    """The Markdown report: a summary line, the MATH.md errata found, then one table row per claim."""
    counts = {s: sum(r.status is s for r in results) for s in Status}
    lines = ["# certify proofs report", ""]
    if inject:
        lines += [f"Injected error: `{inject}` (deliberately wrong input; these checks must FAIL).", ""]
    found = [(r, errata()[r.name]) for r in results if r.name in errata() and not r.ok]
    if found:
        lines += ["**MATH.md errata.** These statements of MATH.md are false as written (FAILED below, with the "
                  "counterexample). certify does not rely on them; each note says where the corrected claim is "
                  "proved. They do not fail the run unless `--strict` is given.", ""]
        lines += [f"- `{r.name}`: {_cell(note)}" for r, note in found] + [""]
    lines += [
        f"{len(results)} claims: {counts[Status.PROVED]} PROVED, {counts[Status.CHECKED]} CHECKED, "
        f"{counts[Status.FAILED]} FAILED; total {total_seconds:.1f} s.",
        "",
        "PROVED: SymPy proved it symbolically. CHECKED: verified numerically or with interval arithmetic on the "
        "stated samples. FAILED: counterexample or error given.",
        "",
        "| proof | status | claim | evidence | seconds |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| `{r.name}` | **{r.status.value}** | {_cell(r.claim)} | {_cell(r.evidence)} | {r.seconds:.2f} |")
    return "\n".join(lines) + "\n"


def text_table(results: Sequence[ProofResult]) -> str:
    """A short plain-text table for the terminal: status, seconds, name, claim (truncated)."""
    width = max((len(r.name) for r in results), default=4)
    rows = [f"{'status':8} {'sec':>6}  {'proof':{width}}  claim"]
    for r in results:
        claim = r.claim if len(r.claim) <= 90 else r.claim[:87] + "..."
        rows.append(f"{r.status.value:8} {r.seconds:6.2f}  {r.name:{width}}  {claim}")
        if r.status is Status.FAILED:
            rows.append(f"{'':8} {'':6}  {'':{width}}  -> {r.evidence}")
    return "\n".join(rows)


def run_all(names: Sequence[str] | None = None, inject: str | None = None) -> list[ProofResult]:
    """Run the named proofs (default: all). With `inject`, run only the modules offering that injection."""
    results = []
    for name in names or proof_names():
        result = run_module(name, inject)
        if result is not None:
            results.append(result)
    return results


def injection_names() -> list[str]:
    """All error names offered by some module's INJECTIONS."""
    found: set[str] = set()
    for name in proof_names():
        found.update(getattr(_load(name), "INJECTIONS", {}))
    return sorted(found)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m proofs` (shared with `certify proofs`)."""
    parser.add_argument("names", nargs="*", help="proof modules to run (default: all)")
    parser.add_argument("--report", default="proofs-report.md", help="Markdown report path (default: %(default)s)")
    parser.add_argument("--inject-error", default=None, metavar="KIND",
                        help="run the checks against a deliberately wrong input (e.g. jacobian, bound); "
                             "they must FAIL, so the exit code is then non-zero")
    parser.add_argument("--list", action="store_true", help="list proofs and injectable errors, then exit")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--strict", action="store_true",
                        help="also fail on FAILED errata of MATH.md (statements certify does not rely on)")


def run_args(args: argparse.Namespace) -> int:
    """Run as configured by `add_arguments`; return 0 if every claim is PROVED or CHECKED, else 1."""
    if args.list:
        print("proofs:", " ".join(proof_names()))
        print("injectable errors:", " ".join(injection_names()))
        return 0
    unknown = sorted(set(args.names) - set(proof_names()))
    if unknown:
        print(f"unknown proof(s): {', '.join(unknown)}; expected some of {', '.join(proof_names())}", file=sys.stderr)
        return 2
    if args.inject_error is not None and args.inject_error not in injection_names():
        print(f"unknown --inject-error {args.inject_error!r}; expected one of {injection_names()}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = run_all(args.names, args.inject_error)
    total = time.perf_counter() - start
    report = markdown_report(results, total, args.inject_error)
    Path(args.report).write_text(report)
    failed = sum(counts_as_failure(r, args.strict) for r in results)
    known = sum(not r.ok for r in results) - failed
    if not args.quiet:
        print(text_table(results))
    note = f" (and {known} FAILED MATH.md erratum, see the report)" if known else ""
    print(f"{len(results)} claims, {failed} FAILED{note}, {total:.1f} s; report written to {args.report}")
    return 1 if failed or not results else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proofs", description="Run the proofs of certify's claims.")
    add_arguments(parser)
    return run_args(parser.parse_args(argv))


def standalone(prove: Callable[[], ProofResult], name: str) -> int:
    """Body of a proof module's `if __name__ == "__main__"` block: run, print, exit 1 on FAILED."""
    if name == "__main__":
        name = Path(sys.argv[0]).stem
    result = run_one(name.rsplit(".", 1)[-1], prove)
    print(f"{result.status.value} ({result.seconds:.2f} s) {result.name}: {result.claim}")
    print(f"  evidence: {result.evidence}")
    return 0 if result.ok else 1
