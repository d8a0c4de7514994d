"""The reported value: ||J(X*)||_p recomputed at the stored witness X*, in float64 on the CPU.

Up to ``DENSE_LIMIT`` = N D coordinates (``DENSE_TIMED_LIMIT`` under a time limit) this is the exact norm of the
closed-form Jacobian (`certify.jacobian`): largest singular value (LAPACK) or largest absolute row sum. Beyond it
the 2-norm is the Rayleigh value ||J v|| / ||v|| after float64 power iteration (<= ||J||_2 for ANY v, so stopping
the iteration early, for a time limit, keeps it a lower bound; a warm start ``v0`` from the search saves most of the
iterations), and the inf-norm is the largest absolute row sum over the rows computed (exact over all rows without a
time limit; with one, token blocks in order, ROW_CHUNK rows at a time, until the time is spent: a max over a subset
of rows is still <= ||J||_inf). Either way the value is attained: ||J(X*)||_p >= value, so it is a lower bound on the
Lipschitz constant over any domain containing X*, up to float64 rounding of one evaluation (relative error of order
N D 2^-53).
"""

from __future__ import annotations

import time

import torch

from ..attention import AttentionWeights, attention_forward, jacobian_equivalent
from ..jacobian import jacobian, jacobian_norm
from ._domains import cpu64
from ._objectives import PowerIteration, _jvp, _vjp, row_block

DENSE_LIMIT = 2048
DENSE_TIMED_LIMIT = 512
"""With a time limit, the dense SVD ((N D)^3 work, seconds at N D = 2048 on two cores) only up to this size."""
ROW_CHUNK = 32
"""With a time limit, the inf-norm's rows by reverse mode in chunks of this many (one row costs about 7 ms at D = 768,
N = 128: a whole row block of 768 rows took 5 s inside a 0.2 s limit)."""
DENSE_INF_ENTRIES = 16 * 2**20
"""The inf-norm's row sums need no SVD: the dense closed-form Jacobian (milliseconds at N D = 816) whenever it has
at most this many entries (128 MiB in float64), with or without a time limit."""


def dense_attained(n: int, norm: str) -> bool:
    """Whether `attained_norm` with a time limit uses the dense closed-form Jacobian at N D = n (cheap and exact)."""
    return n <= DENSE_TIMED_LIMIT or (norm == "inf" and n * n <= DENSE_INF_ENTRIES)


def _jvp_norm(X: torch.Tensor, w: AttentionWeights, v: torch.Tensor) -> float:
    with torch.no_grad():
        Jv = torch.func.jvp(lambda Z: attention_forward(Z, w), (X,), (v,))[1]
    return float(Jv.norm() / v.norm())


def attained_norm(X: torch.Tensor, weights: AttentionWeights, norm: str, iterations: int = 300,
                  seconds: float | None = None, v0: torch.Tensor | None = None) -> tuple[float, str]:
    """(value, how) for one input X (N, D): ||J(X)||_norm (or a lower bound on it) in float64, and how.

    seconds: a time limit for the matrix-free paths (checked before every power iteration or chunk of ROW_CHUNK rows,
    with the measured cost of the last one); at least one Jacobian-vector product (2-norm) or chunk of rows
    (inf-norm) is always computed. v0: a starting vector (N, D) for the power iteration.
    """
    start = time.perf_counter()
    w = jacobian_equivalent(cpu64(weights))  # the same J, without the biases' roundoff in the forward pass
    X = X.detach().to(device="cpu", dtype=torch.float64)[None]
    n = X.shape[1] * X.shape[2]
    if n <= (DENSE_LIMIT if seconds is None else DENSE_TIMED_LIMIT) or (norm == "inf" and n * n <= DENSE_INF_ENTRIES):
        return float(jacobian_norm(jacobian(X, w), norm)[0]), "exact norm of the closed-form Jacobian, float64"
    deadline = None if seconds is None else start + seconds
    if norm == "inf":
        N, D = X.shape[1], X.shape[2]
        chunk = D if deadline is None else min(D, ROW_CHUNK)
        value, rows, cost = 0.0, 0, 0.0
        for t in range(N):
            for first in range(0, D, chunk):
                if rows and deadline is not None and time.perf_counter() + cost > deadline:
                    return value, (f"largest absolute row sum over {rows} of {N * D} rows (time limit), reverse "
                                   "mode, float64")
                begin = time.perf_counter()
                chosen = range(first, min(first + chunk, D))
                value = max(value, float(row_block(X, w, t, False, rows=chosen).abs().sum((-1, -2)).max()))
                cost, rows = time.perf_counter() - begin, rows + len(chosen)
        return value, "largest absolute row sum, row blocks by reverse mode, float64"
    power = PowerIteration(X.shape, torch.Generator().manual_seed(0), torch.float64, torch.device("cpu"))
    if v0 is not None:
        v = v0.detach().to(device="cpu", dtype=torch.float64).reshape(X.shape)
        if torch.isfinite(v).all() and float(v.norm()) > 0:
            power.v = v / v.norm()
    done, cost = 0, 0.0
    for _ in range(iterations):
        if deadline is not None and time.perf_counter() + 1.5 * cost > deadline:
            break
        begin = time.perf_counter()
        with torch.no_grad():
            step = _vjp(X, w, _jvp(X, w, power.v))
        if not torch.isfinite(step).all() or float(step.norm()) == 0:
            break
        power.v = step / step.norm()
        cost, done = time.perf_counter() - begin, done + 1
    value = _jvp_norm(X, w, power.v)
    start_text = "a warm start" if v0 is not None else "a random start"
    return value, f"||J v|| for a unit v after {done} float64 power iterations from {start_text} (<= ||J||_2)"
