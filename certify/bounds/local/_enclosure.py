"""Interval enclosures of the DP and tied-L2 attention Jacobians over a box of inputs X (MATH.md sections 2, 7).

Given a box {X : lo <= X <= hi} (N x D), return an interval array J_box (N, D, N, D) with
J[i, F, l, E] = d F_i[F] / d x_l[E] in J_box for every X in the box. Arithmetic is `certify.interval` (every
operation rounded outward) plus `point_einsum` below for products with exact weight matrices.

Floating-point margin of `point_einsum` (x an interval, W_1..W_p exact float matrices): every output entry is a
sum of K products of p + 1 factors, and any evaluation order (including numpy's pairwise contraction paths) rounds
each term at most K + p times, so |fl(sum) - sum| <= gamma_{K+p} sum |terms| (Higham, section 3.1). We use the
mid-radius form: mid = fl(x_mid . W), rad = fl(x_rad . |W|) (1 + g) + g fl(|x_mid| . |W|) (1 + g) with
g = gamma_{2(K+p)+4}, then round mid -+ rad outward. With point weights this is the exact hull of the linear image
of the box, up to these margins.

Dependency is reduced by the rewritings of MATH.md section 7: every difference x_j - x_k is formed from the two
token boxes directly (and is exactly 0 for j = k); softmax as P_ij = 1 / sum_k exp(s_ik - s_ij) with the k = j term
exactly 1; v_l - vbar_i = sum_k P_ik (v_l - v_k); C_i K = sum_l C_i[:, l] (k_l - k_i)^T (because
sum_l C_i[:, l] = 0); Cov_i = 1/2 sum_{k,l} P_ik P_il (y_k - y_l)(y_k - y_l)^T with squares on its diagonal.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...attention import AttentionWeights
from ...interval import Interval, exp, intersect, isum, reciprocal, round_down, round_up, square
from ...interval._interval import _raw
from ...interval._kernels import centre_radius_kernel, mid_radius_kernel
from ...sdp._floating import ETA, gamma
from ._dual import Dual, d_exp, d_intersect, d_isum, d_reciprocal, d_square, d_where_zero


def const(x: float) -> Interval:
    """An interval around a computed constant (a few roundings away from the real number it stands for)."""
    return Interval(round_down(x * (1 - 1e-15)), round_up(x * (1 + 1e-15))) if x >= 0 else -const(-x)


def _scale_down(array: np.ndarray) -> int:
    """k with max |array| 2^-k in [1/2, 1) (0 for an all-zero or non-finite array)."""
    top = float(np.max(np.abs(array))) if array.size else 0.0
    return math.frexp(top)[1] if 0 < top < math.inf else 0


def _einsum_sizes(subscripts: str, operands: tuple[np.ndarray, ...]) -> tuple[int, tuple[int, ...]]:
    """(K, shape) of einsum(subscripts, *operands): K the number of terms of each output entry (the product of
    the sizes of the letters summed over) and the output's shape. An ellipsis may stand only at the start of an
    operand and of the output (it covers the leading axes, broadcast)."""
    inputs, output = subscripts.split("->")
    if any("..." in letters[3:] or ("..." in letters and not letters.startswith("..."))
           for letters in (*inputs.split(","), output)):
        raise ValueError(f"an ellipsis only at the start of an operand: {subscripts!r}")
    if "..." in inputs and not output.startswith("..."):
        raise ValueError(f"the axes under an ellipsis must be kept in the output: {subscripts!r}")
    sizes: dict[str, int] = {}
    leading: tuple[int, ...] = ()
    for letters, array in zip(inputs.split(","), operands):
        if letters.startswith("..."):
            letters = letters[3:]
            leading = np.broadcast_shapes(leading, array.shape[:array.ndim - len(letters)])
        sizes.update(zip(letters, array.shape[array.ndim - len(letters):]))
    core_letters = output.removeprefix("...")
    K = int(np.prod([size for letter, size in sizes.items() if letter not in core_letters]))
    core = tuple(sizes[letter] for letter in core_letters)
    return K, (leading + core if output.startswith("...") else core)


def point_einsum(subscripts: str, x: Interval, *points: np.ndarray) -> Interval:
    """einsum(subscripts, x, *points) for an interval x and exact float arrays, rounded outward (docstring).

    Every factor is first scaled by a power of two to a largest magnitude in [1/2, 1): the point arrays exactly
    up to entries that become subnormal (moved by <= eta / 2), the interval outward by eta. Then every term is a
    product of factors <= 1, so an underflow anywhere moves it by at most eta / 2 and is never amplified by a
    later factor, and the K 1e-300 absolute term covers it; the result is scaled back by 2^(sum of the
    exponents), with one eta more for that rounding. (Without the scaling, W_V W_O = 1e-340 underflowed to 0
    and was then multiplied by W_Q W_Q^T = 1e180: the enclosure missed a Jacobian of 1.6e-160.)

    Mid-radius form, with mid m and radius rad of the scaled x: every member's einsum is within
    einsum(rad, |points|) of einsum(m, points), whose float value c is within gamma einsum(|m|, |points|) of it
    (any summation order, FMA included; gamma = gamma_(2 (K + p) + 4)). Both are one einsum of
    z = rad + gamma |m| (rounded up) with |points| (einsum is linear in x), whose float value e has
    einsum(z, |points|) <= e (1 + gamma); so the radius is e (1 + gamma) + K 1e-300, rounded up. The scaling of x
    and the last step (radius, scaling back, outward rounding) are each one compiled pass
    (`certify.interval._kernels.mid_radius_kernel` and `centre_radius_kernel`, a multiplication by the power of
    two), or numpy passes where that power of two is not a normal float.
    """
    K, shape = _einsum_sizes(subscripts, (x.lo, *points))
    g = gamma(2 * (K + len(points)) + 4)
    exponents = [_scale_down(x.mag)] + [_scale_down(p) for p in points]
    total = sum(exponents)
    with np.errstate(under="ignore", invalid="ignore"):
        if -1022 <= exponents[0] <= 1022:  # 2^-k is a float: the compiled pass
            lo, hi = np.ascontiguousarray(x.lo), np.ascontiguousarray(x.hi)
            mid, z = np.empty(x.shape), np.empty(x.shape)
            mid_radius_kernel(lo.reshape(-1), hi.reshape(-1), math.ldexp(1.0, -exponents[0]), g, mid.reshape(-1),
                              z.reshape(-1))
        else:  # x of magnitude below 2^-1023 or above 2^1021: the same steps as numpy passes
            finite = np.isfinite(x.lo) & np.isfinite(x.hi)
            lo, hi = np.ldexp(x.lo, -exponents[0]) - ETA, np.ldexp(x.hi, -exponents[0]) + ETA
            mid = np.clip(0.5 * lo + 0.5 * hi, lo, hi)
            z = round_up(round_up(np.maximum(hi - mid, mid - lo)) + round_up(g * np.abs(mid)))
            mid, z = np.where(finite, mid, np.nan), np.where(finite, z, np.nan)
        points = tuple(np.ldexp(p, -k) for p, k in zip(points, exponents[1:]))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        c, e = np.empty(shape), np.empty(shape)  # einsum into contiguous arrays (also faster than without out)
        np.einsum(subscripts, mid, *points, optimize=True, out=c)
        np.einsum(subscripts, z, *[np.abs(p) for p in points], optimize=True, out=e)
        if -1022 <= total <= 1023:
            out_lo, out_hi = np.empty(shape), np.empty(shape)
            centre_radius_kernel(c.reshape(-1), e.reshape(-1), math.ldexp(1.0, total), g, K * 1e-300,
                                 out_lo.reshape(-1), out_hi.reshape(-1))
        else:
            radius = round_up(round_up(e * (1 + g)) + K * 1e-300)
            c, radius = np.ldexp(c, total), round_up(np.ldexp(radius, total)) + ETA
            out_lo, out_hi = round_down(c - radius), round_up(c + radius)
    return _raw(out_lo, out_hi)


def point_einsum_any(subscripts: str, x, *points: np.ndarray):
    """`point_einsum` on an Interval or a Dual (the tangent carries an extra trailing axis)."""
    if isinstance(x, Dual):
        inputs, output = subscripts.split("->")
        first, *rest = inputs.split(",")
        tangent = ",".join([first + "Z", *rest]) + "->" + output + "Z"
        return Dual(point_einsum(subscripts, x.v, *points), point_einsum(tangent, x.t, *points))
    return point_einsum(subscripts, x, *points)


def _exp(x):
    return d_exp(x) if isinstance(x, Dual) else exp(x)


def _reciprocal(x):
    return d_reciprocal(x) if isinstance(x, Dual) else reciprocal(x)


def _square(x):
    return d_square(x) if isinstance(x, Dual) else square(x)


def _isum(x, axis):
    return d_isum(x, axis) if isinstance(x, Dual) else isum(x, axis=axis)


def _intersect(a, b):
    return d_intersect(a, b) if isinstance(a, Dual) else intersect(a, b)


def _where_zero(mask: np.ndarray, x):
    """x where mask, exactly 0 elsewhere."""
    if isinstance(x, Dual):
        return d_where_zero(mask, x)
    return Interval(np.where(mask, x.lo, 0.0), np.where(mask, x.hi, 0.0))


def _map_value(x, f):
    """Tighten the value enclosure only (valid for clipping to a known range)."""
    return Dual(f(x.v), x.t) if isinstance(x, Dual) else f(x)


def clip01(x: Interval) -> Interval:
    """Intersect with [0, 1] (for quantities known to be probabilities)."""
    return Interval(np.clip(x.lo, 0.0, 1.0), np.clip(x.hi, 0.0, 1.0))


def _eye_mask(n: int, ndim: int, axes: tuple[int, int]) -> np.ndarray:
    """Boolean mask, True where the indices along `axes` (of an ndim-array, negative axes allowed) are equal."""
    shape = [1] * ndim
    shape[axes[0]] = n
    shape[axes[1]] = n
    return np.eye(n, dtype=bool).reshape(shape)


def token_differences(X):
    """dX[..., j, k, :] = x_j - x_k for X (..., N, D), exactly 0 for j = k."""
    N = X.shape[-2]
    return _where_zero(~_eye_mask(N, 3, (0, 1)), X.expand(-2) - X.expand(-3))


def _zero_diagonal(x, axes: tuple[int, int]):
    """Set the entries with equal indices along two (negative) axes to exactly 0."""
    return _where_zero(~_eye_mask(x.shape[axes[0]], -min(axes), (min(axes), max(axes))), x)


@dataclasses.dataclass(frozen=True)
class _Weights:
    """The layer's weights as float64 numpy arrays (exact copies of the float64 tensors)."""

    kind: str
    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray  # (H, d, D)
    b_Q: np.ndarray | None
    H: int
    D: int
    d: int


