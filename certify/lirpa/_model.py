"""auto_LiRPA (IBP, CROWN) on a whole `certify.model.Model`: margin lower bounds over an eps-ball and a radius.

`export_model(model)` writes the blocks of `certify.model` (see `certify/model/_blocks.py`) as a float64
``nn.Module`` from inputs (B, *input_shape) to logits (B, K) (the final state flattened row-major), with only
operations that auto_LiRPA 0.3 can bound:

- `Gather`: vec(S) G with the 0/1 selection matrix G (exact; auto_LiRPA's Gather back-propagates with a scatter
  that overwrites rather than adds, which would drop coefficients of repeated indices);
- `ClassToken`: [0 S[:1] + c; S] (exactly c): ``expand`` traces to Equal / Where shape arithmetic, through which
  auto_LiRPA 0.3 propagates no intervals (IBP failed);
- `LayerNorm`: mean, subtract, square, mean, relu (the identity on a variance; it keeps its lower bound >= 0 so
  sqrt(. + eps) stays positive), + eps, sqrt, reciprocal, multiply. auto_LiRPA 0.3 has no LayerNormalization op,
  and its ``BoundDiv.forward`` replaces any ``x / sqrt(.)`` by an ad-hoc layer-norm formula without eps, so the
  division is written as a product with the reciprocal;
- `Attention`: per head softmax(scale Q K^T) V with auto_LiRPA's softmax (decomposed with a fixed max index: the
  ReduceMax soundness patch of `_compat` applies); the causal mask adds ``CAUSAL_MASK`` = -1e9 to the masked
  logits, whose exponentials are then exactly 0 in float64, as in `certify.model.forward`'s -inf;
- GELU: auto_LiRPA 0.3 has no GELU and no Erf op. `_gelu` is a custom op with its own relaxation (`BoundGelu`);
- everything else is matmul, add, multiply, concatenation, slicing, ReLU.

`crown_margins(model, x0, eps, norm, label)` lower-bounds m_j(x) = f_label(x) - f_j(x), j != label, over
{||x - x0||_norm <= eps}, by the specification matrix C with rows e_label - e_j. `model_crown_radius` finds the
largest eps at which all of them are positive (`largest_certified`). auto_LiRPA computes in float64 without outward
rounding, so these are "bound propagation, float64": sound in exact arithmetic, never `certified` (`_bounds`).
On wide balls auto_LiRPA's softmax overflows (exp of logit bounds near 1e6) and its bounds are NaN: an error in
`crown_margins`, an eps not proved in the radius search. Failures inside auto_LiRPA become one `SolverError` that
names the failing node (or the operations it cannot convert, or "out of memory").
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import math
import time
import traceback

import numpy as np
import torch
from torch import nn

from .._errors import InvalidInputError, SolverError
from ..model._blocks import (Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward, Gather,
                             LayerNorm, Linear, Model, Pool, Residual)
from ..model._forward import as_state, forward
from . import _compat
from ._bounds import METHODS, bounded_module, compute, float64_default, perturbation
from ._gelu import BoundGelu, gelu
from ._radius import Radius, largest_certified

CAUSAL_MASK = -1e9
NORMS = ("inf", "2")
CUSTOM_OPS = {"custom::Gelu": BoundGelu}


def _parameter(array: np.ndarray) -> nn.Parameter:
    return nn.Parameter(torch.tensor(array, dtype=torch.float64), requires_grad=False)


class _Gather(nn.Module):
    def __init__(self, block: Gather, rows: int, columns: int) -> None:
        super().__init__()
        size = rows * columns
        if block.index.max() >= size:
            raise InvalidInputError(f"Gather index {int(block.index.max())} is outside the state of {size} entries")
        selection = np.zeros((size, block.index.size))
        selection[block.index.reshape(-1), np.arange(block.index.size)] = 1.0
        self.selection = _parameter(selection)
        self.shape = block.index.shape

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return S.reshape(S.shape[0], -1).matmul(self.selection).reshape(S.shape[0], *self.shape)


class _Linear(nn.Module):
    def __init__(self, weight: np.ndarray, bias: np.ndarray | None) -> None:
        super().__init__()
        self.weight = _parameter(weight)
        self.bias = None if bias is None else _parameter(bias)

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        out = S.matmul(self.weight)
        return out if self.bias is None else out + self.bias


class _ClassToken(nn.Module):
    def __init__(self, block: ClassToken) -> None:
        super().__init__()
        self.token = _parameter(block.token.reshape(1, -1))  # (1, C): no batch dimension (auto_LiRPA broadcasting)

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        # 0 S[:, :1] + c is c exactly (S is finite) in every batch row; expand() would trace to Equal / Where
        # shape arithmetic, which auto_LiRPA 0.3 cannot propagate intervals through (IBP fails)
        return torch.cat([S[:, :1] * 0.0 + self.token, S], dim=1)


class _Affine(nn.Module):
    """S * scale + shift (ChannelAffine), or S + shift (AddConstant: scale None)."""

    def __init__(self, scale: np.ndarray | None, shift: np.ndarray) -> None:
        super().__init__()
        self.scale = None if scale is None else _parameter(scale)
        self.shift = _parameter(shift)

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return (S if self.scale is None else S * self.scale) + self.shift


class _LayerNorm(nn.Module):
    """gamma (x - mean x) / sqrt(relu(var x) + eps) + beta per row: mean / sub / square / relu / sqrt / reciprocal /
    mul."""

    def __init__(self, block: LayerNorm) -> None:
        super().__init__()
        self.gamma, self.beta, self.eps = _parameter(block.gamma), _parameter(block.beta), block.eps

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        centred = S - S.mean(dim=-1, keepdim=True)
        # relu: the identity on the (non-negative) variance, but it keeps the variance's lower bound >= 0 under
        # bound propagation, so that sqrt(. + eps) stays >= sqrt(eps) > 0 instead of NaN on wide balls
        variance = torch.relu((centred * centred).mean(dim=-1, keepdim=True))
        return centred * torch.reciprocal(torch.sqrt(variance + self.eps)) * self.gamma + self.beta


def _activation(kind: str, S: torch.Tensor) -> torch.Tensor:
    return torch.relu(S) if kind == "relu" else gelu(S)


class _Activation(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return _activation(self.kind, S)


class _FeedForward(nn.Module):
    def __init__(self, block: FeedForward) -> None:
        super().__init__()
        self.first, self.second = _Linear(block.W1, block.b1), _Linear(block.W2, block.b2)
        self.kind = block.activation

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return self.second(_activation(self.kind, self.first(S)))


class _Attention(nn.Module):
    """[P_1 V_1, ..., P_H V_H] W^O + b^O, P_h = softmax(scale Q_h K_h^T [+ CAUSAL_MASK above the diagonal])."""

    def __init__(self, block: Attention, rows: int) -> None:
        super().__init__()
        self.heads = block.H
        self.scale = block.scale
        self.W_Q, self.W_K, self.W_V = _parameter(block.W_Q), _parameter(block.W_K), _parameter(block.W_V)
        for name in ("b_Q", "b_K", "b_V", "W_O", "b_O"):
            value = getattr(block, name)
            setattr(self, name, None if value is None else _parameter(value))
        self.mask = _parameter(CAUSAL_MASK * np.triu(np.ones((rows, rows)), 1)) if block.causal else None

    def _head(self, S: torch.Tensor, h: int) -> torch.Tensor:
        Q, K, V = S.matmul(self.W_Q[h]), S.matmul(self.W_K[h]), S.matmul(self.W_V[h])
        if self.b_Q is not None:
            Q = Q + self.b_Q[h]
        if self.b_K is not None:
            K = K + self.b_K[h]
        if self.b_V is not None:
            V = V + self.b_V[h]
        logits = Q.matmul(K.transpose(1, 2)) * self.scale
        if self.mask is not None:
            logits = logits + self.mask
        return torch.softmax(logits, dim=-1).matmul(V)

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        heads = [self._head(S, h) for h in range(self.heads)]
        out = heads[0] if self.heads == 1 else torch.cat(heads, dim=-1)
        if self.W_O is not None:
            out = out.matmul(self.W_O)
        return out if self.b_O is None else out + self.b_O


class _Residual(nn.Module):
    def __init__(self, inner: nn.Sequential) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return S + self.inner(S)


class _Pool(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, S: torch.Tensor) -> torch.Tensor:
        return S.mean(dim=1, keepdim=True) if self.kind == "mean" else S[:, :1]


def _module(block: object, shape: tuple[int, int]) -> tuple[nn.Module, tuple[int, int]]:
    """The module for one block acting on states of shape (R, C), and the shape of its output states."""
    R, C = shape
    if isinstance(block, Gather):
        return _Gather(block, R, C), tuple(block.index.shape)
    if isinstance(block, Linear):
        _check_width(block, C, block.weight.shape[0])
        return _Linear(block.weight, block.bias), (R, block.weight.shape[1])
    if isinstance(block, ClassToken):
        _check_width(block, C, block.token.shape[0])
        return _ClassToken(block), (R + 1, C)
    if isinstance(block, AddConstant):
        return _Affine(None, _broadcast(block, block.value, shape)), shape
    if isinstance(block, ChannelAffine):
        return _Affine(_broadcast(block, block.scale, shape), _broadcast(block, block.shift, shape)), shape
    if isinstance(block, LayerNorm):
        _check_width(block, C, block.gamma.shape[0])
        return _LayerNorm(block), shape
    if isinstance(block, Activation):
        return _Activation(block.kind), shape
    if isinstance(block, Attention):
        _check_width(block, C, block.D)
        return _Attention(block, R), (R, block.out_features)
    if isinstance(block, FeedForward):
        _check_width(block, C, block.W1.shape[0])
        return _FeedForward(block), (R, block.W2.shape[1])
    if isinstance(block, Residual):
        inner, out = _modules(block.inner, shape)
        if out != shape:
            raise InvalidInputError(f"a Residual's inner blocks map states {shape} to {out}: the shapes must agree")
        return _Residual(inner), shape
    if isinstance(block, Pool):
        return _Pool(block.kind), (1, C)
    raise InvalidInputError(f"export_model: no auto_LiRPA form for block {type(block).__name__}")


def _check_width(block: object, columns: int, expected: int) -> None:
    if columns != expected:
        raise InvalidInputError(f"{type(block).__name__} expects states with {expected} columns, gets {columns}")


def _broadcast(block: object, value: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    try:
        return np.broadcast_to(value, shape).copy()
    except ValueError:
        raise InvalidInputError(f"{type(block).__name__} of shape {value.shape} does not broadcast to the state "
                                f"{shape}") from None


def _modules(blocks: tuple, shape: tuple[int, int]) -> tuple[nn.Sequential, tuple[int, int]]:
    modules = []
    for block in blocks:
        module, shape = _module(block, shape)
        modules.append(module)
    return nn.Sequential(*modules), shape


class LirpaModel(nn.Module):
    """A `certify.model.Model` as a float64 module, (B, *input_shape) -> logits (B, K), traceable by auto_LiRPA."""

    def __init__(self, model: Model) -> None:
        super().__init__()
        if not isinstance(model, Model):
            raise InvalidInputError(f"expected a certify.model.Model, got {type(model).__name__}")
        self.input_shape = model.input_shape
        self.state_shape = model.state_shape
        self.blocks, out = _modules(model.blocks, model.state_shape)
        self.outputs = out[0] * out[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        S = x.reshape(x.shape[0], *self.state_shape)
        return self.blocks(S).reshape(x.shape[0], -1)


def export_model(model: Model) -> LirpaModel:
    """The model as a float64 ``nn.Module`` from inputs (B, *input_shape) to logits (B, K) (module docstring)."""
    return LirpaModel(model)


def _check_query(model: Model, x0: torch.Tensor | np.ndarray, norm: str, method: str) -> torch.Tensor:
    """x0 (input_shape, or a batch of one) as a float64 tensor (1, *input_shape); checks norm and method."""
    if not isinstance(model, Model):
        raise InvalidInputError(f"expected a certify.model.Model, got {type(model).__name__}")
    if norm not in NORMS:
        raise InvalidInputError(f"norm must be 'inf' or '2', got {norm!r}")
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {METHODS}, got {method!r}")
    state = as_state(model, x0)  # checks the shape and NaN / Inf
    if state.shape[0] != 1:
        raise InvalidInputError(f"x0 must be one input of shape {model.input_shape}, got a batch of {state.shape[0]}")
    return state.reshape(1, *model.input_shape)


def _check_eps(eps: float) -> float:
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps > 0):
        raise InvalidInputError(f"eps must be a positive finite number, got {eps!r}")
    return float(eps)


def _check_label(label: int, classes: int) -> int:
    if classes < 2:
        raise InvalidInputError(f"the model has {classes} output: margins need at least two classes")
    if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or not 0 <= label < classes:
        raise InvalidInputError(f"label must be an integer in [0, {classes}), got {label!r}")
    return int(label)


def specification(label: int, classes: int) -> torch.Tensor:
    """C (1, K - 1, K) with rows e_label - e_j for j != label in increasing order: C f = the margins."""
    others = [j for j in range(classes) if j != label]
    C = torch.zeros(1, len(others), classes, dtype=torch.float64)
    C[0, torch.arange(len(others)), others] = -1.0
    C[0, :, label] = 1.0
    return C


@contextlib.contextmanager
def _lirpa_errors(stage: str, method: str) -> None:
    """Turn a failure inside auto_LiRPA into a `SolverError` that names the stage, the method and the cause (the
    operations auto_LiRPA could not convert are collected from its log)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("auto_LiRPA")
    handler = Collect(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield
    except (InvalidInputError, KeyboardInterrupt):
        raise
    except Exception as error:  # noqa: BLE001 - any failure inside auto_LiRPA becomes one readable error
        unsupported = [m for m in messages if "unsupported operation" in m]
        if unsupported:
            ops = sorted({m.split("op='")[1].split("'")[0] for m in unsupported if "op='" in m})
            cause = f"operations auto_LiRPA 0.3 cannot bound: {', '.join(ops) or unsupported[0]}"
        elif isinstance(error, MemoryError) or any(text in str(error).lower()
                                                    for text in ("out of memory", "not enough memory")):
            cause = f"out of memory ({type(error).__name__}); the model or the specification is too large for {method}"
        else:
            cause = f"{type(error).__name__}{': ' + str(error) if str(error) else ''}{_where(error)}"
        raise SolverError(f"auto_LiRPA failed while {stage} ({method}): {cause}") from None
    finally:
        logger.removeHandler(handler)


def _where(error: BaseException) -> str:
    """' in BoundDiv(/94).interval_propagate (auto_LiRPA/operators/bivariate.py:423: assert ...)': the innermost
    auto_LiRPA frame of the traceback, with its graph node, so that a bare AssertionError still says what failed."""
    frames = [(frame, line) for frame, line in traceback.walk_tb(error.__traceback__)
              if "auto_LiRPA" in frame.f_code.co_filename]
    if not frames:
        return ""
    frame, line = frames[-1]
    node = frame.f_locals.get("self")
    owner = f"{type(node).__name__}({getattr(node, 'name', '?')})." if node is not None else ""
    path = frame.f_code.co_filename
    path = path[path.rindex("auto_LiRPA"):]
    source = (linecache.getline(frame.f_code.co_filename, line) or "").strip()
    return f" in {owner}{frame.f_code.co_name} ({path}:{line}: {source})"


class _Bounder:
    """The bounded module of one model around one input, reused across eps (one trace, many compute_bounds)."""

    def __init__(self, module: LirpaModel, x: torch.Tensor, method: str) -> None:
        self.method = method
        self.x = x
        with float64_default(), _lirpa_errors("tracing the model", method):
            self.bounded = bounded_module(module, (x,), custom_ops=CUSTOM_OPS)

    def margins(self, eps: float, norm: str, C: torch.Tensor) -> np.ndarray:
        with float64_default(), _lirpa_errors(f"bounding the margins at eps = {eps:g}, norm {norm}", self.method):
            lower, _ = compute(self.bounded, (_compat.BoundedTensor(self.x, perturbation(eps, norm)),), self.method,
                               C=C, upper=False)
        return lower.reshape(-1).numpy()  # NaN where auto_LiRPA's arithmetic overflowed (inf - inf)


def crown_margins(model: Model, x0: torch.Tensor | np.ndarray, eps: float, norm: str, label: int,
                  method: str = "CROWN") -> np.ndarray:
    """Lower bounds on f_label(x) - f_j(x) for j != label (increasing j; K - 1 values) over ||x - x0||_norm <= eps.

    Bound propagation in float64 by auto_LiRPA (``method`` "CROWN" or "IBP"): sound in exact arithmetic, not outward
    rounded, so not a certificate in the sense of `Certificate.certified`.
    """
    x = _check_query(model, x0, norm, method)
    eps = _check_eps(eps)
    module = export_model(model)
    C = specification(_check_label(label, module.outputs), module.outputs)
    lower = _Bounder(module, x, method).margins(eps, norm, C)
    if np.isnan(lower).any():
        raise SolverError(f"auto_LiRPA returned NaN margin bounds ({method}, eps = {eps:g}, norm {norm}): its "
                          "arithmetic overflowed; the ball is too large for bound propagation on this model")
    return lower


def model_crown_radius(model: Model, x0: torch.Tensor | np.ndarray, norm: str, label: int | None = None,
                       method: str = "CROWN", start: float = 1e-3, steps: int = 10) -> Radius:
    """The largest eps found (doubling / quartering from ``start``, then ``steps`` bisections) at which every margin
    lower bound of `crown_margins` is positive; 0 if x0 is not classified as ``label`` (default: the predicted class)
    with a positive margin. ``certified=False`` (bound propagation, float64); ``details`` holds the label, the
    number of bound computations and the margins at x0."""
    begin = time.perf_counter()
    x = _check_query(model, x0, norm, method)
    if not (isinstance(start, (int, float)) and math.isfinite(start) and start > 0):
        raise InvalidInputError(f"start must be a positive finite number, got {start!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise InvalidInputError(f"steps must be a non-negative integer, got {steps!r}")
    with torch.no_grad():
        logits = forward(model, x).reshape(-1)
    label = _check_label(int(logits.argmax()) if label is None else label, logits.numel())
    others = [j for j in range(logits.numel()) if j != label]
    margins = (logits[label] - logits[others]).numpy()
    name = f"auto_LiRPA-{method}"
    details = {"label": label, "margins": margins}
    if margins.min() <= 0:
        return Radius(name, norm, 0.0, time.perf_counter() - begin, False, {**details, "misclassified": True})
    bounder = _Bounder(export_model(model), x, method)
    C = specification(label, logits.numel())

    def test(eps: float) -> bool:  # NaN bounds (overflow on a wide ball) prove nothing: the test fails
        return bool((bounder.margins(eps, norm, C) > 0).all())

    radius, calls = largest_certified(test, start=float(start), steps=steps)
    return Radius(name, norm, radius, time.perf_counter() - begin, False, {**details, "calls": calls})
