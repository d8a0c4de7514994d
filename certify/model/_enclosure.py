"""Sound interval enclosures of each block's output over a box of inputs, and certified bounds on each block's
local Lipschitz constant over that box (float64, outward rounded; MATH.md sections 0 and 7).

Margins (u = 2^-52, stated here once): a product of a float matrix with an interval in midpoint-radius form,
c W +- r |W| over n terms, is widened by 4 (n + 2) u (|c| |W| + r |W|) (covers the gamma_{n+1} error of each float
dot product, Higham Thm 3.5, with room), times (1 + 4u), plus 1e-300 (underflow), then its ends rounded outward.
GELU and its derivative at float points (scipy's ndtr and exp) get a margin of 1e-12 times the magnitudes of their
terms plus 1e-300; softmax uses certify.interval's outward-rounded exp, sums and reciprocals.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.special import ndtr

from typing import Callable

from .._domain import EpsBall
from .._errors import InvalidInputError
from ..attention import AttentionWeights
from ..bounds.local import const, l2_scores, numpy_weights, point_einsum, taylor_bound, token_differences
from ..bounds.local._enclosure import jacobian_enclosure
from ..bounds.local._taylor import taylor_enclosure
from ..bounds.local._simplex import dp_simplex_jacobian_enclosure
from ..interval import (Interval, exp, inf_norm_upper, interval_einsum, isum, reciprocal, round_down, round_up, sqrt,
                        square)
from ..sdp import norm2_upper
from ._blocks import (ATTENTION_TYPES, Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward,
                      Gather, L2Attention, LayerNorm, Linear, Pool, Residual)

U = 2.0**-52
TINY = 1e-300
GELU_MARGIN = 1e-12


def _interval(lo: np.ndarray, hi: np.ndarray) -> Interval:
    return Interval(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))


def _mid_rad(x: Interval) -> tuple[np.ndarray, np.ndarray]:
    return x.mid, x.rad


def _widen(c: np.ndarray, rad: np.ndarray, mag: np.ndarray, n: int) -> Interval:
    rad = (rad + 4 * (n + 2) * U * (mag + rad)) * (1 + 4 * U) + TINY
    return _interval(round_down(c - rad), round_up(c + rad))


def iaffine(x: Interval, W: np.ndarray, b: np.ndarray | None = None) -> Interval:
    """x W + b for an interval x (..., n) and exact W (n, m), b (m,): midpoint-radius with the stated margin."""
    c, r = _mid_rad(x)
    aW = np.abs(W)
    yc = c @ W
    mag = np.abs(c) @ aW
    if b is not None:
        yc = yc + b
        mag = mag + np.abs(b)
    return _widen(yc, r @ aW, mag, W.shape[0] + 1)


def imatmul(a: Interval, b: Interval) -> Interval:
    """a @ b for interval matrices (batched): (|a_c| b_r + a_r |b_c| + a_r b_r) about a_c b_c, stated margin."""
    ac, ar = _mid_rad(a)
    bc, br = _mid_rad(b)
    rad = np.abs(ac) @ br + ar @ (np.abs(bc) + br)
    return _widen(ac @ bc, rad, np.abs(ac) @ np.abs(bc), a.shape[-1])


def _with_margin(v: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[v - m, v + m], m = GELU_MARGIN scale + 1e-300: scale bounds the magnitudes of the terms summed into v."""
    m = GELU_MARGIN * scale + TINY
    return round_down(v - m), round_up(v + m)


def _gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An enclosure of GELU(x) = x Phi(x) at float points x (one product: the margin is relative to the value)."""
    v = x * ndtr(x)
    return _with_margin(v, np.abs(v))


def _gelu_prime(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An enclosure of GELU'(x) = Phi(x) + x phi(x) at float points x. Near GELU's minimum (x = -0.75179...) the two
    terms (about 0.226 each) cancel, so the margin is relative to their magnitudes, not to the sum (a margin relative
    to the sum missed the exact value by 6e-17 at x = -0.75174)."""
    Phi, x_phi = ndtr(x), x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return _with_margin(Phi + x_phi, Phi + np.abs(x_phi))


