"""The toy sequence task behind `certify demo`: learn a kernel smoother.

Tokens x_i ~ N(0, I_D), shrunk into the ball ||x_i|| <= R (as a LayerNorm would keep them bounded). The target is
y_i = sum_j softmax_j(-||x_i - x_j||^2 / 2) x_j, a map that both L2 and dot-product attention can fit. Training
takes a few seconds on a CPU and is seeded, so the demo layers are the same on every machine.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..attention import DotProductMultiheadAttention, L2MultiheadAttention, l2_scores


@dataclasses.dataclass(frozen=True)
class ToyTask:
    N: int = 8
    D: int = 8
    H: int = 2
    radius: float = 3.0


def toy_batch(task: ToyTask, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, Y) with X (batch, N, D) inside the ball of radius R, Y the kernel-smoothed tokens."""
    X = torch.randn(batch, task.N, task.D, generator=generator)
    X = X * torch.clamp(task.radius / X.norm(dim=-1, keepdim=True), max=1.0)
    return X, l2_scores(X / 2**0.5, X / 2**0.5) @ X


def train_toy_layer(kind: str, task: ToyTask = ToyTask(), steps: int = 300, seed: int = 0) -> tuple[nn.Module, float]:
    """Train an L2 ("l2") or dot-product ("dp") layer on the toy task; returns (layer, final test MSE)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layers = {"l2": L2MultiheadAttention, "dp": DotProductMultiheadAttention}
    if kind not in layers:
        raise ValueError(f"kind must be one of {sorted(layers)}, got {kind!r}")
    layer = layers[kind](task.D, task.H, generator=generator)
    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
    for _ in range(steps):
        X, Y = toy_batch(task, 64, generator)
        loss = ((layer(X) - Y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        X, Y = toy_batch(task, 256, generator)
        test_loss = float(((layer(X) - Y) ** 2).mean())
    return layer.eval(), test_loss
