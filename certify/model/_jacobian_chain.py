"""The model's Jacobian over an input domain as a point product plus a certified error (MATH.md sections 0 and 7).

Domain: x = x0 + delta, |delta_m| <= r_m (a box; the l_inf ball is r = eps) or ||delta||_2 <= eps. Write the
model as top-level blocks f_1 .. f_L, F_k = f_k o .. o f_1, S_k a box containing F_k(domain). For each block, a
float matrix A_k (its Jacobian at the image of x0) and a nonnegative Delta_k with |J_{f_k}(s) - A_k| <= Delta_k
entrywise for every s in S_{k-1}. Let W_k = A_k .. A_1 (enclosed in float) and V_k(x) = J_{F_k}(x).

Theorem. e_k >= sup_x ||V_k(x) - W_k||_p holds for

    e_k = sum_{m <= k} ||A_k .. A_{m+1}||_p ( || Delta_m |W_{m-1}| ||_p + ||Delta_m||_p e_{m-1} ),   e_0 = 0.

Proof: V_k - W_k = A_k (V_{k-1} - W_{k-1}) + E_k V_{k-1} with E_k = J_{f_k}(F_{k-1}(x)) - A_k, |E_k| <= Delta_k
since F_{k-1}(x) lies in S_{k-1}; unrolled, V_k - W_k = sum_m (A_k .. A_{m+1}) E_m V_{m-1}, and
|E_m V_{m-1}| <= Delta_m (|W_{m-1}| + |V_{m-1} - W_{m-1}|) entrywise, whose p-norm (p in {1, 2, inf}: monotone on
nonnegative matrices) is at most ||Delta_m |W_{m-1}| || + ||Delta_m|| e_{m-1}.

So Lip_p on the domain <= max ||W_L||_p + e_L (chain rule and mean value on the convex domain, as in `_certify`),
and F_k(x) - F_k(x0) = (int_0^1 V_k(x0 + t delta) dt) delta lies in W_k delta + err delta with ||err|| <= e_k,
which gives the boxes S_k: F_k(x0) +- (|W_k| r + e_k max r) (box) or +- (||rows of |W_k| ||_2 + e_k^(2)) eps (l_2
ball), intersected with the interval image. Given the same chain's slopes on smaller balls about x0, the box takes
the integral of the smallest slope along each segment instead (`nested_spread`). The segment norms
||A_k .. A_{m+1}|| are norms of products of point matrices, so the cancellations between blocks are kept (an
interval matrix carried from block to block would grow by the absolute-value norm of every block instead). For the
l_2 norm of intermediate segments, ||P||_2 <= sqrt(||P||_1 ||P||_inf).

Per block: A and Delta from an interval enclosure of the Jacobian over S_{k-1}, cut down with the prefix's own
first-order form where that is tighter (`block_jacobian`: the set F_{k-1}(domain) has as many dimensions as the
input, often far fewer than the box S_{k-1}); a residual
x + g(x) with g = g_2 o g_1: A = I + A_2 A_1, Delta = |A_2| Delta_1 + Delta_2 |A_1| + Delta_2 Delta_1, the inner boxes
from the one-step form of the same bound.

Products. The error needs |E_m V_{m-1}| (E_m = J_{f_m} - A_m), not |E_m| alone: Delta_m |W_{m-1}| takes every
one of the block's N D inner coordinates in magnitude, where the true product cancels across them. So each block
also bounds |E_m c| for the midpoint c of its prefix's Jacobian enclosure (`Product`: attention along the prefix's
directions, LayerNorm and feed-forward blocks from their factored Jacobians), and `_movement_times` carries it
through a residual's inner blocks; the smaller of the two bounds is kept entrywise. The first inner block of a
residual also maps the prefix's error segment by segment (`_segment_image`: |A P_m| DW_m, not |A| |P_m| DW_m).
On the digits ViT at eps = 3e-4 (inf) the certified bound went from 9.0e48 to 2.8e24 with these; the third
attention block's input box from 11.6 to 0.071 (sampled 0.0096).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable

import numpy as np

from .._errors import InvalidInputError
from ..bounds.local import numpy_weights
from ..bounds.local._enclosure import jacobian_enclosure
from ..bounds.local._slopes import EXACT_DIAGONAL_MAX, dp_slopes
from ..bounds.local._taylor import BYTES_PER_ENTRY as TAYLOR_BYTES_PER_ENTRY
from ..bounds.local._taylor import MEMORY_LIMIT as TAYLOR_MEMORY_LIMIT
from ..bounds.local._taylor import direction_remainder_times, gram_norm2_upper, nonnegative_norm2_upper
from ..sdp import MatrixEnclosure, scaled_bound
from ..interval import Interval, isum, linear_combination, round_down, round_up
from ._blocks import (ATTENTION_TYPES, Activation, AddConstant, Attention, ChannelAffine, ClassToken, FeedForward,
                      Gather, LayerNorm, Linear, Pool, Residual)
from ._nested import step_integral
from ._score_set import head_scores, score_duals
from ._score_set import memory_estimate as score_set_bytes
from ._enclosure import (TINY, U, attention_jacobian, attention_point_jacobian, attention_weights, centring,
                         derivative_interval, enclose, feed_forward_product, iaffine, imatmul, intersect,
                         layer_norm_jacobian, layer_norm_parts, layer_norm_product)

BYTES_PER_ENTRY = 64
"""Bytes per entry of an interval Jacobian G (lo, hi and the temporaries of one interval product)."""
SCALED_SIDES_MAX = 1024
SCALED_ROWS_MAX = 64
"""A prefix's 2-norm bound also takes `certify.sdp.scaled_bound` of its interval Jacobian (m, n0) when m is at most
SCALED_ROWS_MAX and m + n0 at most SCALED_SIDES_MAX (`output_norm_upper`)."""
GRAM_SIDE_MAX = 1024
"""Signed 2-norms from the Gram matrix of the shorter side (`gram_norm2_upper`) when that side is at most this."""


@dataclasses.dataclass(frozen=True)
class Domain:
    """The input domain: x0 (input shape), and r (per-coordinate radii, norm "inf") or eps (norm "2")."""

    x0: np.ndarray
    radius: np.ndarray  # (n0,) for "inf"; one entry, eps, for "2"
    norm: str

    def spread(self, G: Interval) -> np.ndarray:
        """An upper bound on max |(A delta)_i| over A in G and delta in the domain, per row of G (..., n0)."""
        n = G.shape[-1]
        margin = 1.0 + 4.0 * (n + 2) * U
        mag = G.mag
        if self.norm == "inf":
            return round_up((mag @ self.radius) * margin + TINY)
        # ||row||_2 = top sqrt(sum (mag / top)^2): the scaled squares cannot all underflow (the largest is 1);
        # those that do are covered by n 2^-1074 under the root
        top = mag.max(-1)
        safe = np.where(top > 0, top, 1.0)
        with np.errstate(under="ignore"):
            roots = np.sqrt(np.square(mag / safe[..., None]).sum(-1) + n * 2.0**-1074)
        value = round_up(round_up(top * roots * (margin + 4 * U)) * self.radius[0])
        return round_up(value * (1 + 4 * U) + TINY)


@dataclasses.dataclass(frozen=True)
class PrefixBound:
    """After one top-level block: a certified bound on Lip_p of the model up to it, its output box's largest radius."""

    block: str
    value: float
    output_radius: float
    seconds: float