# Constants of GELU(x) = x Phi(x) (mpmath, 40 digits; each rounded outward in its last digit):
GELU_ARGMIN = (-0.7519, -0.7517)  # GELU decreases left of -0.7517915246..., increases right of it
GELU_MIN_LOWER = -0.1699712075  # min GELU = -0.16997120747990...
# GELU' = Phi + x phi has its extrema at -sqrt 2 (min -0.12890414518515...) and +sqrt 2 (max 1.12890414518515...)
GELU_PRIME_EXTREMA = (-0.1289041452, 1.1289041452)
GELU_SECOND_MAX = 0.7978845609  # max |GELU''| = max phi(x) |2 - x^2| = 2 phi(0) = 0.79788456080286...


def _centred(value: tuple[np.ndarray, np.ndarray], slope: np.ndarray, x: Interval) -> Interval:
    """The mean-value form f(c) + [-slope, slope] rad(x) about c = mid(x), with f(c) in ``value``'s margin: it contains
    f(t) for every t in x when slope >= sup |f'| over x and ``value`` encloses f(mid(x)). Tight for narrow x, where
    the endpoint rules are not (a point near GELU's minimum got the whole gap to GELU_MIN_LOWER)."""
    finite = np.isfinite(x.lo) & np.isfinite(x.hi) & np.isfinite(value[0]) & np.isfinite(value[1])
    with np.errstate(invalid="ignore"):
        lo, hi = value
        spread = round_up(round_up(slope * x.rad) * (1 + 4 * U) + TINY)
        return _interval(np.where(finite, round_down(lo - spread), -np.inf),
                         np.where(finite, round_up(hi + spread), np.inf))


def activation_interval(kind: str, x: Interval) -> Interval:
    if kind == "relu":
        return _interval(np.maximum(x.lo, 0.0), np.maximum(x.hi, 0.0))
    with np.errstate(invalid="ignore"):  # infinite ends: the centred form gives up there (the whole line)
        glo, ghi = _gelu(x.lo), _gelu(x.hi)
        lo = np.where(x.hi <= GELU_ARGMIN[0], ghi[0], np.where(x.lo >= GELU_ARGMIN[1], glo[0], GELU_MIN_LOWER))
        hi = np.where(x.hi <= GELU_ARGMIN[0], glo[1], np.where(x.lo >= GELU_ARGMIN[1], ghi[1],
                                                               np.maximum(glo[1], ghi[1])))
        return intersect(_interval(lo, hi), _centred(_gelu(x.mid), derivative_interval(kind, x).mag, x))


def derivative_interval(kind: str, x: Interval) -> Interval:
    """The set of act'(t) for t in x (Clarke's [0, 1] at ReLU's kink)."""
    if kind == "relu":
        return _interval(np.where(x.lo > 0, 1.0, 0.0), np.where(x.hi >= 0, 1.0, 0.0))
    with np.errstate(invalid="ignore"):
        dlo, dhi = _gelu_prime(x.lo), _gelu_prime(x.hi)
        lo, hi = np.minimum(dlo[0], dhi[0]), np.maximum(dlo[1], dhi[1])
        s = math.sqrt(2.0)
        lo = np.where((x.lo <= -s + 1e-3) & (x.hi >= -s - 1e-3), np.minimum(lo, GELU_PRIME_EXTREMA[0]), lo)
        hi = np.where((x.lo <= s + 1e-3) & (x.hi >= s - 1e-3), np.maximum(hi, GELU_PRIME_EXTREMA[1]), hi)
        return intersect(_interval(lo, hi), _centred(_gelu_prime(x.mid), np.full(x.shape, GELU_SECOND_MAX), x))


