"""F(X) and ||J_F(X)|| in mpmath, independent of certify's code: the reference for the floating-point edge tests.

Weights are read exactly (float32 and float64 entries are exact mpmath numbers) and the input X may be any list of
mpmath numbers, so nothing underflows or overflows. The Jacobian comes from forward-mode differentiation with dual
numbers (a + b eps, eps^2 = 0), which is exact up to the working precision; the precision grows with the largest
logit, so exp(logit - max logit) keeps ~40 correct digits whatever the scale (MATH.md section 1 for the maps):

- DP head: P = softmax(X W^Q (X W^K)^T / sqrt(d)) (with biases), f = P (X W^V + b^V);
- tied L2 head: P_ij = softmax_j(-||x_i W^Q - x_j W^Q||^2 / sqrt(d)), f = P X W^Q W^Q^T W^V / sqrt(d);
- F = [f^1 ... f^H] W^O (+ b^O).
"""

from __future__ import annotations

import functools
import operator

import mpmath
import torch

from certify import AttentionWeights


class Dual:
    """a + b eps with eps^2 = 0."""

    def __init__(self, a, b=0):
        self.a, self.b = mpmath.mpf(a), mpmath.mpf(b)

    def __add__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a + o.a, self.b + o.b)

    __radd__ = __add__

    def __sub__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a - o.a, self.b - o.b)

    def __rsub__(self, o):
        return Dual(o) - self

    def __neg__(self):
        return Dual(-self.a, -self.b)

    def __mul__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a * o.a, self.a * o.b + self.b * o.a)

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a / o.a, (self.b * o.a - self.a * o.b) / (o.a * o.a))

    def exp(self):
        e = mpmath.exp(self.a)
        return Dual(e, e * self.b)


def _mat(t: torch.Tensor) -> list:
    """Exact mpmath copy (float32 -> float64 is exact, float64 -> mpf is exact)."""
    return [[mpmath.mpf(float(x)) for x in row] for row in t.detach().to(torch.float64).cpu().tolist()]


def _vec(t: torch.Tensor | None) -> list | None:
    return None if t is None else [mpmath.mpf(float(x)) for x in t.detach().to(torch.float64).cpu().tolist()]


def _sum(terms):
    return functools.reduce(operator.add, terms)


def _matmul(A, B):
    return [[_sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]


def _transpose(A):
    return [list(col) for col in zip(*A)]


def _logits(X, w: AttentionWeights, h: int):
    d = w.d
    Q = _mat(w.W_Q[h])
    if w.kind == "l2":
        Y = _matmul(X, Q)
        return [[-_sum((Y[i][k] - Y[j][k]) * (Y[i][k] - Y[j][k]) for k in range(d)) / mpmath.sqrt(d)
                 for j in range(len(X))] for i in range(len(X))]
    K = _mat(w.W_K[h])
    q, k = _matmul(X, Q), _matmul(X, K)
    bq, bk = _vec(None if w.b_Q is None else w.b_Q[h]), _vec(None if w.b_K is None else w.b_K[h])
    if bq is not None:
        q = [[q[i][c] + bq[c] for c in range(d)] for i in range(len(X))]
    if bk is not None:
        k = [[k[i][c] + bk[c] for c in range(d)] for i in range(len(X))]
    return [[_sum(q[i][c] * k[j][c] for c in range(d)) / mpmath.sqrt(d) for j in range(len(X))]
            for i in range(len(X))]


def forward(X, w: AttentionWeights):
    """F(X) for an N x D list X (mpf or Dual entries)."""
    heads = []
    for h in range(w.H):
        S = _logits(X, w, h)
        if w.kind == "l2":
            Q = _mat(w.W_Q[h])
            values = _matmul(_matmul(X, Q), _matmul(_transpose(Q), _mat(w.W_V[h])))
            values = [[v / mpmath.sqrt(w.d) for v in row] for row in values]
        else:
            values = _matmul(X, _mat(w.W_V[h]))
            if w.b_V is not None:
                bv = _vec(w.b_V[h])
                values = [[row[c] + bv[c] for c in range(w.d)] for row in values]
        rows = []
        for i in range(len(X)):
            top = max((s.a if isinstance(s, Dual) else s) for s in S[i])
            e = [Dual.exp(s - top) if isinstance(s, Dual) else mpmath.exp(s - top) for s in S[i]]
            total = _sum(e)
            rows.append([_sum(e[j] / total * values[j][c] for j in range(len(X)))
                         for c in range(w.d)])
        heads.append(rows)
    concat = [[heads[h][i][c] for h in range(w.H) for c in range(w.d)] for i in range(len(X))]
    out = _matmul(concat, _mat(w.W_O))
    if w.b_O is not None:
        bo = _vec(w.b_O)
        out = [[row[c] + bo[c] for c in range(w.D)] for row in out]
    return out


def _precision(X, w: AttentionWeights) -> int:
    """Digits for ~40 correct digits of every exp(logit - max): 40 + log10(1 + the largest |logit|)."""
    with mpmath.workdps(30):
        largest = max(abs(s) for h in range(w.H) for row in _logits(X, w, h) for s in row)
        return 40 + int(mpmath.log10(1 + largest))


def jacobian_norm(X, w: AttentionWeights, norm: str) -> mpmath.mpf:
    """||J_F(X)||_norm on vec(X) (2: largest singular value; inf: largest absolute row sum), in mpmath."""
    X = [[mpmath.mpf(x) for x in row] for row in X]
    N, D = len(X), w.D
    with mpmath.workdps(_precision(X, w)):
        columns = []
        for i in range(N):
            for a in range(D):
                Xd = [[Dual(X[r][c], 1 if (r, c) == (i, a) else 0) for c in range(D)] for r in range(N)]
                columns.append([entry.b for row in forward(Xd, w) for entry in row])
        J = mpmath.matrix(N * D, N * D)
        for col, values in enumerate(columns):
            for row, v in enumerate(values):
                J[row, col] = v
        if norm == "inf":
            value = max(sum(abs(J[r, c]) for c in range(N * D)) for r in range(N * D))
        else:
            value = max(mpmath.svd_r(J, compute_uv=False))
        return +value
