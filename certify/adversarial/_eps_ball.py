"""Projected gradient ascent of ||J(X)|| over an eps-ball around a data point, on the dense closed-form Jacobian.

For an eps-ball {X : ||vec(X - X0)||_p <= eps} small enough that J(X) is dense-affordable (N D up to a few
thousand), the steepest local ascent of the norm is cheap and strong (issue 15, item 5):

- inf-norm: ||J||_inf = max_a sum_b |J_ab|. Each restart k follows one row a_k (the largest row sums at X0 first):
  ascent on g_k(X) = sum_b |J_{a_k b}(X)|, whose gradient is one backward pass through the closed form;
- 2-norm: ||J||_2 = max_{u, v} u^T J v. Each restart keeps a singular pair (u_k, v_k), refreshed by a few power
  iterations at every step (warm-started), and ascends g_k(X) = u_k^T J(X) v_k (Danskin: its gradient is a
  gradient of sigma_max where the top singular value is simple).

Steps: sign of the gradient times alpha for p = inf (the steepest ascent direction of the l_inf ball), the normalised
gradient times alpha for p = 2, then projection onto the ball; alpha decays linearly from eps / 2 to eps / 50.
Every iterate's norm is recorded in float64 (inf: the exact row sums; 2: ||J v|| for a unit v, <= ||J||_2);
the result is a lower bound (an attained value), never certified.
"""

from __future__ import annotations

import math
import time

import torch

from .._domain import EpsBall
from ..attention import AttentionWeights
from ..jacobian import jacobian
from ._domains import project

DENSE_ENTRIES = 32 * 2**20
"""The ascent forms J, (N D)^2 entries per restart: it applies when (N D)^2 is at most this (256 MiB in float64),
and runs at most BATCH_ENTRIES / (N D)^2 restarts at once (memory: a few times the batch of Jacobians)."""
BATCH_ENTRIES = 64 * 2**20


def applies(N: int, D: int) -> bool:
    return (N * D) ** 2 <= DENSE_ENTRIES


def _row_objective(J: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    n = J.shape[1] * J.shape[2]
    flat = J.reshape(J.shape[0], n, n)
    return flat[torch.arange(J.shape[0]), rows].abs().sum(-1)


def eps_ball_ascent(weights: AttentionWeights, domain: EpsBall, norm: str, seconds: float, restarts: int = 6,
                    seed: int = 0) -> tuple[float, torch.Tensor]:
    """(value, X): the largest ||J(X)||_norm attained by the ascent (module docstring) within `seconds`, and X."""
    begin = time.perf_counter()
    w = weights.to(torch.float64, "cpu")
    X0 = domain.center.detach().to(dtype=torch.float64, device="cpu")
    N, D = X0.shape
    n = N * D
    generator = torch.Generator().manual_seed(seed)
    restarts = max(1, min(restarts, BATCH_ENTRIES // (n * n)))
    J0 = jacobian(X0[None], w)[0].reshape(n, n)
    if norm == "inf":
        row_sums = J0.abs().sum(1)
        best_value, best_X = float(row_sums.max()), X0.clone()
        rows = row_sums.argsort(descending=True)[:restarts]
        K = rows.numel()
    else:  # power iteration (no SVD: LAPACK slows down badly on a loaded machine), one start per restart
        K = restarts
        v = torch.nn.functional.normalize(torch.randn(K, n, generator=generator, dtype=torch.float64), dim=1)
        for _ in range(30):
            v = torch.nn.functional.normalize((v @ J0.T) @ J0, dim=1)
        best_value, best_X = float((v[0] @ J0.T).norm()), X0.clone()
    starts = [X0] * K
    X = torch.stack(starts).clone()
    if K > 1:  # all but the first restart start at a random vertex-like point of the ball, half way out
        X[1:] = project(X[1:] + 0.5 * domain.eps * torch.sign(
            torch.randn(X[1:].shape, generator=generator, dtype=torch.float64)), domain)
    step, cost = 0, 0.0
    while True:
        if time.perf_counter() - begin + 1.5 * cost > seconds:
            break
        started = time.perf_counter()
        X.requires_grad_(True)
        J = jacobian(X, w)
        flat = J.detach().reshape(K, n, n)
        if norm == "inf":
            values = flat.abs().sum(-1).max(-1).values
            objective = _row_objective(J, rows).sum()
        else:
            for _ in range(3):  # warm-started power iterations on J^T J
                v = torch.nn.functional.normalize(torch.einsum("kab,ka->kb", flat, torch.einsum("kab,kb->ka", flat, v)), dim=1)
            Jv = torch.einsum("kab,kb->ka", flat, v)
            values = Jv.norm(dim=1)
            u = torch.nn.functional.normalize(Jv, dim=1)
            objective = torch.einsum("ka,kab,kb->", u, J.reshape(K, n, n), v)
        top = int(values.argmax())
        if float(values[top]) > best_value:
            best_value, best_X = float(values[top]), X[top].detach().clone()
        (gradient,) = torch.autograd.grad(objective, X)
        alpha = domain.eps * (0.5 - 0.48 * min(step / 40.0, 1.0))
        with torch.no_grad():
            if domain.p == "inf":
                direction = torch.sign(gradient)
            else:
                direction = gradient / gradient.flatten(1).norm(dim=1).clamp_min(1e-300).reshape(-1, 1, 1)
            X = project(X.detach() + alpha * direction, domain)
        step += 1
        cost = time.perf_counter() - started
    return best_value, best_X if math.isfinite(best_value) else X0
