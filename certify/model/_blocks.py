"""A whole model as data: a tuple of frozen blocks acting on a 2-D state (MATH.md section 0 for the norms).

Every block maps one sample's state, a real matrix S in R^{R x C} (rows are tokens, columns features; a vector
is a 1 x C state), to the next. The model's input of shape ``input_shape`` is read as the state
(prod(input_shape[:-1]), input_shape[-1]), row-major. Lipschitz constants are taken on vec(S) (row-major), with
the same p-norm (p in {2, inf}) on every intermediate state, so the chain rule composes them.

Blocks (the formula each computes on a state S; weights are float64 numpy arrays):

- `Gather(index)`: S'[r, c] = vec(S)[index[r, c]] (patches, reshapes, transposes, a selected row).
- `Linear(weight, bias)`: S' = S W + 1 b^T, W in R^{C x C'} (rows of S are x_i^T, so W^T acts on each token).
- `ClassToken(token)`: S' = [c^T; S] (prepends one constant row).
- `AddConstant(value)`: S' = S + E (positional terms), E broadcast to S.
- `LayerNorm(gamma, beta, eps)`: each row x -> gamma * (x - mean x) / sqrt(var x + eps) + beta (population var;
  eps is the variance floor).
- `ChannelAffine(scale, shift)`: S' = scale * S + shift, entrywise with broadcasting (BatchNorm in eval mode).
- `Activation(kind)`: ReLU or GELU (exact, Phi the normal CDF: x Phi(x)), entrywise.
- `Attention`: dot-product multi-head attention with biases (MATH.md section 1):
  Q_h = S W^Q_h + b^Q_h, K_h, V_h likewise, P_h = softmax_rows(scale Q_h K_h^T [+ causal mask]),
  S' = [P_1 V_1, ..., P_H V_H] W^O + b^O (W^O = None means the identity).
- `L2Attention`: tied L2 multi-head attention (MATH.md section 1, W^K = W^Q), with an optional causal mask:
  Y_h = S W^Q_h, P_h = softmax_rows(-||y_i - y_j||^2 / sqrt(d) [+ causal mask]), A_h = W^Q_h W^Q_h^T / sqrt(d),
  S' = [P_1 S A_1 W^V_1, ..., P_H S A_H W^V_H] W^O + b^O. Untied L2 (W^K != W^Q) is not Lipschitz and has no block.
- `FeedForward(W1, b1, activation, W2, b2)`: each row x -> W2^T act(W1^T x + b1) + b2.
- `Residual(inner)`: S' = S + inner(S), inner a tuple of blocks.
- `Pool(kind)`: "mean" -> the 1 x C mean of the rows; "cls" -> the first row.

`pre_ln_block` and `post_ln_block` build the two usual transformer blocks from these parts.
"""

from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np

from .._errors import InvalidInputError

ACTIVATIONS = ("relu", "gelu")


