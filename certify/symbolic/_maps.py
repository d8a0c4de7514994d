"""SymPy builders of the attention maps of MATH.md section 1, for small concrete N, D, H with symbolic entries.

Shapes follow `certify.attention.AttentionWeights`: per head h, W_Q[h], W_K[h], W_V[h] are D x d matrices, W_O is
(H d) x D, and the layer output is F(X) = concat_h f^h(X) W_O (+ b_O), X an N x D matrix with rows x_i^T.

- DP head:  f(X) = softmax((X W_Q + 1 b_Q^T)(X W_K + 1 b_K^T)^T / sqrt(d)) (X W_V + 1 b_V^T).
- L2 head (tied W_K = W_Q):  P_ij = softmax_j(-||x_i^T W_Q - x_j^T W_Q||^2 / sqrt(d)),  f = P X A W_V,
  A = W_Q W_Q^T / sqrt(d).
- Untied L2 head:  P_ij = softmax_j(-||x_i^T W_Q - x_j^T W_K||^2 / sqrt(d)),  f = P X W_V.
- Core map of the projected points (MATH.md section 2): P_ij = softmax_j(-||y_i - y_j||^2), g(Y) = P Y, whose
  Jacobian is M(Y).

Softmax is built from `sympy.exp` of the logits, each logit built once per (i, j) by `logits_*`, so the same
exponential atoms appear in a map, its derivative and the closed forms (see `generalise_exponentials`).
"""

from __future__ import annotations

import dataclasses

import sympy as sp

KINDS = ("dp", "l2", "l2-untied")


def symbol_matrix(name: str, rows: int, cols: int, **assumptions: bool) -> sp.Matrix:
    """A rows x cols matrix of fresh real symbols name_{r,c} (1-based)."""
    assumptions.setdefault("real", True)
    return sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}_{r + 1}{c + 1}", **assumptions))


def symbolic_input(N: int, D: int, name: str = "x") -> sp.Matrix:
    """X, an N x D matrix of real symbols x_{ik} (row i is token x_i^T)."""
    _check_sizes(N=N, D=D)
    return symbol_matrix(name, N, D)


@dataclasses.dataclass(frozen=True)
class SymbolicWeights:
    """Symbolic counterpart of `certify.attention.AttentionWeights` (per-head lists of D x d matrices).

    Biases are column vectors (d x 1 per head; D x 1 for b_O) or None.
    """

    kind: str
    W_Q: tuple[sp.Matrix, ...]
    W_K: tuple[sp.Matrix, ...]
    W_V: tuple[sp.Matrix, ...]
    W_O: sp.Matrix
    b_Q: tuple[sp.Matrix, ...] | None = None
    b_K: tuple[sp.Matrix, ...] | None = None
    b_V: tuple[sp.Matrix, ...] | None = None
    b_O: sp.Matrix | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        H, (D, d) = len(self.W_Q), self.W_Q[0].shape
        for name in ("W_Q", "W_K", "W_V"):
            shapes = [m.shape for m in getattr(self, name)]
            if shapes != [(D, d)] * H:
                raise ValueError(f"{name} must be {H} matrices of shape {(D, d)}, got {shapes}")
        if self.W_O.shape != (H * d, D):
            raise ValueError(f"W_O must have shape {(H * d, D)}, got {self.W_O.shape}")
        if self.kind != "dp" and any(b is not None for b in (self.b_Q, self.b_K, self.b_V)):
            raise ValueError("L2 attention has no query, key or value biases (only b_O)")

    @property
    def H(self) -> int:
        return len(self.W_Q)

    @property
    def D(self) -> int:
        return self.W_Q[0].shape[0]

    @property
    def d(self) -> int:
        return self.W_Q[0].shape[1]

    def W_O_head(self, h: int) -> sp.Matrix:
        """W^O_h: the d rows of W_O that multiply head h's output."""
        return self.W_O[h * self.d:(h + 1) * self.d, :]


def symbolic_weights(kind: str, D: int, H: int = 1, d: int | None = None, biases: bool = False) -> SymbolicWeights:
    """Generic symbolic weights: every entry its own real symbol (W_K is W_Q for tied L2).

    d defaults to D / H. `biases` adds b_Q, b_K, b_V (DP only) and b_O.
    """
    d = D // H if d is None else d
    _check_sizes(D=D, H=H, d=d)
    heads = lambda name: tuple(symbol_matrix(f"{name}{h + 1}", D, d) for h in range(H))  # noqa: E731
    W_Q = heads("q")
    W_K = W_Q if kind == "l2" else heads("k")
    vec = lambda name, n: tuple(symbol_matrix(f"{name}{h + 1}", d, 1) for h in range(n))  # noqa: E731
    dp_bias = biases and kind == "dp"
    return SymbolicWeights(kind, W_Q, W_K, heads("v"), symbol_matrix("o", H * d, D),
                           b_Q=vec("bq", H) if dp_bias else None, b_K=vec("bk", H) if dp_bias else None,
                           b_V=vec("bv", H) if dp_bias else None, b_O=symbol_matrix("bo", D, 1) if biases else None)