def numpy_weights(weights: AttentionWeights) -> _Weights:
    import torch

    w = weights.to(torch.float64, "cpu")
    return _Weights(
        kind=w.kind,
        W_Q=w.W_Q.numpy(),
        W_K=w.W_K.numpy(),
        W_V=w.W_V.numpy(),
        W_O=w.W_O.numpy().reshape(w.H, w.d, w.D),
        b_Q=None if w.b_Q is None else w.b_Q.numpy(),
        H=w.H,
        D=w.D,
        d=w.d,
    )


@dataclasses.dataclass(frozen=True)
class KnownHead:
    """Enclosures of one DP head's parts over a subset of the box (`certify.model._score_set`: the set a prefix
    reaches), intersected into `dp_jacobian_enclosure`, whose result then holds for the box's inputs in that subset:
    L the score differences (an Interval, or a Dual when X is one), and the values of Q = q_i (N, d),
    dK = k_j - k_k and dV = v_j - v_k ([j, k], (N, N, d)) as Intervals (a value tightened alone keeps its tangent
    valid: `_dual`)."""

    L: object
    Q: Interval
    dK: Interval
    dV: Interval


def _known_value(x, known: Interval | None):
    return x if known is None else _map_value(x, lambda v: intersect(v, known))


def dp_score_differences(X, dX, w: _Weights, h: int, known: KnownHead | None = None):
    """Head h of DP attention over boxes X (..., N, D): (q_i, k_j - k_k, L) as intervals (or Duals), with the
    score differences L[i, j, k] = s_ik - s_ij = q_i . (k_k - k_j) / sqrt(d), exactly 0 for k = j. ``known``: the
    same quantities over a subset of the box, intersected with them (`KnownHead`)."""
    Q = point_einsum_any("...nD,Dc->...nc", X, w.W_Q[h])
    if w.b_Q is not None:
        Q = Q + w.b_Q[h]
    dK = point_einsum_any("...jkD,Dc->...jkc", dX, w.W_K[h])  # k_j - k_k
    if known is not None:
        Q, dK = _known_value(Q, known.Q), _known_value(dK, known.dK)
    L = _isum(Q.expand(-2).expand(-2) * dK.swapaxes(-3, -2).expand(-4), -1)  # [i, j, k]
    L = _zero_diagonal(L * const(1.0 / math.sqrt(w.d)), (-2, -1))
    if known is not None:
        L = _intersect(L, known.L)
    return Q, dK, L


