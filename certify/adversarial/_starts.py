"""Structured starting points known to be near worst case (MATH.md sections 4 and 7).

- L2 (the Lemma of Theorem 3.2): sum_j p_j z_j with z_i = 0 is maximal when the other N - 1 scores all equal
  1 + phi^{-1}(N-1). With d = 1 and z_j = ||y_0 - y_j||^2 this puts token 0 at the origin and the others at
  distance sqrt(1 + W_0((N-1)/e)) along a direction u, on either side: x_j = +-sqrt(1 + W) u / ||V^T u||.
- DP (Castin, Ablin & Peyre): X = R [u; u/2; ...; u/2] with u the top eigenvector of the symmetric part of
  A = W^Q W^K^T / sqrt(d), which attains their sqrt(N) order on the ball of radius R; and Theorem 3.1's
  X = [0; R u; -R u; ...] (row 0 of the softmax uniform, d f_0 / d x_0 = 1/N + a Var(x), quadratic in R).
  Every other start is the Theorem 3.1 one.
- DP, the rank-one term of the structured bound (`bounds/local/_structured.py`), ||W_VO|| (sum_i P_il Var_i
  ||w_i||^2)^(1/2): every query at x* = R a with ||w|| = ||B x* + W^K b^Q / sqrt(d)|| large (B = W^K W^Q^T /
  sqrt(d); a the top right singular vector of B, either sign, whichever scores itself lower) and two tokens far
  apart along u (the value map's top direction, orthogonal to w) that every query scores above itself, so each
  query splits its attention between them: P Var large, along the direction W_V W^O_h magnifies. On the trained
  digits ViT layer's LayerNorm ball (D = 48, N = 17): 406.8 from such a start, against 328 from the others.
"""

from __future__ import annotations

import math

import torch

from .._domain import Ball, Domain, EpsBall
from ..attention import AttentionWeights
from ..bounds import phi_inverse
from ._domains import cpu64, natural_scale, project


def directions(weights: AttentionWeights) -> torch.Tensor:
    """Unit directions (k, D): top singular vectors of each head's W^Q (L2) or eigenvectors of A_h (DP)."""
    w = cpu64(weights)
    found = []
    for h in range(w.H):
        if w.kind == "dp":
            # sym(W_Q W_K^T) = U S U^T with U = [W_Q, W_K] = Q R and S = [[0, I], [I, 0]] / 2, so its nonzero
            # eigenpairs are those of R S R^T (2d x 2d) mapped by Q: no D x D eigendecomposition (BERT: 54 s)
            U = torch.cat([w.W_Q[h], w.W_K[h]], dim=1)
            Qm, R = torch.linalg.qr(U)
            S = torch.zeros(2 * w.d, 2 * w.d, dtype=torch.float64)
            S[: w.d, w.d :] = S[w.d :, : w.d] = 0.5 * torch.eye(w.d, dtype=torch.float64)
            values, vectors = torch.linalg.eigh(R @ S @ R.T)
            top, bottom = Qm @ vectors[:, -1], Qm @ vectors[:, 0]
            found += [top / top.norm().clamp_min(1e-300), bottom / bottom.norm().clamp_min(1e-300)]
        else:
            U = torch.linalg.svd(w.W_Q[h], full_matrices=False)[0]
            found.append(U[:, 0])
    return torch.stack(found)


def lemma_starts(weights: AttentionWeights, N: int, count: int, generator: torch.Generator,
                 found: torch.Tensor | None = None) -> torch.Tensor:
    """(count, N, D): token 0 at 0, the others at y-distance sqrt(1 + phi^{-1}(N-1)) on random sides, plus noise."""
    w = cpu64(weights)
    units = directions(w) if found is None else found
    radius = math.sqrt(1 + phi_inverse(N - 1))
    starts = []
    for k in range(count):
        u = units[k % len(units)]
        h = (k % len(units)) % w.H
        length = radius / max(float((w.W_Q[h].T @ u).norm()) / w.d**0.25, 1e-12)
        signs = torch.where(torch.rand(N, generator=generator) < (k % 3) / 2, -1.0, 1.0).to(torch.float64)
        X = signs[:, None] * length * u[None, :]
        X[0] = 0
        noise = torch.randn(N, w.D, generator=generator, dtype=torch.float64) * 0.02 * length
        starts.append(X + noise)
    return torch.stack(starts)


