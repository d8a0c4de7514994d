"""Soundness over many inputs (issue 17 target, fast version of benchmarks/model_soundness.py): on a tiny imported
encoder classifier, for 20 inputs and both norms the attained local Lipschitz value never exceeds the certified
one, and certified radii are never broken by a PGD attack inside the certified ball."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from certify.model import Model, certified_radius, certify_model, model_output, pgd_counterexample
from certify.model._forward import forward_blocks

from test_model_chain import tiny_model

INPUTS = 20


@pytest.fixture(scope="module")
def model_and_inputs():
    model = tiny_model(4, N=3, D=6, norm_first=False, classes=3)
    rng = np.random.default_rng(4)
    return model, [rng.standard_normal(model.input_shape) for _ in range(INPUTS)]


def attained(model: Model, x: np.ndarray, eps: float, norm: str, points: int, seed: int) -> float:
    """max ||J|| at x and at ``points`` random points on the ball's boundary (vertices for inf), one batched jacrev."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.tensor(x).reshape(-1)
    d = torch.rand(points, x0.numel(), generator=g, dtype=torch.float64) * 2 - 1
    d = d.sign() if norm == "inf" else d / d.norm(dim=1, keepdim=True)
    X = torch.cat([x0[None], x0 + eps * d])
    J = torch.func.vmap(torch.func.jacrev(lambda v: forward_blocks(model.blocks, v.reshape(1, *model.state_shape))
                                         .reshape(-1)))(X)
    values = J.abs().sum(2).amax(1) if norm == "inf" else torch.linalg.matrix_norm(J, 2)
    return float(values.max())


@pytest.mark.parametrize("norm", ["inf", "2"])
def test_attained_never_exceeds_certified_on_20_inputs(model_and_inputs, norm):
    model, inputs = model_and_inputs
    eps = 1e-3
    ratios = []
    for index, x in enumerate(inputs):
        certified = certify_model(model, x, eps, norm).value
        value = attained(model, x, eps, norm, 8, index)
        assert value <= certified, (index, value, certified)
        ratios.append(certified / value)
    assert max(ratios) < 10  # and the certificates are informative, not just huge


def test_certified_radius_is_never_broken_by_pgd(model_and_inputs):
    model, inputs = model_and_inputs
    for x in inputs[:2]:
        radius = certified_radius(model, x, "inf", steps=4)
        assert radius.value > 0
        y0 = model_output(model, x)
        classes = y0.size
        for j in range(classes):
            if j == radius.label:
                continue
            row = -np.eye(classes)[radius.label] + np.eye(classes)[j]  # y_j - y_label >= 0 breaks the radius
            witness = pgd_counterexample(model, x.reshape(-1) - radius.value, x.reshape(-1) + radius.value,
                                         -row[None], np.zeros(1), restarts=2, steps=20)
            assert witness is None