def softmax_rows(S: sp.Matrix) -> sp.Matrix:
    """Row-wise softmax exp(S_ij) / sum_k exp(S_ik)."""
    E = S.applyfunc(sp.exp)
    return sp.Matrix(S.rows, S.cols, lambda i, j: E[i, j] / sum(E[i, k] for k in range(S.cols)))


def squared_distance_logits(Q: sp.Matrix, K: sp.Matrix, scale: sp.Expr = sp.Integer(1)) -> sp.Matrix:
    """S_ij = -||q_i - k_j||^2 / scale, as explicit sums of squared differences."""
    return sp.Matrix(Q.rows, K.rows, lambda i, j: -sum((Q[i, c] - K[j, c]) ** 2 for c in range(Q.cols)) / scale)


def head_scale(d: int, scale: sp.Expr | None = None) -> sp.Expr:
    """The logit scale sqrt(d), or `scale` when given (a positive symbol keeps zero tests rational)."""
    return sp.sqrt(d) if scale is None else scale


def dp_head(X: sp.Matrix, W_Q: sp.Matrix, W_K: sp.Matrix, W_V: sp.Matrix, b_Q: sp.Matrix | None = None,
            b_K: sp.Matrix | None = None, b_V: sp.Matrix | None = None, scale: sp.Expr | None = None) -> sp.Matrix:
    """DP head f(X) = softmax(Q K^T / sqrt(d)) V with Q = X W_Q + 1 b_Q^T etc.; N x d."""
    Q, K, V = (_affine(X, W, b) for W, b in ((W_Q, b_Q), (W_K, b_K), (W_V, b_V)))
    return softmax_rows(Q * K.T / head_scale(W_Q.cols, scale)) * V


def l2_head(X: sp.Matrix, W_Q: sp.Matrix, W_V: sp.Matrix, scale: sp.Expr | None = None) -> sp.Matrix:
    """Tied L2 head f(X) = P X A W_V, P_ij = softmax_j(-||x_i^T W_Q - x_j^T W_Q||^2 / sqrt(d)); N x d."""
    s = head_scale(W_Q.cols, scale)
    Q = X * W_Q
    A = W_Q * W_Q.T / s
    return softmax_rows(squared_distance_logits(Q, Q, s)) * X * A * W_V


def untied_l2_head(X: sp.Matrix, W_Q: sp.Matrix, W_K: sp.Matrix, W_V: sp.Matrix,
                   scale: sp.Expr | None = None) -> sp.Matrix:
    """Untied L2 head f(X) = P X W_V, P_ij = softmax_j(-||x_i^T W_Q - x_j^T W_K||^2 / sqrt(d)); N x d."""
    s = head_scale(W_Q.cols, scale)
    return softmax_rows(squared_distance_logits(X * W_Q, X * W_K, s)) * X * W_V


def core_map(Y: sp.Matrix) -> sp.Matrix:
    """g(Y) = P Y with P_ij = softmax_j(-||y_i - y_j||^2): the map whose Jacobian is M(Y) (MATH.md section 2)."""
    return softmax_rows(squared_distance_logits(Y, Y)) * Y


def attention(X: sp.Matrix, weights: SymbolicWeights, scale: sp.Expr | None = None) -> sp.Matrix:
    """F(X) = concat_h f^h(X) W_O (+ 1 b_O^T), N x D, for the kind in `weights`.

    `scale` replaces sqrt(d) everywhere (e.g. by a positive symbol, for fast exact zero tests).
    """
    if X.cols != weights.D:
        raise ValueError(f"X must have D = {weights.D} columns, got shape {X.shape}")
    heads = []
    for h in range(weights.H):
        if weights.kind == "dp":
            bias = lambda name: None if getattr(weights, name) is None else getattr(weights, name)[h]  # noqa: E731
            heads.append(dp_head(X, weights.W_Q[h], weights.W_K[h], weights.W_V[h],
                                 bias("b_Q"), bias("b_K"), bias("b_V"), scale))
        elif weights.kind == "l2":
            heads.append(l2_head(X, weights.W_Q[h], weights.W_V[h], scale))
        else:
            heads.append(untied_l2_head(X, weights.W_Q[h], weights.W_K[h], weights.W_V[h], scale))
    return _affine(sp.Matrix.hstack(*heads), weights.W_O, weights.b_O)


def _affine(X: sp.Matrix, W: sp.Matrix, b: sp.Matrix | None) -> sp.Matrix:
    out = X * W
    if b is not None:
        out = out + sp.ones(X.rows, 1) * b.T
    return out


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
