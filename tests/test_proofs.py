"""proofs/: every claim runs and reaches exactly its expected status (PROVED, PROVED-MODULO, VERIFIED, SAMPLED, or
REFUTED for a known-false variant), with a scope; wrong inputs make the checks UNPROVED (never REFUTED); the runner,
its report, JSON and exit codes, old-style proof modules and the CLI behave."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import proofs
from certify.cli import main as certify_main
from proofs import ProofResult, Status, proof_names, run_module
from proofs._runner import counts_as_failure, main, meets, required_status, run_one

# The status each claim must reach exactly: a change (up or down) must be deliberate.
EXPECTED = {
    "phi_inverse": Status.PROVED, "phi_asymptotics": Status.PROVED, "lemma_softmax_bound": Status.PROVED,
    "corollary_softmax_moments": Status.PROVED_MODULO, "jacobian_dp": Status.PROVED, "jacobian_l2": Status.PROVED,
    "l2_factorisation": Status.PROVED, "factorised_bound": Status.PROVED_MODULO,
    "theorem31_dp_not_lipschitz": Status.PROVED, "scaling_wq": Status.PROVED, "bound_inf_chain": Status.PROVED_MODULO,
    "bound_2_chain": Status.PROVED_MODULO, "inf_bound_sqrt_d_variant": Status.REFUTED,
    "exact_constant_n2": Status.VERIFIED, "untied_l2_not_lipschitz": Status.PROVED, "softmax_hessian": Status.PROVED,
    "tail_bound": Status.SAMPLED, "split_bound": Status.SAMPLED, "third_order": Status.SAMPLED,
    "taylor_remainder": Status.SAMPLED, "slopes_derivatives": Status.PROVED,
    "slope_remainder": Status.PROVED_MODULO, "simplex_row_sums": Status.PROVED_MODULO,
    "row_functional": Status.PROVED_MODULO, "dimension_reduction": Status.PROVED_MODULO,
}

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def results(shared) -> dict[str, ProofResult]:
    """Each proof runs once in the whole test run, when a test first asks for it (so test_each_proof spreads the
    proofs over the pytest-xdist workers instead of one worker running them all)."""

    class Results(dict):
        def __missing__(self, name: str) -> ProofResult:
            self[name] = shared(f"proof-{name}", lambda: run_module(name))
            return self[name]

        def values(self) -> list[ProofResult]:  # every proof, not only those asked for so far
            return [self[name] for name in proof_names()]

    return Results()


def test_at_least_twelve_claims_are_proved(results: dict[str, ProofResult]) -> None:
    proved = [r for r in results.values() if r.status in (Status.PROVED, Status.PROVED_MODULO)]
    assert len(proved) >= 12


@pytest.mark.parametrize("name", proof_names())
def test_each_proof(name: str, results: dict[str, ProofResult]) -> None:
    result = results[name]
    assert result.name == name and result.claim and result.evidence
    assert result.scope_text != "(scope not stated)", f"{name} states no scope"
    assert result.status is EXPECTED.get(name), (result.status, result.evidence)
    assert not counts_as_failure(result, list(results.values())), result.evidence


def test_every_proof_has_an_expected_status() -> None:
    assert set(proof_names()) == set(EXPECTED)


def test_sampled_parts_never_make_a_claim_proved(results: dict[str, ProofResult]) -> None:
    for result in results.values():
        if result.status in (Status.PROVED, Status.PROVED_MODULO):
            main_parts = result.evidence.split("; cross-checks:")[0]
            assert "[SAMPLED]" not in main_parts and "[VERIFIED]" not in main_parts, result.name


def test_proved_modulo_names_its_lemmas(results: dict[str, ProofResult]) -> None:
    for result in results.values():
        if result.status is Status.PROVED_MODULO:
            assert result.lemmas and "lemmas:" in result.evidence
            for lemma in result.lemmas:
                if lemma in results:
                    assert results[lemma].ok, (result.name, lemma)


def test_the_sqrt_d_variant_is_refuted_by_intervals(results: dict[str, ProofResult]) -> None:
    evidence = results["inf_bound_sqrt_d_variant"].evidence
    assert evidence.startswith("[REFUTED]") and "mpmath intervals" in evidence


def test_shipped_constants_are_checked_exactly(results: dict[str, ProofResult]) -> None:
    assert "shipped certify.bounds.paper_constant(N, d, 'inf') called on SymPy symbols is 4*phi_inv(N - 1) + " \
           "1/sqrt(d): identical" in results["bound_inf_chain"].evidence
    assert "certify.bounds.default_constant(N, d, '2') called on SymPy symbols is sqrt(N)*(4*phi_inv(N - 1) + 1): " \
           "identical" in results["factorised_bound"].evidence


def test_a_lemma_that_does_not_hold_fails_the_claim_that_uses_it() -> None:
    lemma = ProofResult("lemma", Status.UNPROVED, "x", name="lemma_softmax_bound")
    user = ProofResult("user", Status.PROVED_MODULO, "y", name="corollary_softmax_moments", lemmas=("lemma_softmax_bound",))
    assert counts_as_failure(user, [lemma, user]) and not counts_as_failure(user, [user])


@pytest.mark.parametrize("name, error", [("jacobian_dp", "jacobian"), ("jacobian_l2", "jacobian"),
                                         ("bound_2_chain", "bound"), ("bound_inf_chain", "bound"),
                                         ("tail_bound", "bound"), ("split_bound", "bound"),
                                         ("third_order", "identity"), ("third_order", "bound")])
def test_injected_errors_fail(name: str, error: str) -> None:
    result = run_module(name, inject=error)
    assert result is not None and result.status is Status.UNPROVED  # a failed check is not a proof of falsity
    assert "[UNPROVED]" in result.evidence and counts_as_failure(result)


def test_wrong_bound_counterexample_is_the_scaled_layer() -> None:
    from proofs import bound_2_chain

    result = bound_2_chain.prove(bound_2_chain.wrong_bound, count=8)
    assert result.status is Status.UNPROVED
    assert "end ||J^F||_2 <= bound: violated" in result.evidence


def test_runner_exit_codes_report_and_json(tmp_path: Path) -> None:
    report, data = tmp_path / "report.md", tmp_path / "report.json"
    assert main(["phi_inverse", "lemma_softmax_bound", "--report", str(report), "--json", str(data), "--quiet",
                 "--jobs", "2"]) == 0  # two worker processes; the report keeps the order of the names
    text = report.read_text()
    assert "| `phi_inverse` | **PROVED** | PROVED |" in text and "| `lemma_softmax_bound` | **PROVED** |" in text
    claims = json.loads(data.read_text())["claims"]
    assert [(c["name"], c["status"], c["scope"], c["ok"]) for c in claims] == [
        ("phi_inverse", "PROVED", "N >= 1", True), ("lemma_softmax_bound", "PROVED", "N >= 2", True)]
    assert main(["inf_bound_sqrt_d_variant", "--report", str(report), "--quiet"]) == 0  # REFUTED is what it needs
    assert "**REFUTED** | REFUTED |" in report.read_text()
    assert main(["--inject-error", "jacobian", "jacobian_dp", "--report", str(report), "--quiet"]) == 1
    assert "Injected error: `jacobian`" in report.read_text() and "**UNPROVED** (below)" in report.read_text()
    assert main(["--inject-error", "nonsense", "--report", str(report)]) == 2
    assert main(["no_such_proof", "--report", str(report)]) == 2
    assert main(["phi_inverse", "--jobs", "0", "--report", str(report)]) == 2


def test_requirements() -> None:
    assert meets(Status.PROVED, Status.PROVED_MODULO) and meets(Status.VERIFIED, Status.SAMPLED)
    assert not meets(Status.SAMPLED, Status.VERIFIED) and not meets(Status.UNPROVED, Status.SAMPLED)
    assert not meets(Status.REFUTED, Status.SAMPLED) and not meets(Status.PROVED, Status.REFUTED)
    assert meets(Status.REFUTED, Status.REFUTED)
    assert required_status("exact_constant_n2") is Status.VERIFIED
    assert required_status("inf_bound_sqrt_d_variant") is Status.REFUTED
    assert required_status("tail_bound") is Status.SAMPLED  # no REQUIRES: the default


def test_a_proof_in_the_old_style_still_runs() -> None:
    """A module written before the six statuses (CHECKED / FAILED, `combine`, `numeric`) runs unchanged: CHECKED
    reads as SAMPLED, FAILED as UNPROVED, and with no REQUIRES the claim must be at least SAMPLED."""
    from proofs import combine

    assert Status.CHECKED is Status.SAMPLED and Status.FAILED is Status.UNPROVED
    assert Status("CHECKED") is Status.SAMPLED and Status("FAILED") is Status.UNPROVED

    def old_style(ok: bool) -> ProofResult:
        return combine("old claim", [(Status.PROVED, "identity"), (Status.CHECKED if ok else Status.FAILED, "grid")])

    passing, failing = run_one("taylor_remainder", lambda: old_style(True)), run_one("taylor_remainder", lambda: old_style(False))
    assert passing.status is Status.SAMPLED and not counts_as_failure(passing)
    assert failing.status is Status.UNPROVED and counts_as_failure(failing)
    assert passing.scope_text == "(scope not stated)"


def test_softmax_hessian_run_alone_exits_non_zero_on_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import runpy

    import proofs._check

    monkeypatch.setattr(proofs._check, "fact", lambda ok, what: (Status.UNPROVED, what))
    monkeypatch.delitem(sys.modules, "proofs.softmax_hessian", raising=False)  # run it fresh, as `python -m` does
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("proofs.softmax_hessian", run_name="__main__")
    assert exit_info.value.code == 1


def test_cli_subcommand(tmp_path: Path) -> None:
    report = tmp_path / "r.md"
    assert certify_main(["proofs", "phi_inverse", "--report", str(report), "--quiet"]) == 0
    assert report.exists()


def test_proof_runs_standalone() -> None:
    completed = subprocess.run([sys.executable, "-m", "proofs.phi_inverse"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("PROVED")


def test_a_raising_proof_is_unproved() -> None:
    def broken() -> ProofResult:
        raise ZeroDivisionError("boom")

    result = run_one("broken", broken)
    assert result.status is Status.UNPROVED and "ZeroDivisionError: boom" in result.evidence


def test_check_helpers_distinguish_proved_sampled_unproved() -> None:
    import sympy as sp

    from proofs._check import check_nonnegative, check_zero

    x = sp.Symbol("x", real=True)
    sample = lambda rng: [rng.uniform(-3, 3)]  # noqa: E731
    assert check_zero(sp.sin(x) ** 2 + sp.cos(x) ** 2 - 1, [x], "pythagoras", sample)[0] is Status.PROVED
    assert check_zero(sp.sin(x) - x, [x], "sin = x", sample)[0] is Status.UNPROVED
    never = lambda e: e  # noqa: E731  (a simplifier that proves nothing)
    status, evidence = check_zero(sp.sin(2 * x) - 2 * sp.sin(x) * sp.cos(x), [x], "double angle", sample,
                                  simplifier=never)
    assert status is Status.SAMPLED and "200 random samples" in evidence
    assert check_nonnegative(x ** 2, [x], "square", sample)[0] is Status.PROVED
    assert check_nonnegative(x ** 3, [x], "cube", sample)[0] is Status.UNPROVED
