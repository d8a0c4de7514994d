"""The naive baseline for benchmarks: Adam on ||jacrev(F)(X)||_p (`torch.linalg.matrix_norm`), one restart at a time.

This is what a first implementation would do (and roughly what the paper describes for Sec. 5.1): random starts at
the layer's natural scale, Adam, the full autodiff Jacobian at every step. Its best value is recomputed like the
main search's (`attained_norm`), so the two are compared on equal terms.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from ..attention import AttentionWeights, attention_forward
from ._attained import attained_norm
from ._domains import natural_scale


@dataclasses.dataclass(frozen=True)
class NaiveResult:
    value: float
    evaluations: int
    seconds: float
    restarts: int
    witness: torch.Tensor

    @property
    def rate(self) -> float:
        """Jacobian-norm evaluations per second."""
        return self.evaluations / self.seconds if self.seconds > 0 else math.nan


def naive_lower_bound(weights: AttentionWeights, N: int, norm: str, seconds: float, steps: int = 300,
                      learning_rate: float = 0.05, seed: int = 0, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float64) -> NaiveResult:
    """Sequential restarts of Adam on matrix_norm(jacrev(F)(X)) until ``seconds`` have passed (global domain)."""
    start = time.perf_counter()
    w = weights.to(dtype, device)
    scale = natural_scale(weights)
    generator = torch.Generator().manual_seed(seed)
    single = lambda x: attention_forward(x[None], w)[0]  # noqa: E731
    order = 2 if norm == "2" else math.inf
    best_value, best_X, evaluations, restarts = -math.inf, None, 0, 0
    while time.perf_counter() - start < seconds:
        X0 = torch.randn(N, weights.D, generator=generator, dtype=torch.float64) * scale
        X = X0.to(dtype=dtype, device=device).requires_grad_(True)
        optimizer = torch.optim.Adam([X], lr=learning_rate * scale)
        restarts += 1
        for _ in range(steps):
            J = torch.func.jacrev(single)(X).reshape(N * weights.D, N * weights.D)
            value = torch.linalg.matrix_norm(J, ord=order)
            evaluations += 1
            if float(value.detach()) > best_value:
                best_value, best_X = float(value.detach()), X.detach().clone()
            optimizer.zero_grad()
            (-value).backward()
            optimizer.step()
            if time.perf_counter() - start >= seconds:
                break
    elapsed = time.perf_counter() - start
    value, _ = attained_norm(best_X, weights, norm)
    return NaiveResult(value, evaluations, elapsed, restarts, best_X.to(device="cpu", dtype=torch.float64))