def softmax_from_differences(L):
    """P_ij = 1 / sum_k exp(L[i, j, k]) from score differences L (..., N, N, N), clipped to [0, 1]."""
    return _map_value(_reciprocal(_isum(_exp(L), -1)), clip01)


def dp_scores(X, dX, w: _Weights, h: int, known: KnownHead | None = None):
    """Head h of DP attention over boxes X (..., N, D): (q_i, k_j - k_k, P) as intervals (or Duals).

    P_ij = 1 / sum_k exp(s_ik - s_ij) with s_ik - s_ij = q_i . (k_k - k_j) / sqrt(d), exactly 0 for k = j
    (``known``: as in `dp_score_differences`).
    """
    Q, dK, L = dp_score_differences(X, dX, w, h, known)
    return Q, dK, softmax_from_differences(L)  # P (..., N, N)


def l2_scores(dX, w: _Weights, h: int):
    """Head h of tied L2 attention over the boxes: (y_j - y_k, P) with y = W_Q^T x.

    P_ij = 1 / sum_k exp(s (||y_i - y_j||^2 - ||y_i - y_k||^2)), the exponent taken as the intersection of its
    two forms D2_ij - D2_ik and (y_j - y_k).(y_j + y_k - 2 y_i), exactly 0 for k = j.
    """
    dY = point_einsum_any("...jkD,Dc->...jkc", dX, w.W_Q[h])  # y_j - y_k
    D2 = _isum(_square(dY), -1)  # ||y_j - y_k||^2
    first = D2.expand(-1) - D2.expand(-2)  # [i, j, k]
    dY_ji = dY.swapaxes(-3, -2)  # [i, j] = y_j - y_i
    second = _isum(dY.expand(-4) * (dY_ji.expand(-2) + dY_ji.expand(-3)), -1)
    Z = _zero_diagonal(_intersect(first, second), (-2, -1)) * const(1.0 / math.sqrt(w.d))
    P = _map_value(_reciprocal(_isum(_exp(Z), -1)), clip01)  # (..., N, N)
    return dY, P