def intersect(a: Interval, b: Interval) -> Interval:
    lo, hi = np.maximum(a.lo, b.lo), np.minimum(a.hi, b.hi)
    if np.any(lo > hi):  # both contain the exact image, so they meet; guard against a bug turning unsound
        raise AssertionError("disjoint enclosures: an enclosure is wrong")
    return _interval(lo, hi)


def _sum_up(a: np.ndarray, axis: int) -> np.ndarray:
    """An upper bound on the sum of non-negative floats: (1 + 2 (n + 1) u) fl(sum), rounded up."""
    n = a.shape[axis]
    return round_up(a.sum(axis=axis) * (1 + 2 * (n + 1) * U) + TINY)


def matrix_norm(W: np.ndarray, norm: str) -> float:
    """Certified ||x -> x W|| on rows (J = W^T): inf -> max column sum of |W|; 2 -> ||W||_2 (dilation, proven)."""
    if norm == "inf":
        return float(_sum_up(np.abs(W), 0).max())
    return norm2_upper(W)


def interval_matrix_norm(J: Interval, norm: str) -> float:
    """max over the interval matrices J (batch of (m, n), a block-diagonal Jacobian) of ||A||_p, proven."""
    if norm == "inf":
        return float(inf_norm_upper(J).max())
    out = 0.0
    for k in range(J.shape[0]):
        c, r = J[k].mid, J[k].rad
        out = max(out, float(round_up(norm2_upper(c) + norm2_upper(r))))
    return out


# -- LayerNorm ----------------------------------------------------------------------------------------------------

def centring(D: int) -> np.ndarray:
    """C_float = fl(I - 11^T / D), the float centring matrix of LayerNorm (x C is x minus its mean, up to the u/D
    slack that `layer_norm_parts` adds)."""
    return np.eye(D) - 1.0 / D


