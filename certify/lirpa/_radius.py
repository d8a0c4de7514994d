"""Certified robustness radii of the toy classifier: from Lipschitz margins (ours) and from CROWN by bisection.

For an input X (N, D_in) with label y and logits z, the classifier keeps label y on the ball
{||vec(X' - X)||_p <= r} when every margin z_y - z_j stays positive there.

**Lipschitz margins** (`lipschitz_radius`). The margin m_j = z_y - z_j is a composition (see
`certify.experiments._classifier`): embedding, attention F, mean over tokens, the row difference w_y - w_j. So

    |m_j(X') - m_j(X)| <= c_j,q K_q A_q ||vec(X' - X)||_q,

with K_2 = ||W_e||_2 / sqrt(N), c_j,2 = ||w_y - w_j||_2, K_inf = ||W_e||_inf, c_j,inf = ||w_y - w_j||_1, and A_q a
certified bound on Lip_q(F) over a domain that contains the embedded ball:

- ``"global"`` (tied L2 only): min(factorised, Theorem 3.2) over R^{N x D}; the radius is then explicit,
  r = min_j m_j / (c_j,q K_q A_q);
- ``"castin"`` (dot product): Castin et al. on the token ball ||y_i|| <= max_i ||y0_i|| + t(r), where
  t(r) = ||W_e||_2 r (l_2 ball) or ||W_e||_2 sqrt(D_in) r (l_inf ball) bounds each embedded token's move;
- ``"local"``: `local_bound` (branch and bound) on the embedded eps-ball EpsBall(X W_e, ||W_e||_q r, q), and for
  tied L2 the smaller of that and the global bound (which holds on every domain).

For the domain-dependent bounds, A_q grows with r, and r is certified when m_j >= c_j,q K_q A_q(r) r for all j;
the largest such r is found by bracketing and bisection, and only radii that passed the test are returned. The l_inf
radius also uses the l_2 chain through {||.||_inf <= r} inside {||.||_2 <= sqrt(N D_in) r} and keeps the better one.
Floating point: every factor is rounded up (`certify.bounds.round_up`), and each margin is reduced by
1e-9 (1 + max |z|), far above the float64 error of the forward pass at these sizes.

**CROWN** (`crown_radius`): the largest eps, by bracketing and bisection, at which CROWN's lower bounds on all the
margins (the specification matrix C with rows e_y - e_j) are positive. Sound in exact arithmetic; float64 without
outward rounding (see `_bounds`), so it is reported with ``certified=False``.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
from torch import nn

from .._domain import EpsBall
from .._bisection import largest_certified as largest_certified
from .._errors import InvalidInputError
from ..adversarial import LOCAL_LOWER_SEARCH
from ..bounds import castin_bound, factorised_bound, local_bound, paper_bound, round_up
from ..bounds._rounding import norm_2, norm_inf
from . import _compat
from ._bounds import bounded_module, check_ball, compute, float64_default, perturbation
from ._export import LirpaClassifier

BOUNDS: tuple[str, ...] = ("global", "castin", "local")
MARGIN_SLACK = 1e-9


@dataclasses.dataclass(frozen=True)
class Radius:
    """A robustness radius for one input: the label is constant on the l_p ball of radius ``value``."""

    method: str
    p: str
    value: float
    seconds: float
    certified: bool
    details: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)


def _logits(model: nn.Module, X: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(X.unsqueeze(0))[0].to(torch.float64)


def _check_input(model: nn.Module, X: torch.Tensor, label: int) -> torch.Tensor:
    X = check_ball(X, 1.0, "2")
    task = model.task
    if tuple(X.shape) != (task.N, task.D_in):
        raise InvalidInputError(f"X must have shape (N, D_in) = {(task.N, task.D_in)}, got {tuple(X.shape)}")
    if not 0 <= int(label) < task.classes:
        raise InvalidInputError(f"label must lie in [0, {task.classes}), got {label}")
    return X


def _margins(model: nn.Module, X: torch.Tensor, label: int) -> tuple[torch.Tensor, list[int]]:
    z = _logits(model, X)
    others = [j for j in range(z.numel()) if j != label]
    slack = MARGIN_SLACK * (1.0 + float(z.abs().max()))
    return torch.stack([z[label] - z[j] for j in others]) - slack, others


def _attention_bound(model: nn.Module, bound: str, q: str, X: torch.Tensor, r: float, p: str,
                     time_budget: float) -> float:
    """A certified bound on Lip_q of the attention over a domain containing the embedding of the input l_p ball of
    radius r around X."""
    weights = model.attention_weights().to(torch.float64)
    N, D_in = X.shape
    if bound == "global":
        return min(factorised_bound(weights, N, q).value, paper_bound(weights, N, q).value)
    W_e = model.embedding.weight.detach()
    with torch.no_grad():
        Y0 = model.embed(X)
    if bound == "castin":  # each embedded token moves by at most ||W_e||_2 ||x'_i - x_i||_2
        move = norm_2(W_e) * r * (1.0 if p == "2" else math.sqrt(D_in))
        R = round_up(float(Y0.norm(dim=1).max()) + round_up(move))
        return castin_bound(weights, N, R, q).value
    if q == p:
        eps = (norm_2(W_e) if q == "2" else norm_inf(W_e)) * r
    else:  # the l_2 ball of radius ||W_e||_2 sqrt(N D_in) r contains the embedded l_inf ball
        eps = norm_2(W_e) * math.sqrt(N * D_in) * r
    local = local_bound(weights, N, q, EpsBall(Y0, round_up(eps), q), time_budget=time_budget,
                        lower_search=LOCAL_LOWER_SEARCH).value
    if weights.kind == "l2":  # the global bound holds on every domain: keep the smaller
        return min(local, _attention_bound(model, "global", q, X, r, p, time_budget))
    return local


def lipschitz_radius(model: nn.Module, X: torch.Tensor, label: int, p: str = "2", bound: str = "global",
                     time_budget: float = 2.0, steps: int = 12) -> Radius:
    """Certified l_p radius around X from the Lipschitz margins (module docstring); 0 if X is misclassified.

    ``time_budget`` is per `local_bound` call (bound="local"); ``steps`` bisection steps after bracketing.
    """
    start = time.perf_counter()
    if bound not in BOUNDS:
        raise InvalidInputError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if p not in ("2", "inf"):
        raise InvalidInputError(f"p must be '2' or 'inf', got {p!r}")
    X = _check_input(model, X, label)
    if bound == "global" and model.attention_weights().kind != "l2":
        raise InvalidInputError("a global Lipschitz bound exists only for tied L2 attention (Theorem 3.1): use "
                                "bound='castin' or 'local' for dot-product attention")
    margins, others = _margins(model, X, label)
    method = f"lipschitz-{bound}"
    if float(margins.min()) <= 0:
        return Radius(method, p, 0.0, time.perf_counter() - start, True, {"misclassified": True})
    N, D_in = X.shape
    W_e, W_c = model.embedding.weight.detach(), model.head.weight.detach()
    K = {"2": round_up(norm_2(W_e) / math.sqrt(N)), "inf": norm_inf(W_e)}
    c = {"2": [norm_2((W_c[label] - W_c[j])[None]) for j in others],
         "inf": [norm_inf((W_c[label] - W_c[j])[None]) for j in others]}
    # chain q bounds the margins' change by the q-norm of the move; ||.||_2 <= sqrt(N D_in) ||.||_inf
    chains = ("2",) if p == "2" else (("inf",) if bound == "local" else ("inf", "2"))
    scale = {"2": 1.0 if p == "2" else math.sqrt(N * D_in), "inf": 1.0}

    def chain_radius(q: str, A: float) -> float:
        """The radius, in the ball's p-norm, that chain q certifies with attention bound A."""
        slopes = [round_up(c_j * K[q] * A) for c_j in c[q]]
        r = min(float(m) / s for m, s in zip(margins, slopes))
        return r * (1 - 1e-12) / scale[q]

    def attention(q: str, r: float) -> float:
        return _attention_bound(model, bound, q, X, r, p, time_budget)

    if bound == "global":
        radius = max(chain_radius(q, attention(q, 0.0)) for q in chains)
        return Radius(method, p, radius, time.perf_counter() - start, True, {"calls": 1})

    def test(r: float) -> bool:
        return any(chain_radius(q, attention(q, r)) >= r for q in chains)

    first = max(chain_radius(q, attention(q, 1e-4)) for q in chains)
    radius, calls = largest_certified(test, start=max(first, 1e-6), steps=steps)
    if bound == "local" and model.attention_weights().kind == "l2":  # both radii are certified: keep the larger
        radius = max(radius, lipschitz_radius(model, X, label, p, "global").value)
    return Radius(method, p, radius, time.perf_counter() - start, True, {"calls": calls + 1})


