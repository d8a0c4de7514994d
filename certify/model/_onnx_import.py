"""Models from ONNX graphs of ViT-style transformers, through the ``onnx`` package (batch size 1 graphs).

Each value of the graph that depends on the input is tracked as an index map into a model state: the blocks that
compute the state from the input, and an integer array (the value's shape) saying which entry of the state each
entry of the value is, times a constant scale plus a constant offset. Layout operators act on the index array
exactly; constant subgraphs (shape arithmetic) are evaluated with ``onnx.reference``; compute operators append
blocks. Attention is recognised from MatMul(Q, K^T) -> Softmax -> MatMul(P, V) with Q, K, V column slices of
linear maps of one common state; a residual from Add of two values where one's blocks extend the other's.
A final pass fuses Linear + bias, LayerNorm + affine, Attention + output projection, Linear-act-Linear.

Supported operators (anything else raises `InvalidInputError` naming the node and its op type):

- compute: MatMul (activation x constant matrix, and the attention pattern), Gemm (transA = 0), Add, Sub, Mul, Div
  (with constants; Add of two activations as a residual), Relu, Gelu (exact), Erf (in x * 0.5 * (1 + erf(x /
  sqrt 2))), Softmax (last axis, in attention), LayerNormalization (last axis) or its decomposed form (ReduceMean,
  Sub, Pow 2, Add eps, Sqrt, Div), BatchNormalization (eval), ReduceMean (over tokens: mean pooling);
- layout: Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Gather (constant indices), Slice, Split, Concat (of
  activations, or a constant class token before the tokens), Expand, Identity, Dropout;
- constants: Constant, Shape, and every operator whose inputs are all constants (evaluated by onnx.reference).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._errors import InvalidInputError
from ._blocks import (Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward, Gather, LayerNorm,
                      Linear, Model, Pool, Residual)

LAYOUT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Gather", "Slice", "Split", "Expand",
              "Identity", "Dropout", "Concat")
SUPPORTED_OPS = ("MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Gelu", "Erf", "Softmax", "LayerNormalization",
                 "ReduceMean", "Pow", "Sqrt", "BatchNormalization", "Constant", "Shape") + LAYOUT_OPS


@dataclasses.dataclass(frozen=True, eq=False)
class Act:
    """value = vec(state)[idx] * scale + offset, state = blocks(input) of shape `shape`."""

    prog: tuple
    shape: tuple[int, int]
    idx: np.ndarray
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None
    cache: list = dataclasses.field(default_factory=list)  # its materialised form, computed once (shared blocks)

    def with_idx(self, f) -> "Act":
        return Act(self.prog, self.shape, f(self.idx), None if self.scale is None else f(self.scale),
                   None if self.offset is None else f(self.offset))

    @property
    def s(self) -> np.ndarray:
        return np.ones(self.idx.shape) if self.scale is None else self.scale

    @property
    def o(self) -> np.ndarray:
        return np.zeros(self.idx.shape) if self.offset is None else self.offset


@dataclasses.dataclass(frozen=True, eq=False)
class Lazy:
    """A partial pattern (attention scores / probabilities, GELU or LayerNorm pieces) of the activation `act`."""

    kind: str
    act: Act
    data: dict


class _Unsupported(Exception):
    pass


def _unsupported(node: Any, why: str) -> InvalidInputError:
    return InvalidInputError(f"ONNX node {node.name!r} (op {node.op_type}) is not supported: {why}")


def _identity(idx: np.ndarray, size: int) -> bool:
    return idx.size == size and np.array_equal(idx.reshape(-1), np.arange(size))


def materialize(a: Act) -> Act:
    """The same value with its own state: (P, K) = (prod of leading dims, last dim), identity index, no scale.

    Computed once per value, so that two branches reading the same value share the same block objects (which is
    how a residual connection is recognised)."""
    if a.cache:
        return a.cache[0]
    shape = a.idx.shape
    K = shape[-1] if len(shape) else 1
    P = a.idx.size // K
    prog = a.prog
    size = a.shape[0] * a.shape[1]
    if not _identity(a.idx, size) or (P, K) != a.shape:
        prog = prog + (Gather(a.idx.reshape(P, K)),)
    if a.scale is not None or a.offset is not None:
        s, o = a.s.reshape(P, K), a.o.reshape(P, K)
        s = s[:1] if np.all(s == s[:1]) else s
        o = o[:1] if np.all(o == o[:1]) else o
        prog = prog + ((ChannelAffine(s, o),) if np.any(s != 1) else (AddConstant(o),))
    out = Act(prog, (P, K), np.arange(P * K).reshape(shape)) if prog is not a.prog or a.scale is not None else a
    a.cache.append(out)
    return out


def _append(a: Act, block: object, out_features: int) -> Act:
    """Materialise `a` and apply a row-wise block with `out_features` columns."""
    m = materialize(a)
    P = m.shape[0]
    return Act(m.prog + (block,), (P, out_features), np.arange(P * out_features).reshape(*a.idx.shape[:-1],
                                                                                           out_features))


def _lazy_affine(a: Act, scale: Any = 1.0, offset: Any = 0.0) -> Act:
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), a.idx.shape)
    o = np.broadcast_to(np.asarray(offset, dtype=np.float64), a.idx.shape)
    if np.asarray(scale).ndim > a.idx.ndim or np.asarray(offset).ndim > a.idx.ndim:
        raise _Unsupported("a constant broadcasts the activation to a larger shape")
    return Act(a.prog, a.shape, a.idx, a.s * s, a.o * s + o)


def _same_base(a: Act, b: Act) -> bool:
    return a.prog is b.prog or (len(a.prog) == len(b.prog) and all(x is y for x, y in zip(a.prog, b.prog)))


def _projection(a: Act, C_name: str) -> tuple[tuple, np.ndarray, np.ndarray, np.ndarray]:
    """For a (G, N, d) value a = (X W + b)[:, cols] * s + o: (base prog, W_h (G, D, d), b_h (G, d), rows)."""
    if not a.prog or not isinstance(a.prog[-1], Linear):
        raise _Unsupported(f"the attention {C_name} is not a column slice of a linear map of one state")
    lin = a.prog[-1]
    C = a.shape[1]
    row, col = a.idx // C, a.idx % C
    N = a.idx.shape[1]
    if not (np.all(row == np.arange(N)[None, :, None]) and np.all(col == col[:, :1]) and np.all(a.s == a.s[:, :1])
            and np.all(a.o == a.o[:, :1])):
        raise _Unsupported(f"the attention {C_name} does not map tokens to tokens uniformly")
    cols, s, o = col[:, 0], a.s[:, 0], a.o[:, 0]
    W = lin.weight[:, cols].transpose(1, 0, 2) * s[:, None, :]
    b = (0.0 if lin.bias is None else lin.bias[cols]) * s + o
    return a.prog[:-1], W, b, cols


def _groups(a: Act, transpose: bool) -> Act:
    """Flatten the leading (batch, head) axes: (G, N, d) (transposing the last two axes first if asked)."""
    f = (lambda x: np.swapaxes(x, -1, -2)) if transpose else (lambda x: x)
    b = a.with_idx(f)
    return b.with_idx(lambda x: x.reshape(-1, *x.shape[-2:]))


def _attention(scores: Lazy, v: Act) -> Act:
    q, k = scores.data["q"], scores.data["k"]
    base_q, W_Q, b_Q, _ = _projection(q, "query")
    base_k, W_K, b_K, _ = _projection(k, "key")
    vg = _groups(v, False)
    base_v, W_V, b_V, _ = _projection(vg, "value")
    if not (len(base_q) == len(base_k) == len(base_v) and all(x is y is z for x, y, z in zip(base_q, base_k, base_v))):
        raise _Unsupported("query, key and value are not computed from one common state")
    G, N, d = vg.idx.shape
    if W_Q.shape[0] != G or W_Q.shape[2] != W_V.shape[2]:
        raise _Unsupported("query, key and value heads differ in number or width")
    block = Attention(W_Q, W_K, W_V, b_Q, b_K, b_V, scale=scores.data["factor"], causal=scores.data["causal"])
    idx = np.arange(N)[None, :, None] * (G * d) + np.arange(G)[:, None, None] * d + np.arange(d)[None, None, :]
    return Act(base_q + (block,), (N, G * d), idx.reshape(v.idx.shape[:-2] + (N, d)))


def _residual(a: Act, b: Act) -> Act:
    for x, y in ((a, b), (b, a)):  # y = base, x = base + tail
        n = len(y.prog)
        if len(x.prog) > n and all(p is q for p, q in zip(x.prog[:n], y.prog)):
            if y.scale is not None or y.offset is not None:
                y = materialize(y)
                if len(x.prog) <= len(y.prog) or not all(p is q for p, q in zip(x.prog, y.prog)):
                    break
            xm = materialize(x) if (x.scale is not None or x.offset is not None) else x
            tail = xm.prog[len(y.prog):]
            if xm.shape == y.shape and np.array_equal(xm.idx, y.idx):
                return Act(y.prog + (Residual(tail),), y.shape, y.idx)
            if xm.idx.shape == y.idx.shape and _identity(y.idx, y.shape[0] * y.shape[1]):
                xm = materialize(xm)
                if xm.shape == y.shape:
                    return Act(y.prog + (Residual(xm.prog[len(y.prog):]),), y.shape, y.idx)
    raise _Unsupported("Add of two activations that is not a residual connection (x + f(x))")


def _attr(node: Any) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _const_eval(node: Any, inputs: list) -> list:
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.input]
    feeds = {name: value for name, value in zip(names, inputs) if name}
    return list(ReferenceEvaluator(node).run(None, feeds))


def _layout(node: Any, a: Act, consts: list, attrs: dict) -> list[Act]:
    op = node.op_type
    if op in ("Identity", "Dropout"):
        return [a]
    if op == "Reshape":
        shape = [int(s) for s in consts[1]]
        shape = [a.idx.shape[i] if s == 0 and not attrs.get("allowzero", 0) else s for i, s in enumerate(shape)]
        return [a.with_idx(lambda x: x.reshape(shape))]
    if op == "Transpose":
        perm = attrs.get("perm", list(range(a.idx.ndim))[::-1])
        return [a.with_idx(lambda x: np.transpose(x, perm))]
    if op in ("Squeeze", "Unsqueeze"):
        axes = attrs.get("axes", None if len(consts) < 2 or consts[1] is None else [int(v) for v in consts[1]])
        if op == "Squeeze":
            axes = tuple(i for i, n in enumerate(a.idx.shape) if n == 1) if axes is None else tuple(axes)
            return [a.with_idx(lambda x: np.squeeze(x, axis=axes))]
        out_ndim = a.idx.ndim + len(axes)
        axes = sorted(ax % out_ndim for ax in axes)
        return [a.with_idx(lambda x: np.expand_dims(x, axes))]
    if op == "Flatten":
        axis = attrs.get("axis", 1) % max(a.idx.ndim, 1)
        return [a.with_idx(lambda x: x.reshape(int(np.prod(x.shape[:axis])), -1))]
    if op == "Gather":
        indices = np.asarray(consts[1], dtype=np.int64)
        axis = attrs.get("axis", 0)
        return [a.with_idx(lambda x: np.take(x, indices, axis=axis))]
    if op == "Slice":
        starts, ends = consts[1], consts[2]
        axes = consts[3] if len(consts) > 3 and consts[3] is not None else range(len(starts))
        steps = consts[4] if len(consts) > 4 and consts[4] is not None else [1] * len(starts)
        key = [slice(None)] * a.idx.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            key[int(ax)] = slice(int(s), int(e), int(st))
        return [a.with_idx(lambda x: x[tuple(key)])]
    if op == "Split":
        axis = attrs.get("axis", 0)
        n = len(node.output)
        sizes = consts[1] if len(consts) > 1 and consts[1] is not None else attrs.get("split")
        if sizes is None:
            sizes = [a.idx.shape[axis] // n] * n
        cuts = np.cumsum(sizes)[:-1]
        return [a.with_idx(lambda x, i=i: np.split(x, cuts, axis=axis)[i]) for i in range(n)]
    if op == "Expand":
        shape = np.broadcast_shapes(a.idx.shape, tuple(int(s) for s in consts[1]))
        return [a.with_idx(lambda x: np.broadcast_to(x, shape).copy())]
    raise _Unsupported("layout operator not handled")


def _concat(node: Any, values: list, attrs: dict) -> Any:
    axis = attrs["axis"]
    acts = [v for v in values if isinstance(v, Act)]
    if all(isinstance(v, Act) for v in values):
        if not all(_same_base(acts[0], b) for b in acts[1:]):
            raise _Unsupported("Concat of activations from different states")
        out = acts[0]
        for b in acts[1:]:
            out = Act(out.prog, out.shape, np.concatenate([out.idx, b.idx], axis), np.concatenate([out.s, b.s], axis),
                      np.concatenate([out.o, b.o], axis))
        return out
    if len(values) == 2 and not isinstance(values[0], Act) and isinstance(values[1], Act):
        a = values[1]
        token = np.asarray(values[0], dtype=np.float64)
        ax = axis % a.idx.ndim
        if ax != a.idx.ndim - 2 or token.shape[ax] != 1:
            raise _Unsupported("Concat of a constant and an activation other than a class token before the tokens")
        m = materialize(a)
        P, K = m.shape
        return Act(m.prog + (ClassToken(token.reshape(-1)[-K:]),), (P + 1, K),
                   np.arange((P + 1) * K).reshape(*a.idx.shape[:-2], a.idx.shape[-2] + 1, K))
    raise _Unsupported("Concat of constants and activations other than a class token")


def _binary(node: Any, x: Any, y: Any) -> Any:
    op = node.op_type
    ax, ay = isinstance(x, (Act, Lazy)), isinstance(y, (Act, Lazy))
    if isinstance(x, Act) and isinstance(y, Act):
        if op == "Add":
            return _residual(x, y)
        raise _Unsupported(f"{op} of two activations")
    if isinstance(x, Lazy) or isinstance(y, Lazy):
        return _lazy_binary(node, x, y)
    if ax and not ay:
        c = np.asarray(y, dtype=np.float64)
        if op == "Add":
            return _lazy_affine(x, 1.0, c)
        if op == "Sub":
            return _lazy_affine(x, 1.0, -c)
        if op == "Mul":
            return _lazy_affine(x, c, 0.0)
        if op == "Div":
            return _lazy_affine(x, 1.0 / c, 0.0)
    if ay and not ax:
        c = np.asarray(x, dtype=np.float64)
        if op == "Add":
            return _lazy_affine(y, 1.0, c)
        if op == "Sub":
            return _lazy_affine(y, -1.0, c)
        if op == "Mul":
            return _lazy_affine(y, c, 0.0)
    raise _Unsupported(f"{op} with these operands")


def _scalar(c: Any) -> float | None:
    c = np.asarray(c, dtype=np.float64)
    return float(c.reshape(-1)[0]) if c.size >= 1 and np.all(c == c.reshape(-1)[0]) else None


def _lazy_binary(node: Any, x: Any, y: Any) -> Any:
    op = node.op_type
    if isinstance(y, Lazy) and not isinstance(x, Lazy) and op in ("Add", "Mul"):
        x, y = y, x
    # GELU: x * 0.5 * (1 + erf(x / sqrt 2)) in any order of the two multiplications
    if isinstance(x, Lazy) and x.kind == "erf" and op == "Add" and _scalar(y) == 1.0:
        return Lazy("erf+1", x.act, {"factor": 1.0})
    if isinstance(x, Lazy) and x.kind == "erf+1" and op == "Mul":
        if isinstance(y, Act) and np.array_equal(y.idx, x.act.idx) and _same_base(y, x.act):
            ratio = y.s / x.act.s  # y = ratio * u (the ONNX constants are float32: sqrt 2 to 1e-7)
            r = float(np.mean(ratio))
            if np.allclose(ratio, r, rtol=1e-6, atol=0) and np.allclose(y.o, r * x.act.o, rtol=1e-6, atol=1e-12):
                return Lazy("2gelu", Act(y.prog, y.shape, y.idx, y.s / r, y.o / r), {"factor": x.data["factor"] * r})
            raise _Unsupported("x * (1 + erf(u / sqrt 2)) with x not proportional to u: not a GELU")
        if not isinstance(y, (Act, Lazy)) and _scalar(y) is not None:
            return Lazy("erf+1", x.act, {"factor": x.data["factor"] * _scalar(y)})
    if isinstance(x, Lazy) and x.kind == "2gelu" and op in ("Mul", "Div") and _scalar(y) is not None:
        factor = x.data["factor"] * (_scalar(y) if op == "Mul" else 1.0 / _scalar(y))
        out = _append(x.act, Activation("gelu"), x.act.idx.shape[-1]) if x.act.idx.ndim else None
        # float32 graphs hold sqrt 2 and 0.5 to 1e-7: within 1e-6 the product is read as the exact GELU
        return _lazy_affine(out, 2.0 * factor, 0.0) if abs(2.0 * factor - 1.0) > 1e-6 else out
    # attention scores: scaling and an additive causal mask
    if isinstance(x, Lazy) and x.kind == "scores" and _scalar(y) is not None and op in ("Mul", "Div"):
        factor = x.data["factor"] * (_scalar(y) if op == "Mul" else 1.0 / _scalar(y))
        return Lazy("scores", x.act, {**x.data, "factor": factor})
    if isinstance(x, Lazy) and x.kind == "scores" and op == "Add" and not isinstance(y, (Act, Lazy)):
        mask = np.asarray(y, dtype=np.float64)
        N = mask.shape[-1]
        causal = np.where(np.triu(np.ones((N, N), dtype=bool), 1), -np.inf, 0.0)
        if np.all(mask == 0):
            return x
        if np.all((mask == causal) | ((causal == -np.inf) & (mask <= -1e9))) and not x.data["causal"]:
            return Lazy("scores", x.act, {**x.data, "causal": True})
        raise _Unsupported("an additive attention mask other than the causal one")
    # decomposed LayerNorm
    if isinstance(x, Act) and isinstance(y, Lazy) and y.kind == "mean" and op == "Sub" and y.act is x:
        return Lazy("centred", x, {})
    if isinstance(x, Lazy) and x.kind == "centred" and op == "Pow" and _scalar(y) == 2.0:
        return Lazy("square", x.act, {})
    if isinstance(x, Lazy) and x.kind == "var" and op == "Add" and _scalar(y) is not None:
        return Lazy("var+eps", x.act, {"eps": _scalar(y)})
    if isinstance(x, Lazy) and x.kind == "centred" and isinstance(y, Lazy) and y.kind == "std" and y.act is x.act \
            and op == "Div":
        K = x.act.idx.shape[-1]
        return _append(x.act, LayerNorm(np.ones(K), np.zeros(K), y.data["eps"]), K)
    raise _Unsupported("operands do not form a supported pattern (GELU, attention or LayerNorm)")


def _node(node: Any, values: list, attrs: dict) -> list:
    op = node.op_type
    x = values[0] if values else None
    if op in LAYOUT_OPS and op != "Concat":
        if not isinstance(x, Act):
            raise _Unsupported("layout operator on a partial pattern")
        return _layout(node, x, values, attrs)
    if op == "Concat":
        return [_concat(node, values, attrs)]
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        if op == "Pow":
            return [_lazy_binary(node, x, values[1])]
        return [_binary(node, x, values[1])]
    if op == "MatMul" or op == "Gemm":
        y = values[1]
        if isinstance(x, Act) and isinstance(y, Act):
            q, k = _groups(x, False), _groups(y, True)
            return [Lazy("scores", q, {"q": q, "k": k, "factor": 1.0, "causal": False})]
        if isinstance(x, Lazy) and x.kind == "probs" and isinstance(y, Act):
            return [_attention(x, y)]
        if not isinstance(x, Act) or isinstance(y, (Act, Lazy)):
            raise _Unsupported("MatMul must be activation x constant matrix, or the attention pattern")
        W = np.asarray(y, dtype=np.float64)
        if op == "Gemm":
            if attrs.get("transA", 0):
                raise _Unsupported("Gemm with transA = 1")
            W = W.T if attrs.get("transB", 0) else W
            W = W * attrs.get("alpha", 1.0)
        if W.ndim != 2:
            raise _Unsupported(f"MatMul by a constant of shape {W.shape} (only matrices)")
        out = _append(x, Linear(W), W.shape[1])
        if op == "Gemm" and len(values) > 2 and values[2] is not None:
            out = _lazy_affine(out, 1.0, attrs.get("beta", 1.0) * np.asarray(values[2], dtype=np.float64))
        return [out]
    if op == "Softmax":
        if isinstance(x, Lazy) and x.kind == "scores" and attrs.get("axis", -1) in (-1, len(x.act.idx.shape) - 1):
            return [Lazy("probs", x.act, x.data)]
        raise _Unsupported("Softmax outside the attention pattern MatMul(Q, K^T) -> Softmax(last axis)")
    if op == "Relu" and isinstance(x, Act):
        return [_append(x, Activation("relu"), x.idx.shape[-1])]
    if op == "Gelu" and isinstance(x, Act):
        if attrs.get("approximate", "none") not in ("none", b"none"):
            raise _Unsupported("tanh-approximate Gelu")
        return [_append(x, Activation("gelu"), x.idx.shape[-1])]
    if op == "Erf" and isinstance(x, Act):
        # erf(u / sqrt 2): the GELU's argument is u = sqrt(2) x (checked against the other factor later)
        return [Lazy("erf", Act(x.prog, x.shape, x.idx, x.s * np.sqrt(2.0), x.o * np.sqrt(2.0)), {})]
    if op == "Sqrt" and isinstance(x, Lazy) and x.kind == "var+eps":
        return [Lazy("std", x.act, x.data)]
    if op == "ReduceMean":
        axes = attrs.get("axes", None if len(values) < 2 or values[1] is None else [int(a) for a in values[1]])
        keep = attrs.get("keepdims", 1)
        target = x.act if isinstance(x, Lazy) else x
        ndim = target.idx.ndim
        axes = [a % ndim for a in (axes if axes is not None else range(ndim))]
        if axes == [ndim - 1] and keep:
            if isinstance(x, Act):
                return [Lazy("mean", x, {})]
            if isinstance(x, Lazy) and x.kind == "square":
                return [Lazy("var", x.act, {})]
        if isinstance(x, Act) and axes == [ndim - 2]:
            m = materialize(x)
            K = m.shape[1]
            shape = x.idx.shape[:-2] + ((1,) if keep else ()) + (K,)
            return [Act(m.prog + (Pool("mean"),), (1, K), np.arange(K).reshape(shape))]
        raise _Unsupported(f"ReduceMean over axes {axes}: only the last axis (LayerNorm) or the tokens (pooling)")
    if op == "LayerNormalization" and isinstance(x, Act):
        if attrs.get("axis", -1) % x.idx.ndim != x.idx.ndim - 1:
            raise _Unsupported("LayerNormalization over more than the last axis")
        K = x.idx.shape[-1]
        gamma = np.broadcast_to(np.asarray(values[1], dtype=np.float64), (K,))
        beta = np.zeros(K) if len(values) < 3 or values[2] is None else np.asarray(values[2], dtype=np.float64)
        return [_append(x, LayerNorm(gamma, np.broadcast_to(beta, (K,)), attrs.get("epsilon", 1e-5)), K)]
    if op == "BatchNormalization" and isinstance(x, Act):
        if attrs.get("training_mode", 0):
            raise _Unsupported("BatchNormalization in training mode")
        gamma, beta, mean, var = (np.asarray(v, dtype=np.float64) for v in values[1:5])
        scale = gamma / np.sqrt(var + attrs.get("epsilon", 1e-5))
        shape = (1, -1) + (1,) * (x.idx.ndim - 2)
        return [_lazy_affine(x, scale.reshape(shape), (beta - mean * scale).reshape(shape))]
    raise _Unsupported("this operator (or this use of it) is not among the supported ones")


def _fuse(blocks: tuple) -> tuple:
    """Fuse bias / affine tails into Linear, LayerNorm and Attention; Linear-act-Linear into FeedForward."""
    out: list = []
    for block in blocks:
        if isinstance(block, Residual):
            block = Residual(_fuse(block.inner))
        prev = out[-1] if out else None
        per_col = isinstance(block, (ChannelAffine, AddConstant)) and all(
            a.ndim == 1 or a.shape[0] == 1 for a in ((block.scale, block.shift) if isinstance(block, ChannelAffine)
                                                     else (block.value,)))
        if per_col:
            s = block.scale.reshape(-1) if isinstance(block, ChannelAffine) else np.ones(1)
            t = block.shift.reshape(-1) if isinstance(block, ChannelAffine) else block.value.reshape(-1)
            if isinstance(prev, Linear):
                bias = np.zeros(prev.weight.shape[1]) if prev.bias is None else prev.bias
                out[-1] = Linear(prev.weight * s, bias * s + t)
                continue
            if isinstance(prev, FeedForward):
                b2 = np.zeros(prev.W2.shape[1]) if prev.b2 is None else prev.b2
                out[-1] = dataclasses.replace(prev, W2=prev.W2 * s, b2=b2 * s + t)
                continue
            if isinstance(prev, LayerNorm):
                out[-1] = LayerNorm(prev.gamma * s, prev.beta * s + t, prev.eps)
                continue
            if isinstance(prev, Attention) and prev.W_O is not None:
                b = np.zeros(prev.out_features) if prev.b_O is None else prev.b_O
                out[-1] = dataclasses.replace(prev, W_O=prev.W_O * s, b_O=b * s + t)
                continue
        if isinstance(block, Linear) and isinstance(prev, Attention) and prev.W_O is None:
            out[-1] = dataclasses.replace(prev, W_O=block.weight, b_O=block.bias)
            continue
        if isinstance(block, Linear) and len(out) >= 2 and isinstance(prev, Activation) \
                and isinstance(out[-2], Linear):
            first = out[-2]
            out[-2:] = [FeedForward(first.weight, first.bias, prev.kind, block.weight, block.bias)]
            continue
        out.append(block)
    return tuple(out)


def _fuse_all(blocks: tuple) -> tuple:
    while True:
        fused = _fuse(blocks)
        if len(_flat(fused)) == len(_flat(blocks)):
            return fused
        blocks = fused


def _flat(blocks: tuple) -> list:
    out = []
    for b in blocks:
        out.append(b)
        if isinstance(b, Residual):
            out.extend(_flat(b.inner))
    return out


def from_onnx(path_or_model: Any) -> tuple[Model, tuple[int, ...]]:
    """(model, output shape per sample) from an ONNX file or `onnx.ModelProto` with one input and one output.

    The graph must have batch size 1 (or a symbolic batch dimension, read as 1). Raises `InvalidInputError` naming
    the first unsupported node, or for an unreadable file.
    """
    import onnx
    from onnx import numpy_helper

    if isinstance(path_or_model, onnx.ModelProto):
        proto = path_or_model
    else:
        try:
            proto = onnx.load(str(path_or_model))
        except Exception as error:
            raise InvalidInputError(f"{path_or_model!r} could not be read as ONNX: {error}") from None
    graph = proto.graph
    env: dict[str, Any] = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in env]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise InvalidInputError(f"the ONNX graph must have one input and one output, got {len(inputs)} and "
                                f"{len(graph.output)}")
    dims = [d.dim_value if d.HasField("dim_value") else 1 for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) < 2 or dims[0] != 1:
        raise InvalidInputError(f"the ONNX input must have shape (1, ...) (batch size 1), got {dims}")
    input_shape = tuple(dims[1:])
    model_shape = Model((), input_shape).state_shape
    env[inputs[0].name] = Act((), model_shape, np.arange(int(np.prod(dims))).reshape(dims))
    for node in graph.node:
        values = [env.get(name) if name else None for name in node.input]
        missing = [name for name, v in zip(node.input, values) if name and v is None and name not in env]
        if missing:
            raise InvalidInputError(f"ONNX node {node.name!r} (op {node.op_type}) reads undefined values {missing}")
        attrs = _attr(node)
        try:
            if not any(isinstance(v, (Act, Lazy)) for v in values):
                if node.op_type == "Constant" or all(v is not None or not n for v, n in zip(values, node.input)):
                    outputs = _const_eval(node, values)
                else:
                    raise _Unsupported("constant inputs missing")
            elif node.op_type == "Shape":
                shape = (x.act if isinstance(x := values[0], Lazy) else x).idx.shape
                start, end = attrs.get("start", 0), attrs.get("end", None)
                outputs = [np.array(shape[start:end], dtype=np.int64)]
            else:
                outputs = _node(node, values, attrs)
        except _Unsupported as why:
            raise _unsupported(node, str(why)) from None
        except InvalidInputError as error:
            raise _unsupported(node, str(error)) from None
        except Exception as error:  # a malformed graph: name the node, never a bare traceback
            raise _unsupported(node, f"{type(error).__name__}: {error}") from None
        for name, value in zip(node.output, outputs):
            env[name] = value
    result = env.get(graph.output[0].name)
    if not isinstance(result, Act):
        raise InvalidInputError("the ONNX output is not an activation of the input (or ends in a partial pattern)")
    final = materialize(result)
    return Model(_fuse_all(final.prog), input_shape), tuple(result.idx.shape[1:])