class ModelInterrupted(KeyboardInterrupt):
    """Ctrl-C (KeyboardInterrupt) while a model's constant was being certified, with what was certified before it.

    ``prefixes[k]`` is a certified bound on Lip_p of the model's first k + 1 top-level blocks on the ball (NOT of
    the whole model); ``blocks`` is the number of top-level blocks. Being a KeyboardInterrupt, it stops a program
    that does not catch it, as Ctrl-C does.
    """

    def __init__(self, prefixes: tuple[PrefixBound, ...], blocks: int) -> None:
        super().__init__(f"interrupted after {len(prefixes)} of {blocks} blocks")
        self.prefixes, self.blocks = tuple(prefixes), int(blocks)

    @property
    def longest(self) -> PrefixBound | None:
        """The certified bound of the longest completed prefix (None: interrupted before anything was certified)."""
        return self.prefixes[-1] if self.prefixes else None


def jacobian_norm_upper(G: Interval, norm: str) -> float:
    """max over the interval matrix G (m, n) of ||A||_p, proven: row sums of mag (inf); ||mid|| + ||rad|| or
    || mag || (2)."""
    if not (np.all(np.isfinite(G.lo)) and np.all(np.isfinite(G.hi))):
        return math.inf
    mag = G.mag
    if norm == "inf":
        n = mag.shape[-1]
        return float(round_up(mag.sum(-1).max() * (1 + 2 * (n + 1) * U) + TINY))
    value = nonnegative_norm2_upper(mag)
    if min(mag.shape) <= GRAM_SIDE_MAX:
        value = min(value, float(round_up(gram_norm2_upper(G.mid) + nonnegative_norm2_upper(G.rad))))
    return value


def output_norm_upper(G: Interval, norm: str) -> float:
    """`jacobian_norm_upper` of a prefix's interval Jacobian (m, n0), in the 2-norm also through the relaxation with
    solver-free multipliers (`certify.sdp.scaled_bound`) when m <= SCALED_ROWS_MAX and m + n0 <= SCALED_SIDES_MAX (a
    classifier's output; a prefix's bound depends only on its own Jacobian, so an interrupted chain's longest prefix
    gets the same bound as that prefix certified alone)."""
    value = jacobian_norm_upper(G, norm)
    if norm == "2" and G.shape[0] <= SCALED_ROWS_MAX and sum(G.shape) <= SCALED_SIDES_MAX and math.isfinite(value):
        value = min(value, scaled_bound(MatrixEnclosure.from_bounds(G.lo, G.hi)))
    return value


def memory_estimate(largest_state: int, n0: int, attention_sizes: list[tuple[int, int, str]]) -> int:
    """Bytes for the largest G (state entries x n0 inputs) or the largest attention Taylor form ((N D)^2 entries)."""
    from ..bounds.local import memory_estimate as taylor_memory

    taylor = max((taylor_memory(N, D, seeds=seeds) for N, D, seeds in attention_sizes), default=0)
    return max(BYTES_PER_ENTRY * largest_state * n0, taylor)


def apply_jacobian(block: object, box: Interval, G: Interval) -> Interval:
    """[J_block over box] G for G (R, C, n0), the blocks whose Jacobian needs no enclosure of a nonlinearity beyond
    the activation's derivative: Gather, Linear, ClassToken, AddConstant, ChannelAffine, Activation, Pool."""
    n0 = G.shape[-1]
    if isinstance(block, Gather):
        flat = G.reshape(-1, n0)
        index = block.index
        return Interval(flat.lo[index], flat.hi[index])
    if isinstance(block, Linear):
        return iaffine(G.swapaxes(1, 2), block.weight).swapaxes(1, 2)
    if isinstance(block, ClassToken):
        zero = np.zeros((1, *G.shape[1:]))
        return Interval(np.concatenate([zero, G.lo]), np.concatenate([zero, G.hi]))
    if isinstance(block, AddConstant):
        return G
    if isinstance(block, ChannelAffine):
        return G * np.broadcast_to(block.scale, box.shape)[..., None]
    if isinstance(block, Activation):
        return G * derivative_interval(block.kind, box).expand(-1)
    if isinstance(block, Pool):
        if block.kind == "cls":
            return G[:1]
        return isum(G, axis=0).expand(0) / float(G.shape[0])
    raise InvalidInputError(f"not a model block: {type(block).__name__}")