def crown_radius(model: nn.Module, X: torch.Tensor, label: int, p: str = "2", method: str = "CROWN",
                 steps: int = 12, start: float = 0.05) -> Radius:
    """Largest eps (bisection) at which ``method`` ("CROWN" or "IBP") proves every margin positive on the l_p ball."""
    begin = time.perf_counter()
    X = _check_input(model, X, label)
    name = f"auto_LiRPA-{method}"
    margins, others = _margins(model, X, label)
    if float(margins.min()) <= 0:
        return Radius(name, p, 0.0, time.perf_counter() - begin, False, {"misclassified": True})
    with float64_default():
        module = LirpaClassifier(model)
        Xb = X.unsqueeze(0)
        bounded = bounded_module(module, (Xb,))
        C = torch.zeros(1, len(others), model.task.classes, dtype=torch.float64)
        for row, j in enumerate(others):
            C[0, row, label], C[0, row, j] = 1.0, -1.0

        def test(eps: float) -> bool:
            lower, _ = compute(bounded, (_compat.BoundedTensor(Xb, perturbation(eps, p)),), method, C=C)
            return bool((lower > 0).all())

        radius, calls = largest_certified(test, start=start, steps=steps)
    return Radius(name, p, radius, time.perf_counter() - begin, False, {"calls": calls})
