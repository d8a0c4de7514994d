"""The Taylor method's time budget (issue 15, item 6): predicted before the pass, checked after each head of the
slopes, and the streamed form in its place when it cannot fit (certify/bounds/local/_taylor.py `_fit_budget`,
certify/_certify.py). No test times anything: the predictions are forced by their constants or a past deadline."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from problems import random_weights

import certify
from certify._domain import EpsBall
from certify._errors import BudgetExceeded
from certify.bounds.local import _taylor
from certify.bounds.local._domain import initial_box
from certify.bounds.local._enclosure import numpy_weights
from certify.bounds.local._slopes import dp_slopes
from certify.jacobian import jacobian, jacobian_norm

F64 = torch.float64


def _layer_and_centre(N: int = 6, D: int = 4, H: int = 2):
    weights = random_weights("dp", H, D // H, scale=1.0, seed=1, bias=True)
    X0 = torch.randn(N, weights.D, generator=torch.Generator().manual_seed(3), dtype=F64)
    return weights, X0


def test_a_pass_predicted_past_the_budget_is_refused_before_it_starts(monkeypatch):
    weights, X0 = _layer_and_centre()
    monkeypatch.setattr(_taylor, "SLOPES_SECONDS", 1.0)  # every unit of work a second: far past any budget
    began = time.perf_counter()
    with pytest.raises(BudgetExceeded, match="raise time_budget"):
        _taylor.taylor_bound(weights, 6, "inf", EpsBall(X0, 1e-2, "inf"), seeds="slopes", time_budget=5.0)
    assert time.perf_counter() - began < 5.0  # refused from the prediction, not after running out the budget
    # without a budget nothing is predicted, and the bound is the one the budget would have refused
    cert = _taylor.taylor_bound(weights, 6, "inf", EpsBall(X0, 1e-2, "inf"), seeds="slopes")
    assert cert.certified and cert.value >= float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])


def test_the_product_rule_is_dropped_before_the_pass_is_refused(monkeypatch):
    """A prediction that fits only without the product rule runs without it (and still bounds the attained)."""
    weights, X0 = _layer_and_centre()
    N, D, H = 6, weights.D, weights.H
    first, rest = _taylor.predicted_seconds(N, D, H, "inf", "slopes", False, False)
    # scale the product rule's cost so that with it the pass needs 100 s, without it the unchanged few ms
    monkeypatch.setattr(_taylor, "PRODUCT_RULE_SECONDS", 100.0 / (H * N**3 * D**2))
    used = []
    original = _taylor.taylor_enclosure

    def spy(*args, **kwargs):
        used.append(kwargs.get("product_rule"))
        return original(*args, **kwargs)

    monkeypatch.setattr(_taylor, "taylor_enclosure", spy)
    cert = _taylor.taylor_bound(weights, N, "inf", EpsBall(X0, 1e-2, "inf"), seeds="slopes", time_budget=10.0)
    assert used == [False] and first + rest < 10.0
    assert cert.value >= float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])


def test_the_row_functionals_are_dropped_when_they_do_not_fit(monkeypatch):
    """A row pass predicted at 100 s is skipped (row_steps 0, the entrywise row sums alone); within the budget it
    runs, and the bound is never above the entrywise one."""
    weights, X0 = _layer_and_centre()
    N, D, H = 6, weights.D, weights.H
    domain = EpsBall(X0, 1e-2, "inf")
    with_rows = _taylor.taylor_bound(weights, N, "inf", domain, seeds="slopes", time_budget=10.0)
    monkeypatch.setattr(_taylor, "ROW_FUNCTIONAL_SECONDS", 100.0 / (H * (N * D) ** 2))
    without = _taylor.taylor_bound(weights, N, "inf", domain, seeds="slopes", time_budget=10.0)
    assert with_rows.details["row_steps"] >= 1 and without.details["row_steps"] == 0
    assert float(jacobian_norm(jacobian(X0[None], weights), "inf")[0]) <= with_rows.value <= without.value


def test_the_slopes_stop_after_a_head_when_the_rest_would_pass_the_deadline():
    weights, X0 = _layer_and_centre(H=2)
    nw = numpy_weights(weights.to(F64, "cpu"))
    box = initial_box(EpsBall(X0, 1e-2, "inf"), 6, weights.D)
    centre = X0.numpy()
    with pytest.raises(BudgetExceeded, match="1 of 2 heads"):
        dp_slopes(box, centre, nw, deadline=time.perf_counter())
    # a deadline far away changes nothing
    assert np.array_equal(dp_slopes(box, centre, nw, deadline=time.perf_counter() + 1e6), dp_slopes(box, centre, nw))
    # one head: nothing left to extrapolate, so a past deadline cannot stop it
    single, X1 = _layer_and_centre(D=2, H=1)
    nw1 = numpy_weights(single.to(F64, "cpu"))
    dp_slopes(initial_box(EpsBall(X1, 1e-2, "inf"), 6, 2), X1.numpy(), nw1, deadline=time.perf_counter() - 1.0)


def test_certify_layer_runs_the_streamed_form_where_taylor_cannot_fit(monkeypatch):
    """Default methods on a DP eps-ball: taylor refused for time is reported, and the streamed form certifies in its
    place, above the value attained at the centre; named alone, taylor raises."""
    weights, X0 = _layer_and_centre()
    monkeypatch.setattr(_taylor, "ENCLOSURE_SECONDS", 1.0)  # any seeds: every pass encloses J
    report = certify.certify_layer(weights, center=X0, eps=1e-3, norm="inf", lower=False, time_budget=5.0,
                                   methods=["castin", "taylor"])
    methods = [c.method for c in report.certificates]
    assert methods == ["castin", "streamed"]
    assert any(line.startswith("taylor: the pass needs about") for line in report.skipped)
    assert any(line.startswith("taylor: streamed ran instead") for line in report.skipped)
    exact = float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])
    assert report.certificates[1].certified and exact <= report.certificates[1].value
    assert report.to_json()["skipped"] == list(report.skipped)  # --json keeps why taylor did not answer
    with pytest.raises(BudgetExceeded):
        certify.certify_layer(weights, center=X0, eps=1e-3, norm="inf", lower=False, time_budget=5.0,
                              methods="taylor")


def test_the_prediction_grows_with_every_option():
    """The options the budget may drop cost something in the prediction, the 2-norm's eigenvalue problems count
    only up to DENSE_NORM_MAX, and the inf-norm's row functionals (one pass) at every size."""
    base = _taylor.predicted_seconds(17, 48, 3, "inf", "slopes")
    assert _taylor.predicted_seconds(17, 48, 3, "inf", "slopes", exact_diagonal=True)[0] > base[0]
    assert _taylor.predicted_seconds(17, 48, 3, "inf", "slopes", product_rule=True)[0] > base[0]
    rows = _taylor.ROW_FUNCTIONAL_SECONDS * 3 * (17 * 48) ** 2
    assert _taylor.predicted_seconds(17, 48, 3, "2", "slopes")[1] > base[1] - rows
    large = _taylor.predicted_seconds(64, 64, 4, "2", "slopes")[1]
    rows = _taylor.ROW_FUNCTIONAL_SECONDS * 4 * (64 * 64) ** 2
    assert _taylor.predicted_seconds(64, 64, 4, "inf", "slopes")[1] - large == pytest.approx(rows)