def dp_jacobian_enclosure(X, w: _Weights, scores: list | None = None):
    """Enclosure of the dot-product attention Jacobian over boxes X (..., N, D); returns (..., N, D, N, D).

    J^h_il = P_il W_V^T + (1/sqrt(d)) [delta_il C_i K W_Q^T + C_i[:, l] q_i^T W_K^T], C_i[:, l] = P_il (v_l - vbar_i),
    J_il = sum_h W^O_h^T J^h_il (see `certify/jacobian/_dot_product.py`). Query biases enter through q_i; key and
    value biases cancel in the differences. X may be an Interval or a `Dual` (then the result is a Dual too).
    ``scores[h]``: head h's `KnownHead`, enclosures over a subset of the box intersected with the box's (the result
    then holds for the inputs of X in that subset).
    """
    N = X.shape[-2]
    dX = token_differences(X)
    scale = const(1.0 / math.sqrt(w.d))
    diagonal_mask = _eye_mask(N, 4, (0, 2))
    J = None
    for h in range(w.H):
        WQ, WK, WV, WO = w.W_Q[h], w.W_K[h], w.W_V[h], w.W_O[h]
        known = None if scores is None else scores[h]
        Q, dK, P = dp_scores(X, dX, w, h, known)
        dV = point_einsum_any("...jkD,Dc->...jkc", dX, WV)  # v_j - v_k
        if known is not None:
            dV = _known_value(dV, known.dV)
        Dv = _isum(P.expand(-2).expand(-1) * dV.expand(-4), -2)  # [i, l] = v_l - vbar_i = sum_k P_ik (v_l - v_k)
        C = P.expand(-1) * Dv  # [i, l, a] = C_i[a, l]
        dK_li = dK.swapaxes(-3, -2)  # [i, l] = k_l - k_i
        CK = _isum(C.expand(-1) * dK_li.expand(-2), -3)  # [i, a, c] = sum_l C_il[a] (k_l - k_i)[c]
        diagonal = point_einsum_any("...iac,aF,Ec->...iFE", CK, WO, WQ) * scale
        Kq = point_einsum_any("...ic,Ec->...iE", Q, WK)  # W_K q_i
        OC = point_einsum_any("...ila,aF->...iFl", C, WO)
        cross = OC.expand(-1) * Kq.expand(-2).expand(-2) * scale  # [i, F, l, E]
        value = point_einsum_any("...il,aF,Ea->...iFlE", P, WO, WV)
        head = value + cross + _where_zero(diagonal_mask, diagonal.expand(-2))
        J = head if J is None else J + head
    return J


