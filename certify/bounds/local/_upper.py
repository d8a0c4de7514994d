"""Upper bounds on sums and products of nonnegative float64 arrays (each operation rounded up, with an absolute term
for underflow), shared by the slope, simplex and streamed bounds."""

from __future__ import annotations

import numpy as np

from ...interval import round_up
from ...sdp._floating import ETA


def _mul(*factors: np.ndarray) -> np.ndarray:
    """An upper bound on the exact product of nonnegative float arrays (each multiplication rounded up)."""
    out = factors[0]
    for f in factors[1:]:
        out = round_up(out * f) + ETA
    return out


def _add(*terms: np.ndarray) -> np.ndarray:
    """An upper bound on the exact sum of nonnegative float arrays."""
    out = terms[0]
    for t in terms[1:]:
        out = round_up(out + t)
    return out


def _einsum_up(subscripts: str, *operands: np.ndarray) -> np.ndarray:
    """An upper bound on einsum(subscripts, *operands) for nonnegative float operands: the float einsum of K terms
    of p factors is within gamma_{K+p} relative of the exact sum, plus K (p + 1) 2^-1074 for underflow."""
    inputs, output = subscripts.split("->")
    sizes: dict[str, int] = {}
    for names, x in zip(inputs.split(","), operands):
        sizes.update(zip(names, x.shape))
    K = int(np.prod([sizes[c] for c in sizes if c not in output])) if sizes else 1
    n = 2 * (K + len(operands)) + 4
    with np.errstate(under="ignore"):
        value = np.einsum(subscripts, *operands, optimize=True)
    return round_up(value * (1.0 + 2.0 * n * 2.0**-53)) + (K * (len(operands) + 1) + 1) * ETA