def test_the_unit_tangents_are_predicted_at_one_enclosure_per_coordinate(monkeypatch):
    """seeds "coordinates" is a forward pass per input coordinate (in chunks): N D enclosures of J. Predicted at N D / 8
    it let a 10 s budget run 20 s on a tied L2 layer at (D, H, N) = (64, 4, 6); now that pass is refused before it
    starts (its prediction forced past the budget by the enclosure's constant, not timed), and a small DP layer's
    slopes path, which also runs the unit tangents, counts them."""
    enclosure = _taylor.ENCLOSURE_SECONDS * 4 * (6 * 64) ** 2
    assert _taylor.predicted_seconds(6, 64, 4, "2", "coordinates")[0] == pytest.approx(enclosure * 6 * 64)
    small = _taylor.ENCLOSURE_SECONDS * 2 * (6 * 4) ** 2 * (6 * 4)
    monkeypatch.setattr(_taylor, "COORDINATES_MAX", 0)
    without = _taylor.predicted_seconds(6, 4, 2, "2", "slopes")[0]
    monkeypatch.undo()
    assert _taylor.predicted_seconds(6, 4, 2, "2", "slopes")[0] == pytest.approx(without + small)
    weights, X0 = _layer_and_centre()
    # one enclosure 1.5 s: N D = 24 of them (36 s) are refused; at N D / 8 (4.5 s) plus the rest it would have run
    monkeypatch.setattr(_taylor, "ENCLOSURE_SECONDS", 1.5 / (2 * 24**2))
    began = time.perf_counter()
    with pytest.raises(BudgetExceeded, match="raise time_budget"):
        _taylor.taylor_bound(weights, 6, "2", EpsBall(X0, 1e-2, "inf"), seeds="coordinates", time_budget=5.0)
    assert time.perf_counter() - began < 5.0


