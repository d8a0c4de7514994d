"""Bound propagation beside Lipschitz certificates on the same layer and ball, or the same classifier and inputs.

`compare_layer(layer, X0, eps, p)` returns one `Comparison` row per method, each bounding
max over {||vec(X - X0)||_p <= eps} of ||vec(F(X) - F(X0))||_p (the output deviation):

- ``IBP``, ``CROWN``: from auto_LiRPA's output box (`OutputBounds.deviation`); no Lipschitz constant;
- ``auto_LiRPA-CROWN-Jacobian`` (or IBP): L = the Lip_p bound of the CROWN (IBP) enclosure of J over the
  ball; deviation L eps;
- ``ours local``: L = `local_bound` (branch and bound, certified) on the same ball; deviation L eps;
- ``ours global``: L = min(factorised, Theorem 3.2) for tied L2 over R^{N x D}; Castin et al. on the token ball
  ||x_i|| <= max_i ||x0_i|| + eps (p = 2) or + sqrt(D) eps (p = inf) for dot-product attention; deviation L eps;
- ``attained (PGD)``: the largest deviation projected gradient ascent finds, with the largest ||J(X)||_p it
  visits: lower bounds for every row above (estimates, never certified).

(||F(X) - F(X0)||_p <= Lip_p eps on a convex ball, MATH.md section 0.) `compare_classifier` returns, per method,
the mean certified radius, the certified accuracy at each eps, and the time per input.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import torch
from torch import nn

from .._domain import EpsBall
from ..attention import AttentionWeights, as_weights, attention_forward
from ..adversarial import LOCAL_LOWER_SEARCH
from ..bounds import castin_bound, factorised_bound, local_bound, paper_bound, round_up
from ..jacobian import jacobian, jacobian_norm
from ._bounds import check_ball, output_bounds
from ._jacobian import jacobian_bounds, lirpa_lipschitz
from ._radius import crown_radius, lipschitz_radius


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One method on one ball: a Lipschitz bound (if the method has one), the output-deviation bound, seconds."""

    method: str
    eps: float
    p: str
    lipschitz: float | None
    deviation: float
    certified: bool
    seconds: float
    kind: str = "upper"

    def as_row(self) -> dict:
        return dataclasses.asdict(self)


def _project(X: torch.Tensor, X0: torch.Tensor, eps: float, p: str) -> torch.Tensor:
    delta = X - X0
    if p == "inf":
        return X0 + delta.clamp(-eps, eps)
    norms = delta.flatten(1).norm(dim=1).clamp_min(1e-300)
    return X0 + delta * (eps / norms).clamp(max=1.0)[:, None, None]


def attained_deviation(weights: AttentionWeights, X0: torch.Tensor, eps: float, p: str, restarts: int = 16,
                       steps: int = 60, seed: int = 0) -> tuple[float, float]:
    """(deviation, lipschitz): the largest ||F(X) - F(X0)||_p and ||J(X)||_p that PGD finds in the ball."""
    w = weights.to(torch.float64)
    generator = torch.Generator().manual_seed(seed)
    N, D = X0.shape
    F0 = attention_forward(X0[None], w)
    X = X0 + eps * (2 * torch.rand(restarts, N, D, generator=generator, dtype=torch.float64) - 1)
    X = _project(X, X0, eps, p)
    step = 0.25 * eps
    for _ in range(steps):
        X.requires_grad_(True)
        gap = (attention_forward(X, w) - F0).flatten(1)
        objective = gap.abs().amax(1) if p == "inf" else gap.norm(dim=1)
        (grad,) = torch.autograd.grad(objective.sum(), X)
        with torch.no_grad():
            if p == "inf":
                direction = grad.sign()
            else:
                direction = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-300)[:, None, None]
            X = _project(X + step * direction, X0, eps, p)
        step *= 0.96
    with torch.no_grad():
        gap = (attention_forward(X, w) - F0).flatten(1)
        deviation = float((gap.abs().amax(1) if p == "inf" else gap.norm(dim=1)).max())
        lipschitz = float(jacobian_norm(jacobian(torch.cat([X, X0[None]]), w), p).max())
    return deviation, lipschitz