def castin_starts(weights: AttentionWeights, N: int, domain: Domain, count: int,
                  generator: torch.Generator, found: torch.Tensor | None = None,
                  scale: float | None = None) -> torch.Tensor:
    """(count, N, D): X = R [u; u/2; ...; u/2] (and sign/scale variants), projected onto the domain."""
    w = cpu64(weights)
    units = directions(w) if found is None else found
    if isinstance(domain, Ball):
        radii = [domain.radius]
    else:
        radii = [(natural_scale(w) if scale is None else scale) * s for s in (1.0, 2.0, 4.0)]
    starts = []
    for k in range(count):
        j = k // 2
        u = units[j % len(units)] * (1 if (j // len(units)) % 2 == 0 else -1)
        R = radii[(j // (2 * len(units))) % len(radii)]
        if k % 2 == 0:
            X = (R / 2) * u.repeat(N, 1)
            X[0] = R * u
        else:
            signs = torch.tensor([(-1.0) ** j for j in range(N)], dtype=torch.float64)
            X = R * signs[:, None] * u[None, :]
            X[0] = 0
        X = X + 0.01 * R * torch.randn(N, w.D, generator=generator, dtype=torch.float64)
        starts.append(X)
    X = torch.stack(starts)
    if isinstance(domain, EpsBall):
        return project(domain.center.to(device="cpu", dtype=torch.float64).expand_as(X).clone(), domain)
    return project(X, domain)


def rank_one_starts(weights: AttentionWeights, N: int, domain: Domain, count: int,
                    generator: torch.Generator, scale: float | None = None) -> torch.Tensor:
    """(count, N, D), DP with N >= 3: tokens 2.. (the queries) at x* = R a, tokens 0 and 1 at
    R (cos phi w^ +- sin phi u) (module docstring), head by head; a = +-v (v the top right singular vector of B:
    the largest ||w||) or the lowest eigenvector of sym(B), u the first or second left singular vector of
    W_V W^O_h made orthogonal to w;
    cos phi puts the two tokens' scores ln N + 6 above the queries' own, so each query's attention splits between
    them. Plus 1% noise; projected onto the domain (R = its radius, else the natural scale)."""
    w = cpu64(weights)
    R = domain.radius if isinstance(domain, Ball) else (natural_scale(w) if scale is None else scale)
    found = directions(w)  # per head: the top and the lowest eigenvector of sym(B), without a D x D problem
    geometry = {}
    starts = []
    for k in range(count):
        h, variant = k % w.H, (k // w.H) % 6
        if h not in geometry:
            geometry[h] = (_top_singular(w.W_K[h], w.W_Q[h])[1], _top_singular(w.W_V[h], w.W_O_head(h).T, 2)[0])
        right, left = geometry[h]
        a = found[2 * h + 1] if variant % 3 == 2 else right[:, 0] * (1.0 if variant % 3 == 0 else -1.0)
        x = R * a
        query = w.W_K[h] @ (w.W_Q[h].T @ x) / math.sqrt(w.d)
        if w.b_Q is not None:
            query = query + w.W_K[h] @ w.b_Q[h] / math.sqrt(w.d)
        w_hat = query / query.norm().clamp_min(1e-300)
        u = left[:, min(variant // 3, left.shape[1] - 1)]
        u = u - (u @ w_hat) * w_hat
        u = u / u.norm().clamp_min(1e-300)
        cos_phi = (math.log(N) + 6.0 + float(query @ x)) / max(R * float(query.norm()), 1e-300)
        cos_phi = cos_phi if -1.0 < cos_phi < 1.0 else 0.0
        sin_phi = math.sqrt(1.0 - cos_phi**2)
        X = x.repeat(N, 1)
        X[0], X[1] = R * (cos_phi * w_hat + sin_phi * u), R * (cos_phi * w_hat - sin_phi * u)
        starts.append(X + 0.01 * R * torch.randn(N, w.D, generator=generator, dtype=torch.float64))
    return project(torch.stack(starts), domain)


def _top_singular(F: torch.Tensor, G: torch.Tensor, k: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k left and right singular vectors (D, k) of F G^T (F, G of shape (D, d)), from the d x d core of
    F = Q_F R_F, G = Q_G R_G: F G^T = Q_F (R_F R_G^T) Q_G^T (no D x D decomposition; BERT size: milliseconds)."""
    Q_F, R_F = torch.linalg.qr(F)
    Q_G, R_G = torch.linalg.qr(G)
    U, _, Vt = torch.linalg.svd(R_F @ R_G.T)
    return Q_F @ U[:, :k], Q_G @ Vt[:k].T
