"""Invertible self-attention (MATH.md sections 1 and 6): X + F(X) with F contractive
(`ContractiveL2MultiheadAttention`: tied L2 attention divided by its Theorem 3.2 bound), inverted by fixed-point
iteration with certified error bounds; and the counterexample showing why X + DP(X) needs no such guarantee."""

from ._contractive import ContractiveL2MultiheadAttention as ContractiveL2MultiheadAttention
from ._block import (
    CERTIFIED_METHODS as CERTIFIED_METHODS,
    Inverse as Inverse,
    InverseStep as InverseStep,
    InvertibleResidualBlock as InvertibleResidualBlock,
    contraction_certificate as contraction_certificate,
    invert as invert,
    predicted_iterations as predicted_iterations,
    sequence_norm as sequence_norm,
)
from ._non_injective import (
    NonInjectivePair as NonInjectivePair,
    dp_non_injective_pair as dp_non_injective_pair,
    non_injective_weights as non_injective_weights,
    residual as residual,
)