def _array(value: object, name: str, ndim: int | tuple[int, ...] | None = None) -> np.ndarray:
    array = np.array(value, dtype=np.float64)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and array.ndim not in dims:
        raise InvalidInputError(f"{name} must have {' or '.join(map(str, dims))} dimensions, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InvalidInputError(f"{name} has NaN or Inf entries")
    array.setflags(write=False)
    return array


def _set(block: object, name: str, value: object) -> None:
    object.__setattr__(block, name, value)


@dataclasses.dataclass(frozen=True, eq=False)
class Gather:
    """S'[r, c] = vec(S)[index[r, c]], index an integer matrix (R' x C')."""

    index: np.ndarray

    def __post_init__(self) -> None:
        index = np.array(self.index, dtype=np.int64)
        if index.ndim != 2 or index.size == 0 or index.min() < 0:
            raise InvalidInputError(f"Gather index must be a non-empty non-negative integer matrix, got {index.shape}")
        index.setflags(write=False)
        _set(self, "index", index)


@dataclasses.dataclass(frozen=True, eq=False)
class Linear:
    """S' = S W + 1 b^T with W = ``weight`` of shape (C, C') and b = ``bias`` (C',) or None."""

    weight: np.ndarray
    bias: np.ndarray | None = None

    def __post_init__(self) -> None:
        _set(self, "weight", _array(self.weight, "Linear weight", 2))
        if self.bias is not None:
            _set(self, "bias", _array(self.bias, "Linear bias", 1))
            if self.bias.shape[0] != self.weight.shape[1]:
                raise InvalidInputError(f"Linear bias has {self.bias.shape[0]} entries, weight {self.weight.shape}")


@dataclasses.dataclass(frozen=True, eq=False)
class ClassToken:
    """S' = [c^T; S]: one constant row c (C,) before the tokens."""

    token: np.ndarray

    def __post_init__(self) -> None:
        _set(self, "token", _array(self.token, "class token", 1))


@dataclasses.dataclass(frozen=True, eq=False)
class AddConstant:
    """S' = S + E, E (R x C, or broadcastable to it): positional terms."""

    value: np.ndarray

    def __post_init__(self) -> None:
        _set(self, "value", _array(self.value, "AddConstant value", (1, 2)))


@dataclasses.dataclass(frozen=True, eq=False)
class LayerNorm:
    """Each row x -> gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta; eps > 0 is the variance floor."""

    gamma: np.ndarray
    beta: np.ndarray
    eps: float

    def __post_init__(self) -> None:
        _set(self, "gamma", _array(self.gamma, "LayerNorm gamma", 1))
        _set(self, "beta", _array(self.beta, "LayerNorm beta", 1))
        if self.gamma.shape != self.beta.shape:
            raise InvalidInputError(f"LayerNorm gamma {self.gamma.shape} and beta {self.beta.shape} differ")
        if not (np.isfinite(self.eps) and self.eps > 0):
            raise InvalidInputError(f"LayerNorm eps must be positive (the variance floor), got {self.eps!r}")
        _set(self, "eps", float(self.eps))


@dataclasses.dataclass(frozen=True, eq=False)
class ChannelAffine:
    """S' = scale * S + shift entrywise (arrays broadcast to the state: BatchNorm in eval mode, or any affine)."""

    scale: np.ndarray
    shift: np.ndarray

    def __post_init__(self) -> None:
        _set(self, "scale", _array(self.scale, "ChannelAffine scale", (1, 2)))
        _set(self, "shift", _array(self.shift, "ChannelAffine shift", (1, 2)))


@dataclasses.dataclass(frozen=True, eq=False)
class Activation:
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in ACTIVATIONS:
            raise InvalidInputError(f"activation must be one of {ACTIVATIONS}, got {self.kind!r}")


class _HeadShapes:
    """H, D, d and the output width of an attention block from W_Q (H, D, d) and W_O (H d, C) or None."""

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
    def out_features(self) -> int:
        return self.H * self.d if self.W_O is None else self.W_O.shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class Attention(_HeadShapes):
    """Dot-product multi-head attention (MATH.md section 1) with biases and an optional causal mask.

    W_Q, W_K, W_V: (H, D, d); b_Q, b_K, b_V: (H, d) or None; W_O: (H d, D') or None (identity); b_O: (D',) or None;
    logits = scale Q_h K_h^T (scale = 1 / sqrt(d) in the paper's convention).
    """

    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    b_Q: np.ndarray | None = None
    b_K: np.ndarray | None = None
    b_V: np.ndarray | None = None
    W_O: np.ndarray | None = None
    b_O: np.ndarray | None = None
    scale: float | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("W_Q", "W_K", "W_V"):
            _set(self, name, _array(getattr(self, name), name, 3))
        H, D, d = self.W_Q.shape
        if self.W_K.shape != (H, D, d) or self.W_V.shape != (H, D, d):
            raise InvalidInputError(f"W_K {self.W_K.shape} and W_V {self.W_V.shape} must match W_Q {(H, D, d)}")
        for name in ("b_Q", "b_K", "b_V"):
            if getattr(self, name) is not None:
                _set(self, name, _array(getattr(self, name), name, 2))
                if getattr(self, name).shape != (H, d):
                    raise InvalidInputError(f"{name} must have shape {(H, d)}, got {getattr(self, name).shape}")
        if self.W_O is not None:
            _set(self, "W_O", _array(self.W_O, "W_O", 2))
            if self.W_O.shape[0] != H * d:
                raise InvalidInputError(f"W_O must have H d = {H * d} rows, got {self.W_O.shape}")
        if self.b_O is not None:
            _set(self, "b_O", _array(self.b_O, "b_O", 1))
            if self.b_O.shape[0] != self.out_features:
                raise InvalidInputError(f"b_O must have {self.out_features} entries, got {self.b_O.shape}")
        scale = 1.0 / np.sqrt(d) if self.scale is None else float(self.scale)
        if not np.isfinite(scale):
            raise InvalidInputError(f"attention scale must be finite, got {scale}")
        _set(self, "scale", scale)
        _set(self, "causal", bool(self.causal))


@dataclasses.dataclass(frozen=True, eq=False)
class L2Attention(_HeadShapes):
    """Tied L2 multi-head attention (MATH.md section 1) with an optional causal mask: per head h,

        P^h_ij = softmax_j(-||x_i^T W^Q_h - x_j^T W^Q_h||_2^2 / sqrt(d)),   f^h(X) = P^h X A_h W^V_h,
        A_h = W^Q_h W^Q_h^T / sqrt(d),   F(X) = [f^1, ..., f^H] W^O + b^O.

    W_Q, W_V: (H, D, d); W_O: (H d, D') or None (identity); b_O: (D',) or None. There are no query, key or value
    biases, and W^K = W^Q by construction: the untied map is not Lipschitz (MATH.md section 1). With ``causal``,
    token i attends to j <= i only (row i is the unmasked layer applied to the prefix x_1..x_i).
    """

    W_Q: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray | None = None
    b_O: np.ndarray | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("W_Q", "W_V"):
            _set(self, name, _array(getattr(self, name), name, 3))
        H, D, d = self.W_Q.shape
        if self.W_V.shape != (H, D, d):
            raise InvalidInputError(f"W_V {self.W_V.shape} must match W_Q {(H, D, d)}")
        if self.W_O is not None:
            _set(self, "W_O", _array(self.W_O, "W_O", 2))
            if self.W_O.shape[0] != H * d:
                raise InvalidInputError(f"W_O must have H d = {H * d} rows, got {self.W_O.shape}")
        if self.b_O is not None:
            _set(self, "b_O", _array(self.b_O, "b_O", 1))
            if self.b_O.shape[0] != self.out_features:
                raise InvalidInputError(f"b_O must have {self.out_features} entries, got {self.b_O.shape}")
        _set(self, "causal", bool(self.causal))


@dataclasses.dataclass(frozen=True, eq=False)
class FeedForward:
    """Each row x -> W2^T act(W1^T x + b1) + b2 (W1: (C, hidden), W2: (hidden, C'))."""

    W1: np.ndarray
    b1: np.ndarray | None
    activation: str
    W2: np.ndarray
    b2: np.ndarray | None

    def __post_init__(self) -> None:
        _set(self, "W1", _array(self.W1, "W1", 2))
        _set(self, "W2", _array(self.W2, "W2", 2))
        if self.W1.shape[1] != self.W2.shape[0]:
            raise InvalidInputError(f"W1 {self.W1.shape} and W2 {self.W2.shape} do not chain")
        for name, size in (("b1", self.W1.shape[1]), ("b2", self.W2.shape[1])):
            if getattr(self, name) is not None:
                _set(self, name, _array(getattr(self, name), name, 1))
                if getattr(self, name).shape != (size,):
                    raise InvalidInputError(f"{name} must have {size} entries, got {getattr(self, name).shape}")
        if self.activation not in ACTIVATIONS:
            raise InvalidInputError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Residual:
    """S' = S + inner(S)."""

    inner: tuple

    def __post_init__(self) -> None:
        _set(self, "inner", tuple(self.inner))
        if not self.inner:
            raise InvalidInputError("a residual block needs at least one inner block")


@dataclasses.dataclass(frozen=True, eq=False)
class Pool:
    kind: str  # "mean" (mean of the rows) or "cls" (the first row)

    def __post_init__(self) -> None:
        if self.kind not in ("mean", "cls"):
            raise InvalidInputError(f"pooling must be 'mean' or 'cls', got {self.kind!r}")


Block = Union[Gather, Linear, ClassToken, AddConstant, LayerNorm, ChannelAffine, Activation, Attention, L2Attention,
              FeedForward, Residual, Pool]
BLOCK_TYPES = (Gather, Linear, ClassToken, AddConstant, LayerNorm, ChannelAffine, Activation, Attention, L2Attention,
               FeedForward, Residual, Pool)
ATTENTION_TYPES = (Attention, L2Attention)


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A sequence of blocks applied to one sample of shape ``input_shape`` (read as a 2-D state, module docstring)."""

    blocks: tuple
    input_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        _set(self, "blocks", tuple(self.blocks))
        _set(self, "input_shape", tuple(int(n) for n in self.input_shape))
        if not self.input_shape or min(self.input_shape) < 1:
            raise InvalidInputError(f"input_shape must be non-empty and positive, got {self.input_shape}")
        for block in _walk(self.blocks):
            if not isinstance(block, BLOCK_TYPES):
                raise InvalidInputError(f"not a model block: {type(block).__name__}")

    @property
    def state_shape(self) -> tuple[int, int]:
        """The input read as a 2-D state (R, C)."""
        return (int(np.prod(self.input_shape[:-1], dtype=np.int64)), self.input_shape[-1])

    def describe(self) -> list[str]:
        """One line per block (nested blocks indented)."""
        return _describe(self.blocks, "")


def _walk(blocks: tuple) -> list:
    out = []
    for block in blocks:
        out.append(block)
        if isinstance(block, Residual):
            out.extend(_walk(block.inner))
    return out


def _describe(blocks: tuple, indent: str) -> list[str]:
    lines = []
    for block in blocks:
        if isinstance(block, Residual):
            lines.append(f"{indent}Residual")
            lines.extend(_describe(block.inner, indent + "  "))
        elif isinstance(block, Linear):
            lines.append(f"{indent}Linear {block.weight.shape[0]} -> {block.weight.shape[1]}")
        elif isinstance(block, Attention):
            lines.append(f"{indent}Attention H={block.H} D={block.D} d={block.d}{' causal' if block.causal else ''}")
        elif isinstance(block, L2Attention):
            lines.append(f"{indent}L2Attention H={block.H} D={block.D} d={block.d}{' causal' if block.causal else ''}")
        elif isinstance(block, FeedForward):
            lines.append(f"{indent}FeedForward {block.W1.shape[0]} -> {block.W1.shape[1]} ({block.activation}) -> "
                         f"{block.W2.shape[1]}")
        elif isinstance(block, (Activation, Pool)):
            lines.append(f"{indent}{type(block).__name__}({block.kind})")
        else:
            lines.append(f"{indent}{type(block).__name__}")
    return lines


def pre_ln_block(norm1: LayerNorm, attention: Attention | L2Attention, norm2: LayerNorm,
                 feed_forward: FeedForward) -> tuple:
    """Z' = Z + MHA(LN1(Z)), then Z' + FF(LN2(Z')): two residual blocks."""
    return (Residual((norm1, attention)), Residual((norm2, feed_forward)))


def post_ln_block(attention: Attention | L2Attention, norm1: LayerNorm, feed_forward: FeedForward,
                  norm2: LayerNorm) -> tuple:
    """Z' = LN1(Z + MHA(Z)), then LN2(Z' + FF(Z')) (the original transformer)."""
    return (Residual((attention,)), norm1, Residual((feed_forward,)), norm2)