def test_tied_l2_above_the_small_sizes_takes_the_unit_tangents_when_they_fit(monkeypatch):
    """seeds "auto" for tied L2 at N D > COORDINATES_MAX: the unit tangents where their predicted pass fits the
    budget (tighter than the one interval direction), else the direction; sound either way."""
    weights = random_weights("l2", 2, 16, scale=1.0, seed=0)
    X0 = torch.randn(6, 32, generator=torch.Generator().manual_seed(1), dtype=F64)
    domain = EpsBall(X0, 1e-3, "inf")
    direction = _taylor.taylor_bound(weights, 6, "2", domain, seeds="directional", time_budget=60.0)
    tangents = _taylor.taylor_bound(weights, 6, "2", domain, time_budget=60.0)
    assert tangents.details["seeds"] == "coordinates" and tangents.value < direction.value
    points = X0 + 1e-3 * (2 * torch.rand(64, 6, 32, generator=torch.Generator().manual_seed(2), dtype=F64) - 1)
    attained = float(jacobian_norm(jacobian(torch.cat([X0[None], points]), weights), "2").max())
    assert attained <= tangents.value
    # one enclosure 0.5 s: 192 of them do not fit 10 s, the direction's 4 (and the rest) do
    monkeypatch.setattr(_taylor, "ENCLOSURE_SECONDS", 0.5 / (2 * 192**2))
    fallback = _taylor.taylor_bound(weights, 6, "2", domain, time_budget=10.0)
    assert fallback.details["seeds"] == "directional" and attained <= fallback.value


def test_the_prediction_is_calibrated_by_the_centre_enclosure(monkeypatch):
    """A machine far slower than the reference (here: a reference enclosure time of 1e-15 s per unit, so the
    measured one is about 1e9 times it) is refused after the centre's enclosure, by the calibrated prediction."""
    weights, X0 = _layer_and_centre()
    monkeypatch.setattr(_taylor, "ENCLOSURE_SECONDS", 1e-15)
    with pytest.raises(BudgetExceeded, match="more on this machine now"):
        _taylor.taylor_bound(weights, 6, "inf", EpsBall(X0, 1e-2, "inf"), seeds="slopes", time_budget=5.0)


def test_the_refinement_pass_is_dropped_before_the_pass_is_refused(monkeypatch):
    """At the reference speed (the calibration pinned to 1), a pass that fits only as one slope pass runs as one,
    says so, and still bounds the attained value; the two-pass bound it replaces is at most 10% tighter here."""
    weights, X0 = _layer_and_centre()
    N, D, H = 6, weights.D, weights.H
    original = _taylor._centre_and_speed
    monkeypatch.setattr(_taylor, "_centre_and_speed", lambda X, w: (original(X, w)[0], 1.0))
    units = H * (N * D) ** 2
    # two passes: 10 s; one pass: 6.5 s; the budget 8.5 s (9.35 s with PREDICTION_SLACK)
    monkeypatch.setattr(_taylor, "SLOPES_SECONDS", 10.0 / units)
    monkeypatch.setattr(_taylor, "PRODUCT_RULE_SECONDS", 0.0)
    domain = EpsBall(X0, 1e-2, "inf")
    cert = _taylor.taylor_bound(weights, N, "inf", domain, seeds="slopes", time_budget=8.5, max_steps=1)
    assert cert.details["slope_passes"] == 1
    exact = float(jacobian_norm(jacobian(X0[None], weights), "inf")[0])
    two = _taylor.taylor_bound(weights, N, "inf", domain, seeds="slopes", max_steps=1)
    assert exact <= two.value <= cert.value <= 1.1 * two.value
    with pytest.raises(BudgetExceeded):  # not even one pass fits (5.5 s with the slack)
        _taylor.taylor_bound(weights, N, "inf", domain, seeds="slopes", time_budget=5.0, max_steps=1)
