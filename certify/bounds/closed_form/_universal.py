"""Universal constants c_p(N, d) = sup_Y ||M(Y)||_p of the L2 core Jacobian (MATH.md section 2).

M(Y) (MATH.md section 2) depends only on the N projected points y_k in R^d, so c_p(N, d) bounds every tied L2
head of width d, whatever its weights. Proven defaults, from the Lemma and Corollary of Theorem 3.2
(w = phi^{-1}(N-1); sum_j P_ij ||y_j - y_i||^2 <= w, hence also sum_j P_ij ||y_j - ybar_i||^2 <= w and
sum_j P_ij ||y_j - ybar_i|| ||y_i - y_j|| <= w by Cauchy-Schwarz):

- block row i of M is [P_i1 I, ..., P_iN I] + 2 Cov_i e_i^T + [2 P_ij (y_j - ybar_i)(y_i - y_j)^T]_j, whose
  2-norms are at most ||P_i||_2 <= 1, 2 tr Cov_i <= 2 w and (Frobenius) 2 sum_j P_ij ||y_j - ybar_i|| ||y_i - y_j||
  <= 2 w; so ||M||_2 <= sqrt(sum_i ||M_i:||_2^2) <= sqrt(N) (1 + 4 w);
- in the inf-norm, ||a b^T||_inf = ||a||_inf ||b||_1 <= sqrt(d) ||a||_2 ||b||_2 gives
  ||M||_inf <= 1 + 2 sqrt(d) w + 2 sqrt(d) w = 1 + 4 sqrt(d) w.

These equal Theorem 3.2's constants for one head with unit weights. Tighter certified values for small N and d
come from branch and bound and ship in ``certify/data/universal_constants.json``; `universal_constant` uses them
when present.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
from typing import NamedTuple

from ...attention import check_tokens
from ...jacobian import check_norm
from ._lambert import phi_inverse
from .._rounding import round_up
from ._dimension_reduction import reduced_upper, reduces


class UniversalConstant(NamedTuple):
    value: float
    source: str


def default_constant(N: int, d: int, norm: str) -> float:
    """The proven Theorem 3.2 constant: sqrt(N)(1 + 4 w) (2-norm) or 1 + 4 sqrt(d) w (inf-norm), rounded up."""
    w = phi_inverse(N - 1)
    return round_up(math.sqrt(N) * (1 + 4 * w) if norm == "2" else 1 + 4 * math.sqrt(d) * w)


@functools.cache
def certified_table() -> dict[tuple[int, int, str], dict]:
    """Entries of the shipped table of certified constants, keyed by (N, d, norm); empty if none ships."""
    try:
        text = importlib.resources.files("certify").joinpath("data/universal_constants.json").read_text()
    except FileNotFoundError:
        return {}
    return {(e["N"], e["d"], str(e["norm"])): e for e in json.loads(text)["entries"]}


def universal_constant(N: int, d: int, norm: str) -> UniversalConstant:
    """A certified upper bound on c_norm(N, d): the smallest of the shipped table's entry for (N, d), for the 2-norm
    with d >= N the table's c_2(N, N - 1) through the dimension reduction (`_dimension_reduction`:
    c_2(N, d) <= max(c_2(N, N - 1), sqrt((N + 1) / 2))), and the default (Theorem 3.2)."""
    check_tokens(N)
    check_norm(norm)
    if N == 1:
        return UniversalConstant(1.0, "exact (N = 1: M = I)")
    table = certified_table()
    candidates = []  # in order of preference on a tie: a direct entry, the reduction, Theorem 3.2
    entry = table.get((N, d, norm))
    if entry is not None:
        candidates.append(UniversalConstant(float(entry["upper"]),
                                            f"certified table ({entry.get('method', 'branch and bound')})"))
    reduced = table.get((N, N - 1, norm)) if reduces(N, d, norm) else None
    if reduced is not None:
        candidates.append(UniversalConstant(reduced_upper(reduced["upper"], N),
                                            f"certified table's c_2({N}, {N - 1}) through the dimension reduction "
                                            "(proofs/dimension_reduction.py)"))
    candidates.append(UniversalConstant(default_constant(N, d, norm), "Theorem 3.2 constant"))
    return min(candidates, key=lambda c: c.value)  # the first of the smallest
