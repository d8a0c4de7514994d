"""Discover, run and report the proofs in this package (see README.md, "Adding a proof")."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import multiprocessing
import os
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
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
    """Run one check, time it, and turn an exception into an UNPROVED result with the traceback's last line."""
    start = time.perf_counter()
    try:
        result = check()
        if not isinstance(result, ProofResult):
            raise TypeError(f"proof {name} returned {type(result).__name__}, expected ProofResult")
    except Exception as exc:  # a proof that raises has not proved anything
        tb = traceback.format_exc(limit=3).strip().splitlines()
        result = ProofResult(claim=f"({name} raised)", status=Status.UNPROVED,
                             evidence=f"{type(exc).__name__}: {exc} | {tb[-2].strip() if len(tb) > 1 else ''}")
    seconds = time.perf_counter() - start
    return dataclasses.replace(result, name=result.name or name, seconds=seconds)


def run_module(name: str, inject: str | None = None) -> ProofResult | None:
    """Run proof module `name`; with `inject`, run its INJECTIONS[inject] instead (None if it has none)."""
    try:
        module = _load(name)
    except Exception as exc:
        return ProofResult(claim=f"(import of {name} failed)", status=Status.UNPROVED,
                           evidence=f"{type(exc).__name__}: {exc}", name=name)
    if inject is None:
        prove = getattr(module, "prove", None)
        if not callable(prove):
            return ProofResult(claim=f"({name} has no prove())", status=Status.UNPROVED,
                               evidence="a proof module must define prove() -> ProofResult (see proofs/README.md)",
                               name=name)
        return run_one(name, prove)
    injections: dict[str, Callable[[], ProofResult]] = getattr(module, "INJECTIONS", {})
    if inject not in injections:
        return None
    return run_one(name, injections[inject])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def required_status(name: str) -> Status:
    """The status certify needs for proof `name`: its module's ``REQUIRES`` (default SAMPLED, i.e. the claim must
    hold on the evidence given); ``REQUIRES = Status.REFUTED`` marks a known-false statement that certify must not
    use (the proof must refute it)."""
    try:
        return Status(getattr(_load(name), "REQUIRES", Status.SAMPLED))
    except Exception:  # an unimportable module is reported UNPROVED by run_module
        return Status.SAMPLED


def meets(status: Status, required: Status) -> bool:
    """Is `status` at least `required`? REFUTED meets only REFUTED; otherwise compare strengths
    (PROVED > PROVED-MODULO > VERIFIED > SAMPLED > UNPROVED)."""
    if required is Status.REFUTED:
        return status is Status.REFUTED
    return status.strength >= required.strength


def lemma_problems(result: ProofResult, results: Sequence[ProofResult]) -> list[str]:
    """Lemmas of `result` that are proof modules run here and do not hold ("name: STATUS")."""
    by_name = {r.name: r for r in results}
    return [f"{lemma}: {by_name[lemma].status.value}" for lemma in result.lemmas
            if lemma in by_name and not by_name[lemma].ok]


def counts_as_failure(result: ProofResult, results: Sequence[ProofResult] = ()) -> bool:
    """A claim fails the run when its status is below what certify needs (`required_status`), or when it is
    PROVED-MODULO a lemma (run in the same batch) that does not hold."""
    return not meets(result.status, required_status(result.name)) or bool(lemma_problems(result, results))


def as_json(results: Sequence[ProofResult], total_seconds: float, inject: str | None = None) -> dict:
    """The machine-readable report: one entry per claim with status, scope, required status and evidence."""
    return {
        "inject": inject,
        "seconds": total_seconds,
        "counts": {s.value: sum(r.status is s for r in results) for s in _STATUSES},
        "claims": [{"name": r.name, "status": r.status.value, "required": required_status(r.name).value,
                    "ok": not counts_as_failure(r, results), "claim": r.claim, "scope": r.scope_text,
                    "lemmas": list(r.lemmas), "evidence": r.evidence, "seconds": r.seconds} for r in results],
    }


_STATUSES = (Status.PROVED, Status.PROVED_MODULO, Status.VERIFIED, Status.SAMPLED, Status.UNPROVED, Status.REFUTED)
LEGEND = ("PROVED: exact (SymPy) for the stated scope. PROVED-MODULO: exact from the named lemmas. VERIFIED: rigorous "
          "interval arithmetic. SAMPLED: numeric evidence only, with counts. UNPROVED: not established (never a claim "
          "of falsity). REFUTED: a rigorous counterexample. A claim fails the run when its status is below the one "
          "certify needs (column `needs`; REFUTED for a known-false variant certify must not use).")


def summary(results: Sequence[ProofResult], total_seconds: float) -> str:
    counts = ", ".join(f"{sum(r.status is s for r in results)} {s.value}" for s in _STATUSES)
    failing = sum(counts_as_failure(r, results) for r in results)
    return f"{len(results)} claims: {counts}; {failing} below what certify needs; total {total_seconds:.1f} s."