def l2_jacobian_enclosure(X, w: _Weights):
    """Enclosure of the tied-L2 attention Jacobian over boxes X (..., N, D); returns (..., N, D, N, D).

    With y_k = W_Q^T x_k (exact weights, no d^{1/4} rounding) and s = 1/sqrt(d): P_il = softmax_l(-s ||y_i - y_l||^2),
    M_il = P_il I + 2 s delta_il Cov_i + 2 s P_il (y_l - ybar_i)(y_i - y_l)^T, and
    J_il = s W^O_h^T W_V^T W_Q M_il W_Q^T summed over heads (MATH.md section 2 with V = W_Q s^{1/2}).
    X may be an Interval or a `Dual`.
    """
    N = X.shape[-2]
    d = w.d
    dX = token_differences(X)
    s = const(1.0 / math.sqrt(d))
    token_diagonal = _eye_mask(N, 4, (0, 1))  # [i, l, a, c] with i = l
    coordinate_diagonal = np.eye(d, dtype=bool)
    J = None
    for h in range(w.H):
        WQ, WV, WO = w.W_Q[h], w.W_V[h], w.W_O[h]
        dY, P = l2_scores(dX, w, h)
        Dm = _isum(P.expand(-2).expand(-1) * dY.expand(-4), -2)  # [i, l] = y_l - ybar_i
        # Cov_i = 1/2 sum_{k,l} P_ik P_il (y_k - y_l)(y_k - y_l)^T, squares on the diagonal
        outer = _where_zero(~coordinate_diagonal, dY.expand(-1) * dY.expand(-2)) + _where_zero(
            coordinate_diagonal, _square(dY).expand(-1)
        )
        PP = P.expand(-1) * P.expand(-2)  # [i, k, l]
        Cov = _isum(PP.expand(-1).expand(-1) * outer.expand(-5), (-4, -3)) * 0.5  # [i, a, c]
        dY_il = -dY.swapaxes(-3, -2)  # [i, l] = y_i - y_l
        rank_one = (P.expand(-1).expand(-1) * Dm.expand(-1)) * dY_il.expand(-2)  # [i, l, a, c]
        M = rank_one * (s * 2.0) + P.expand(-1).expand(-1) * np.eye(d)
        M = M + _where_zero(token_diagonal, (Cov * (s * 2.0)).expand(-3))
        head = point_einsum_any("...ilac,bF,eb,ea,Ec->...iFlE", M, WO, WV, WQ, WQ) * s
        J = head if J is None else J + head
    return J


def jacobian_enclosure(X, w: _Weights, scores: list | None = None):
    """Dispatch on the attention kind (DP or tied L2; ``scores``: DP only, `dp_jacobian_enclosure`)."""
    if w.kind == "dp":
        return dp_jacobian_enclosure(X, w, scores)
    if scores is not None:
        raise ValueError("score enclosures are for DP attention only")
    if w.kind == "l2":
        return l2_jacobian_enclosure(X, w)
    raise ValueError(f"local enclosures cover kinds 'dp' and 'l2', got {w.kind!r}")


def mean_value_enclosure(X: Interval, w: _Weights) -> Interval:
    """J over boxes X (..., N, D) by the mean-value form, intersected with the direct interval evaluation.

    For X in the box with centre c and radius h: J(X) = J(c) + sum_m (X_m - c_m) dJ/dX_m(xi) for some xi in the box
    (mean-value theorem, entrywise), so J(X) is in J([c, c]) + sum_m [-h_m, h_m] T_m, with T_m the interval tangent
    of the forward-mode evaluation over the box (`_dual.Dual`). J([c, c]) is itself an interval evaluation at
    the point c. The direct evaluation over the box is the value part of the same forward pass.
    """
    dual = jacobian_enclosure(Dual.seed(X), w)
    centre = np.clip(0.5 * X.lo + 0.5 * X.hi, X.lo, X.hi)
    n = X.shape[-2] * X.shape[-1]
    h = round_up(np.maximum(X.hi - centre, centre - X.lo)).reshape(*X.shape[:-2], 1, 1, 1, 1, n)
    at_centre = jacobian_enclosure(Interval(centre, centre), w)
    spread = isum(dual.t * Interval(-h, h), axis=-1)
    return intersect(dual.v, at_centre + spread)