@dataclasses.dataclass(frozen=True)
class ChainEnclosure:
    """output(x0) in point; output(x) in box; J(x) in W + err (W an interval matrix) with ||err||_inf <= error_inf and
    (l_2-ball domains) ||err||_2 <= error_2."""

    domain: Domain
    point: Interval
    box: Interval
    W: Interval  # (m, n0)
    error_inf: float
    error_2: float
    prefixes: tuple[PrefixBound, ...]
    slopes: "StateSlopes | None" = None  # per state of the chain, for the enclosures of larger balls about x0

    def lipschitz(self, norm: str) -> float:
        """max ||W||_norm + error: a certified bound on Lip_norm of the model on the domain (norm "inf", or "2" when
        the domain is the l_2 ball: its error_2 is computed only then)."""
        if norm == "2" and self.domain.norm != "2":
            raise InvalidInputError("the 2-norm error term is computed for l_2-ball domains only")
        error = self.error_inf if norm == "inf" else self.error_2
        return float(round_up(output_norm_upper(self.W, norm) + error))

    def linear_lower(self, A: np.ndarray) -> np.ndarray:
        """Certified lower bounds on (A vec(output(x)))_k over the domain, A (K, m) exact floats:
        a^T y(x0) - spread(a^T W) - ||a||_1 e_inf max_m |delta_m|; and a^T box."""
        lower, slope = self.margin_slopes(A)  # checks A
        over_box = linear_combination(self.box.reshape(1, self.W.shape[0]), np.asarray(A, dtype=np.float64))[0]
        return np.maximum(round_down(lower - slope), over_box.lo)

    def margin_slopes(self, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, slope) per row a of A (K, m): lower <= a^T vec(output(x0)) and slope >= |a^T J(z) delta| for
        every z in the domain and every delta with x0 + delta in it (|delta_m| <= r_m, or ||delta||_2 <= eps):
        spread(a^T W) + ||a||_1 e_inf max r, the terms of `linear_lower` (`certify.model._radius.nested_radius`
        combines the slopes of several balls about x0)."""
        A = np.asarray(A, dtype=np.float64)
        m = self.W.shape[0]
        if A.ndim != 2 or A.shape[1] != m or not np.all(np.isfinite(A)):
            raise InvalidInputError(f"A must be a finite matrix of shape (K, {m}), got {A.shape}")
        lower = linear_combination(self.point.reshape(1, m), A)[0].lo
        AW = linear_combination(self.W.swapaxes(0, 1), A).swapaxes(0, 1)
        tail = _up(np.abs(A).sum(1) * self.error_inf * float(self.domain.radius.max()), A.shape[1])
        return lower, round_up(self.domain.spread(AW) + tail)

    def certified_scale(self, A: np.ndarray) -> float:
        """The largest t in [0, 1] found such that every (A vec(output(x)))_k is certified positive for x in the
        domain scaled by t about x0 (radius t r or t eps): 1 when `linear_lower` is positive; otherwise, since the
        enclosure holds on the whole domain and so on the segment from x0 to any x of the smaller ball, where
        |delta| <= t r, the mean-value bound a^T y(x0) - t (spread(a^T W) + ||a||_1 e max r) is positive for every
        t below lower / slope (rounded down twice: the quotient's rounding and strictness). 0 when a^T y(x0) itself
        is not certified positive."""
        if np.all(self.linear_lower(A) > 0):
            return 1.0
        lower, slope = self.margin_slopes(A)
        if np.any(lower <= 0):
            return 0.0
        with np.errstate(divide="ignore", over="ignore", under="ignore"):
            quotient = np.nextafter(np.nextafter(lower / slope, 0.0), 0.0)
        return float(min(1.0, float(np.min(quotient))))


def _up(x: np.ndarray | float, n: int) -> np.ndarray:
    """A float result of n-term sums/products of nonnegative numbers, raised to cover its rounding."""
    return round_up(np.asarray(x) * (1 + 4 * (n + 2) * U) + n * TINY)


def _product_up(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """An entrywise upper bound on A B for nonnegative A, B (the n TINY of `_up` covers products that underflow)."""
    with np.errstate(under="ignore"):
        return _up(A @ B, A.shape[-1])


@dataclasses.dataclass(frozen=True)
class Segment:
    """A product of float matrices A_k .. A_{m+1} as the float product P and bounds on the p-norms (p = 1, inf) of
    the difference to the exact product: fl(A P) - A P is within gamma_n |A| |P| entrywise, so
    error'_p <= gamma_n ||A||_p ||P||_p + ||A||_p error_p (p = 1, inf; ||A||_p = || |A| ||_p)."""

    P: np.ndarray
    error_1: float = 0.0
    error_inf: float = 0.0

    def times(self, A: np.ndarray) -> "Segment":
        n = A.shape[1]
        gamma = 2 * (n + 2) * U
        a1, ainf = _norm(np.abs(A), "1"), _norm(np.abs(A), "inf")
        p1, pinf = _norm(np.abs(self.P), "1"), _norm(np.abs(self.P), "inf")
        with np.errstate(under="ignore"):
            P = A @ self.P
        return Segment(P, float(_up(gamma * a1 * p1 + a1 * self.error_1, 3) + n * TINY),
                       float(_up(gamma * ainf * pinf + ainf * self.error_inf, 3) + n * TINY))

    def norm(self, norm: str, exact: bool = False) -> float:
        """A certified bound on ||exact product||_norm (2: sqrt(||.||_1 ||.||_inf), or the dense bound when exact)."""
        if norm in ("1", "inf"):
            return float(_up(_norm(np.abs(self.P), norm) + (self.error_1 if norm == "1" else self.error_inf), 2))
        value = float(round_up(math.sqrt(float(_up(self.norm("1") * self.norm("inf"), 1))) * (1 + 4 * U)))
        if exact and min(self.P.shape) <= GRAM_SIDE_MAX:
            error = float(round_up(math.sqrt(float(_up(self.error_1 * self.error_inf, 1))) * (1 + 4 * U)))
            value = min(value, float(_up(jacobian_norm_upper(Interval(self.P, self.P), "2") + error, 2)))
        return value


def _norm(M: np.ndarray | Interval, norm: str) -> float:
    """Certified ||M||_norm (max over an interval matrix: of its magnitude for p in {1, inf}); M nonnegative or an
    Interval; "2" only for nonnegative arrays."""
    mag = M.mag if isinstance(M, Interval) else M
    if mag.size == 0:
        return 0.0
    if norm == "inf":
        return float(_up(mag.sum(1).max(), mag.shape[1]))
    if norm == "1":
        return float(_up(mag.sum(0).max(), mag.shape[0]))
    return nonnegative_norm2_upper(mag)


def _dense(J: Interval, out_shape: tuple[int, ...], in_size: int) -> Interval:
    """A per-row Jacobian (R, C', C) as the block-diagonal (R C', R C) interval matrix."""
    R, Cp, C = J.shape
    lo, hi = np.zeros((R, Cp, R, C)), np.zeros((R, Cp, R, C))
    index = np.arange(R)
    lo[index, :, index, :] = J.lo
    hi[index, :, index, :] = J.hi
    return Interval(lo.reshape(R * Cp, R * C), hi.reshape(R * Cp, R * C))


def _distance(J_box: Interval, A: np.ndarray) -> np.ndarray:
    """Delta >= |J - A| for J in J_box: the larger end distance, rounded up where not 0 (a float difference is 0
    only between equal floats, so a 0 is exact; no subnormal 2^-1074 in place of exact zeros, which would slow
    every later product down)."""
    d = np.maximum(np.maximum(J_box.hi - A, A - J_box.lo), 0.0)
    return np.where(d > 0, round_up(d), 0.0)


def _centre_and_delta(J_box: Interval, J_point: Interval) -> tuple[np.ndarray, np.ndarray]:
    """A = mid of the Jacobian at the centre; Delta >= |J - A| over the box's enclosure."""
    A = J_point.mid
    return A, _distance(J_box, A)


@dataclasses.dataclass(frozen=True)
class Product:
    """|(J_f(y) - A) right| <= bound entrywise for every input y of the block reachable from the domain (`right` a
    float matrix, the midpoint of the prefix's Jacobian enclosure): attention from `directional_bounds`, LayerNorm
    and feed-forward blocks from `_enclosure.layer_norm_product` / `feed_forward_product`."""

    right: np.ndarray
    bound: np.ndarray


def block_jacobian(block: object, box: Interval, point: Interval, *, prefix: "_Prefix | None" = None,
                   domain: Domain | None = None) -> tuple[np.ndarray, np.ndarray, Product | None]:
    """(A, Delta, product), A and Delta dense (m_out, m_in), for one non-residual block over the box (module
    docstring). With the prefix's state and the domain: a LayerNorm's centred input and a feed-forward block's
    pre-activation are also enclosed as linear images of the reachable set (`linear_image_on_set`), and an unmasked
    attention block's Delta is also bounded along the prefix's directions (`directional_bounds`; the tighter of each
    is kept), which also bounds its movement times the prefix's Jacobian (``product``; None elsewhere)."""
    m_in = int(np.prod(box.shape))
    if isinstance(block, LayerNorm):
        centred = None
        if prefix is not None and domain is not None and box.shape[-1] > 1:
            centred = linear_image_on_set(prefix, domain, centring(box.shape[-1]))
        y, inv, _ = layer_norm_parts(block, box, centred)
        y0, inv0, _ = layer_norm_parts(block, point)
        J_box = layer_norm_jacobian(block, y, inv)
        J_point = layer_norm_jacobian(block, y0, inv0)
        A, delta = _centre_and_delta(_dense(J_box, box.shape, m_in), _dense(J_point, box.shape, m_in))
        if prefix is None or box.shape[-1] == 1:
            return A, delta, None
        return A, delta, Product(prefix.W.mid, layer_norm_product(block, y, inv, A, prefix.W.mid))
    if isinstance(block, FeedForward):
        def jacobian(pre: Interval) -> Interval:
            slope = derivative_interval(block.activation, pre)
            return iaffine(slope.expand(1) * block.W2.T[None], block.W1.T)
        pre_box = iaffine(box, block.W1, block.b1)
        if prefix is not None and domain is not None:
            pre_box = intersect(pre_box, linear_image_on_set(prefix, domain, block.W1, block.b1))
        J_point = jacobian(iaffine(point, block.W1, block.b1))
        A, delta = _centre_and_delta(_dense(jacobian(pre_box), box.shape, m_in), _dense(J_point, box.shape, m_in))
        if prefix is None:
            return A, delta, None
        return A, delta, Product(prefix.W.mid, feed_forward_product(block, pre_box, A, prefix.W.mid))
    if isinstance(block, ATTENTION_TYPES):  # DP or tied L2, causal or not (`_enclosure.attention_jacobian`)
        J_box = attention_jacobian(block, box)
        A = attention_point_jacobian(block, point.mid)
        delta = _distance(J_box, A)
        worth_it = _norm(delta, "inf") > DIRECTIONS_FROM * _norm(np.abs(A), "inf")
        if worth_it and isinstance(block, Attention) and box.shape[0] * box.shape[1] ** 3 <= EXACT_DIAGONAL_MAX:
            # the exact diagonal slope (`_slopes.dp_slopes`; about 5x the separable one's time at N = 17, D = 48):
            # on the digits ViT at eps = 1e-4 the last attention block's ||Delta||_inf 6.36 -> 5.00
            delta = np.minimum(delta, _distance(attention_jacobian(block, box, exact_diagonal=True), A))
        product = None
        if prefix is not None and domain is not None and not block.causal and worth_it:
            right = prefix.W.mid
            bounds = directional_bounds(block, prefix, domain, A, right)
            if bounds is not None:
                delta = np.minimum(delta, bounds[0])
                product = Product(right, bounds[1])
        return A, delta, product
    eye = np.eye(m_in).reshape(*box.shape, m_in)
    J = apply_jacobian(block, box, Interval(eye, eye.copy())).reshape(-1, m_in)
    A = J.mid
    return A, _distance(J, A), None


def linear_image_on_set(prefix: "_Prefix", domain: Domain, M: np.ndarray, b: np.ndarray | None = None) -> Interval:
    """An enclosure of y M + b (row by row; y (N, C) the block's input, M (C, m) and b exact) for every input
    y = F(x), x in the domain, from the prefix's first-order form: y - y0 = W~ delta + E~ delta (W~ in W,
    ||E~||_inf <= e; `directional_bounds`), so (y - y0) M lies in (W~ delta) M +- (e max |delta|) 1^T |M|, and
    (W~ delta) M = (M^T W~) delta is bounded row by row by the domain's spread of the interval matrix M^T W (the
    cancellations inside M^T W are kept, unlike |M|^T |W| r, the image of the box); y0 M + b is enclosed from the
    point. On the digits ViT this narrows the pre-activations of the feed-forward blocks and the centred inputs of
    the LayerNorms, hence their Delta."""
    box, W = prefix.box, prefix.W
    N, C = box.shape
    n0, m = W.shape[1], M.shape[1]
    columns = Interval(W.lo.reshape(N, C, n0).swapaxes(1, 2), W.hi.reshape(N, C, n0).swapaxes(1, 2))  # (N, n0, C)
    image = iaffine(columns, M)  # (N, n0, m): [t, j, :] = W[(t, .), j] M
    G = Interval(image.lo.swapaxes(1, 2).reshape(N * m, n0), image.hi.swapaxes(1, 2).reshape(N * m, n0))
    tail = _up(np.abs(M).sum(0) * _up(prefix.error_inf * float(domain.radius.max()), 1), C)  # (m,)
    radius = round_up(domain.spread(G).reshape(N, m) + tail)
    centre = iaffine(prefix.point, M, b)
    return Interval(round_down(centre.lo - radius), round_up(centre.hi + radius))


DIRECTION_THREADS = min(2, os.cpu_count() or 1)
"""Threads for the forward-mode passes of `directional_bounds` (1.4x on the 2-core development machine)."""
DIRECTIONS_MAX = 256
"""`directional_bounds` only when the model's input has at most this many coordinates (one forward-mode pass per 8)."""
DIRECTIONS_SHARE = 4
"""... and at most 1 / DIRECTIONS_SHARE of the attention block's input coordinates (else the coordinate slopes)."""
DIRECTIONS_FROM = 0.005
"""... and only where the coordinate slopes' ||Delta||_inf exceeds this share of ||A||_inf (below it the chain is
already within a few percent, and the directions cost about 20 s per attention block at N D = 816, K = 64)."""


def directional_bounds(block: object, prefix: "_Prefix", domain: Domain, A: np.ndarray,
                       right: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Delta' >= |J_f(y) - A| for every input y = F(x) of the (unmasked attention) block f with x in the domain,
    from the prefix's first-order form; None where it does not apply (`DIRECTIONS_MAX`) or is not finite.

    The prefix state (its box S, its point enclosure of y0 = F(x0), the interval matrix W and e with
    J_F(x) in W + E, ||E||_inf <= e) gives y - y0 = (int_0^1 J_F(x0 + t delta) dt) delta = W~ delta + E~ delta with
    W~ in W (entrywise) and ||E~||_inf <= e. Let c be the midpoint of point & S; then
    y - c = sum_j delta_j g_j + u, g_j = column j of W~ (in the interval column W_j), |u| <= e max |delta_m| + |y0 - c|.
    Both c and y lie in the box S (convex), so by the integral mean-value theorem and linearity of dJ(xi)[.],

        |J_f(y) - J_f(c)| <= sup_{xi in S} |sum_j delta_j dJ(xi)[g_j] + dJ(xi)[u]| <= T,

    T from `_taylor.direction_remainder_times` (|delta_j| <= r_j, or ||delta||_2 <= eps; for DP blocks with interval
    directions, their midpoints there and the rest by the weighted coordinate slopes, `_split_directions`). Every
    xi of a segment [c, y] is c + t (y0 - c) + W~ (t delta) + E~ (t delta), a point of the set of `_score_set` (the
    domain holds t delta), so for DP blocks the forward passes also take the score differences over that set
    (`_score_set.head_scores`, O(eps) wide where the box's are not: on the digits ViT at eps = 3e-4 (l_inf) the
    box made the last block's directional remainder about 1,000x its value at c). Then
    Delta' = |J_f(c) - A| + T, with J_f(c) enclosed at the point c. For a float matrix ``right`` (N D, q) also
    P >= |(J_f(y) - A) right| = |(J_f(c) - A) right + (int_0^1 dJ(c + t (y - c))[y - c] dt) right|: P = |J_f(c) - A|
    |right| + T_right, the product taken inside the sum over the N D inner coordinates (the chain multiplies the
    movement of J_f by the prefix's Jacobian, whose columns cancel in it); (Delta', P), or (Delta', None) without
    ``right``. The directions follow the set the prefix actually reaches (K input dimensions) instead of the box
    around it (N D coordinates, each bounded separately); the score sets are skipped (the box's kept) where their
    `_score_set.memory_estimate` exceeds `_taylor.MEMORY_LIMIT`. Memory: about `_taylor.BYTES_PER_ENTRY`
    bytes per entry of J per tangent (an estimate, as for one directional seed), so the tangents per pass are cut to
    stay within `_taylor.MEMORY_LIMIT`, and none runs when one tangent alone would exceed it."""
    box, W = prefix.box, prefix.W
    N, D = box.shape
    n0 = W.shape[1]
    per_tangent = TAYLOR_BYTES_PER_ENTRY * (N * D) ** 2  # the Dual's tangent arrays, as for one directional seed
    if n0 > DIRECTIONS_MAX or DIRECTIONS_SHARE * n0 > N * D or per_tangent > TAYLOR_MEMORY_LIMIT:
        return None
    workers = DIRECTION_THREADS if TAYLOR_MEMORY_LIMIT // per_tangent >= 2 * DIRECTION_THREADS else 1
    chunk = int(max(1, min(8, TAYLOR_MEMORY_LIMIT // (per_tangent * workers))))  # all passes within the memory limit
    inner = intersect(prefix.point, box)
    c = np.clip(inner.mid, box.lo, box.hi)
    centre_gap = round_up(np.maximum(inner.hi - c, c - inner.lo))
    u = round_up(centre_gap + _up(prefix.error_inf * float(domain.radius.max()), 1))
    w = numpy_weights(attention_weights(block))
    radii = domain.radius if domain.norm == "inf" else domain.radius[:1]
    directions = Interval(W.lo.reshape(N, D, n0), W.hi.reshape(N, D, n0))
    scores, heads = None, None
    if w.kind == "dp" and score_set_bytes(N, w.d, n0) <= TAYLOR_MEMORY_LIMIT:  # over the set the prefix reaches
        heads = [head_scores(c, u, W, domain.spread, w.W_Q[h], w.W_K[h], None if w.b_Q is None else w.b_Q[h],
                             w.W_V[h]) for h in range(w.H)]
        scores = lambda g: score_duals(heads, g, w.W_Q, w.W_K, w.d)  # noqa: E731
    if w.kind == "dp" and np.any(directions.rad > 0):
        bounds = _split_directions(box, c, w, directions, radii, domain.norm, right, u, chunk, workers, scores,
                                   None if heads is None else [head.L for head in heads])
    else:
        bounds = direction_remainder_times(box, w, directions, radii, domain.norm, right, spread=u, chunk=chunk,
                                           workers=workers, scores=scores if np.all(directions.rad == 0) else None)
    if bounds is None:
        return None
    T, T_right = bounds
    n = N * D
    J_c = jacobian_enclosure(Interval(c, c.copy()), w).reshape(n, n)
    gap = round_up(np.maximum(np.maximum(J_c.hi - A, A - J_c.lo), 0.0))
    delta = _up(gap + T.reshape(n, n), 2)
    if right is None:
        return delta, None
    return delta, _up(_product_up(gap, np.abs(right)) + T_right, 2)


def _split_directions(box: Interval, c: np.ndarray, w, directions: Interval, radii: np.ndarray, norm: str,
                      right: np.ndarray | None, u: np.ndarray, chunk: int, workers: int,
                      scores=None, known_L: list[Interval] | None = None
                      ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(T, T_right) of `directional_bounds` for a DP block, with each direction g_j in [m_j - q_j, m_j + q_j] split
    into its midpoint and the rest: y - c = sum_j delta_j m_j + v, |v| <= e + u entrywise with e = sum_j r_j q_j
    (inf: |delta_j| <= r_j) or eps (sum_j q_j^2)^(1/2) (2: ||delta||_2 <= eps). Then
    |dJ(xi)[y - c]| <= |sum_j delta_j dJ(xi)[m_j]| + |dJ(xi)[v]|: the first by `direction_remainder_times` on the
    point directions m_j, the second by the coordinate slopes weighted by e + u (`_slopes.dp_slopes` with
    ``weights``: sum_m (e + u)_m sup |d_m J| over the box, or over its points in the set of `_score_set` with its
    score differences ``known_L``, where the segments lie); T_right adds S |right| to the first's product. The
    interval directions of `direction_remainder_times` carry the prefix's first-order error through the interval
    derivative instead (on the digits ViT's last attention block at eps = 1e-4, error 44 against a midpoint of 63
    in row sums, which made T 76 there); the smaller of the two is kept entrywise by the caller's min with Delta.
    None where an enclosure is not finite."""
    mid = Interval(directions.mid, directions.mid.copy())
    bounds = direction_remainder_times(box, w, mid, radii, norm, right, spread=None, chunk=chunk, workers=workers,
                                       scores=scores)
    if bounds is None:
        return None
    T, T_right = bounds
    q = round_up(np.maximum(directions.hi - directions.mid, directions.mid - directions.lo))  # (N, D, K)
    if norm == "inf":
        e = _up(np.einsum("ndk,k->nd", q, radii), q.shape[-1])
    else:
        e = round_up(np.sqrt(_up(np.einsum("ndk,ndk->nd", q, q), q.shape[-1])) * float(radii[0]))
    weights = round_up(e + u)
    n = box.lo.size
    with np.errstate(over="ignore", invalid="ignore"):
        S = dp_slopes(box, c, w, weights=weights, known_L=known_L).reshape(n, n)
    if not np.all(np.isfinite(S)):
        return None
    T = _up(T + S.reshape(T.shape), 1)
    if right is not None:
        T_right = _up(T_right + _product_up(S, np.abs(right)), 1)
    return T, T_right


def _compose(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]):
    """g_2 o g_1: (A_2 A_1 (float; its rounding added to Delta), |A_2| Delta_1 + Delta_2 |A_1| + Delta_2 Delta_1)."""
    (A1, D1), (A2, D2) = first, second
    with np.errstate(under="ignore"):
        A = A2 @ A1
    rounding = _product_up(np.abs(A2), np.abs(A1)) * (2 * (A1.shape[0] + 2) * U)  # gamma_n |A2| |A1|
    delta = _product_up(np.abs(A2), D1) + _product_up(D2, np.abs(A1)) + _product_up(D2, D1) + rounding
    return A, _up(delta, 4)


@dataclasses.dataclass
class _Prefix:
    box: Interval
    point: Interval
    W: Interval
    error_inf: float


def _spread(prefix_W: Interval, error_inf: float, domain: Domain) -> np.ndarray:
    """|W delta|_i + ||err||_inf max_m |delta_m| (max |delta_m| <= max r, or eps for the l_2 ball)."""
    scale = float(domain.radius.max())
    return round_up(domain.spread(prefix_W) + _up(error_inf * scale, 1))


def _box(naive: Interval, point: Interval, W: Interval, error_inf: float, domain: Domain) -> Interval:
    spread = _spread(W, error_inf, domain).reshape(point.shape)
    return intersect(naive, Interval(round_down(point.lo - spread), round_up(point.hi + spread)))


@dataclasses.dataclass(frozen=True)
class StateSlopes:
    """One enclosed ball's slopes per state of the chain: per_unit[key] >= sup over the ball (radius ``radius``
    about x0, uniform) of |(J_state(x) u)_i| per unit ||u|| (the domain's norm), key = (top-level block, inner step
    of a residual; -1: the block's output): the box's spread divided by the radius (it is linear in it)."""

    radius: float
    per_unit: dict


def nested_spread(spread: np.ndarray, radius: float, key: tuple[int, int], smaller: tuple[StateSlopes, ...],
                  record: dict) -> np.ndarray:
    """A bound on |F(x) - F(x0)|_i over the ball of radius ``radius`` for a state F of the chain whose spread there
    is ``spread`` (`_spread`), from the slopes of the same state on the smaller balls about x0 (recording this
    ball's own slope per unit into ``record[key]``).

    F(x) - F(x0) = int_0^1 J_F(x0 + t delta) delta dt, and x0 + t delta lies in the ball of radius t ||delta||, so
    |F(x) - F(x0)|_i <= int_0^radius sigma_i(s) ds, sigma_i(s) the smallest slope per unit over the balls (this one
    included) of radius >= s (as `certify.model._radius.nested_radius` does for the margins): a step function,
    integrated piece by piece, every product and sum rounded up (`_nested.step_integral`). The enclosures'
    first-order error grows super-linearly with the radius, so the inner part of each segment costs less; smaller
    boxes then give every later block a smaller Delta, which is what made the chain diverge. The smaller of this and
    ``spread``."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        per_unit = np.nextafter(spread / radius, np.inf)
    record[key] = per_unit
    inner = sorted((b for b in smaller if b.radius < radius and key in b.per_unit), key=lambda b: b.radius)
    if not inner:
        return spread
    radii = np.array([b.radius for b in inner] + [radius])
    total = step_integral(radii, np.stack([b.per_unit[key] for b in inner] + [per_unit]), radius)
    return np.fmin(spread, total)


@dataclasses.dataclass(frozen=True)
class _Source:
    """A block m with Delta_m != 0: Delta_m |W_{m-1}| and the norms the bound uses (fixed once computed)."""

    block: int
    DW: np.ndarray
    DW_inf: float
    D_inf: float
    DW_2: float = math.inf
    D_2: float = math.inf

    @staticmethod
    def of(block: int, delta: np.ndarray, W: Interval, norm: str, product: np.ndarray | None = None) -> "_Source":
        """The source for E = J_f - A with |E| <= delta over the inputs, V in W: Delta |W|, or the smaller of it
        and ``product`` (a bound on |E V| entrywise, `_movement_times`)."""
        DW = _product_up(delta, W.mag)
        if product is not None:
            DW = np.minimum(DW, product)
        twos = (_norm(DW, "2"), _norm(delta, "2")) if norm == "2" else (math.inf, math.inf)
        return _Source(block, DW, _norm(DW, "inf"), _norm(delta, "inf"), *twos)


def _widen(W: Interval, E: np.ndarray) -> Interval:
    return Interval(round_down(W.lo - E), round_up(W.hi + E))


def _image_of_point(block: object, point: Interval, box: Interval, A: np.ndarray, delta: np.ndarray) -> Interval:
    """An enclosure of f(y0) for the exact image y0 of x0, known to lie in ``point`` and in ``box`` (block f with
    |J_f| <= |A| + Delta over the box): with c = mid(point & box), f(y0) = f(c) + J_f(xi) (y0 - c) for some xi on the
    segment [c, y0] (inside the box), so f(y0) in f([c, c]) +- (|A| + Delta) rad(point & box). Intersected with the
    interval image of ``point``. The interval image alone widens a narrow input about 100-fold per attention block
    (each score, exponential and sum is bounded separately): on the digits ViT the point's enclosure grew from 1e-13
    to 5e-3 over three layers, more than the eps = 1e-5 ball's own spread."""
    inner = intersect(point, box)
    centre = inner.mid
    base = enclose(block, Interval(centre, centre.copy()))
    spread = _product_up(_up(np.abs(A) + delta, 1), inner.rad.reshape(-1)).reshape(base.shape)
    centred = Interval(round_down(base.lo - spread), round_up(base.hi + spread))
    return intersect(enclose(block, point), centred)


Step = tuple[np.ndarray, np.ndarray, "Product | None"]
"""One block's (A, Delta, product) from `block_jacobian`."""


def _times(step: Step, Z: Interval) -> np.ndarray:
    """B >= |E Z'| entrywise for every Z' in Z, E = J_f(y) - A of one block at any reachable input y: Delta |Z|, or
    with a product (E c bounded for its matrix c) the smaller of that and bound + Delta |Z' - c|."""
    _, delta, product = step
    B = _product_up(delta, Z.mag)
    if product is not None:
        B = np.minimum(B, _up(product.bound + _product_up(delta, _distance(Z, product.right)), 1))
    return B


def _segment_image(A: np.ndarray, W: Interval, sources: list["_Source"], segments: list[Segment]) -> Interval:
    """An enclosure of A V for every V in W +- Err, Err = sum_m |P_m| DW_m (the entrywise part of the prefix's
    error, `_enclose_chain`): A W +- sum_m |A P_m| DW_m, since the error is sum_m P_m X_m with |X_m| <= DW_m, and
    |fl(A P_m) - A P_m| <= gamma_n |A| |P_m|. Tighter than |A| Err where A cancels across P_m's rows (a LayerNorm's
    centring removes the tokens' common part); the float segments' own error is in the prefix's scalar part."""
    n = A.shape[1]
    gamma = 2 * (n + 2) * U
    abs_A = np.abs(A)
    error = np.zeros((A.shape[0], W.shape[1]))
    for source, segment in zip(sources, segments):
        with np.errstate(under="ignore"):
            AP = np.abs(A @ segment.P)
        error = error + _product_up(AP, source.DW) + gamma * _product_up(abs_A, _product_up(np.abs(segment.P),
                                                                                          source.DW))
    return _widen(imatmul(Interval(A, A), W), _up(error, 3 * len(sources) + 1))


def _movement_times(steps: list[Step], W: Interval, delta: np.ndarray) -> np.ndarray:
    """An entrywise bound on |(J_g(x) - A_g) V| for every x in the domain and V in W, g = f_T o .. o f_1 the blocks
    of ``steps``, A_g = fl(A_T .. A_1) as `_compose` forms it and ``delta`` >= |J_g - A_g| (its Delta).

    With c = mid W and rho >= |V - c|: |(J_g - A_g) V| <= |(J_g - A_g) c| + delta rho. For the first term, with
    Pi_t = J_t .. J_1 at the inputs along x and fl products A^_t = fl(A_t A^_{t-1}): Pi_t c lies in
    Z_t = A_t Z_{t-1} +- B_t (Z_0 = [c, c], B_t = `_times`(step t, Z_{t-1}) >= |E_t Pi_{t-1} c|) and
    |Pi_t c - A^_t c| <= Y_t = B_t + |A_t| Y_{t-1} + gamma_n |A_t| |A^_{t-1}| |c| (Y_1 = B_1), since
    Pi_t c - A^_t c = E_t Pi_{t-1} c + A_t (Pi_{t-1} c - A^_{t-1} c) + (A_t A^_{t-1} - A^_t) c. So the bound is
    Y_T + delta rho. With the attention blocks' products (`directional_bounds`) the sum over the inner coordinates
    in E c keeps its cancellations, which Delta |W| loses."""
    c = W.mid
    rho = _distance(W, c)
    abs_c = np.abs(c)
    Z = Interval(c, c.copy())
    Y, A_hat = None, None
    for step in steps:
        A_t = step[0]
        B = _times(step, Z)
        if A_hat is None:
            Y = B
        else:
            rounding = _product_up(np.abs(A_t), _product_up(np.abs(A_hat), abs_c)) * (2 * (A_hat.shape[0] + 2) * U)
            Y = _up(B + _product_up(np.abs(A_t), Y) + rounding, 2)
        with np.errstate(under="ignore"):
            A_hat = A_t if A_hat is None else A_t @ A_hat
        Z = _widen(imatmul(Interval(A_t, A_t), Z), B)
    return _up(Y + _product_up(delta, rho), 1)


def _one_step(state: _Prefix, block: object, domain: Domain,
              image: Callable[[np.ndarray], Interval] | None = None,
              box_of: Callable[..., Interval] | None = None) -> tuple[_Prefix, Step]:
    """One block with the one-step bound: J in A W + B (B = `_times`: Delta |W| entrywise, or tighter with a
    product) plus (||A|| + ||Delta||) e (inner boxes; state.W already holds the first-order error of the prefix).
    ``image(A)``: an enclosure of A V for every V in state.W, tighter than the interval product (`_segment_image`);
    ``box_of(naive, point, W, e)``: the output box (default `_box`; the chain's nests it, `nested_spread`)."""
    step = block_jacobian(block, state.box, state.point, prefix=state, domain=domain)
    A, delta, _ = step
    AW = imatmul(Interval(A, A), state.W) if image is None else image(A)
    W = _widen(AW, _times(step, state.W))
    e_inf = float(_up((Segment(A).norm("inf") + _norm(delta, "inf")) * state.error_inf, 2))
    point = _image_of_point(block, state.point, state.box, A, delta)
    if box_of is None:
        box = _box(enclose(block, state.box), point, W, e_inf, domain)
    else:
        box = box_of(enclose(block, state.box), point, W, e_inf)
    return _Prefix(box, point, W, e_inf), step


def enclose_chain(blocks: tuple, x0: np.ndarray, domain: Domain, names: list[str] | None = None,
                  progress: Callable[[int], None] | None = None,
                  smaller: tuple[StateSlopes, ...] = ()) -> ChainEnclosure:
    """The module docstring's bound for the top-level blocks about the state x0 (R0, C0); ``progress(k)`` after
    block k. Ctrl-C raises `ModelInterrupted` with the bounds of the prefixes completed before it. ``smaller``: the
    `ChainEnclosure.slopes` of smaller balls about the same x0 (same norm), which narrow every box of the chain
    (`nested_spread`; domains of one radius in every coordinate only)."""
    prefixes: list[PrefixBound] = []
    try:
        return _enclose_chain(blocks, x0, domain, names, progress, prefixes, tuple(smaller))
    except ModelInterrupted:
        raise
    except KeyboardInterrupt:
        raise ModelInterrupted(tuple(prefixes), len(blocks)) from None


def _enclose_chain(blocks: tuple, x0: np.ndarray, domain: Domain, names: list[str] | None,
                   progress: Callable[[int], None] | None, prefixes: list[PrefixBound],
                   smaller: tuple[StateSlopes, ...] = ()) -> ChainEnclosure:
    """`enclose_chain`, appending each completed prefix's bound to ``prefixes`` as it goes.

    The error is kept entrywise as far as it can be: sum_m |A_k .. A_{m+1}| Delta_m (|W_{m-1}| + Err_{m-1}) =: Err_k
    (m_k x n0), so J_{F_k}(x) lies in [W_k - Err_k, W_k + Err_k] plus a matrix of p-norm at most s_k (the terms
    ||A_k .. A_{m+1}|| ||Delta_m|| s_{m-1} and the rounding of the float segment products). Proof: in the module
    docstring's unrolled sum, |V_{m-1}| <= |W_{m-1}| + Err_{m-1} + |R_{m-1}| with ||R_{m-1}|| <= s_{m-1}, so
    |E_m V_{m-1}| <= Delta_m (|W_{m-1}| + Err_{m-1}) + Delta_m |R_{m-1}|, the first entrywise, the second of p-norm
    at most ||Delta_m|| s_{m-1}. Keeping Delta_m Err_{m-1} entrywise (rather than in the norm term) keeps the
    boxes S_k and the directions of `directional_bounds` tight: as one norm it spread over every coordinate.
    The first term may be replaced by any DW_m >= |E_m V~| for all V~ in W_{m-1} +- Err_{m-1} (`_Source.of`'s
    product, from `_movement_times`: the module docstring's "Products")."""
    x0 = np.asarray(x0, dtype=np.float64)
    n0 = x0.size
    r = domain.radius.reshape(x0.shape) if domain.norm == "inf" else domain.radius[0]
    box = Interval(round_down(x0 - r), round_up(x0 + r))
    point = Interval(x0, x0.copy())
    eye = np.eye(n0)
    W = Interval(eye, eye.copy())  # the float product W_k (rounding only)
    widened = W
    seconds_inf, seconds_2 = [0.0], [0.0]  # s_k: the part of prefix k's error not in `widened` (p-norm bound)
    s_prev = 0.0  # s_{k-1}: the part of the prefix's error not in `widened`
    sources: list[_Source] = []  # the blocks with Delta_m != 0
    segments: list[Segment] = []  # A_k .. A_{m+1} for each source, updated per block
    radius = float(domain.radius.max())
    uniform = domain.norm == "2" or bool(np.all(domain.radius == radius))
    record: dict = {}

    def box_of(key: tuple[int, int]) -> Callable[..., Interval]:
        def nested(naive: Interval, point: Interval, W: Interval, e_inf: float) -> Interval:
            spread = _spread(W, e_inf, domain)
            if uniform and radius > 0:
                spread = nested_spread(spread, radius, key, smaller, record)
            spread = spread.reshape(point.shape)
            return intersect(naive, Interval(round_down(point.lo - spread), round_up(point.hi + spread)))
        return nested

    for k, block in enumerate(blocks):
        t = time.perf_counter()
        if isinstance(block, Residual):
            state = _Prefix(box, point, widened, s_prev)
            A_inner, D_inner = None, None
            steps = []
            image = lambda A: _segment_image(A, W, sources, segments)  # noqa: E731 (the prefix's W, before this block)
            for j, sub in enumerate(block.inner):
                state, step = _one_step(state, sub, domain, image if not steps else None, box_of((k, j)))
                steps.append(step)
                A_inner, D_inner = step[:2] if A_inner is None else _compose((A_inner, D_inner), step[:2])
            eye_k = np.eye(A_inner.shape[0])
            A = A_inner + eye_k
            plus = _up(np.abs(A - A_inner - eye_k) + np.abs(A) * U, 1)  # the rounding of + I
            delta = _up(D_inner + plus, 2)
            product = _up(_movement_times(steps, widened, D_inner) + _product_up(plus, widened.mag), 1)
            out_point, naive = point + state.point, box + state.box
        else:
            step = block_jacobian(block, box, point, prefix=_Prefix(box, point, widened, s_prev), domain=domain)
            A, delta, _ = step
            product = _movement_times([step], widened, delta) if step[2] is not None else None
            out_point, naive = _image_of_point(block, point, box, A, delta), enclose(block, box)
        segments = [P.times(A) for P in segments]
        if np.any(delta > 0):
            sources.append(_Source.of(k, delta, widened, domain.norm, product))
            segments.append(Segment(np.eye(A.shape[0])))
        W = imatmul(Interval(A, A), W)
        Err = np.zeros(W.shape)
        s_inf, s_2 = 0.0, 0.0
        last = k == len(blocks) - 1
        for source, P in zip(sources, segments):
            Err = Err + _product_up(np.abs(P.P), source.DW)
            s_inf += P.error_inf * source.DW_inf + P.norm("inf") * source.D_inf * seconds_inf[source.block]
            if domain.norm == "2":  # the dense 2-norm of a segment only at the output (few rows)
                rounding = float(round_up(math.sqrt(float(_up(P.error_1 * P.error_inf, 1)))))
                s_2 += rounding * source.DW_2 + P.norm("2", exact=last) * source.D_2 * seconds_2[source.block]
        Err = _up(Err, 2 * len(sources) + 1)
        s_inf, s_2 = float(_up(s_inf, 4 * len(sources) + 1)), float(_up(s_2, 4 * len(sources) + 1))
        widened = _widen(W, Err)
        s_prev = s_inf
        seconds_inf.append(s_inf)
        seconds_2.append(s_2 if domain.norm == "2" else math.inf)
        point = out_point
        box = box_of((k, -1))(naive, point, widened, s_inf)
        value = float(round_up(output_norm_upper(widened, domain.norm) + (s_inf if domain.norm == "inf" else s_2)))
        prefixes.append(PrefixBound(names[k] if names else type(block).__name__, value, float(np.max(box.rad)),
                                    time.perf_counter() - t))
        if progress is not None:
            progress(k)
    slopes = StateSlopes(radius, record) if uniform and radius > 0 else None
    return ChainEnclosure(domain, point, box, widened, s_inf, s_2, tuple(prefixes), slopes)

