"""A small vision transformer on scikit-learn's 8 x 8 digits: trained attention layers and real inputs for them.

The digits (1,797 images of 8 x 8 pixels, shipped with scikit-learn, no download) are cut into 16 patches of
2 x 2 pixels; with a class token that gives N = 17 tokens. The model is the usual pre-LN encoder:

    Z_0 = [c; P E] + pos,    Z_l = Z'_l + FF_l(LN(Z'_l)),   Z'_l = Z_{l-1} + MHA_l(LN(Z_{l-1})),
    logits = W_head LN(Z_L)[0],

with P the patches (16 x 4), E (4 x D), torch.nn.MultiheadAttention (dot-product, q/k/v/out biases, H heads of
width d = D / H), FF a two-layer GELU network. Defaults: D = 48, H = 3 (d = 16), 3 layers, as in issue 15.
Training takes a few seconds on a CPU and reaches about 95% test accuracy.

`attention_inputs(model, images, layer)` returns what attention layer `layer` sees: LN(Z_{layer}), shape
(B, 17, D). Those are the real inputs X0 around which local certificates are taken (issue 15).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

PATCH = 2
SIDE = 8
TOKENS = (SIDE // PATCH) ** 2 + 1  # 16 patches and the class token


def load_digits_tensors(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train / test images (B, 8, 8) in [0, 1] and labels, split 80 / 20 by a seeded permutation."""
    from sklearn.datasets import load_digits  # ships the data; nothing is downloaded

    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return images[train], labels[train], images[test], labels[test]


def patches(images: torch.Tensor) -> torch.Tensor:
    """(B, 8, 8) -> (B, 16, 4): 2 x 2 patches in row-major order."""
    B = images.shape[0]
    grid = images.reshape(B, SIDE // PATCH, PATCH, SIDE // PATCH, PATCH).permute(0, 1, 3, 2, 4)
    return grid.reshape(B, (SIDE // PATCH) ** 2, PATCH * PATCH)


class Block(nn.Module):
    """Pre-LN transformer block: Z + MHA(LN(Z)), then + FF(LN(.))."""

    def __init__(self, D: int, H: int, hidden: int) -> None:
        super().__init__()
        self.norm_attention = nn.LayerNorm(D)
        self.attention = nn.MultiheadAttention(D, H, batch_first=True)
        self.norm_ff = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, hidden), nn.GELU(), nn.Linear(hidden, D))

    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        X = self.norm_attention(Z)
        Z = Z + self.attention(X, X, X, need_weights=False)[0]
        return Z + self.ff(self.norm_ff(Z))


class DigitsTransformer(nn.Module):
    def __init__(self, D: int = 48, H: int = 3, layers: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Linear(PATCH * PATCH, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.position = nn.Parameter(0.02 * torch.randn(1, TOKENS, D))
        self.blocks = nn.ModuleList(Block(D, H, 2 * D) for _ in range(layers))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """Z_0 = [c; P E] + pos, (B, 17, D)."""
        embedded = self.embed(patches(images))
        return torch.cat([self.cls.expand(len(images), -1, -1), embedded], dim=1) + self.position

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        Z = self.tokens(images)
        for block in self.blocks:
            Z = block(Z)
        return self.head(self.norm(Z)[:, 0])


@dataclasses.dataclass(frozen=True)
class VisionResult:
    model: DigitsTransformer
    test_accuracy: float
    test_images: torch.Tensor
    test_labels: torch.Tensor


def train_digits_transformer(D: int = 48, H: int = 3, layers: int = 3, epochs: int = 15, seed: int = 0,
                             learning_rate: float = 3e-3) -> VisionResult:
    """Train `DigitsTransformer` with Adam (batch 64) on 80% of the digits; accuracy on the other 20%.

    Runs on one CPU thread (restored afterwards): at this size two threads spin against each other and take several
    times longer on a shared 2-core machine.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(D, H, layers, epochs, seed, learning_rate)
    finally:
        torch.set_num_threads(threads)


def _train(D: int, H: int, layers: int, epochs: int, seed: int, learning_rate: float) -> VisionResult:
    torch.manual_seed(seed)
    train_x, train_y, test_x, test_y = load_digits_tensors(seed)
    model = DigitsTransformer(D, H, layers)
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(train_y), generator=generator).split(64):
            loss = nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(test_x).argmax(-1) == test_y).float().mean())
    return VisionResult(model, accuracy, test_x, test_y)


@torch.no_grad()
def attention_inputs(model: DigitsTransformer, images: torch.Tensor, layer: int) -> torch.Tensor:
    """The inputs X = LN(Z_layer) of attention layer `layer` (0-based), (B, 17, D)."""
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer must be in 0..{len(model.blocks) - 1}, got {layer}")
    Z = model.tokens(images)
    for block in model.blocks[:layer]:
        Z = block(Z)
    return model.blocks[layer].norm_attention(Z)


def attention_layer(model: DigitsTransformer, layer: int) -> nn.MultiheadAttention:
    return model.blocks[layer].attention


def layer_norm_radius(model: DigitsTransformer, layer: int) -> float:
    """A per-token radius R that every LN output of the layer satisfies: ||gamma (z - mean) / std + beta||_2 <=
    sqrt(D) max|gamma| + ||beta||_2 (the normalised vector has norm sqrt(D))."""
    norm = model.blocks[layer].norm_attention
    D = norm.weight.numel()
    return float(np.sqrt(D) * norm.weight.detach().abs().max() + norm.bias.detach().norm()) * (1 + 1e-6)
