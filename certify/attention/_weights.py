"""`AttentionWeights`: the weights of one multi-head attention layer, as plain tensors (MATH.md section 1).

Shapes (H heads, embedding dimension D, head width d):

- ``W_Q``, ``W_K``, ``W_V``: (H, D, d), so head h computes queries X @ W_Q[h];
- ``W_O``: (H d, D); the layer output is F(X) = concat_h f^h(X) @ W_O (+ b_O), so W^O_h = W_O[h d:(h+1) d];
- optional biases ``b_Q``, ``b_K``, ``b_V``: (H, d) and ``b_O``: (D,) (dot-product attention only, except b_O).

``kind`` is ``"dp"`` (dot-product), ``"l2"`` (L2 attention with tied W^K = W^Q; values X A_h W^V_h with
A_h = W^Q_h W^Q_h^T / sqrt(d)) or ``"l2-untied"`` (W^K != W^Q; not Lipschitz, MATH.md section 1).

Construction validates everything: a bad shape, a dtype other than float32 / float64 (complex, integer, bool, half),
mixed dtypes, NaN or Inf raise `InvalidInputError` naming expected and actual.
"""

from __future__ import annotations

import dataclasses

import torch

from .._errors import InvalidInputError

KINDS: tuple[str, ...] = ("dp", "l2", "l2-untied")
DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float64)  # the dtypes certify computes with
DTYPE_NAMES: tuple[str, ...] = ("float32", "float64")


@dataclasses.dataclass(frozen=True)
class AttentionWeights:
    kind: str
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    b_Q: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    b_O: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidInputError(f"attention kind must be one of {KINDS}, got {self.kind!r}")
        if self.W_Q.ndim != 3:
            raise InvalidInputError(f"W_Q must have shape (H, D, d), got {tuple(self.W_Q.shape)}")
        H, D, d = self.W_Q.shape
        if min(H, D, d) < 1:
            raise InvalidInputError(f"W_Q must have positive dimensions (H, D, d), got {(H, D, d)}")
        expected = {"W_K": (H, D, d), "W_V": (H, D, d), "W_O": (H * d, D)}
        for name, shape in expected.items():
            actual = tuple(getattr(self, name).shape)
            if actual != shape:
                raise InvalidInputError(f"{name} must have shape {shape} to match W_Q {(H, D, d)}, got {actual}")
        for name, shape in {"b_Q": (H, d), "b_K": (H, d), "b_V": (H, d), "b_O": (D,)}.items():
            bias = getattr(self, name)
            if bias is not None and tuple(bias.shape) != shape:
                raise InvalidInputError(f"{name} must have shape {shape}, got {tuple(bias.shape)}")
        for name, tensor in self.tensors().items():
            if tensor.dtype not in DTYPES:
                raise InvalidInputError(f"{name} has dtype {str(tensor.dtype).replace('torch.', '')}; weights must be "
                                        f"real floating point, {' or '.join(DTYPE_NAMES)}")
        dtypes = {t.dtype for t in self.tensors().values()}
        if len(dtypes) != 1:
            raise InvalidInputError(f"all weights must share one dtype, got {sorted(map(str, dtypes))}")
        for name, tensor in self.tensors().items():
            if not torch.isfinite(tensor).all():
                raise InvalidInputError(f"{name} has NaN or Inf entries; no bound can be certified")
        if self.kind == "l2" and not torch.equal(self.W_K, self.W_Q):
            raise InvalidInputError("kind 'l2' requires tied weights W_K == W_Q; use kind 'l2-untied' otherwise")
        if self.kind != "dp" and any(getattr(self, n) is not None for n in ("b_Q", "b_K", "b_V")):
            raise InvalidInputError("L2 attention has no query, key or value biases (only b_O)")

    @property
    def H(self) -> int:
        return self.W_Q.shape[0]

    @property
    def D(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d(self) -> int:
        return self.W_Q.shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.W_Q.dtype

    def tensors(self) -> dict[str, torch.Tensor]:
        """The weight tensors that are present, by name."""
        names = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> AttentionWeights:
        """A copy with every tensor converted (detached from any graph)."""
        converted = {n: t.detach().to(dtype=dtype, device=device) for n, t in self.tensors().items()}
        if self.kind == "l2":
            converted["W_K"] = converted["W_Q"]
        return dataclasses.replace(self, **converted)

    def W_O_head(self, h: int) -> torch.Tensor:
        """W^O_h, the d x D block of W_O that multiplies head h."""
        return self.W_O[h * self.d : (h + 1) * self.d]

    def describe(self) -> dict:
        """A JSON-friendly description (kind and sizes)."""
        return {"kind": self.kind, "H": self.H, "D": self.D, "d": self.d, "dtype": str(self.dtype).replace("torch.", "")}


def jacobian_equivalent(weights: AttentionWeights) -> AttentionWeights:
    """Weights with the same Jacobian J(X) at every X, the biases that cancel in it left out: b_O always, and for
    dot-product attention b_K (it shifts every score of a query row by q_i . b_K, which the softmax removes) and b_V
    (v_l - vbar_i). Derivatives through the forward pass are then free of the roundoff those biases add: with W_V of
    1e-155 beside b_V = 1, v_l - vbar_i is otherwise 1e-16 of rounding. Only for derivatives: the outputs differ."""
    if weights.kind == "dp":
        return dataclasses.replace(weights, b_K=None, b_V=None, b_O=None)
    return dataclasses.replace(weights, b_O=None)


def check_input(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """Validate an input batch X of shape (B, N, D) (or (N, D), which gets a batch axis) and return it batched."""
    if X.ndim == 2:
        X = X.unsqueeze(0)
    if X.ndim != 3:
        raise InvalidInputError(f"X must have shape (B, N, D) or (N, D), got {tuple(X.shape)}")
    if X.shape[1] < 1:
        raise InvalidInputError(f"the sequence length N must be at least 1, got {X.shape[1]}")
    if X.shape[2] != weights.D:
        raise InvalidInputError(f"X has D = {X.shape[2]} features per token but the weights expect D = {weights.D}")
    if X.dtype != weights.dtype:
        raise InvalidInputError(f"X has dtype {X.dtype} but the weights have {weights.dtype}")
    if not torch.isfinite(X).all():
        raise InvalidInputError("X has NaN or Inf entries")
    return X


def check_tokens(N: int) -> int:
    """Validate a sequence length N >= 1."""
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise InvalidInputError(f"the sequence length N must be an integer >= 1, got {N!r}")
    return N