def global_lipschitz(weights: AttentionWeights, X0: torch.Tensor, eps: float, p: str):
    """Our certified bound that needs no search: global for tied L2, Castin on a token ball for dot product."""
    N, D = X0.shape
    if weights.kind == "l2":
        return min((factorised_bound(weights, N, p), paper_bound(weights, N, p)), key=lambda c: c.value)
    if weights.kind == "dp":
        move = eps * (1.0 if p == "2" else math.sqrt(D))
        return castin_bound(weights, N, round_up(float(X0.norm(dim=1).max()) + round_up(move)), p)
    return None


def compare_layer(layer: nn.Module | AttentionWeights, X0: torch.Tensor, eps: float, p: str = "inf",
                  time_budget: float = 5.0, norm2: str = "sdp", chunk: int | None = None,
                  jacobian_method: str = "CROWN") -> list[Comparison]:
    """All methods on the ball {||vec(X - X0)||_p <= eps} (module docstring); p is also the output norm.

    ``time_budget``: seconds for our branch and bound (and the SDP time limit); ``norm2``: the `certify.sdp`
    method for 2-norms of the auto_LiRPA enclosure; ``jacobian_method``: "CROWN" or "IBP" for that enclosure.
    """
    X0 = check_ball(X0, eps, p)
    weights = as_weights(layer).to(torch.float64)
    rows = [Comparison(b.method, eps, p, None, b.deviation(p), False, b.seconds)
            for b in output_bounds(weights, X0, eps, p)]
    lirpa = lirpa_lipschitz(weights, X0, eps, p, p, jacobian_method, norm2=norm2, chunk=chunk, time_limit=time_budget)
    rows.append(Comparison(lirpa.method, eps, p, lirpa.value, round_up(lirpa.value * eps), False, lirpa.seconds))
    ours = local_bound(weights, X0.shape[0], p, EpsBall(X0, eps, p), time_budget=time_budget,
                       lower_search=LOCAL_LOWER_SEARCH)
    rows.append(Comparison("ours local", eps, p, ours.value, round_up(ours.value * eps), True, ours.seconds))
    best = global_lipschitz(weights, X0, eps, p)
    if best is not None:
        rows.append(Comparison(f"ours global ({best.method})", eps, p, best.value, round_up(best.value * eps), True,
                               best.seconds))
    start = time.perf_counter()
    deviation, lipschitz = attained_deviation(weights, X0, eps, p)
    lipschitz = max(lipschitz, float(ours.details.get("lower", 0.0)))
    rows.append(Comparison("attained (PGD)", eps, p, lipschitz, deviation, False, time.perf_counter() - start,
                           kind="lower"))
    return rows


@dataclasses.dataclass(frozen=True)
class RadiusSummary:
    """One method over a set of inputs: mean certified radius, certified accuracy at each eps, seconds per input."""

    method: str
    p: str
    mean_radius: float
    certified_accuracy: dict[float, float]
    seconds_per_input: float
    certified: bool

    def as_row(self) -> dict:
        row = dataclasses.asdict(self)
        row["certified_accuracy"] = {str(k): v for k, v in self.certified_accuracy.items()}
        return row


def compare_classifier(model: nn.Module, X: torch.Tensor, labels: torch.Tensor, p: str = "2",
                       eps: Sequence[float] = (), methods: Sequence[str] | None = None,
                       time_budget: float = 1.0, steps: int = 10) -> tuple[RadiusSummary, ...]:
    """Certified l_p radii of `ToyClassifier` ``model`` on inputs X (B, N, D_in), by every method.

    Methods: "CROWN" (bisection), "lipschitz-global" (tied L2 only), "lipschitz-castin" (dot product only),
    "lipschitz-local" (branch and bound per tested radius; ``time_budget`` seconds per call).
    """
    kind = model.attention_weights().kind
    if methods is None:
        methods = ("CROWN", "lipschitz-global" if kind == "l2" else "lipschitz-castin", "lipschitz-local")
    summaries = []
    for method in methods:
        radii, seconds = [], 0.0
        for x, y in zip(X, labels):
            if method in ("CROWN", "IBP"):
                result = crown_radius(model, x, int(y), p, method=method, steps=steps)
            else:
                result = lipschitz_radius(model, x, int(y), p, method.split("-", 1)[1], time_budget=time_budget,
                                          steps=steps)
            radii.append(result.value)
            seconds += result.seconds
        accuracy = {e: sum(r >= e and r > 0 for r in radii) / len(radii) for e in eps}
        summaries.append(RadiusSummary(result.method, p, sum(radii) / len(radii), accuracy, seconds / len(radii),
                                       result.certified))
    return tuple(summaries)