def markdown_report(results: Sequence[ProofResult], total_seconds: float, inject: str | None = None) -> str:
    """The Markdown report: a summary line, the legend, then one table row per claim."""
    lines = ["# certify proofs report", ""]
    if inject:
        lines += [f"Injected error: `{inject}` (deliberately wrong input; these checks must not hold).", ""]
    lines += [summary(results, total_seconds), "", LEGEND, "",
              "| proof | status | needs | claim | scope | evidence | seconds |", "|---|---|---|---|---|---|---|"]
    for r in results:
        flag = " (below)" if counts_as_failure(r, results) else ""
        evidence = r.evidence + "".join(f"; LEMMA DOES NOT HOLD: {p}" for p in lemma_problems(r, results))
        lines.append(f"| `{r.name}` | **{r.status.value}**{flag} | {required_status(r.name).value} | {_cell(r.claim)} | "
                     f"{_cell(r.scope_text)} | {_cell(evidence)} | {r.seconds:.2f} |")
    return "\n".join(lines) + "\n"


def text_table(results: Sequence[ProofResult]) -> str:
    """A plain-text table for the terminal: status, seconds, name, claim (truncated) and its scope."""
    width = max((len(r.name) for r in results), default=4)
    rows = [f"{'status':13} {'sec':>6}  {'proof':{width}}  claim [scope]"]
    for r in results:
        claim = r.claim if len(r.claim) <= 90 else r.claim[:87] + "..."
        rows.append(f"{r.status.value:13} {r.seconds:6.2f}  {r.name:{width}}  {claim} [{r.scope_text}]")
        if counts_as_failure(r, results):
            problems = "".join(f"; lemma {p}" for p in lemma_problems(r, results))
            rows.append(f"{'':13} {'':6}  {'':{width}}  -> below {required_status(r.name).value}: {r.evidence}{problems}")
    return "\n".join(rows)


def default_jobs() -> int:
    """The number of cores this process may use (the default of ``--jobs``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def _share_threads(threads: int) -> None:
    """Worker initializer: this process's share of the cores for the numeric libraries, set before torch, numpy
    or numba load their thread pools (as tests/conftest.py does for pytest-xdist workers), so that the workers do
    not oversubscribe the machine."""
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, str(threads))


def run_all(names: Sequence[str] | None = None, inject: str | None = None, jobs: int = 1) -> list[ProofResult]:
    """Run the named proofs (default: all), in the order given. With `inject`, run only the modules offering that
    injection. ``jobs > 1``: in that many worker processes (each claim in one process; started with "spawn", so no
    worker inherits threads or state from this one); the results keep the order of the names."""
    names = list(names or proof_names())
    jobs = max(1, min(jobs, len(names)))
    if jobs == 1:
        results = [run_module(name, inject) for name in names]
    else:
        threads = max(1, default_jobs() // jobs)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_share_threads,
                                 initargs=(threads,)) as pool:
            results = list(pool.map(run_module, names, [inject] * len(names)))
    return [result for result in results if result is not None]


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
                             "they must not hold, so the exit code is then non-zero")
    parser.add_argument("--list", action="store_true", help="list proofs and injectable errors, then exit")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON to FILE")
    parser.add_argument("--jobs", "-j", type=int, default=default_jobs(), metavar="N",
                        help="run the claims in N worker processes (default: the number of cores, %(default)s); "
                             "the report keeps the same order")


def run_args(args: argparse.Namespace) -> int:
    """Run as configured by `add_arguments`; return 0 if every claim meets what certify needs of it, else 1."""
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
    if args.jobs < 1:
        print(f"--jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    results = run_all(args.names, args.inject_error, args.jobs)
    total = time.perf_counter() - start
    report = markdown_report(results, total, args.inject_error)
    Path(args.report).write_text(report)
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(results, total, args.inject_error), indent=1) + "\n")
    failed = sum(counts_as_failure(r, results) for r in results)
    if not args.quiet:
        print(text_table(results))
    print(f"{summary(results, total)} Report written to {args.report}")
    return 1 if failed or not results else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proofs", description="Run the proofs of certify's claims.")
    add_arguments(parser)
    return run_args(parser.parse_args(argv))


def standalone(prove: Callable[[], ProofResult], name: str) -> int:
    """Body of a proof module's `if __name__ == "__main__"` block: run, print, exit 1 when the status is below the
    module's REQUIRES (default SAMPLED)."""
    module = sys.modules.get(name)
    required = Status(getattr(module, "REQUIRES", Status.SAMPLED))
    if name == "__main__":
        name = Path(sys.argv[0]).stem
    result = run_one(name.rsplit(".", 1)[-1], prove)
    print(f"{result.status.value} ({result.seconds:.2f} s) {result.name}: {result.claim}")
    print(f"  scope: {result.scope_text}")
    print(f"  evidence: {result.evidence}")
    if not meets(result.status, required):
        print(f"  below what certify needs: {required.value}")
        return 1
    return 0
