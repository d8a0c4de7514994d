"""Reference layers and hypothesis strategies shared by tests and benchmarks.

Dimensions use different primes where shapes could be confused (equinox's habit), and every layer is built from
explicit tensors, so a test never depends on module initialisation.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from certify import AttentionWeights

F64 = torch.float64


def unit_l2(D: int = 1) -> AttentionWeights:
    """One head, W_Q = W_V = W_O = I_D: J = M(Y) / sqrt(D), so Lip_p(F) = c_p(N, D) / sqrt(D)."""
    eye = torch.eye(D, dtype=F64)
    return AttentionWeights("l2", eye[None], eye[None], eye[None], eye)


def random_weights(kind: str, H: int, d: int, D: int | None = None, scale: float = 1.0, seed: int = 0,
                   bias: bool = False) -> AttentionWeights:
    """Gaussian weights with entries of standard deviation scale / sqrt(D)."""
    D = H * d if D is None else D
    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=F64) * scale / math.sqrt(D)  # noqa: E731
    W_Q = draw(H, D, d)
    W_K = W_Q if kind == "l2" else draw(H, D, d)
    biases = {}
    if bias and kind == "dp":
        biases = dict(b_Q=draw(H, d), b_K=draw(H, d), b_V=draw(H, d), b_O=draw(D))
    return AttentionWeights(kind, W_Q, W_K, draw(H, D, d), draw(H * d, D), **biases)


@st.composite
def layers(draw, kinds=("dp", "l2"), max_H: int = 2, max_d: int = 3, max_N: int = 5):
    """(weights, N): small layers, H <= 2, d <= 3, N <= 5, weight scale in [0.2, 3], biases sometimes (DP)."""
    kind = draw(st.sampled_from(kinds))
    H = draw(st.integers(1, max_H))
    d = draw(st.integers(1, max_d))
    scale = draw(st.floats(0.2, 3.0))
    seed = draw(st.integers(0, 2**31 - 1))
    bias = draw(st.booleans())
    N = draw(st.integers(1, max_N))
    return random_weights(kind, H, d, scale=scale, seed=seed, bias=bias), N


@st.composite
def biased_dp_problems(draw, max_H: int = 2):
    """(weights, X0): a DP layer (H <= max_H, d <= 3, D <= 5, random scale, biases or not) and a centre X0 (N <= 4)."""
    H, d = draw(st.integers(1, max_H)), draw(st.integers(1, 3))
    D = draw(st.integers(1, 5))
    weights = random_weights("dp", H, d, D=D, scale=draw(st.floats(0.3, 3.0)), seed=draw(st.integers(0, 2**31 - 1)),
                             bias=draw(st.booleans()))
    N = draw(st.integers(1, 4))
    X0 = torch.randn(N, D, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))), dtype=F64)
    return weights, X0 * draw(st.floats(0.1, 3.0))


def random_inputs(weights: AttentionWeights, N: int, batch: int = 4, scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, N, weights.D, generator=g, dtype=F64) * scale
