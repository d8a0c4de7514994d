"""Mutation suite: small formula slips in the shipped code (certify.bounds, certify.jacobian) and in the proofs'
own references (certify.symbolic, proofs/), each applied by monkeypatching (never by editing a file), must be
caught by a check of `proofs/`: the check's status drops to UNPROVED (or REFUTED).

A mutation names a function, a snippet of its source that must occur exactly once, and its replacement. The
mutated source is compiled in the function's own module, and every loaded module that holds the original under
that name gets the mutant (so `from ._lambert import phi_inverse` sees it too). Each check also runs unmutated and
must then hold, so a catch is never a check that fails anyway.

Known blind spots (slips the proofs do not catch), with the reason:
- `round_up` replaced by the identity (`BLIND_SPOTS`, run below and asserted uncaught): the proofs compare with
  relative tolerances >= 1e-12 and their sampled inequalities are far from tight, so the directed rounding of
  certified values (a 1e-9 relative margin) is invisible to them; tests/test_bounds.py checks rounding.
- Castin et al.'s local bound (certify/bounds/closed_form/_castin.py): no proof in proofs/ derives it.
- A W_0(N/e) slip in `certify.symbolic.phi_inverse_expr` (the symbolic re-implementation): the proofs no longer
  use it for the shipped bound, only for deliberately wrong bounds; tests/test_symbolic.py compares it with
  certify.bounds.
- Tables of certified constants (certify/data/universal_constants.json): they rest on the global branch and bound,
  which proofs/ checks only through its tail, split and third-order bounds.
- The interval enclosures of the coordinate slopes (certify/bounds/local/_slopes.py): proofs/slopes_derivatives.py
  proves the closed-form derivatives they are built from (its own statement of them is mutated below), not the
  interval code; tests/test_local_slopes.py checks the enclosures against autodiff. proofs/slope_remainder.py runs
  the streamed method's `slope_sums` itself on polynomial magnitudes (its slips are mutated below), but not the
  enclosures it takes the magnitudes from, nor its rounding.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from proofs import Status
from proofs._result import ProofResult

Check = Callable[[], "tuple[Status, str] | ProofResult"]


def _phi_inverse() -> tuple[Status, str]:
    from proofs import phi_inverse

    return phi_inverse.check_shipped(grid=(0, 1, 2, 5, 63, 10**4))


def _assembly(kind: str, norm: str) -> Check:
    def check() -> tuple[Status, str]:
        from proofs._chain import check_assembly

        return check_assembly(kind, norm)

    check.__name__ = f"assembly_{kind}_{norm}"
    return check


def _weight_factor(norm: str) -> Check:
    def check() -> tuple[Status, str]:
        from proofs._chain import check_weight_factor

        return check_weight_factor(norm, count=8)

    check.__name__ = f"weight_factor_{norm}"
    return check


def _factorised_weights() -> tuple[Status, str]:
    from proofs.factorised_bound import check_factor_norms

    return check_factor_norms(count=8)


def _tail_formula() -> tuple[Status, str]:
    from proofs.tail_bound import _code_formula_matches

    return _code_formula_matches()


def _shipped_core() -> tuple[Status, str]:
    from proofs.l2_factorisation import check_shipped_core

    return check_shipped_core(cases=((2, 1), (3, 2)))


def _shipped_jacobian(kind: str) -> Check:
    def check() -> tuple[Status, str]:
        from proofs._composition import check_shipped_jacobian

        return check_shipped_jacobian(kind, cases=((2, 1, 1), (3, 2, 2), (3, 4, 2)))

    check.__name__ = f"shipped_jacobian_{kind}"
    return check


def _dp_closed_form() -> ProofResult:
    from certify.symbolic import _jacobians
    from proofs import combine, jacobian_dp

    return combine("dp", jacobian_dp.check_dp_jacobian(_jacobians.dp_closed_form, ((2, 1), (2, 2))))


def _l2_closed_form() -> ProofResult:
    from certify.symbolic import _jacobians
    from proofs import combine, jacobian_l2

    return combine("l2", jacobian_l2.check_l2_jacobian(_jacobians.l2_closed_form, ((2, 1), (2, 2))))


def _core_derivative() -> tuple[Status, str]:
    from proofs.l2_factorisation import check_core_derivative

    return check_core_derivative(2, 1)


def _slopes(part: str) -> Check:
    def check() -> tuple[Status, str]:
        from proofs.slopes_derivatives import check_part

        return check_part(part, sizes=((2, 2, 1), (3, 1, 1)))

    check.__name__ = f"slopes_{part}"
    return check


def _slope_sums_dominate() -> tuple[Status, str]:
    from proofs.slope_remainder import check_sums_dominate

    return check_sums_dominate(sizes=((2, 2), (3, 2)))


def _module_prove(name: str) -> Check:
    def check() -> ProofResult:
        return importlib.import_module(f"proofs.{name}").prove()

    check.__name__ = f"prove_{name}"
    return check


def _hessian() -> tuple[Status, str]:
    from proofs.softmax_hessian import _softmax_hessian_identity

    return _softmax_hessian_identity(2)


def _corollary() -> ProofResult:
    from proofs import combine
    from proofs.corollary_softmax_moments import check_general

    return combine("corollary", check_general())


@dataclass(frozen=True)
class Mutation:
    """Replace `old` (exactly one occurrence) by `new` in `module.function`; `check` must then not hold."""

    name: str
    module: str
    function: str
    old: str
    new: str
    check: Check


MUTATIONS = [
    # shipped code: certify.bounds
    Mutation("phi_inverse: W_0(N/e) for W_0((N-1)/e)", "certify.bounds.closed_form._lambert", "phi_inverse",
             "mpmath.mpf(n) / mpmath.e", "(mpmath.mpf(n) + 1) / mpmath.e", _phi_inverse),
    Mutation("paper_constant: phi_inverse(N) for phi_inverse(N - 1)", "certify.bounds.closed_form._paper", "paper_constant",
             "phi_inverse(N - 1)", "phi_inverse(N)", _assembly("paper", "inf")),
    Mutation("paper_constant inf: 3W + 1/sqrt(d)", "certify.bounds.closed_form._paper", "paper_constant",
             "4 * w + 1 / math.sqrt(d) if", "3 * w + 1 / math.sqrt(d) if", _assembly("paper", "inf")),
    Mutation("paper_constant inf: (4W + 1)/sqrt(d)", "certify.bounds.closed_form._paper", "paper_constant",
             "4 * w + 1 / math.sqrt(d) if", "(4 * w + 1) / math.sqrt(d) if", _assembly("paper", "inf")),
    Mutation("paper_constant 2: sqrt(N) dropped", "certify.bounds.closed_form._paper", "paper_constant",
             "math.sqrt(N) / math.sqrt(d) * (4 * w + 1)", "1 / math.sqrt(d) * (4 * w + 1)", _assembly("paper", "2")),
    Mutation("paper_constant 2: sqrt(N d) for sqrt(N)/sqrt(d)", "certify.bounds.closed_form._paper", "paper_constant",
             "math.sqrt(N) / math.sqrt(d) * (4 * w + 1)", "math.sqrt(N * d) * (4 * w + 1)", _assembly("paper", "2")),
    Mutation("paper_weight_factor 2: ||W^Q||^2 for ^4", "certify.bounds.closed_form._paper", "paper_weight_factor",
             '_matrix_norm(W_Q, "2") ** 4', '_matrix_norm(W_Q, "2") ** 2', _weight_factor("2")),
    Mutation("paper_weight_factor inf: ||W^O|| for ||W^O^T||", "certify.bounds.closed_form._paper", "paper_weight_factor",
             '_matrix_norm(weights.W_O.T, "inf")', '_matrix_norm(weights.W_O, "inf")', _weight_factor("inf")),
    Mutation("paper_weight_factor inf: ||W^Q^T|| dropped", "certify.bounds.closed_form._paper", "paper_weight_factor",
             ' * _matrix_norm(W_Q.transpose(1, 2), "inf")).max()', ").max()", _weight_factor("inf")),
    Mutation("default_constant 2: sqrt(N) dropped", "certify.bounds.closed_form._universal", "default_constant",
             "math.sqrt(N) * (1 + 4 * w)", "(1 + 4 * w)", _assembly("core", "2")),
    Mutation("default_constant inf: sqrt(d) dropped", "certify.bounds.closed_form._universal", "default_constant",
             "1 + 4 * math.sqrt(d) * w", "1 + 4 * w", _assembly("core", "inf")),
    Mutation("tail_constant: e^{-r} for e^{-r^2}", "certify.bounds.global_l2._tail", "tail_constant",
             "mpmath.exp(-r_**2)", "mpmath.exp(-r_)", _tail_formula),
    Mutation("tail_constant: 6W for 12W in K", "certify.bounds.global_l2._tail", "tail_constant",
             "K = 3 + 12 * W", "K = 3 + 6 * W", _tail_formula),
    Mutation("tail_bound: eps_2 = sqrt(N) eps_inf for sqrt(N d)", "certify.bounds.global_l2._tail", "tail_bound",
             "mpmath.sqrt(N * d) * eps_inf", "mpmath.sqrt(N) * eps_inf", _tail_formula),
    Mutation("tail_bound: eps_inf without sqrt(d)", "certify.bounds.global_l2._tail", "tail_bound",
             "eps_inf = mpmath.sqrt(d) * tail_constant(r, N)", "eps_inf = tail_constant(r, N)", _tail_formula),
    Mutation("core_jacobian_float: covariance factor 1 for 2", "certify.bounds.global_l2._enclosure",
             "core_jacobian_float", "M[:, idx, idx] += 2.0 * cov", "M[:, idx, idx] += cov", _shipped_core),
    # shipped code: certify.bounds.local (the streamed method's separable slope sums)
    Mutation("slope_sums: the sigma eta |v~| |M| term dropped from R", "certify.bounds.local._streamed", "slope_sums",
             "_mul(sigma_eta, pv, np.full(1, float(m_all)))", "0 * _mul(sigma_eta, pv, np.full(1, float(m_all)))",
             _slope_sums_dominate),
    Mutation("slope_sums: |M| row sums for column sums in C's S_A part", "certify.bounds.local._streamed",
             "slope_sums", '_mul(_einsum_up("it,it->i", P, v1)[:, None], m_col[None, :])',
             '_mul(_einsum_up("it,it->i", P, v1)[:, None], m_row[None, :])', _slope_sums_dominate),
    Mutation("slope_sums: s_P for 1 + s_P in S_P (the delta_lt term dropped)", "certify.bounds.local._streamed",
             "slope_sums", "_mul(one_plus, b1)", "_mul(sP, b1)", _slope_sums_dominate),
    # shipped code: certify.jacobian
    Mutation("l2_factors: V = W^Q / sqrt(d) for / d^{1/4}", "certify.jacobian._l2", "l2_factors",
             "weights.W_Q / weights.d**0.25", "weights.W_Q / weights.d**0.5", _shipped_jacobian("l2")),
    Mutation("M(Y) torch: dropped delta_ij (no covariance block)", "certify.jacobian._l2", "core_blocks",
             "M[:, index, index] += 2 * covariance", "M[:, index, index] += 0 * covariance", _shipped_core),
    Mutation("M(Y) torch: (y_j - y_i) for (y_i - y_j), E_ij vs E_ji", "certify.jacobian._l2", "core_blocks",
             "from_token = Y[:, :, None, :] - Y[:, None, :, :]", "from_token = Y[:, None, :, :] - Y[:, :, None, :]",
             _shipped_core),
    Mutation("L2 layer Jacobian: covariance factor 1 for 2", "certify.jacobian._l2", "l2_jacobian",
             "blocks[:, index, index] += 2 * torch.einsum", "blocks[:, index, index] += torch.einsum",
             _shipped_jacobian("l2")),
    Mutation("DP Jacobian: dropped delta_ij (query term)", "certify.jacobian._dot_product", "dot_product_jacobian",
             "J[:, index, :, index, :] += torch.einsum", "J[:, index, :, index, :] += 0 * torch.einsum",
             _shipped_jacobian("dp")),
    Mutation("DP Jacobian: A for A^T (W^Q q_i for W^K q_i)", "certify.jacobian._dot_product", "dot_product_jacobian",
             "query = (Q @ weights.W_K.transpose(1, 2))", "query = (Q @ weights.W_Q.transpose(1, 2))",
             _shipped_jacobian("dp")),
    # the proofs' own references
    Mutation("symbolic DP closed form: E_ij for E_ji", "certify.symbolic._jacobians", "dp_closed_form",
             "E[j, i] = 1", "E[i, j] = 1", _dp_closed_form),
    Mutation("symbolic L2 closed form: covariance factor 1 for 2", "certify.symbolic._jacobians", "l2_closed_form",
             "return P[i, i] * A + 2 * A * cov * A", "return P[i, i] * A + A * cov * A", _l2_closed_form),
    Mutation("symbolic M(Y): dropped delta_ij", "certify.symbolic._jacobians", "core_closed_form",
             "out += 2 * sum(", "out += 0 * sum(", _core_derivative),
    Mutation("Lemma: W e^W = N/e for (N-1)/e", "proofs.lemma_softmax_bound", "prove",
             "define_W = {sp.exp(W): (n - 1) / (sp.E * W)}", "define_W = {sp.exp(W): n / (sp.E * W)}",
             _module_prove("lemma_softmax_bound")),
    Mutation("Corollary (b): cross term 2 p (y - m)(m - c) halved", "proofs.corollary_softmax_moments", "check_general",
             "- 2 * p * (y - m) * (m - yi))", "- p * (y - m) * (m - yi))", _corollary),
    Mutation("chain assembly inf: Corollary bound W for sqrt(d) W", "proofs._chain", "assembled_constant",
             "row, z, unit = c / s + 2 * (c / s) * S1 + 2 * (c / s) * S2, s, c",
             "row, z, unit = c / s + 2 * (c / s) * S1 + 2 * (c / s) * S2, 1, c", _assembly("paper", "inf")),
    Mutation("softmax Hessian: Cov without the 1/2", "proofs.softmax_hessian", "_softmax_hessian_identity",
             "cov = sp.Rational(1, 2) * sum(", "cov = sum(", _hessian),
    Mutation("tail proof's reference formula: 10W for 12W", "proofs.tail_bound", "_code_formula_matches",
             "K = 3 + 12 * W", "K = 3 + 10 * W", _tail_formula),
    Mutation("slopes (c): delta_lt dropped in d v~_il", "proofs.slopes_derivatives", "dv_formula",
             "(delta(l, t) - h.P[i][t])", "(0 - h.P[i][t])", _slopes("c")),
    Mutation("slopes (d): M[r, s] for M[s, r] in d A_i", "proofs.slopes_derivatives", "dA_formula",
             "h.M[s][r] * h.vt[i][t][F]", "h.M[r][s] * h.vt[i][t][F]", _slopes("d")),
    Mutation("slopes (f): the -sigma b_i[r] P_it v~_it term dropped", "proofs.slopes_derivatives", "product_formula",
             "- h.sigma * h.b[i][r] * h.P[i][t] * h.vt[i][t][F]", "", _slopes("f")),
]


def _status(outcome: tuple[Status, str] | ProofResult) -> tuple[Status, str]:
    return (outcome.status, outcome.evidence) if isinstance(outcome, ProofResult) else outcome


@pytest.fixture(autouse=True, scope="module")
def _every_proof_module_loaded_first() -> None:
    """Import every proof module before any mutation: a module first imported while a mutation is applied would bind
    the mutant (`from certify.symbolic import dp_closed_form`, or a default argument) and keep it after monkeypatch
    restores the original, so a later test in the same worker (tests/test_proofs.py under xdist) would see it."""
    import pathlib

    import proofs

    for path in sorted(pathlib.Path(proofs.__file__).parent.glob("*.py")):
        if not path.stem.startswith("__"):
            importlib.import_module(f"proofs.{path.stem}")


def apply(mutation: Mutation, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile the mutated source in the function's module; rebind it wherever the original is bound."""
    module = importlib.import_module(mutation.module)
    original = getattr(module, mutation.function)
    source = textwrap.dedent(inspect.getsource(original))
    assert source.count(mutation.old) == 1, f"{mutation.name}: snippet not found once in {mutation.function}"
    namespace: dict = {}
    exec(compile(source.replace(mutation.old, mutation.new), f"<mutant {mutation.name}>", "exec"),
         module.__dict__, namespace)
    mutant = namespace[mutation.function]
    for loaded in list(sys.modules.values()):
        if getattr(loaded, mutation.function, None) is original:
            monkeypatch.setattr(loaded, mutation.function, mutant)