def _widen_centring(z: Interval, magnitude: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of z (an enclosure of x C_float) widened by the error of the float centring matrix
    C_float = fl(I - 11^T/D) against the exact one, for inputs of the given magnitudes along ``axis`` (D entries):
    off the diagonal |fl(1/D) - 1/D| <= u/D, on it |fl(1 - fl(1/D)) - (1 - 1/D)| <= u + u/D (the subtraction
    rounds too unless D is a power of 2), so the k-th centred entry is off by at most u (sum_i |x_i| / D + |x_k|)
    <= U (...) with U = 2u. (The former slack U sum_i |x_i| / D omitted the diagonal's u |x_k|: no case was found
    where that mattered beyond the enclosures' own outward rounding, but it was not proven.)"""
    D = magnitude.shape[axis]
    slack = round_up(U * (magnitude.sum(axis, keepdims=True) / D + magnitude) * (1 + 4 * U) + TINY)
    return round_down(z.lo - slack), round_up(z.hi + slack)


def layer_norm_parts(block: LayerNorm, x: Interval,
                     centred: Interval | None = None) -> tuple[Interval, Interval, Interval]:
    """(y = (x - mean)/sigma, 1/sigma, output) per row; sigma = sqrt(var + eps), var >= 0 the population variance.
    ``centred``: another enclosure of x C_float (`centring`) over the same inputs, intersected in."""
    D = x.shape[-1]
    C = centring(D)  # float 1/D: C is a float matrix; we use z = x C_exact through the enclosure below
    z = iaffine(x, C) if D > 1 else _interval(np.zeros(x.shape), np.zeros(x.shape))
    if centred is not None and D > 1:
        z = intersect(z, centred)
    z = _interval(*_widen_centring(z, np.maximum(np.abs(x.lo), np.abs(x.hi)), -1))
    var = isum(square(z), axis=-1) / float(D)
    var = _interval(np.maximum(var.lo, 0.0), var.hi)
    inv = reciprocal(sqrt(var + block.eps))
    y = z * inv.expand(-1)
    return y, inv, y * block.gamma + block.beta


def layer_norm_jacobian(block: LayerNorm, y: Interval, inv: Interval) -> Interval:
    """Per row: J = diag(gamma) (1/sigma) (I - 11^T/D - y y^T / D), an interval (R, D, D)."""
    D = y.shape[-1]
    yy = y.expand(-1) * y.expand(-2)
    C = centring(D)
    M = (yy / float(D)) * -1.0 + C
    return M * block.gamma[None, :, None] * inv.expand(-1).expand(-1)


def _minus_product(image: Interval, A: np.ndarray, right: np.ndarray) -> np.ndarray:
    """max |J c - A c| over J c in ``image`` (reshaped to (m, q)), A c enclosed outward from the exact A and c."""
    Ac = point_einsum("ab,bj->aj", _interval(A, A.copy()), right)
    return (image.reshape(*Ac.shape) - Ac).mag


def layer_norm_product(block: LayerNorm, y: Interval, inv: Interval, A: np.ndarray, right: np.ndarray) -> np.ndarray:
    """P >= |(J(x) - A) c| entrywise for every input x whose normalised row y and 1/sigma lie in ``y``, ``inv``
    (`layer_norm_parts`), c = ``right`` (N D, q): row by row J c = gamma * (1/sigma) (z - y (y . z) / D) with
    z = c - mean(c) enclosed once from the exact c, since I - 11^T/D - y y^T/D = (I - y y^T/D)(I - 11^T/D) for the
    exact y (it sums to 0). The columns' common part cancels exactly in z, where Delta |c| (the entrywise Jacobian
    interval times magnitudes) carries it through every entry."""
    N, D = y.shape
    c = right.reshape(N, D, -1)
    z = point_einsum("tij,ik->tkj", _interval(c, c.copy()), centring(D))  # C_float is symmetric
    z = _interval(*_widen_centring(z, np.abs(c), 1))
    dot = interval_einsum("tk,tkj->tj", y, z)
    image = (z - y.expand(-1) * dot.expand(1) / float(D)) * block.gamma[None, :, None] * inv.expand(-1).expand(-1)
    return _minus_product(image, A, right)


def feed_forward_product(block: FeedForward, pre: Interval, A: np.ndarray, right: np.ndarray) -> np.ndarray:
    """P >= |(J(x) - A) c| entrywise for every input x whose pre-activations x W1 + b1 lie in ``pre`` (N, hidden),
    c = ``right`` (N C, q): row by row J c = W2^T (act'(pre) * (W1^T c)), with W1^T c enclosed once from the exact c
    (its sum over the C inputs keeps the cancellations that Delta |c| loses)."""
    N, C = pre.shape[0], block.W1.shape[0]
    c = right.reshape(N, C, -1)
    inner = point_einsum("tij,ih->thj", _interval(c, c.copy()), block.W1)
    slope = derivative_interval(block.activation, pre)
    image = point_einsum("thj,ho->toj", slope.expand(-1) * inner, block.W2)
    return _minus_product(image, A, right)


def _layer_norm_lipschitz(block: LayerNorm, y: Interval, inv: Interval, norm: str) -> float:
    if norm == "2":  # ||C - y y^T / D||_2 <= 1 (a projection minus a PSD part of norm ||y||^2 / D < 1)
        return float(round_up(np.abs(block.gamma).max() * inv.hi.max()))
    return interval_matrix_norm(layer_norm_jacobian(block, y, inv), "inf")


# -- attention ----------------------------------------------------------------------------------------------------

def attention_interval(block: Attention, x: Interval) -> Interval:
    """Naive interval evaluation of `Attention` (softmax enclosed as p_j = 1 / sum_k exp(s_k - s_j))."""
    outs = []
    N = x.shape[0]
    for h in range(block.H):
        Q = iaffine(x, block.W_Q[h], None if block.b_Q is None else block.b_Q[h])
        K = iaffine(x, block.W_K[h], None if block.b_K is None else block.b_K[h])
        V = iaffine(x, block.W_V[h], None if block.b_V is None else block.b_V[h])
        S = imatmul(Q, K.swapaxes(0, 1)) * block.scale
        # T[i, j, k] encloses s_ik - s_ij, so P_ij = 1 / sum_k exp(T[i, j, k])
        T = _interval(round_down(S.lo[:, None, :] - S.hi[:, :, None]), round_up(S.hi[:, None, :] - S.lo[:, :, None]))
        E = exp(T)
        lo, hi = E.lo.copy(), E.hi.copy()
        eye = np.eye(N, dtype=bool)
        lo[:, eye], hi[:, eye] = 1.0, 1.0
        if block.causal:
            masked = np.triu(np.ones((N, N), dtype=bool), 1)  # key k > query i
            lo[masked[:, None, :].repeat(N, 1)] = 0.0
            hi[masked[:, None, :].repeat(N, 1)] = 0.0
        P = reciprocal(isum(_interval(lo, hi), axis=-1))  # (N, N): P[i, j]
        if block.causal:
            P = _interval(np.where(np.triu(np.ones((N, N)), 1) > 0, 0.0, P.lo),
                          np.where(np.triu(np.ones((N, N)), 1) > 0, 0.0, P.hi))
        P = _interval(np.clip(P.lo, 0.0, 1.0), np.clip(P.hi, 0.0, 1.0))
        outs.append(imatmul(P, V))
    O = _interval(np.concatenate([o.lo for o in outs], -1), np.concatenate([o.hi for o in outs], -1))
    if block.W_O is None:
        return O if block.b_O is None else O + block.b_O
    return iaffine(O, block.W_O, block.b_O)


def attention_weights(block: Attention | L2Attention) -> AttentionWeights:
    """The toolkit's AttentionWeights of the UNMASKED layer (DP: scale folded into W^Q, b^Q, its logits use
    1/sqrt(d); L2: kind "l2", W^K = W^Q). A causal block's mask is applied by `causal_rows` / `causal_jacobian`."""
    H, D, d = block.W_Q.shape
    W_O = np.eye(H * d) if block.W_O is None else block.W_O
    if W_O.shape[1] != D:
        raise InvalidInputError(f"attention with output width {W_O.shape[1]} != D = {D} is not supported by "
                                "certify.bounds")
    t = lambda a: None if a is None else torch.tensor(a, dtype=torch.float64)  # noqa: E731
    if isinstance(block, L2Attention):
        return AttentionWeights("l2", t(block.W_Q), t(block.W_Q), t(block.W_V), t(W_O), b_O=t(block.b_O))
    k = block.scale * math.sqrt(d)
    return AttentionWeights("dp", t(block.W_Q * k), t(block.W_K), t(block.W_V), t(W_O),
                            t(None if block.b_Q is None else block.b_Q * k), t(block.b_K), t(block.b_V), t(block.b_O))


def causal_rows(box: Interval, rows: Callable[[Interval], Interval]) -> Interval:
    """Output enclosure of a causal layer (N, C') from its unmasked map: row i of the masked layer at X is row i of
    the unmasked layer at the prefix x_1..x_i (the mask removes exactly the keys j > i), so it lies in row i of
    ``rows`` (an enclosure of the unmasked layer) over the prefix box."""
    parts = [rows(box[: i + 1])[i] for i in range(box.shape[0])]
    return _interval(np.stack([p.lo for p in parts]), np.stack([p.hi for p in parts]))


def causal_jacobian(box: Interval, jacobian: Callable[[Interval], Interval], out_features: int) -> Interval:
    """Jacobian enclosure (N C', N C) of a causal layer over the box from its unmasked map's: row block i is row
    block i of ``jacobian`` ((n C', n C) over an n-token box) on the prefix box of i tokens (columns j <= i), and
    exactly 0 for j > i (row i of the masked layer does not depend on x_j, j > i; `causal_rows`)."""
    N, C = box.shape
    lo, hi = np.zeros((N, out_features, N, C)), np.zeros((N, out_features, N, C))
    for i in range(N):
        J = jacobian(box[: i + 1]).reshape(i + 1, out_features, i + 1, C)
        lo[i, :, : i + 1], hi[i, :, : i + 1] = J.lo[i], J.hi[i]
    n = N * C
    return _interval(lo.reshape(N * out_features, n), hi.reshape(N * out_features, n))


def _unmasked_jacobian(block: Attention | L2Attention, box: Interval, exact_diagonal: bool | None = False) -> Interval:
    """[J] (n D, n D) containing J(X) for every X in the box (n tokens), unmasked: the Taylor form about the box's
    midpoint (DP: slope seeds; L2: directional seeds), cut by the direct interval evaluation and, for DP, by the
    simplex enclosure (`bounds/local/_simplex.py`). exact_diagonal: as in `_slopes.dp_slopes` (False: the separable
    diagonal slope, about 5x faster at N = 17, D = 48; None: the exact one where N D^3 is small enough)."""
    w = numpy_weights(attention_weights(block))
    seeds = "slopes" if w.kind == "dp" else "directional"
    form = taylor_enclosure(box, box.mid, w, seeds=seeds, exact_diagonal=exact_diagonal)
    summed = form.at_centre + form.remainder
    J = intersect(summed, form.direct) if np.all(np.isfinite(form.direct.lo)) else summed
    if w.kind == "dp":  # each softmax row kept on the simplex: much narrower on wide boxes
        J = intersect(J, dp_simplex_jacobian_enclosure(box, w))
    n = box.shape[0] * box.shape[1]
    return J.reshape(n, n)


def attention_jacobian(block: Attention | L2Attention, box: Interval, exact_diagonal: bool | None = False) -> Interval:
    """[J] (N D, N D) containing the layer's Jacobian J(X) for every X in the box (causal: `causal_jacobian`);
    exact_diagonal as in `_unmasked_jacobian`."""
    if block.causal:
        return causal_jacobian(box, lambda prefix: _unmasked_jacobian(block, prefix, exact_diagonal),
                               block.out_features)
    return _unmasked_jacobian(block, box, exact_diagonal)


def attention_point_jacobian(block: Attention | L2Attention, centre: np.ndarray) -> np.ndarray:
    """A float matrix (N D, N D) within a few ulps of J(centre) (the midpoint of its enclosure at the point)."""
    w = numpy_weights(attention_weights(block))
    n = centre.size

    def at(point: Interval) -> Interval:
        return jacobian_enclosure(point, w).reshape(point.shape[0] * point.shape[1], -1)

    point = _interval(centre, centre.copy())
    J = causal_jacobian(point, at, block.out_features) if block.causal else at(point)
    return J.mid.reshape(n, n)


def attention_lipschitz(block: Attention | L2Attention, x: Interval, norms: tuple[str, ...]) -> dict[str, float]:
    """{norm: a certified bound on sup ||J|| over the box}: unmasked DP, certify's own local bound (method taylor) on
    the cube about the box's midpoint that contains the box; causal or L2, the norm of `attention_jacobian`."""
    if isinstance(block, L2Attention) or block.causal:
        J = attention_jacobian(block, x).expand(0)
        return {n: interval_matrix_norm(J, n) for n in norms}
    c = x.mid
    radius = float(round_up(np.max(x.rad))) if x.rad.size else 0.0
    domain = EpsBall(torch.tensor(c), max(radius, 1e-300), "inf")
    out = {}
    for norm in norms:
        # the separable diagonal slope: 10x faster than the exact one at D = 48, within 6% (bounds/local/_slopes.py)
        cert = taylor_bound(attention_weights(block), c.shape[0], norm, domain, exact_diagonal=False)
        if not cert.certified:
            raise InvalidInputError(f"the attention bound was not certified: {cert}")
        out[norm] = float(cert.value)
    return out


def _l2_unmasked_interval(block: L2Attention, x: Interval) -> Interval:
    """Interval evaluation of unmasked tied L2 attention: per head, with v_k = x_k^T A_h W^V_h (exact weights,
    `point_einsum`), row i = v_i + sum_k P_ik (v_k - v_i) (sum_k P_ik = 1; the differences formed from the token
    boxes, exactly 0 for k = i), P from `l2_scores`; then W^O, b^O."""
    w = numpy_weights(attention_weights(block))
    dX = token_differences(x)
    scale = const(1.0 / math.sqrt(block.d))
    heads = []
    for h in range(block.H):
        _, P = l2_scores(dX, w, h)  # (N, N)
        V = point_einsum("nD,Dc,Ec,Ee->ne", x, block.W_Q[h], block.W_Q[h], block.W_V[h]) * scale
        dV = point_einsum("jkD,Dc,Ec,Ee->jke", dX, block.W_Q[h], block.W_Q[h], block.W_V[h]) * scale
        heads.append(V + isum(P.expand(-1) * dV.swapaxes(0, 1), axis=1))  # dV[k, i] = v_k - v_i
    O = _interval(np.concatenate([o.lo for o in heads], -1), np.concatenate([o.hi for o in heads], -1))
    if block.W_O is None:
        return O if block.b_O is None else O + block.b_O
    return iaffine(O, block.W_O, block.b_O)


def l2_attention_interval(block: L2Attention, x: Interval) -> Interval:
    """Interval evaluation of `L2Attention` (causal: row i from the prefix, `causal_rows`)."""
    if block.causal:
        return causal_rows(x, lambda prefix: _l2_unmasked_interval(block, prefix))
    return _l2_unmasked_interval(block, x)


# -- one block --------------------------------------------------------------------------------------------------

def _mean_value(point: Interval, lipschitz_inf: float, x: Interval) -> Interval:
    """f(B) within f(c) +- L_inf max|x - c| (mean value on the convex box; L_inf bounds ||J||_inf on B)."""
    r = float(round_up(lipschitz_inf * np.max(x.rad))) if x.rad.size else 0.0
    return _interval(round_down(point.lo - r), round_up(point.hi + r))


def _point(x: Interval) -> Interval:
    c = x.mid
    return _interval(c, c)


def feed_forward_parts(block: FeedForward, x: Interval) -> tuple[Interval, Interval]:
    """(output enclosure, per-row interval Jacobian (R, C', C)) of W2^T act(W1^T x + b1) + b2."""
    h = iaffine(x, block.W1, block.b1)
    out = iaffine(activation_interval(block.activation, h), block.W2, block.b2)
    g = derivative_interval(block.activation, h)  # (R, hidden)
    A = g.expand(1) * block.W2.T[None]  # (R, C', hidden): W2^T diag(g)
    J = iaffine(A, block.W1.T)  # (R, C', C)
    hc = iaffine(_point(x), block.W1, block.b1)
    centre = iaffine(activation_interval(block.activation, hc), block.W2, block.b2)
    mv_rad = round_up(np.einsum("rij,rj->ri", J.mag, x.rad) * (1 + 4 * (x.shape[-1] + 2) * U) + TINY)
    out = intersect(out, _interval(round_down(centre.lo - mv_rad), round_up(centre.hi + mv_rad)))
    return out, J


def enclose(block: object, x: Interval) -> Interval:
    """Only the enclosure of block(B) (cheap: no attention bound; used for the image of the point x0)."""
    if isinstance(block, Attention):
        return attention_interval(block, x)
    if isinstance(block, L2Attention):
        return l2_attention_interval(block, x)
    if isinstance(block, Residual):
        inner = x
        for sub in block.inner:
            inner = enclose(sub, inner)
        return x + inner
    return analyse(block, x, ())[0]


def analyse(block: object, x: Interval, norms: tuple[str, ...], direct: bool = True) -> tuple[Interval, dict]:
    """(enclosure of block(B), {norm: certified bound on sup_{X in B} ||J_block(X)||_norm}) for the box B = x."""
    if isinstance(block, Gather):
        flat = x.reshape(-1)
        out = _interval(flat.lo[block.index], flat.hi[block.index])
        count = np.bincount(block.index.reshape(-1)).max()
        return out, {"inf": 1.0, "2": float(round_up(np.sqrt(float(count))))}
    if isinstance(block, Linear):
        return iaffine(x, block.weight, block.bias), {n: matrix_norm(block.weight, n) for n in norms}
    if isinstance(block, ClassToken):
        row = np.asarray(block.token)[None]
        return _interval(np.concatenate([row, x.lo]), np.concatenate([row, x.hi])), {n: 1.0 for n in norms}
    if isinstance(block, AddConstant):
        return x + np.broadcast_to(block.value, x.shape), {n: 1.0 for n in norms}
    if isinstance(block, ChannelAffine):
        out = x * np.broadcast_to(block.scale, x.shape) + np.broadcast_to(block.shift, x.shape)
        return out, {n: float(np.abs(block.scale).max()) for n in norms}
    if isinstance(block, Activation):
        g = derivative_interval(block.kind, x)
        return activation_interval(block.kind, x), {n: float(np.maximum(-g.lo, g.hi).max()) for n in norms}
    if isinstance(block, Pool):
        if block.kind == "cls":
            return x[:1], {n: 1.0 for n in norms}
        R = x.shape[0]
        return isum(x, axis=0).expand(0) / float(R), {"inf": 1.0, "2": float(round_up(1.0 / math.sqrt(R)))}
    if isinstance(block, LayerNorm):
        y, inv, out = layer_norm_parts(block, x)
        return out, {n: _layer_norm_lipschitz(block, y, inv, n) for n in norms}
    if isinstance(block, FeedForward):
        out, J = feed_forward_parts(block, x)
        g = derivative_interval(block.activation, iaffine(x, block.W1, block.b1))
        gmax = float(np.maximum(-g.lo, g.hi).max())
        crude = {n: float(round_up(matrix_norm(block.W1, n) * gmax * matrix_norm(block.W2, n))) for n in norms}
        return out, {n: min(crude[n], interval_matrix_norm(J, n)) for n in norms}
    if isinstance(block, ATTENTION_TYPES):
        wanted = tuple(dict.fromkeys(norms + ("inf",)))
        L = attention_lipschitz(block, x, wanted)
        out, at_centre = enclose(block, x), enclose(block, _point(x))
        out = intersect(out, _mean_value(at_centre, L["inf"], x))
        return out, {n: L[n] for n in norms}
    if isinstance(block, Residual):
        return _residual(block, x, norms, direct)
    raise InvalidInputError(f"not a model block: {type(block).__name__}")


def _residual(block: Residual, x: Interval, norms: tuple[str, ...], direct: bool) -> tuple[Interval, dict]:
    """S + inner(S): 1 + prod Lip(inner) in general; for inner = (LayerNorm, FeedForward) or (FeedForward,), also
    the norm of the per-row interval Jacobian I + J_FF J_LN (tighter: no triangle inequality); the smaller one."""
    inner_box, factors = x, {n: 1.0 for n in norms}
    wanted = tuple(dict.fromkeys(norms + ("inf",)))
    for sub in block.inner:
        inner_box, L = analyse(sub, inner_box, wanted, direct)
        factors = {n: float(round_up(factors[n] * L[n])) for n in norms}
    bounds = {n: float(round_up(1.0 + factors[n])) for n in norms}
    kinds = tuple(type(b) for b in block.inner)
    if direct and kinds in ((LayerNorm, FeedForward), (FeedForward,)) and inner_box.shape == x.shape:
        ff = block.inner[-1]
        if len(block.inner) == 2:
            y, inv, normed = layer_norm_parts(block.inner[0], x)
            _, J_ff = feed_forward_parts(ff, normed)
            J = imatmul(J_ff, layer_norm_jacobian(block.inner[0], y, inv))
        else:
            _, J = feed_forward_parts(ff, x)
        eye = np.eye(J.shape[-1])
        J = _interval(round_down(J.lo + eye), round_up(J.hi + eye))
        bounds = {n: min(bounds[n], interval_matrix_norm(J, n)) for n in norms}
    return x + inner_box, bounds
