"""Shared symbolic step of the Jacobian proofs: multi-head composition and the logit identities."""

from __future__ import annotations

import sympy as sp

from certify.symbolic import block, differentiate, from_blocks, symbol_matrix, symbolic_input
from proofs._check import Check, fact


def check_composition(N: int = 2, D: int = 2, H: int = 2) -> Check:
    """F = sum_h g_h(X) W_V^h W_O_h with arbitrary differentiable g_h (N x D) has
    J^F_ij = sum_h W_O_h^T W_V^{h T} J^{g_h}_ij (each g_h entry an undefined function of all of X)."""
    d = D // H
    X = symbolic_input(N, D)
    xs = list(X)
    g = [sp.Matrix(N, D, lambda i, a, h=h: sp.Function(f"g{h}_{i}{a}")(*xs)) for h in range(H)]
    W_V = [symbol_matrix(f"v{h}", D, d) for h in range(H)]
    W_O = symbol_matrix("o", H * d, D)
    W_O_h = [W_O[h * d:(h + 1) * d, :] for h in range(H)]
    F = sum((g[h] * W_V[h] * W_O_h[h] for h in range(1, H)), g[0] * W_V[0] * W_O_h[0])
    J_F = differentiate(F, X)
    J_g = [differentiate(g[h], X) for h in range(H)]
    composed = sum((from_blocks(N, lambda i, j, h=h: W_O_h[h].T * W_V[h].T * block(J_g[h], N, i, j))
                    for h in range(1, H)), from_blocks(N, lambda i, j: W_O_h[0].T * W_V[0].T * block(J_g[0], N, i, j)))
    ok = all(sp.expand(e) == 0 for e in J_F - composed)
    return fact(ok, f"chain rule for F = sum_h g_h(X) W_V^h W_O_h, arbitrary g_h (N={N}, D={D}, H={H}): "
                    "J^F_ij = sum_h W_O_h^T W_V^hT J^g_h_ij" + ("" if ok else " NOT verified"))


def check_dp_logits(N: int = 3, D: int = 2, d: int = 2) -> Check:
    """X W_Q (X W_K)^T / s = X A^T X^T with A = W_K W_Q^T / s (s = sqrt(d))."""
    s = sp.Symbol("s", positive=True)
    X, W_Q, W_K = symbolic_input(N, D), symbol_matrix("q", D, d), symbol_matrix("k", D, d)
    difference = (X * W_Q) * (X * W_K).T / s - X * (W_K * W_Q.T / s).T * X.T
    ok = all(sp.expand(e) == 0 for e in difference)
    return fact(ok, f"DP logits X W_Q (X W_K)^T / sqrt(d) = X A^T X^T, A = W_K W_Q^T / sqrt(d) (N={N}, D={D}, d={d})")


def check_l2_logits(N: int = 3, D: int = 2, d: int = 2) -> Check:
    """||x_i^T W_Q - x_j^T W_Q||^2 / s = (x_i - x_j)^T A (x_i - x_j) with A = W_Q W_Q^T / s."""
    s = sp.Symbol("s", positive=True)
    X, W_Q = symbolic_input(N, D), symbol_matrix("q", D, d)
    A = W_Q * W_Q.T / s
    ok = True
    for i in range(N):
        for j in range(N):
            u = (X[i, :] - X[j, :])
            lhs = sum(e ** 2 for e in u * W_Q) / s
            ok &= sp.expand(lhs - (u * A * u.T)[0, 0]) == 0
    return fact(ok, f"L2 logits ||(x_i - x_j)^T W_Q||^2 / sqrt(d) = (x_i - x_j)^T A (x_i - x_j), A = W_Q W_Q^T / "
                    f"sqrt(d) (N={N}, D={D}, d={d})")


def check_shipped_jacobian(kind: str, cases: tuple[tuple[int, int, int], ...] = ((2, 1, 1), (3, 2, 1), (3, 2, 2), (4, 4, 2)),
                           seed: int = 0) -> Check:
    """Cross-check of the shipped code: `certify.jacobian.jacobian` (the torch closed forms that certify's bounds use)
    against `certify.symbolic.oracle_jacobian` (SymPy's derivative of the definition, lambdified) on random layers:
    |difference| <= 1e-10 (1 + max |J|). SAMPLED, with the shapes (N, D, H) and one input per shape."""
    import numpy as np
    import torch

    from certify import jacobian as shipped
    from certify.attention import AttentionWeights
    from certify.symbolic import oracle_jacobian
    from proofs._check import numeric

    rng = np.random.default_rng(seed)
    worst = 0.0
    for N, D, H in cases:
        d = D // H
        t = lambda *shape: torch.tensor(rng.standard_normal(shape))  # noqa: E731
        W_Q = t(H, D, d)
        weights = AttentionWeights(kind, W_Q, W_Q if kind == "l2" else t(H, D, d), t(H, D, d), t(H * d, D))
        X = t(N, D)
        J = shipped.jacobian(X[None], weights)[0].numpy()
        J_oracle = oracle_jacobian(X.numpy(), weights)[0]
        gap = float(np.abs(J - J_oracle).max()) / (1 + float(np.abs(J_oracle).max()))
        worst = max(worst, gap)
        if not gap <= 1e-10:
            return numeric(False, f"shipped certify.jacobian.jacobian ({kind}) differs from the SymPy oracle by "
                                  f"{gap:.3g} (relative) at N={N}, D={D}, H={H}")
    return numeric(True, f"shipped certify.jacobian.jacobian ({kind}) = SymPy oracle on {len(cases)} random layers "
                         f"(N, D, H) in {list(cases)}: largest relative gap {worst:.2g}")