def test_at_least_twenty_mutations() -> None:
    assert len(MUTATIONS) >= 20 and len({m.name for m in MUTATIONS}) == len(MUTATIONS)


@pytest.mark.parametrize("check", sorted({m.check.__name__: m.check for m in MUTATIONS}.values(),
                                         key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_checks_hold_without_mutation(check: Check) -> None:
    status, evidence = _status(check())
    assert status.holds, evidence


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_is_caught(mutation: Mutation, monkeypatch: pytest.MonkeyPatch) -> None:
    apply(mutation, monkeypatch)
    status, evidence = _status(mutation.check())
    assert status in (Status.UNPROVED, Status.REFUTED), f"{mutation.name} not caught: {evidence}"


def test_blind_spot_rounding_is_not_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """round_up -> identity passes the proofs' checks of the paper bound (module docstring): a known blind spot."""
    from certify.bounds import _rounding
    from proofs._chain import shipped_paper_bound
    from proofs._l2numeric import instances, layer_jacobian, op_norm

    original = _rounding.round_up
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "round_up", None) is original:
            monkeypatch.setattr(loaded, "round_up", lambda x: x)
    bound = shipped_paper_bound("inf")
    for X, layer, _ in instances("inf", 8, climb=0):
        assert op_norm(layer_jacobian(X, layer), "inf") <= bound(layer.H)(layer, X.shape[0])
