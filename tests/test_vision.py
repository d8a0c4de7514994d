"""The digits vision transformer that supplies trained attention layers and real inputs (certify.experiments)."""

from __future__ import annotations

import torch

from certify.experiments import attention_inputs, attention_layer, layer_norm_radius, train_digits_transformer
from certify.experiments._vision import patches


def test_patches_are_the_two_by_two_blocks_in_row_major_order():
    images = torch.arange(2 * 64, dtype=torch.float32).reshape(2, 8, 8)
    P = patches(images)
    assert P.shape == (2, 16, 4)
    for b in range(2):
        for k in range(16):
            r, c = divmod(k, 4)
            block = images[b, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(-1)
            assert torch.equal(P[b, k], block)


def test_small_model_learns_and_layer_inputs_respect_the_layer_norm_radius():
    result = train_digits_transformer(D=16, H=2, layers=2, epochs=8)
    assert result.test_accuracy > 0.6  # ten classes: chance is 0.1
    for layer in range(2):
        X = attention_inputs(result.model, result.test_images, layer)
        assert X.shape == (len(result.test_images), 17, 16)
        assert float(X.norm(dim=-1).max()) <= layer_norm_radius(result.model, layer)
        assert isinstance(attention_layer(result.model, layer), torch.nn.MultiheadAttention)
