"""Memory floors before allocating (certify/_footprint.py): methods chosen for the user that cannot fit are left out
and named in the report; methods the user names still get the precise refusal."""

from __future__ import annotations

import pytest
import torch
from problems import random_weights

import certify
import certify._certify as entry
from certify._domain import EpsBall
from certify._errors import InvalidInputError
from certify._footprint import method_floor_bytes


def _problem():
    weights = random_weights("dp", 2, 2, seed=0, bias=True)
    X0 = torch.randn(6, weights.D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return weights, EpsBall(X0, 1e-2, "inf")


def test_default_methods_that_do_not_fit_are_skipped_and_named(monkeypatch):
    weights, domain = _problem()
    bnb = method_floor_bytes("bnb", weights, 6, domain)
    monkeypatch.setattr(entry, "available_bytes", lambda: bnb - 1)  # everything but bnb fits
    monkeypatch.setattr("certify._footprint.available_bytes", lambda: bnb - 1)
    report = certify.certify_layer(weights, domain=domain, lower=False, time_budget=1.0)
    assert any(reason.startswith("bnb: needs at least") for reason in report.skipped)
    assert "bnb" not in {c.method for c in report.certificates}
    assert report.best_upper() is not None


def test_a_named_method_that_does_not_fit_is_refused(monkeypatch):
    weights, domain = _problem()
    bnb = method_floor_bytes("bnb", weights, 6, domain)
    monkeypatch.setattr(entry, "available_bytes", lambda: bnb - 1)
    monkeypatch.setattr("certify._footprint.available_bytes", lambda: bnb - 1)
    with pytest.raises(InvalidInputError, match="too long for this machine: bnb needs at least"):
        certify.certify_layer(weights, domain=domain, methods=["bnb"], lower=False, time_budget=1.0)


def test_bnb_runs_above_the_dense_sampling_size_in_little_memory(monkeypatch):
    """N D = 1024 > DENSE_LOWER_COORDINATES: the branch and bound samples no dense Jacobians, so 64 (N D)^2 floats
    (512 MiB) is not its floor; with 64 MiB 'available' it still runs, and its bound stays above the attained one."""
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(64, 4, batch_first=True).double()
    weights = certify.attention.as_weights(layer)
    domain = certify.Ball(8.0)
    assert method_floor_bytes("bnb", weights, 16, domain) == (2 * 16 * 64 + 16 * 16) * 8
    monkeypatch.setattr(entry, "available_bytes", lambda: 64 * 2**20)
    monkeypatch.setattr("certify._footprint.available_bytes", lambda: 64 * 2**20)
    report = certify.certify_layer(weights, tokens=16, domain=domain, methods=["bnb"], lower=False, time_budget=2.0)
    (bnb,) = report.certificates
    assert bnb.certified and bnb.method == "bnb"
    lower = certify.adversarial.lower_bound(weights, 16, "2", domain, restarts=4, steps=40, seed=0)
    assert lower.value <= bnb.value < 0.5 * certify.certify_layer(weights, tokens=16, domain=domain,
                                                                   methods=["castin"], lower=False).best_upper().value
