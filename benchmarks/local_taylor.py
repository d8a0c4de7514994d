"""The Taylor bound (`certify.bounds.local._taylor`) vs the local branch and bound on a trained layer around a real
input (issue 15: D = 48, H = 3, d = 16, q/k/v/out biases, N = 17).

    python benchmarks/local_taylor.py [--budget 20] [--lower-seconds 5] [--train-seconds 30] [--eps 1e-3 1e-2 1e-1]

The layer: a one-layer vision transformer trained here on sklearn's 8 x 8 digits (16 patches of 2 x 2 pixels, a
class token, learned positions, pre-LayerNorm, nn.MultiheadAttention(48, 3) with biases, class-token readout),
trained with Adam for --train-seconds on the CPU (seeded; the test accuracy is printed). X0 = the LayerNorm output
(the attention layer's input) of the first test image. For each eps in {1e-3, 1e-2, 1e-1}, l_inf and l_2 balls and
both norms: the old branch and bound (`local_bound`, taylor=False, --budget seconds), the Taylor bound (one pass),
the lower bound (adversarial ascent inside the ball, --lower-seconds, and ||J(X0)||), the ratio upper / lower and
seconds. Every certified value is checked to be above the lower bound. Also prints the Taylor pass's peak memory
(tracemalloc) next to `memory_estimate`.
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc

import numpy as np
import torch
from torch import nn

from certify._domain import EpsBall
from certify.adversarial import LOCAL_LOWER_SEARCH, lower_bound
from certify.attention import as_weights
from certify.bounds.local._search import local_bound
from certify.bounds.local._taylor import memory_estimate, taylor_bound
from certify.jacobian import jacobian, jacobian_norm


class TinyViT(nn.Module):
    """Patches (16 x 4) -> Linear(4, 48) + positions, a class token, LayerNorm, attention (residual), readout."""

    def __init__(self, D: int = 48, H: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 17, D))
        self.norm = nn.LayerNorm(D)
        self.attention = nn.MultiheadAttention(D, H, bias=True, batch_first=True)
        self.head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, classes))

    def tokens(self, patches: torch.Tensor) -> torch.Tensor:
        """The attention layer's input: LayerNorm(embedding), (B, 17, D)."""
        x = torch.cat([self.cls.expand(len(patches), -1, -1), self.embed(patches)], dim=1) + self.pos
        return x, self.norm(x)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        x, z = self.tokens(patches)
        x = x + self.attention(z, z, z, need_weights=False)[0]
        return self.head(x[:, 0])


def digits_patches() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """sklearn digits as (B, 16, 4) patches in [0, 1], split 1500 train / the rest test."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32) / 16.0  # (B, 8, 8)
    patches = images.reshape(-1, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, 16, 4)
    labels = torch.tensor(data.target)
    return patches[:1500], labels[:1500], patches[1500:], labels[1500:]


def train(seconds: float, seed: int = 0) -> tuple[TinyViT, float, torch.Tensor]:
    torch.manual_seed(seed)
    model = TinyViT()
    Xtr, ytr, Xte, yte = digits_patches()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    start, generator = time.perf_counter(), torch.Generator().manual_seed(seed)
    while time.perf_counter() - start < seconds:
        for batch in torch.randperm(len(Xtr), generator=generator).split(64):
            loss = nn.functional.cross_entropy(model(Xtr[batch]), ytr[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        accuracy = float((model(Xte).argmax(1) == yte).float().mean())
    return model, accuracy, Xte


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=20.0, help="seconds for the old branch and bound")
    parser.add_argument("--lower-seconds", type=float, default=5.0)
    parser.add_argument("--train-seconds", type=float, default=30.0)
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1])
    parser.add_argument("--no-bnb", action="store_true", help="skip the old branch and bound")
    args = parser.parse_args()

    model, accuracy, Xte = train(args.train_seconds)
    weights = as_weights(model.attention.double()).to(torch.float64, "cpu")
    with torch.no_grad():
        X0 = model.double().tokens(Xte[:1].double())[1][0]
    N, D = X0.shape
    print(f"trained TinyViT on digits for {args.train_seconds:g} s: test accuracy {accuracy:.3f}; layer D = {D}, "
          f"H = {weights.H}, d = {weights.d}, biases, N = {N}; ||J(X0)||_2 = "
          f"{float(jacobian_norm(jacobian(X0[None], weights), '2')[0]):.4g}, ||J(X0)||_inf = "
          f"{float(jacobian_norm(jacobian(X0[None], weights), 'inf')[0]):.4g}")

    tracemalloc.start()
    taylor_bound(weights, N, "2", EpsBall(X0, 1e-3, "inf"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"Taylor pass peak memory (tracemalloc): {peak / 2**20:.0f} MiB; memory_estimate "
          f"{memory_estimate(N, D) / 2**20:.0f} MiB ({peak / (N * D) ** 2:.0f} bytes per entry of J)")

    header = f"{'eps':>6} {'ball':>4} {'norm':>4} | {'old bnb':>10} {'s':>5} | {'taylor':>10} {'s':>5} | " \
             f"{'lower':>9} {'||J(X0)||':>9} | {'old/lower':>9} {'taylor/lower':>12}"
    print(header)
    print("-" * len(header))
    for eps in args.eps:
        for p in ("inf", "2"):
            for norm in ("2", "inf"):
                domain = EpsBall(X0, eps, p)
                taylor = taylor_bound(weights, N, norm, domain)
                low = lower_bound(weights, N, norm, domain, restarts=8, steps=150, seconds=args.lower_seconds)
                lower = max(low.value, taylor.details["lower"])
                if args.no_bnb:
                    old, old_s = math.nan, math.nan
                else:
                    result = local_bound(weights, N, norm, domain, args.budget, lower=low, taylor=False,
                                         lower_search=LOCAL_LOWER_SEARCH)
                    old, old_s = result.value, result.seconds
                    assert old >= lower, (old, lower)
                assert taylor.value >= lower, (taylor.value, lower)
                print(f"{eps:>6g} {p:>4} {norm:>4} | {old:>10.5g} {old_s:>5.1f} | {taylor.value:>10.5g} "
                      f"{taylor.seconds:>5.1f} | {lower:>9.5g} {taylor.details['lower']:>9.5g} | "
                      f"{old / lower:>9.3f} {taylor.value / lower:>12.3f}", flush=True)


if __name__ == "__main__":
    main()
