"""The auto_LiRPA bridge (certify.lirpa): patches, export, output bounds, Jacobian enclosures, radii, CLI.

Every bound is checked against points of the ball: random samples, vertices and projected gradient ascent (PGD).
The ReduceMax test shows that auto_LiRPA 0.3 without our fix returns CROWN bounds that the layer violates.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

import certify.lirpa as lirpa
from certify import CertifyError, EpsBall, InvalidInputError, save_layer
from certify.attention import (
    AttentionWeights,
    DotProductMultiheadAttention,
    L2MultiheadAttention,
    UntiedL2MultiheadAttention,
    as_weights,
    attention,
)
from certify.adversarial import LOCAL_LOWER_SEARCH
from certify.bounds import factorised_bound
from certify.bounds.local._search import local_bound
from certify.jacobian import autodiff_jacobian, flatten_jacobian, jacobian, jacobian_norm
from certify.lirpa import _compat

torch.set_num_threads(1)
F64 = torch.float64
TOL = 1e-9  # float64 bound propagation is not outward-rounded; violations must stay below this


def dp_layer(D: int = 4, H: int = 2, seed: int = 0, bias: bool = True) -> DotProductMultiheadAttention:
    layer = DotProductMultiheadAttention(D, H, bias=bias, dtype=F64, generator=torch.Generator().manual_seed(seed))
    if bias:
        with torch.no_grad():
            for b in (layer.b_Q, layer.b_K, layer.b_V, layer.b_O):
                b.copy_(0.3 * torch.randn(b.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=F64))
    return layer


def l2_layer(D: int = 4, H: int = 2, seed: int = 0) -> L2MultiheadAttention:
    return L2MultiheadAttention(D, H, bias=True, dtype=F64, generator=torch.Generator().manual_seed(seed))


def mha_layer(D: int = 4, H: int = 2, seed: int = 0) -> torch.nn.MultiheadAttention:
    torch.manual_seed(seed)
    return torch.nn.MultiheadAttention(D, H, batch_first=True, dtype=F64)


def weights_of(layer) -> AttentionWeights:
    return as_weights(layer)  # certify's modules and torch.nn.MultiheadAttention alike


def centre(N: int, D: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(N, D, generator=torch.Generator().manual_seed(100 + seed), dtype=F64)


def ball_samples(X0: torch.Tensor, eps: float, p: str, count: int, seed: int = 0) -> torch.Tensor:
    """Uniform-ish samples of the ball plus points on its boundary (vertices for l_inf)."""
    g = torch.Generator().manual_seed(seed)
    N, D = X0.shape
    if p == "inf":
        inside = 2 * torch.rand(count, N, D, generator=g, dtype=F64) - 1
        vertices = torch.sign(torch.randn(count, N, D, generator=g, dtype=F64))
        return X0 + eps * torch.cat([inside, vertices])
    direction = torch.randn(2 * count, N, D, generator=g, dtype=F64)
    direction = direction / direction.flatten(1).norm(dim=1)[:, None, None]
    scale = torch.cat([torch.rand(count, generator=g, dtype=F64), torch.ones(count, dtype=F64)])
    return X0 + eps * scale[:, None, None] * direction


def project(X: torch.Tensor, X0: torch.Tensor, eps: float, p: str) -> torch.Tensor:
    delta = X - X0
    if p == "inf":
        return X0 + delta.clamp(-eps, eps)
    return X0 + delta * (eps / delta.flatten(1).norm(dim=1).clamp_min(1e-300)).clamp(max=1)[:, None, None]


def pgd_extremes(weights: AttentionWeights, X0: torch.Tensor, eps: float, p: str, steps: int = 40) -> torch.Tensor:
    """Points of the ball found by PGD that push each output coordinate up and down: (2 N D, N, D)."""
    N, D = X0.shape
    n = N * D
    sign = torch.cat([torch.ones(n, dtype=F64), -torch.ones(n, dtype=F64)])
    coordinate = torch.cat([torch.arange(n), torch.arange(n)])
    X = project(X0 + 0.5 * eps * torch.randn(2 * n, N, D, generator=torch.Generator().manual_seed(3), dtype=F64),
                X0, eps, p)
    step = 0.3 * eps
    for _ in range(steps):
        X.requires_grad_(True)
        out = attention(X, weights).reshape(2 * n, n)
        objective = (sign * out[torch.arange(2 * n), coordinate]).sum()
        (grad,) = torch.autograd.grad(objective, X)
        with torch.no_grad():
            if p == "inf":
                X = project(X + step * grad.sign(), X0, eps, p)
            else:
                X = project(X + step * grad / grad.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None], X0, eps, p)
        step *= 0.93
    return X.detach()


def violation(bounds: lirpa.OutputBounds, outputs: torch.Tensor) -> float:
    """How far outputs (B, N, D) leave [lower, upper]; <= 0 when they stay inside."""
    outputs = outputs.detach()
    return float(torch.maximum(outputs - bounds.upper, bounds.lower - outputs).max())


# --- compatibility module ---------------------------------------------------------------------------------------


def test_version_and_patches_are_in_place():
    assert lirpa.VERSION == lirpa.REQUIRED_VERSION == "0.3"
    assert lirpa.reducemax_fix_enabled()
    import numpy
    import sys

    assert sys.modules["numpy.lib.arraysetops"].isin is numpy.isin
    assert hasattr(torch._C.Node, "__getitem__")
    bound_general = importlib.import_module("auto_LiRPA.bound_general")
    assert hasattr(bound_general.BoundedModule._named_members, "__wrapped__")


def test_reducemax_context_manager_restores_state_even_on_error():
    assert lirpa.reducemax_fix_enabled()
    with lirpa.reducemax_fix(False):
        assert not lirpa.reducemax_fix_enabled()
        with lirpa.reducemax_fix(True):
            assert lirpa.reducemax_fix_enabled()
        assert not lirpa.reducemax_fix_enabled()
    assert lirpa.reducemax_fix_enabled()
    with pytest.raises(RuntimeError):
        with lirpa.reducemax_fix(False):
            raise RuntimeError("boom")
    assert lirpa.reducemax_fix_enabled()


def test_wrong_or_missing_version_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_compat, "_installed_version", lambda: "0.4")
    with pytest.raises(lirpa.LirpaUnavailableError, match=r"0\.3.*0\.4 is installed"):
        _compat._load()

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.undo()
    monkeypatch.setattr(_compat.importlib.metadata, "version", missing)
    expected = r"not installed: pip install --no-deps auto-lirpa==0\.3 && pip install appdirs"
    with pytest.raises(lirpa.LirpaUnavailableError, match=expected):
        _compat._installed_version()
    assert issubclass(lirpa.LirpaUnavailableError, CertifyError)


def test_import_leaves_warning_filters_and_default_dtype_alone():
    """auto_LiRPA runs warnings.simplefilter('once') at import; the bridge confines it. Bounding restores dtype."""
    assert ("once", None, Warning, None, 0) not in warnings.filters
    before = torch.get_default_dtype()
    lirpa.output_bounds(l2_layer(), centre(3, 4), 0.01, "inf", methods=("IBP",))
    assert torch.get_default_dtype() == before


# --- export -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [dp_layer, l2_layer, mha_layer,
                                  lambda: UntiedL2MultiheadAttention(4, 2, dtype=F64,
                                                                     generator=torch.Generator().manual_seed(5))])
def test_export_computes_the_same_map(make):
    layer = make()
    X = centre(5, 4).unsqueeze(0).repeat(3, 1, 1) + torch.randn(3, 5, 4, dtype=F64)
    module = lirpa.export_attention(layer)
    expected = layer(X, X, X, need_weights=False)[0] if isinstance(layer, torch.nn.MultiheadAttention) else layer(X)
    assert module(X).shape == (3, 20)
    torch.testing.assert_close(module(X), expected.reshape(3, 20), rtol=1e-12, atol=1e-12)


def test_export_rejects_what_it_cannot_bound():
    with pytest.raises(InvalidInputError, match="cannot certify a Linear"):
        lirpa.export_attention(torch.nn.Linear(3, 3))
    with pytest.raises(InvalidInputError, match=r"shape \(N, D\)"):
        lirpa.output_bounds(l2_layer(), torch.zeros(1, 3, 4, dtype=F64), 0.1)
    with pytest.raises(InvalidInputError, match="eps must be a positive"):
        lirpa.output_bounds(l2_layer(), centre(3, 4), -0.1)
    with pytest.raises(InvalidInputError, match="norm p must be"):
        lirpa.output_bounds(l2_layer(), centre(3, 4), 0.1, p="1")
    with pytest.raises(InvalidInputError, match="layer expects 4"):
        lirpa.output_bounds(l2_layer(), centre(3, 5), 0.1)
    with pytest.raises(InvalidInputError, match="method must be one of"):
        lirpa.output_bounds(l2_layer(), centre(3, 4), 0.1, methods=("alpha-CROWN",))


# --- output bounds ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [dp_layer, l2_layer, mha_layer])
@pytest.mark.parametrize("p", ["inf", "2"])
def test_output_bounds_contain_samples_and_pgd(make, p):
    layer = make()
    weights = lirpa.export_attention(layer)  # also checks the MHA import path
    w = weights_of(layer)
    X0 = centre(3, 4, seed=1)
    for eps in (0.02, 0.2):
        ibp, crown = lirpa.output_bounds(layer, X0, eps, p)
        assert (ibp.method, crown.method) == ("IBP", "CROWN")
        points = torch.cat([ball_samples(X0, eps, p, 300), pgd_extremes(w, X0, eps, p)])
        outputs = attention(points, w.to(F64))
        for bounds in (ibp, crown):
            assert violation(bounds, outputs) <= TOL, (bounds.method, eps)
            assert bounds.deviation() >= float(
                ((outputs - bounds.center).flatten(1).abs().amax(1) if p == "inf"
                 else (outputs - bounds.center).flatten(1).norm(dim=1)).max()) - TOL
        # the bounds are not vacuous: CROWN at the smaller ball is within a factor 4 of what PGD attains
        if eps == 0.02:
            attained = float((outputs.amax(0) - outputs.amin(0)).max())
            assert crown.width <= 4 * attained + 1e-12
    assert weights(X0[None]).shape == (1, 12)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["dp", "l2"]), N=st.integers(2, 4), H=st.sampled_from([1, 2]),
       eps=st.floats(0.005, 0.3), p=st.sampled_from(["inf", "2"]))
def test_output_bounds_sound_on_random_layers(seed, kind, N, H, eps, p):
    layer = dp_layer(4, H, seed) if kind == "dp" else l2_layer(4, H, seed)
    X0 = centre(N, 4, seed)
    for bounds in lirpa.output_bounds(layer, X0, eps, p):
        outputs = attention(ball_samples(X0, eps, p, 200, seed), layer.attention_weights())
        assert violation(bounds, outputs) <= TOL


def test_reducemax_bug_is_unsound_without_the_fix_and_sound_with_it():
    """MATH.md section 8: 0.3's fixed-index ReduceMax backward writes only spec row 0 (scatter does not broadcast).

    Without the fix, CROWN's bounds on dot-product attention exclude outputs that the layer attains at sampled
    points of the ball; with the fix (the bridge's default) they contain them, and the switch leaves no trace.
    """
    layer = dp_layer(4, 2, seed=0, bias=False)
    w = layer.attention_weights()
    X0, eps = centre(4, 4, seed=2), 0.01
    points = torch.cat([ball_samples(X0, eps, "inf", 500), pgd_extremes(w, X0, eps, "inf", steps=20)])
    outputs = attention(points, w)
    with lirpa.reducemax_fix(False):
        (unpatched,) = lirpa.output_bounds(layer, X0, eps, "inf", methods=("CROWN",))
    (patched,) = lirpa.output_bounds(layer, X0, eps, "inf", methods=("CROWN",))
    assert lirpa.reducemax_fix_enabled()
    assert violation(unpatched, outputs) > 1e-2  # detectably unsound: outputs outside the bounds
    assert violation(patched, outputs) <= TOL
    # and the centre itself already lies outside the unpatched bounds for some coordinate
    assert violation(unpatched, attention(X0[None], w)) > 0


# --- Jacobian module and enclosures -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", [dp_layer, l2_layer, mha_layer])
def test_jvp_module_gives_the_jacobian_columns(make):
    layer = make()
    w = weights_of(layer)
    N, D = 3, 4
    X = centre(N, D, seed=4)
    module = lirpa.AttentionJVP(w)
    T = lirpa.jacobian_directions(N, D)
    columns = module(X[None].expand(N * D, N, D), T)  # row m = column m of J
    reference = flatten_jacobian(autodiff_jacobian(X[None], w.to(F64)))[0]
    torch.testing.assert_close(columns.T, reference, rtol=1e-11, atol=1e-12)
    some = lirpa.jacobian_directions(N, D, [2, 7])
    torch.testing.assert_close(module(X[None].expand(2, N, D), some).T, reference[:, [2, 7]], rtol=1e-11, atol=1e-12)


def test_jvp_refuses_untied_l2():
    with pytest.raises(ValueError, match="kinds 'dp' and 'l2'"):
        lirpa.AttentionJVP(UntiedL2MultiheadAttention(4, 2, dtype=F64))


@pytest.mark.parametrize("make,p", [(dp_layer, "inf"), (l2_layer, "2"), (mha_layer, "inf")])
def test_jacobian_enclosure_is_sound_and_chunk_invariant(make, p):
    layer = make()
    w = weights_of(layer)
    X0, eps = centre(3, 4, seed=5), 0.05
    full = lirpa.jacobian_bounds(w, X0, eps, p, "CROWN")
    chunked = lirpa.jacobian_bounds(w, X0, eps, p, "CROWN", chunk=5)
    assert chunked.chunk == 5 and full.lower.shape == (12, 12)
    torch.testing.assert_close(torch.from_numpy(chunked.lower), torch.from_numpy(full.lower), rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(torch.from_numpy(chunked.upper), torch.from_numpy(full.upper), rtol=1e-9, atol=1e-11)
    J = flatten_jacobian(jacobian(ball_samples(X0, eps, p, 200), w.to(F64))).numpy()
    for bounds in (full, lirpa.jacobian_bounds(w, X0, eps, p, "IBP")):
        assert (J <= bounds.upper + TOL).all() and (J >= bounds.lower - TOL).all(), bounds.method
    for norm in ("inf", "2"):
        cert = lirpa.lirpa_lipschitz(w, X0, eps, p, norm, bounds=full)
        sampled = float(jacobian_norm(torch.from_numpy(J), norm).max())
        assert sampled <= cert.value + TOL
        assert cert.value <= 1.5 * sampled  # a small ball: the enclosure is tight
        assert not cert.certified and cert.method == "auto_LiRPA-CROWN-Jacobian"


def test_lirpa_lipschitz_beside_our_local_bound():
    """Both are upper bounds on Lip over the same ball: both exceed our adversarial lower bound there."""
    layer = l2_layer(4, 2, seed=3)
    w = layer.attention_weights()
    X0, eps = centre(3, 4, seed=6), 0.05
    for norm in ("inf", "2"):
        theirs = lirpa.lirpa_lipschitz(w, X0, eps, norm, norm, norm2="sdp")
        ours = local_bound(w, 3, norm, EpsBall(X0, eps, norm), time_budget=1.5, lower_search=LOCAL_LOWER_SEARCH)
        lower = ours.details["lower"]
        assert ours.certified and lower > 0
        assert theirs.value >= lower - TOL and ours.value >= lower - TOL
        assert theirs.value <= factorised_bound(w, 3, norm).value  # local beats global on a small ball


# --- comparison, radii, CLI -------------------------------------------------------------------------------------


def test_compare_layer_rows_are_upper_bounds_on_the_attained_deviation():
    rows = lirpa.compare_layer(l2_layer(4, 1, seed=2), centre(3, 4, seed=7), 0.05, "inf", time_budget=1.0,
                               norm2="cheap")
    methods = [r.method for r in rows]
    assert methods[:3] == ["IBP", "CROWN", "auto_LiRPA-CROWN-Jacobian"] and methods[-1] == "attained (PGD)"
    assert "ours local" in methods and any(m.startswith("ours global") for m in methods)
    attained = rows[-1]
    for row in rows[:-1]:
        assert row.deviation >= attained.deviation - TOL, row.method
        if row.lipschitz is not None:
            assert row.lipschitz >= attained.lipschitz - TOL, row.method
    assert [r.certified for r in rows if r.method.startswith("ours")] == [True, True]


def test_largest_certified_returns_only_passing_radii():
    assert lirpa.largest_certified(lambda r: r <= 0.3, start=0.05, steps=20)[0] == pytest.approx(0.3, rel=1e-5)
    assert lirpa.largest_certified(lambda r: r <= 0.3, start=7.0, steps=20)[0] == pytest.approx(0.3, rel=1e-5)
    assert lirpa.largest_certified(lambda r: False, start=1.0)[0] == 0.0
    tested = []

    def erratic(r: float) -> bool:  # not monotone: the answer must still be a radius that passed
        tested.append(r)
        return math.sin(40 * r) > 0 and r < 1

    r, _ = lirpa.largest_certified(erratic, start=0.01)
    assert r == 0.0 or (r in tested and erratic(r))


@pytest.fixture(scope="module")
def classifiers(shared):
    from certify.experiments import ClassifierTask, train_classifier

    task = ClassifierTask(N=4, D_in=3, D=4, H=1, classes=3, signal=2, noise=0.2)
    return shared("lirpa-classifiers",
                  lambda: {kind: train_classifier(kind, task, steps=120, seed=1)[0] for kind in ("l2", "dp")})


def attack_radius(model, X, label, p, hi, steps=30):
    """Smallest radius (by bisection on [0, hi]) at which PGD on the margins flips the label, or inf."""

    def flips(r: float) -> bool:
        Z = X[None].repeat(8, 1, 1) + r * 0.5 * torch.randn(8, *X.shape, generator=torch.Generator().manual_seed(0),
                                                              dtype=F64)
        Z = project(Z, X, r, p)
        for _ in range(steps):
            Z.requires_grad_(True)
            z = model(Z)
            others = torch.cat([z[:, :label], z[:, label + 1:]], dim=1)
            margin = z[:, label] - others.max(dim=1).values
            if bool((margin < 0).any()):
                return True
            (grad,) = torch.autograd.grad(-margin.sum(), Z)
            with torch.no_grad():
                g = grad.sign() if p == "inf" else grad / grad.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]
                Z = project(Z + 0.2 * r * g, X, r, p)
        with torch.no_grad():
            z = model(Z)
            return bool((z.argmax(1) != label).any())

    if not flips(hi):
        return math.inf
    lo = 0.0
    for _ in range(10):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if flips(mid) else (mid, hi)
    return hi


@pytest.mark.parametrize("kind", ["l2", "dp"])
@pytest.mark.parametrize("p", ["2", "inf"])
def test_certified_radii_are_below_attacked_radii(classifiers, kind, p):
    from certify.experiments import classifier_batch

    model = classifiers[kind]
    X, labels = classifier_batch(model.task, 6, torch.Generator().manual_seed(11))
    with torch.no_grad():
        correct = [i for i in range(6) if int(model(X[i:i + 1]).argmax()) == int(labels[i])]
    assert len(correct) >= 2
    cheap = "global" if kind == "l2" else "castin"
    for i in correct[:2]:
        crown = lirpa.crown_radius(model, X[i], int(labels[i]), p, steps=8)
        ours = lirpa.lipschitz_radius(model, X[i], int(labels[i]), p, cheap, steps=8)
        assert crown.value > 0 and ours.value > 0 and ours.certified and not crown.certified
        attacked = attack_radius(model, X[i], int(labels[i]), p, hi=max(4 * crown.value, 1.0))
        assert crown.value <= attacked and ours.value <= attacked
    wrong = int(labels[correct[0]] + 1) % model.task.classes
    assert lirpa.lipschitz_radius(model, X[correct[0]], wrong, p, cheap).value == 0.0
    assert lirpa.crown_radius(model, X[correct[0]], wrong, p).value == 0.0


def test_local_radius_and_errors(classifiers):
    from certify.experiments import classifier_batch

    model = classifiers["l2"]
    X, labels = classifier_batch(model.task, 1, torch.Generator().manual_seed(12))
    local = lirpa.lipschitz_radius(model, X[0], int(labels[0]), "2", "local", time_budget=0.3, steps=3)
    attacked = attack_radius(model, X[0], int(labels[0]), "2", hi=2.0)
    assert 0 <= local.value <= attacked and local.certified
    torch.testing.assert_close(lirpa.LirpaClassifier(model)(X), model(X), rtol=1e-12, atol=1e-12)
    with pytest.raises(InvalidInputError, match="global Lipschitz bound exists only for tied L2"):
        lirpa.lipschitz_radius(classifiers["dp"], X[0], 0, "2", "global")
    with pytest.raises(InvalidInputError, match=r"X must have shape \(N, D_in\)"):
        lirpa.crown_radius(model, X[0, :2], 0)
    with pytest.raises(InvalidInputError, match="label must lie"):
        lirpa.lipschitz_radius(model, X[0], 7)


def test_cli_compare_layer_and_classifier(tmp_path, classifiers, capsys):
    from certify.cli import main
    from certify.experiments import save_classifier

    layer_path, out = tmp_path / "layer.pt", tmp_path / "out.json"
    save_layer(l2_layer(4, 1, seed=1), layer_path)
    assert main(["compare", str(layer_path), "--eps", "0.02", "-N", "3", "--time-budget", "0.5",
                 "--json", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    for method in ("IBP", "CROWN", "auto_LiRPA-CROWN-Jacobian", "ours local", "ours global", "attained (PGD)"):
        assert method in printed
    rows = json.loads(out.read_text())["rows"]
    lower = [r for r in rows if r["kind"] == "lower"][0]
    assert all(r["deviation"] >= lower["deviation"] - TOL for r in rows)

    clf_path = tmp_path / "clf.pt"
    save_classifier(classifiers["l2"], clf_path)
    assert main(["compare", str(clf_path), "--eps", "0.01", "-p", "2", "--inputs", "2", "--time-budget", "0.2",
                 "--json", str(out), "--quiet"]) == 0
    summary = json.loads(out.read_text())["summaries"]
    assert [s["method"] for s in summary] == ["auto_LiRPA-CROWN", "lipschitz-global", "lipschitz-local"]
    assert all(s["mean_radius"] >= 0 for s in summary)

    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    assert main(["compare", str(bad), "--eps", "0.1"]) == 2
    assert "cannot read checkpoint" in capsys.readouterr().err


def test_cli_compare_input_file_and_errors(tmp_path, capsys):
    from certify.cli import main

    layer_path, X_path, bad_X = tmp_path / "layer.pt", tmp_path / "X.pt", tmp_path / "badX.pt"
    save_layer(dp_layer(4, 2, seed=4), layer_path)
    torch.save(centre(2, 4, seed=9), X_path)
    torch.save(torch.zeros(2, 5, dtype=F64), bad_X)
    assert main(["compare", str(layer_path), "--eps", "0.01", "--input", str(X_path), "--time-budget", "0.3",
                 "-p", "2", "--quiet"]) == 0
    assert "N = 2, D = 4" in capsys.readouterr().out
    assert main(["compare", str(layer_path), "--eps", "0.01", "--input", str(bad_X)]) == 2
    assert "--input must hold an (N, D) tensor with D = 4, got (2, 5)" in capsys.readouterr().err


def test_benchmark_script_runs(tmp_path, capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "lirpa_compare.py"
    spec = importlib.util.spec_from_file_location("lirpa_compare", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "bench.json"
    assert module.main(["--sizes", "2", "--kinds", "l2", "--norms", "inf", "--eps", "0.05", "--time-budget", "0.3",
                        "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["method"] for r in rows} >= {"IBP", "CROWN", "auto_LiRPA-CROWN-Jacobian", "ours local",
                                           "attained (PGD)"}
    assert "ours global (factorised)" in capsys.readouterr().out
