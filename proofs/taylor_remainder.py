"""Claim: the first-order Taylor form of the local bound (MATH.md section 7; ``certify/bounds/local/_taylor.py``).

Setting. B = [lo, hi] a box of inputs X (N x D), X0 in B, J the Jacobian of a DP (with biases) or tied L2 layer.

Claim. For every X in B, with Delta = X - X0,

    (I)  J(X) = J(X0) + int_0^1 dJ(X0 + t Delta)[Delta] dt,  dJ(xi)[Delta] = sum_m Delta_m dJ/dX_m(xi)  (entrywise);
    (II) the code's remainder T contains dJ(xi)[Delta] for every xi in B and Delta in B - X0 (seeds "directional":
         one forward pass whose tangent is the interval Delta), or T = sum_m [-h_m, h_m] dJ/dX_m(B) contains
         sum_m Delta_m dJ/dX_m(xi) (seeds "coordinates": unit tangents, h_m >= |Delta_m|), or (seeds "layered", DP)
         the small intermediates u get unit tangents collapsed to sum_m [-h_m, h_m] du/dX_m(B), which contains
         du(xi)[Delta], and the rest runs with these as interval tangents;
    (III) hence J(X) in J([X0, X0]) + T: every t in [0, 1] has X0 + t Delta in B (B is convex), so the integrand of
         (I) lies in the box T for every t, and so does its integral (an average of points of a convex set).

Argument for (II): forward mode applies the chain rule operation by operation; each interval operation contains
the exact result for every member of its operands (``certify.interval``, outward rounding), and the value and
tangent of the exact computation at (xi, Delta) are members at every step. Nothing here is symbolic, so (II) is
CHECKED numerically.

Checks.
- (I) for a DP head with N = 2, D = 1 and generic symbols: d/dt J(X0 + t Delta) - sum_m Delta_m (dJ/dX_m)(X0 +
  t Delta) simplifies to 0 (the chain rule; with the fundamental theorem of calculus this is (I)). PROVED by SymPy.
- (II) and (III) on random layers (DP with q/k/v/out biases, tied L2; H in 1..2, d in 1..2, N in 2..4), random
  boxes of widths 1e-4 .. 0.3 and random centres X0 in them, both seed kinds: dJ(xi)[Delta] at sampled xi, Delta
  (interior points and the vertices Delta = +-h sign(dJ_ab/dX(xi)) that attain the entrywise extremes) lies in T,
  and J(X) - J([X0, X0]) lies in T at sampled X. CHECKED on the stated number of samples.
- Injection ``remainder``: T scaled by 0.9 must be left by an attained value (it is, at the attaining vertices on
  the small boxes), so the check can fail.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch

from proofs._check import Check, fact, numeric
from proofs._result import ProofResult, combine

CLAIM = ("J(X) in J(X0) + T for every X in a box B containing X0, where T encloses the directional derivative "
         "dJ(xi)[X - X0] over xi in B (integral mean-value form, entrywise)")


def check_chain_rule() -> Check:
    """d/dt J(X0 + t Delta) = sum_m Delta_m dJ/dX_m(X0 + t Delta) for a DP head, N = 2, D = 1, generic symbols."""
    from certify.symbolic import differentiate, softmax_rows, symbol_matrix, symbolic_input

    N, D = 2, 1
    X = symbolic_input(N, D)
    A = symbol_matrix("a", D, D)
    J = differentiate(softmax_rows(X * A.T * X.T) * X, X)
    X0, Delta = symbol_matrix("c", N, D), symbol_matrix("e", N, D)
    t = sp.Symbol("t", real=True)
    path = {X[k]: X0[k] + t * Delta[k] for k in range(N * D)}
    left = J.subs(path).diff(t)
    right = sum((J.diff(X[k]) * Delta[k] for k in range(N * D)), sp.zeros(*J.shape)).subs(path)
    zero = all(sp.simplify(entry) == 0 for entry in (left - right))
    return fact(zero, "d/dt J(X0 + t Delta) - sum_m Delta_m dJ/dX_m(X0 + t Delta) simplifies to 0 (DP, N = 2, D = 1)")


def _layer(rng: np.random.Generator):
    from certify.attention import AttentionWeights

    kind = ["dp", "l2"][int(rng.integers(2))]
    H, d = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    D = H * d
    t = lambda *shape: torch.from_numpy(rng.standard_normal(shape) * 1.5 / np.sqrt(D))  # noqa: E731
    W_Q = t(H, D, d)
    W_K = W_Q if kind == "l2" else t(H, D, d)
    biases = dict(b_Q=t(H, d), b_K=t(H, d), b_V=t(H, d), b_O=t(D)) if kind == "dp" else {}
    return AttentionWeights(kind, W_Q, W_K, t(H, D, d), t(D, D), **biases), int(rng.integers(2, 5))


def check_remainder(scale: float = 1.0, instances: int = 12, points: int = 15, seed: int = 0) -> Check:
    """(II) and (III) on random instances; `scale` < 1 shrinks T (the injection)."""
    from certify.bounds.local._enclosure import numpy_weights
    from certify.bounds.local._taylor import taylor_enclosure
    from certify.interval import Interval
    from certify.jacobian import jacobian

    rng = np.random.default_rng(seed)
    samples, worst = 0, -np.inf
    for instance in range(instances):
        weights, N = _layer(rng)
        D, n = weights.D, N * weights.D
        width = [1e-4, 1e-3, 0.05, 0.3][instance % 4]
        lo = rng.standard_normal((N, D))
        hi = lo + width * rng.uniform(0.2, 1.0, lo.shape)
        X0 = lo + rng.uniform(0, 1, lo.shape) * (hi - lo)
        grad = lambda xi: torch.autograd.functional.jacobian(  # noqa: E731
            lambda X: jacobian(X[None], weights)[0].reshape(n * n), torch.from_numpy(xi), vectorize=True,
            strategy="forward-mode").reshape(n * n, n).numpy()
        for seeds in ("directional", "coordinates") + (("layered",) if weights.kind == "dp" else ()):
            form = taylor_enclosure(Interval(lo, hi), X0, numpy_weights(weights), seeds=seeds, remainder_scale=scale)
            T_lo, T_hi = form.remainder.lo.reshape(-1), form.remainder.hi.reshape(-1)
            J0_lo, J0_hi = form.at_centre.lo.reshape(-1), form.at_centre.hi.reshape(-1)
            J0 = jacobian(torch.from_numpy(X0)[None], weights)[0].numpy().reshape(-1)
            slack = 1e-12 * (1.0 + np.abs(J0).max() + np.abs(T_hi).max())
            for _ in range(points // 3):
                xi = lo + rng.uniform(0, 1, lo.shape) * (hi - lo)
                G = grad(xi)
                h_lo, h_hi = (lo - X0).reshape(-1), (hi - X0).reshape(-1)
                directions = [rng.uniform(h_lo, h_hi)]
                entry = int(rng.integers(n * n))  # the vertex attaining the largest / smallest dJ_entry[Delta]
                directions += [np.where(G[entry] > 0, h_hi, h_lo), np.where(G[entry] > 0, h_lo, h_hi)]
                for delta in directions:
                    value = G @ delta
                    excess = max(float(np.max(value - T_hi)), float(np.max(T_lo - value)))
                    worst, samples = max(worst, excess), samples + 1
                    if excess > slack:
                        return numeric(False, f"dJ(xi)[Delta] leaves T by {excess:.3g} ({seeds}, width {width:g}, "
                                              f"N = {N}, D = {D}, {weights.kind}; scale {scale:g})")
            X = lo + rng.uniform(0, 1, (points, N, D)) * (hi - lo)
            J = jacobian(torch.from_numpy(X), weights).numpy().reshape(points, -1)
            excess = max(float(np.max(J - (J0_hi + T_hi))), float(np.max((J0_lo + T_lo) - J)))
            worst, samples = max(worst, excess), samples + points
            if excess > slack:
                return numeric(False, f"J(X) leaves J(X0) + T by {excess:.3g} ({seeds}, width {width:g}, N = {N}, "
                                      f"D = {D}, {weights.kind}; scale {scale:g})")
    return numeric(True, f"dJ(xi)[Delta] in T and J(X) in J(X0) + T on {samples} samples over {instances} random "
                         f"layers and boxes (widths 1e-4..0.3, all seed kinds, attaining vertices included); largest "
                         f"excess {worst:.2g} (<= 0 means inside)")


SCOPE = {"chain rule": "DP head, N = 2, D = 1 (SymPy)", "inclusion": "12 random DP / L2 layers and boxes, 720 samples"}


def prove() -> ProofResult:
    return combine(CLAIM, [check_chain_rule(), check_remainder()], scope=SCOPE)


INJECTIONS = {"remainder": lambda: combine(CLAIM + " [injected: T * 0.9]", [check_remainder(scale=0.9)])}


if __name__ == "__main__":
    from proofs import standalone

    raise SystemExit(standalone(prove, __name__))
