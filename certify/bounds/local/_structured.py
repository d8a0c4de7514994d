"""Structured (norm-based) bounds on max ||J(X)|| over a box of X, tighter than Castin et al. on the same ball.

Instead of bounding J entrywise, bound the norms of its three parts with the box's softmax enclosure P in
[P_lo, P_hi] (`_enclosure.dp_scores` / `l2_scores`). Notation: c = max_l sum_i P_hi[i, l] >= the largest
column sum of P; since rows of P sum to 1, ||P||_2 <= sqrt(||P||_1 ||P||_inf) <= sqrt(c), and ||P||_2 <= ||P_hi||_2
(P >= 0 entrywise). Proofs are in each function's docstring; all are Cauchy-Schwarz.

**DP head** (`certify/jacobian/_dot_product.py`): J^h_il = W^O_h^T [P_il W_V^T + delta_il W_V^T Cov_i B
+ P_il W_V^T (x_l - xbar_i) w_i^T] with B = W_K W_Q^T / sqrt(d), Cov_i = sum_l P_il (x_l - xbar_i)(x_l - xbar_i)^T
(key biases cancel since sum_l P_il (x_l - xbar_i) = 0) and w_i = W_K q_i / sqrt(d). With
V >= max_i sum_l P_il ||x_l - xbar_i||^2 (>= ||Cov_i||_2):

  - ||[P_il (W_V W^O_h)^T]|| = ||P|| ||W_V W^O_h||;
  - the block diagonal part <= ||W_V W^O_h|| ||B|| V;
  - the rank-one part T_il = u_il w_i^T with u_il = P_il (W_V W^O_h)^T (x_l - xbar_i):
    ||T z||^2 <= sum_i ||w_i||^2 (sum_l ||u_il|| ||z_l||)^2
             <= sum_i ||w_i||^2 (sum_l ||u_il||^2 / P_il)(sum_l P_il ||z_l||^2)
             <= ||W_V W^O_h||^2 V max_i ||w_i||^2 c ||z||^2.

  So ||J^h|| <= ||W_V W^O_h|| (||P|| + ||B|| V + sqrt(V c) max_i ||w_i||), and ||J|| <= sum_h of these, or
  ||W_O|| (sum_h (same with ||W_V||)^2)^{1/2}.

  Two refinements (2026-12-07). (1) The block-diagonal part: Cov_i is positive semidefinite with trace
  Var_i <= V, Cov_i = sum_k lambda_k u_k u_k^T, so ||M Cov_i B|| <= sum_k lambda_k ||M u_k|| ||B^T u_k||
  <= V kappa with kappa = max_u ||M u|| ||B^T u|| <= ||M|| ||B|| (M = (W_V W^O_h)^T, or W_V^T in the second
  form; `pair_product_upper` bounds kappa, exactly up to rounding; on the trained digits ViT layer kappa is 0.60
  to 0.63 of ||M|| ||B||). (2) In the rank-one part, P_il Var_i <= min(P_il V_i, P_il (1 - P_il) S_l) with
  S_l >= max_k ||x_k - x_l||^2 (the variance about x_l), and P_il Var_i <= rho^2 g(P_il) with rho >= every
  token's norm, bounded over the box's range of P_il (`_weighted_variance`: 16/27 R^2 instead of R^2 on Ball(R),
  attained).

  Heads stacked (`_stacked_terms`): J = W_O^T (J^h z)_h stacked, so ||J|| <= ||W_O|| times the sum of the three
  parts' norms over all heads at once, where sum_h ||B_h x||^2 <= ||B_stack||^2 ||x||^2 (`_stacked_norm`) couples
  the heads' query terms, which the per-head forms take each at its own worst x (BERT-size ball: 2297 -> 1055).

  The inf-norm from the same parts, row by row (`dp_structured_inf_bound`): ||WVO[:, F]||_1 + ||WVO[:, F]||_2
  (||w_i||_1 Var_i^(1/2) + beta Var_i) per head and row (i, F), with no sqrt(N D) factor.

  V <= max_l sup ||x_l - m||^2 over the box for any fixed m (the weighted variance is at most the weighted second
  moment about m); we take m = 0 (then V <= R^2 on Ball(R)) and m = the centre of the tokens' hull. Per query,
  V_i <= sum_l P_hi[i, l] sup ||x_l - m_i||^2 with m_i the centre of xbar_i's enclosure, and keeping the
  Cauchy-Schwarz step per i gives
  ||T|| <= ||W_V W^O_h|| (max_l sum_i P_hi[i, l] ||w_i||^2 V_i)^{1/2}; the smaller of the two forms is used.

**Tied L2 head** with y = W_Q^T x, s = 1/sqrt(d) (`_enclosure.l2_jacobian_enclosure`):
J^h = s (P (x) G W_Q^T) + 2 s^2 (I (x) G) [blockdiag(Cov_i) + T] (I (x) W_Q^T), G = W^O_h^T W_V^T W_Q,
T_il = P_il (y_l - ybar_i)(y_i - y_l)^T. With Var_i = sum_l P_il ||y_l - ybar_i||^2 <= sum_l P_il ||y_l - y_i||^2
and col_l = sum_i P_il ||y_i - y_l||^2: ||T z||^2 <= sum_i Var_i sum_l P_il ||y_i - y_l||^2 ||z_l||^2
<= max_i Var_i max_l col_l ||z||^2. Also s Var_i <= phi^{-1}(N - 1) (MATH.md section 4 corollary) and
P_il ||y_i - y_l||^2 <= max_z z e^{-s z} = 1 / (e s), so col_l <= (N - 1) / (e s).

Floating point: weight norms are proven (`certify.sdp.norm2_upper`, products with a gamma_k |A||B| term), box
quantities come from outward-rounded intervals, and the final few operations on nonnegative numbers are covered by
`round_up`'s relative margin (certify/bounds/_rounding.py).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import scipy.linalg

from ...interval import Interval, isum
from ...sdp._floating import ETA, gamma, lambda_min_lower, norm2_upper, sum_up, up
from ..closed_form import phi_inverse
from ._enclosure import _Weights, dp_scores, l2_scores, point_einsum, point_einsum_any, token_differences
from .._rounding import Scaled, power_of_two_scaled, round_up


def product_norm_upper(*matrices: np.ndarray) -> float:
    """Proven upper bound on ||M_1 M_2 ... M_k||_2 (float64 inputs taken as exact).

    Each M_i = 2^(k_i) M_hat_i with max |M_hat_i| in [1/2, 1) (`_rounding.power_of_two_scaled`, exact unless an
    entry spans more than ~2^1000 below the largest, which moves it by at most eta / 2 and is covered by the
    underflow term below), so nothing overflows and the product of the M_hat_i is formed at a safe scale.
    fl(A B) = A B + E with |E| <= gamma_n |A| |B| + n eta / 2 entrywise (gradual underflow: each product may lose
    eta / 2, sums of subnormals are exact); applied left to right, with the error terms carried as nonnegative
    matrices and their norms bounded by `norm2_upper` (also a bound for the exact |.| products, up to the same
    gamma factor, which the final 1e-9 margin covers) plus sqrt(rows cols) n eta for both underflows. The result
    is 2^(sum k_i) times that bound, rounded up by `Scaled.round_up` (never 0 or a subnormal too small, never
    inf: beyond float64 it raises InvalidInputError).
    """
    scaled = [power_of_two_scaled(M) for M in matrices]
    product = scaled[0][0]
    magnitude = np.abs(product)
    error = 0.0  # bound on ||exact prefix - product||, as a norm, in the scaled units
    for M, _ in scaled[1:]:
        n = M.shape[0]
        g = gamma(n + 2)
        underflow = up(2.0 * math.sqrt(product.shape[0] * M.shape[1]) * n * ETA)
        error = up(error * norm2_upper(M) + g * norm2_upper(magnitude @ np.abs(M)) * (1 + g) + underflow)
        product = product @ M
        magnitude = magnitude @ np.abs(M)
    exponent = sum(k for _, k in scaled)
    return Scaled.of(float(up(norm2_upper(product) + error)), exponent).round_up("a weight-product norm")


def factored_norm_upper(A: np.ndarray, B: np.ndarray) -> float:
    """Proven upper bound on ||A B||_2 for float64 A (m x k), B (k x n) taken as exact, from k x k matrices only:
    O((m + n) k^2) work, never the m x n product (at D = 768, d = 64: milliseconds, where `product_norm_upper`'s
    2D-sized eigenproblems take seconds).

    After power-of-two scaling (`power_of_two_scaled`; ||A B|| = 2^(a + b) ||A^ B^||), with G = fl(A^T A) and
    Y = fl(B B^T) (mirrored to be exactly symmetric): A^T A <= G + e_G I and B B^T <= Y + e_Y I in the Loewner order,
    e_G = gamma_{m+2} ||A||_F^2 + (m + n + k + 2)^3 ETA (Higham 3.5; the last term covers gradual underflow, at
    most ETA / 2 per operation, with room to spare: the scaled entries are at most 1), e_Y likewise. For PSD X <= X'
    and Y <= Y', lambda_max(X Y) = lambda_max(Y^(1/2) X Y^(1/2)) <= lambda_max(X' Y') (twice, X' PSD), so
    ||A B||^2 = lambda_max(A^T A B B^T) <= lambda_max(X' Y'), X' = G + (e_G + tau) I (diagonal rounded up), Y' =
    Y + e_Y I. Floating-point Cholesky X' = L L^T - Delta, |Delta| <= gamma_{k+1} |L| |L^T| (Higham 10.3), so
    X' <= L L^T + delta I, delta = gamma_{k+1} ||L||_F^2 + (the same underflow term), and by Weyl

        lambda_max(X' Y') <= lambda_max(L^T Y' L) + delta lambda_max(Y')
                          <= lambda_max(C) + e_C + e_Y ||L||_F^2 + delta (lambda_max(Y) + e_Y),

    C = fl(L^T Y L) (mirrored), e_C = gamma_{2k+2} ||L||_F^2 ||Y||_F + (the underflow term); the largest eigenvalues
    of the symmetric float matrices C and Y from `lambda_min_lower` (a verified Cholesky). Every step rounded up. tau
    (0 first) grows while Cholesky fails (a rank-deficient A); returns inf if it never succeeds (the caller keeps
    another bound).
    """
    A_hat, a = power_of_two_scaled(A)
    B_hat, b = power_of_two_scaled(B)
    (m, k), n = A_hat.shape, B_hat.shape[1]
    if not np.any(A_hat) or not np.any(B_hat):
        return 0.0
    frobenius2 = lambda X: float(sum_up(up(X * X)))  # noqa: E731  >= ||X||_F^2
    with np.errstate(under="ignore"):
        G, Y = A_hat.T @ A_hat, B_hat @ B_hat.T
    G, Y = np.triu(G) + np.triu(G, 1).T, np.triu(Y) + np.triu(Y, 1).T
    underflow = float((m + n + k + 2) ** 3 * ETA)  # gradual underflow: at most ETA / 2 per operation, every sum
    e_G = float(up(gamma(m + 2) * frobenius2(A_hat) + underflow))
    e_Y = float(up(gamma(n + 2) * frobenius2(B_hat) + underflow))
    tau, L = 0.0, None
    for _ in range(12):
        X = G.copy()
        X[np.diag_indices(k)] = up(np.diagonal(G) + float(up(e_G + tau)))
        try:
            with np.errstate(under="ignore"):
                L = scipy.linalg.cholesky(X, lower=True, check_finite=False)
            if np.all(np.isfinite(L)):
                break
        except np.linalg.LinAlgError:
            pass
        L, tau = None, max(4.0 * tau, 1e-14 * float(np.trace(G)) + 1e-300)
    if L is None:
        return math.inf
    L_frobenius2 = frobenius2(L)
    delta = float(up(gamma(k + 1) * L_frobenius2 + underflow))
    with np.errstate(under="ignore"):
        C = (L.T @ Y) @ L
    C = np.triu(C) + np.triu(C, 1).T
    e_C = float(up(up(gamma(2 * k + 2) * L_frobenius2) * math.sqrt(frobenius2(Y)) * (1 + 4 * 2.0**-53)
                   + underflow))
    lambda_C = float(up(-lambda_min_lower(-C) + e_C))
    lambda_Y = float(up(-lambda_min_lower(-Y) + e_Y))
    square = float(up(up(lambda_C + up(e_Y * L_frobenius2)) + up(delta * lambda_Y)))
    return Scaled.of(float(up(math.sqrt(max(square, 0.0)) * (1 + 4e-16))), a + b).round_up("a weight-product norm")


def pair_product_upper(left: tuple[np.ndarray, np.ndarray], right: tuple[np.ndarray, np.ndarray]) -> float:
    """Proven upper bound on max over unit u of ||L u|| ||R u||, L = L_1 L_2 and R = R_1 R_2 (float64 factors taken
    as exact; L_1 is m x k, L_2 k x n, R_1 p x q, R_2 q x n). Callers also have ||L|| ||R||, the other bound.

    For every a > 0, ||L u|| ||R u|| <= (a^2 ||L u||^2 + ||R u||^2 / a^2) / 2 = ||[a L; R / a] u||^2 / 2 (AM-GM),
    and [a L; R / a] = M Z with M = blockdiag(a L_1, R_1 / a), Z = [L_2; R_2]. a is chosen numerically: ||M Z||^2 is
    the largest eigenvalue of (M^T M)(Z Z^T), (k + q) x (k + q), convex in log a (golden section). Then, for the
    float matrix M~ = fl(M) (each entry one rounding: |M - M~| <= 2u |M~| + ETA), ||M Z|| <= ||M~ Z|| +
    (2u ||M~||_F + ETA sqrt(#M)) ||Z||_F, all rounded up. By Brickman's
    theorem (the joint numerical range of two quadratic forms is convex for n >= 3) the minimum over a equals the
    maximum over u, so only the rounding and the search separate the bound from the exact value. ||M~ Z|| by
    `factored_norm_upper` ((k + q)-sized matrices only)."""
    (L1, L2), (R1, R2) = left, right
    Z = np.vstack([L2, R2])
    G = Z @ Z.T
    A1, B1 = L1.T @ L1, R1.T @ R1
    k = L1.shape[1]

    # an estimate only (the proof is below, for whatever a is chosen): lambda_max(C G) = lambda_max(G^(1/2) C G^(1/2))
    # with C = blockdiag(a^2 A1, B1 / a^2), i.e. lambda_max(a^2 P_L + P_R / a^2), P_L, P_R formed once
    values, vectors = np.linalg.eigh(G)
    root = (vectors * np.sqrt(np.maximum(values, 0.0))) @ vectors.T
    P_L, P_R = root[:, :k] @ A1 @ root[:k, :], root[:, k:] @ B1 @ root[k:, :]

    def estimate(log_a: float) -> float:
        return float(np.linalg.eigvalsh(math.exp(2 * log_a) * P_L + math.exp(-2 * log_a) * P_R)[-1])

    nL, nR = float(np.trace(A1 @ G[:k, :k])), float(np.trace(B1 @ G[k:, k:]))  # ||L||_F^2, ||R||_F^2
    log_a = 0.0
    if nL > 0 and nR > 0 and math.isfinite(nL * nR):  # the optimum is near a^4 = ||R||^2 / ||L||^2
        low, high = 0.25 * math.log(nR / nL) - 6.0, 0.25 * math.log(nR / nL) + 6.0
        golden = (math.sqrt(5) - 1) / 2  # golden section, one new evaluation per step (convex in log a)
        left_point, right_point = high - golden * (high - low), low + golden * (high - low)
        left_value, right_value = estimate(left_point), estimate(right_point)
        for _ in range(30):
            if left_value <= right_value:
                high, right_point, right_value = right_point, left_point, left_value
                left_point = high - golden * (high - low)
                left_value = estimate(left_point)
            else:
                low, left_point, left_value = left_point, right_point, right_value
                right_point = low + golden * (high - low)
                right_value = estimate(right_point)
        log_a = 0.5 * (low + high)
    a = math.exp(log_a)
    M = np.zeros((L1.shape[0] + R1.shape[0], k + R1.shape[1]))
    M[: L1.shape[0], :k] = a * L1
    M[L1.shape[0]:, k:] = R1 / a
    frobenius = lambda X: float(up(math.sqrt(float(sum_up(up(X * X))))))  # noqa: E731
    # ||M Z|| <= ||M~ Z|| + ||M - M~||_F ||Z||_F, |M - M~| <= 2u |M~| + ETA per entry (one rounding each)
    rounding = up(up(up(2.0**-52 * frobenius(M)) + ETA * math.sqrt(M.size) * (1 + 1e-15)) * frobenius(Z))
    norm = float(up(factored_norm_upper(M, Z) + rounding))
    return float(up(0.5 * up(norm * norm)))


GRAM_DIMENSION = 256
"""Above this D the weight norms of L2 layers (and W_O for every layer) come from the small Gram matrices
(`gram_norm2_upper`) and products of norms:
the dilations of `norm2_upper` are (D + d)- or 2D-sized eigenproblems, 60 of them at BERT size (minutes)."""


def gram_norm2_upper(A: np.ndarray) -> float:
    """Proven upper bound on ||A||_2 from the Gram matrix of the smaller side (n x n for A m x n, m >= n).

    G = fl(A^T A) has |G - A^T A| <= gamma_m |A|^T |A| entrywise (Higham, section 3.5), so
    ||A^T A - G||_2 <= gamma_m || |A|^T |A| ||_F <= gamma_m ||A||_F^2, and ||A||_2^2 = lambda_max(A^T A)
    <= -lambda_min_lower(-G) + gamma_m ||A||_F^2. G is made exactly symmetric by mirroring its upper triangle
    (each entry is still one computed inner product).
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"A must be a matrix, got shape {A.shape}")
    if A.shape[0] < A.shape[1]:
        A = A.T
    m, n = A.shape
    if A.size == 0 or not np.any(A):
        return 0.0
    G = A.T @ A
    G = np.triu(G) + np.triu(G, 1).T
    frobenius2 = float(sum_up(up(A * A)))
    square = up(-lambda_min_lower(-G) + up(gamma(m + 2) * frobenius2))
    return float(up(np.sqrt(max(float(square), 0.0)) * (1 + 4e-16)))


def _mul_up(*values: float) -> float:
    product = 1.0
    for value in values:
        product = float(up(product * value))
    return product


def _gram_head(w: _Weights, h: int, inv_sqrt_d: float) -> tuple[float, ...]:
    """Head h's (VO, V, B, G, Q, KbQ, VO_B, V_B) for large D: every product norm bounded by the product of Gram-based
    norms (submultiplicativity; sound, possibly looser than the norm of the product)."""
    nQ, nK, nV, nO = (gram_norm2_upper(M) for M in (w.W_Q[h], w.W_K[h], w.W_V[h], w.W_O[h]))
    VO, V = _mul_up(nV, nO), nV
    if w.kind != "dp":
        return VO, V, _mul_up(nO, nV, nQ, nQ), _mul_up(nO, nV, nQ), nQ, 0.0, 0.0, 0.0
    B = _mul_up(nK, nQ, inv_sqrt_d)
    KbQ = 0.0 if w.b_Q is None else _mul_up(gram_norm2_upper(w.W_K[h] @ w.b_Q[h][:, None]), 1 + 1e-12, inv_sqrt_d)
    return VO, V, B, 0.0, 0.0, KbQ, _mul_up(VO, B), _mul_up(V, B)


def _exact_head(w: _Weights, h: int, inv_sqrt_d: float) -> tuple[float, ...]:
    """Head h's (VO, V, B, G, Q, KbQ, VO_B, V_B) from the norms of the products themselves. DP: every product is
    D x d times d x D, bounded from d x d matrices (`factored_norm_upper`, `pair_product_upper`: milliseconds to a
    second per head at D = 768). L2: `product_norm_upper` (2D-sized eigenproblems, about 0.5 s per head at D = 256)."""
    WQ, WK, WV, WO = w.W_Q[h], w.W_K[h], w.W_V[h], w.W_O[h]
    if w.kind != "dp":
        return (product_norm_upper(WV, WO), norm2_upper(WV), product_norm_upper(WO.T, WV.T, WQ, WQ.T),
                product_norm_upper(WO.T, WV.T, WQ), norm2_upper(WQ), 0.0, 0.0, 0.0)
    VO, V = factored_norm_upper(WV, WO), gram_norm2_upper(WV)
    B = float(round_up(factored_norm_upper(WK, WQ.T) * inv_sqrt_d))
    KbQ = 0.0 if w.b_Q is None else float(round_up(factored_norm_upper(WK, w.b_Q[h][:, None]) * inv_sqrt_d))
    VO_B = min(_mul_up(VO, B), _mul_up(pair_product_upper((WO.T, WV.T), (WQ, WK.T)), inv_sqrt_d))
    V_B = min(_mul_up(V, B), _mul_up(pair_product_upper((np.eye(WV.shape[1]), WV.T), (WQ, WK.T)), inv_sqrt_d))
    return VO, V, B, 0.0, 0.0, KbQ, VO_B, V_B


@dataclasses.dataclass(frozen=True)
class StructuredConstants:
    """Per-head weight norms used by the structured bounds (all proven upper bounds)."""

    VO: tuple[float, ...]  # ||W_V W^O_h||
    V: tuple[float, ...]  # ||W_V^h||
    O: float  # ||W_O||
    B: tuple[float, ...]  # DP: ||W_K W_Q^T|| / sqrt(d);  L2: ||G W_Q^T|| = ||W^O_h^T W_V^T W_Q W_Q^T||
    G: tuple[float, ...]  # L2: ||G|| = ||W^O_h^T W_V^T W_Q||
    Q: tuple[float, ...]  # L2: ||W_Q^h||
    KbQ: tuple[float, ...]  # DP: ||W_K b_Q|| / sqrt(d) (0 without query bias)
    VO_B: tuple[float, ...] = ()  # DP: >= max_u ||(W_V W^O_h)^T u|| ||B^T u|| (`pair_product_upper`; <= VO B)
    V_B: tuple[float, ...] = ()  # DP: >= max_u ||W_V^T u|| ||B^T u|| (<= V B)
    VO_1: tuple[np.ndarray, ...] = ()  # DP, (D,) per head: >= ||(W_V W^O_h)[:, F]||_1 (`_inf_constants`)
    VO_2: tuple[np.ndarray, ...] = ()  # DP, (D,) per head: >= ||(W_V W^O_h)[:, F]||_2
    B_21: tuple[float, ...] = ()  # DP: >= max_{||y|| = 1} ||B^T y||_1 (sum of B's column norms)
    B_rows: tuple[float, ...] = ()  # DP: >= max_{||x|| = 1} ||B x||_1 (sum of B's row norms)
    KbQ_1: tuple[float, ...] = ()  # DP: >= ||W_K b_Q||_1 / sqrt(d)
    B_stack: float = math.inf  # DP: >= max_{||x|| = 1} (sum_h ||B_h x||^2)^(1/2), B_h = W^K_h W^Q_h^T / sqrt(d)
    KbQ_stack: float = math.inf  # DP: >= (sum_h KbQ_h^2)^(1/2)


def _magnitude_upper(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """>= |A B| entrywise for float64 A (m, n), B (n, p) taken as exact: the magnitude of `point_einsum`'s
    outward-rounded enclosure of the product (scaled against underflow)."""
    return point_einsum("mn,np->mp", Interval.point(A), B).mag


def _norms_up(M: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(1-norms, 2-norms) of a nonnegative M along ``axis``, rounded up."""
    return sum_up(M, axis=axis), up(np.sqrt(sum_up(up(M * M), axis=axis)))


def _inf_constants(w: _Weights, k: StructuredConstants, inv_sqrt_d: float) -> StructuredConstants:
    """The DP constants of `dp_structured_inf_bound`, from entrywise upper bounds on |W_V W^O_h|, |W_K W_Q^T| and
    |W_K b_Q| (`_magnitude_upper`); B's norms are also capped by sqrt(D) ||B||_2."""
    VO_1, VO_2, B_21, B_rows, KbQ_1 = [], [], [], [], []
    cap = lambda h: _mul_up(math.sqrt(w.D) * (1 + 1e-15), k.B[h])  # noqa: E731
    for h in range(w.H):
        one, two = _norms_up(_magnitude_upper(w.W_V[h], w.W_O[h]), axis=0)
        VO_1.append(one)
        VO_2.append(two)
        magnitude = _magnitude_upper(w.W_K[h], w.W_Q[h].T)
        B_21.append(min(cap(h), _mul_up(float(sum_up(_norms_up(magnitude, axis=0)[1])), inv_sqrt_d)))
        B_rows.append(min(cap(h), _mul_up(float(sum_up(_norms_up(magnitude, axis=1)[1])), inv_sqrt_d)))
        KbQ_1.append(0.0 if w.b_Q is None
                     else _mul_up(float(sum_up(_magnitude_upper(w.W_K[h], w.b_Q[h][:, None]))), inv_sqrt_d))
    return dataclasses.replace(k, VO_1=tuple(VO_1), VO_2=tuple(VO_2), B_21=tuple(B_21), B_rows=tuple(B_rows),
                               KbQ_1=tuple(KbQ_1))


def structured_constants(w: _Weights, deadline: float | None = None) -> StructuredConstants:
    """The per-head weight norms, proven: from the products themselves (`_exact_head`; for L2 layers only up to
    D = GRAM_DIMENSION), else from Gram matrices (`_gram_head`). ``deadline`` (a `time.perf_counter()` time): a head
    whose exact norms would end past it, at the slowest head's time so far, gets the Gram ones instead (each head's
    norms bound that head alone, so the two kinds mix; the Gram ones are 10-20% looser at D = 256). The exact ones
    take 0.3 s at D = 256, H = 8 and 3.8 s at D = 768, H = 12 (`factored_norm_upper`), twice that on a busy machine."""
    inv_sqrt_d = float(up(1.0 / math.sqrt(w.d)) * (1 + 1e-15))
    heads, slowest = [], 0.0
    for h in range(w.H):
        began = time.perf_counter()
        exact = (w.kind == "dp" or w.D <= GRAM_DIMENSION) and (deadline is None or began + slowest <= deadline)
        heads.append(_exact_head(w, h, inv_sqrt_d) if exact else _gram_head(w, h, inv_sqrt_d))
        if exact:
            slowest = max(slowest, time.perf_counter() - began)
    W_O = w.W_O.reshape(-1, w.D)
    exact_O = w.D <= GRAM_DIMENSION and (deadline is None or time.perf_counter() + slowest / 3 <= deadline)
    VO, V, B, G, Q, KbQ, VO_B, V_B = (tuple(column) for column in zip(*heads))
    constants = StructuredConstants(VO, V, norm2_upper(W_O) if exact_O else gram_norm2_upper(W_O), B, G, Q, KbQ,
                                    VO_B if w.kind == "dp" else (), V_B if w.kind == "dp" else ())
    if w.kind != "dp":
        return constants
    if deadline is None or time.perf_counter() + slowest <= deadline:  # about one head's time (1.8 s at D = 768)
        constants = dataclasses.replace(constants, B_stack=_stacked_norm(w, inv_sqrt_d),
                                        KbQ_stack=float(up(math.sqrt(float(sum_up(up(np.square(KbQ))))))))
    return _inf_constants(w, constants, inv_sqrt_d)


def _stacked_norm(w: _Weights, inv_sqrt_d: float) -> float:
    """>= max_{||x|| = 1} (sum_h ||B_h x||^2)^(1/2), the norm of the heads' B_h = W^K_h W^Q_h^T / sqrt(d) stacked:
    ||[W^Q_1 .. W^Q_H] blockdiag(W^K_h^T)|| (the transpose), by `factored_norm_upper` ((H d)-sized matrices)."""
    import scipy.linalg as linalg

    queries = np.concatenate([w.W_Q[h] for h in range(w.H)], axis=1)  # D x H d
    keys = linalg.block_diag(*[w.W_K[h].T for h in range(w.H)])  # H d x H D
    return _mul_up(factored_norm_upper(queries, keys), inv_sqrt_d)


def _second_moment_bound(X: Interval, radius: float | None) -> np.ndarray:
    """V >= sup over each box of max_l ||x_l - m||^2, for m = 0 (and the ball radius) and m = the hull centre.

    X: (..., N, D); returns (...).
    """
    about_zero = np.max(np.sum(X.mag**2, axis=-1), axis=-1)
    if radius is not None:
        about_zero = np.minimum(about_zero, radius**2)
    m = 0.5 * X.lo.min(axis=-2, keepdims=True) + 0.5 * X.hi.max(axis=-2, keepdims=True)
    spread = np.maximum(np.abs(X.lo - m), np.abs(X.hi - m))
    about_centre = np.max(np.sum(spread**2, axis=-1), axis=-1)
    return np.minimum(about_zero, about_centre) * (1 + 1e-12)


def _weighted_second_moment(X: Interval, P: Interval) -> np.ndarray:
    """V_i >= sum_l P_il ||x_l - xbar_i||^2 for each query i, per box: X (..., N, D), P (..., N, N) -> (..., N).

    The weighted variance is at most the weighted second moment about any point m_i; take m_i the centre of the
    interval enclosure of xbar_i = sum_k P_ik x_k, and bound sum_l P_il sup ||x_l - m_i||^2 with P_hi.
    """
    xbar = isum(P.expand(-1) * X.expand(-3), axis=-2)  # (..., N, D)
    m = np.clip(0.5 * xbar.lo + 0.5 * xbar.hi, xbar.lo, xbar.hi)  # (..., i, D)
    far = np.maximum(np.abs(X.lo[..., None, :, :] - m[..., :, None, :]), np.abs(X.hi[..., None, :, :] - m[..., :, None, :]))
    r2 = np.sum(far**2, axis=-1)  # (..., i, l)
    return np.sum(P.hi * r2, axis=-1) * (1 + 1e-12)


def _p_max(N: int, logit_range: np.ndarray) -> np.ndarray:
    """Upper bound on every P_il when all logit differences s_il - s_ik lie in [-logit_range, logit_range]:
    P_il = 1 / sum_k exp(s_ik - s_il) <= 1 / (1 + (N - 1) exp(-logit_range)), rounded up."""
    if N == 1:
        return np.ones_like(logit_range)
    with np.errstate(under="ignore"):
        low = np.exp(-np.minimum(logit_range, 700.0)) * (1 - 1e-14)
    return 1.0 / (1.0 + (N - 1) * low) * (1 + 1e-14)


def _weighted_variance(P_lo: np.ndarray, P_hi: np.ndarray, V_i: np.ndarray, spread: np.ndarray,
                       norm2: np.ndarray | None = None) -> np.ndarray:
    """[i, l] >= P_il Var_i for P_il in [P_lo, P_hi], Var_i <= V_i (the query's weighted variance) and
    Var_i <= (1 - P_il) S_l, S_l = spread[l] >= max_k ||x_k - x_l||^2 (the variance is at most the weighted second
    moment about x_l, to which x_l itself adds nothing). So P_il Var_i <= f(P_il), f(p) = min(p V, p (1 - p) S),
    which is at most each of: P_hi V; S max p (1 - p) over [P_lo, P_hi]; and f's maximum over [0, 1],
    V (1 - V / S) at p = 1 - V / S when 2 V <= S, else S / 4 at p = 1 / 2.

    With ``norm2`` (...,) >= every ||x_k||^2 (rho^2; on Ball(R), R^2): write the row as mass p at x_l and 1 - p on
    the others, of mean y (||y|| = s <= rho) and variance W <= rho^2 - s^2 (their second moment about 0 is at most
    rho^2); then Var_i = p (1 - p) ||x_l - y||^2 + (1 - p) W <= p (1 - p) (rho + s)^2 + (1 - p)(rho^2 - s^2), and
    the largest value over s gives P_il Var_i <= rho^2 g(p), g(p) = p for p <= 1/2 and 4 p^2 (1 - p) above
    (s = rho there), increasing up to p = 2/3 and decreasing after: at most rho^2 g(clip(2/3, P_lo, P_hi)), 16/27
    rho^2 on a ball (attained by mass 2/3 on rho u and 1/3 on -rho u) instead of R^2. Rounded up by a relative
    1e-12 (a few operations on nonnegative floats; g is flat at 2/3, so the rounding of 2/3 costs nothing)."""
    V = V_i[..., :, None]
    S = spread[..., None, :]
    p = np.clip(0.5, P_lo, P_hi)
    ratio = np.divide(V, S, out=np.ones(np.broadcast_shapes(V.shape, S.shape)), where=S > 0)
    peak = np.where(2 * V <= S, V * (1 - ratio), 0.25 * S)
    bound = np.minimum(np.minimum(P_hi * V, p * (1 - p) * S), peak)
    if norm2 is not None:
        q = np.clip(2.0 / 3.0, P_lo, P_hi)
        g = np.where(q <= 0.5, q, 4.0 * q * q * (1.0 - q))
        bound = np.minimum(bound, g * norm2[..., None, None])
    return bound * (1 + 1e-12)


def _largest_distances(X: Interval, dX: Interval | None, token_norm: np.ndarray) -> np.ndarray:
    """(..., N): >= sup over each box of max_k ||x_k - x_l||^2 for every token l, from the differences' enclosure
    (``dX``, `token_differences`) where given, and <= (2 max ||x||)^2 in any case."""
    ball = (2 * token_norm) ** 2 * (1 + 1e-12)
    if dX is None:
        return np.broadcast_to(ball[..., None], X.shape[:-1])
    from_box = np.max(np.sum(dX.mag**2, axis=-1), axis=-2) * (1 + 1e-12)  # [l] = max_k sum_D |x_k - x_l|^2
    return np.minimum(from_box, ball[..., None])


def _token_norm(X: Interval, radius: float | None) -> np.ndarray:
    """max_l sup ||x_l|| over each box (and <= R on Ball(R)); X (..., N, D), returns (...)."""
    value = np.sqrt(np.max(np.sum(X.mag**2, axis=-1), axis=-1)) * (1 + 1e-12)
    return np.minimum(value, radius) if radius is not None else value


def _P_norm_and_colsum(P_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bound on ||P||_2, bound on the largest column sum) per box, P_hi (..., N, N) >= P entrywise."""
    c = np.max(np.sum(P_hi, axis=-2), axis=-1) * (1 + 1e-12)
    return np.sqrt(c), c


def dp_structured_bound(X: Interval, w: _Weights, k: StructuredConstants, radius: float | None = None,
                        scores: bool = True) -> np.ndarray:
    """Proven bound on max ||J(X)||_2 over each box X (..., N, D) for DP attention (module docstring).

    scores=False skips the interval enclosure of the attention matrix (O(N^3 d) memory per head) and of the
    per-query second moments (O(N^2 D)): then P_il <= the logit-range bound `_p_max` and V_i <= V, in O(N D + N^2)
    memory (the matrix-free path for large layers; the same inequalities with weaker inputs).
    """
    dX = token_differences(X) if scores else None
    V = _second_moment_bound(X, radius)
    token_norm = _token_norm(X, radius)
    spread = _largest_distances(X, dX, token_norm)  # (..., N): >= max_k ||x_k - x_l||^2
    N = X.shape[-2]
    per_head_VO, per_head_V = [], []
    inv_sqrt_d = 1.0 / math.sqrt(w.d)
    stacked_P, stacked_T, stacked_C, variance = 0.0, 0.0, 0.0, 0.0  # the heads stacked (module docstring)
    largest_weighted, query_weights = 0.0, 0.0  # max_h P^h_il Var^h_i and sum_h ||W_V^h||^2 ||w^h_i||^2
    for h in range(w.H):
        if scores:
            Q, _, P = dp_scores(X, dX, w, h)
        else:
            Q = point_einsum_any("...nD,Dc->...nc", X, w.W_Q[h])
            if w.b_Q is not None:
                Q = Q + w.b_Q[h]
            ones = np.ones((*X.shape[:-1], N))
            P = Interval(0.0 * ones, ones)
        Kq = point_einsum_any("...ic,Ec->...iE", Q, w.W_K[h])  # W_K q_i
        w_from_box = np.sqrt(np.max(np.sum(Kq.mag**2, axis=-1), axis=-1)) * inv_sqrt_d
        w_max = np.minimum(w_from_box, k.B[h] * token_norm + k.KbQ[h]) * (1 + 1e-12)
        # |s_il - s_ik| = |w_i . (x_l - x_k)| <= w_max 2 max ||x||
        P_hi = np.minimum(P.hi, _p_max(N, 2 * w_max * token_norm * (1 + 1e-12))[..., None, None])
        Pn, c = _P_norm_and_colsum(P_hi)
        # per-query refinements: V_i <= sum_l P_hi[i, l] sup ||x_l - m_i||^2 with m_i the centre of xbar_i's
        # enclosure, and ||T||^2 <= max_l sum_i P_hi[i, l] ||w_i||^2 V_i (the Cauchy-Schwarz step kept per i)
        if scores:
            V_i = np.minimum(_weighted_second_moment(X, Interval(np.minimum(P.lo, P_hi), P_hi)), V[..., None])
        else:
            V_i = np.broadcast_to(V[..., None], (*V.shape, N))  # (..., N)
        w_i = np.sqrt(np.sum(Kq.mag**2, axis=-1)) * inv_sqrt_d * (1 + 1e-12)  # (..., N)
        w_i = np.minimum(w_i, w_max[..., None])
        P_lo = np.zeros_like(P_hi) if not scores else np.minimum(P.lo, P_hi)
        weighted = _weighted_variance(P_lo, P_hi, V_i, spread, token_norm**2 * (1 + 1e-15))
        T3 = np.sqrt(np.max(np.sum(weighted * (w_i**2)[..., :, None], axis=-2), axis=-1) * (1 + 1e-12))
        T3 = np.minimum(T3, np.sqrt(V * c) * w_max)
        VO_B = k.VO_B[h] if k.VO_B else k.VO[h] * k.B[h]
        V_B = k.V_B[h] if k.V_B else k.V[h] * k.B[h]
        per_head_VO.append(k.VO[h] * (Pn + T3) + VO_B * np.max(V_i, axis=-1))
        per_head_V.append(k.V[h] * (Pn + T3) + V_B * np.max(V_i, axis=-1))
        stacked_P = stacked_P + (k.V[h] * Pn) ** 2
        stacked_T = stacked_T + (k.V[h] * T3) ** 2
        stacked_C = stacked_C + (V_B * np.max(V_i, axis=-1)) ** 2
        variance = np.maximum(variance, np.max(V_i, axis=-1))
        largest_weighted = np.maximum(largest_weighted, weighted)
        query_weights = query_weights + (k.V[h] * w_i) ** 2
    value = np.minimum(sum(per_head_VO), k.O * np.sqrt(sum(b * b for b in per_head_V)))
    if math.isfinite(k.B_stack):
        x_norm = np.sqrt(np.sum(X.mag**2, axis=-1)) * (1 + 1e-12)  # (..., N)
        if radius is not None:
            x_norm = np.minimum(x_norm, radius)
        terms = _stacked_terms(k, x_norm, stacked_P, stacked_T, stacked_C, variance, largest_weighted, query_weights)
        value = np.minimum(value, k.O * sum(terms) * (1 + 1e-12))
    return value * (1 + 1e-9)


def _stacked_terms(k: StructuredConstants, x_norm: np.ndarray, stacked_P, stacked_T, stacked_C, variance,
                   largest_weighted, query_weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The DP bound with the heads stacked (module docstring), its three terms: bounds on ||(A^h z)_h|| / ||z|| for
    A^h = P^h (x) W_V^h^T, T^h (rank-one part) and C^h (covariance block) over all heads at once; then
    ||J|| <= ||W_O|| (sum of the three). From the per-head loop of `dp_structured_bound`: stacked_P = sum_h
    (||W_V^h|| ||P^h||)^2, stacked_T = sum_h (||W_V^h|| T3_h)^2, stacked_C = sum_h (V_B_h max_i V^h_i)^2 (the heads
    one at a time), variance >= max_{h,i} Var^h_i, largest_weighted [i, l] >= max_h P^h_il Var^h_i, query_weights [i]
    >= sum_h ||W_V^h||^2 ||w^h_i||^2; x_norm [i] >= ||x_i||.

    T: ||T^h z||^2 <= ||W_V^h||^2 sum_l ||z_l||^2 sum_i ||w^h_i||^2 P^h_il Var^h_i (the per-head Cauchy-Schwarz), so
    sum_h ||T^h z||^2 <= ||z||^2 max_l sum_i largest_weighted[i, l] query_weights[i], and sum_h ||w^h_i||^2 =
    sum_h ||B_h x_i + c_h||^2 <= (B_stack ||x_i|| + KbQ_stack)^2 (the triangle inequality in the stacked space).
    C: sum_h ||W_V^h^T Cov^h_i B_h z_i||^2 <= max_h ||W_V^h||^2 variance^2 sum_h ||B_h z_i||^2
    <= (max_h ||W_V^h|| variance B_stack)^2 ||z_i||^2. Each term is also at most its per-head form."""
    largest_V = max(k.V)
    query_weights = np.minimum(query_weights, (largest_V * (k.B_stack * x_norm + k.KbQ_stack)) ** 2)
    joint_T = np.sqrt(np.max(np.sum(largest_weighted * query_weights[..., :, None], axis=-2), axis=-1))
    joint_C = largest_V * k.B_stack * variance
    return (np.sqrt(stacked_P) * (1 + 1e-12), np.minimum(np.sqrt(stacked_T), joint_T) * (1 + 1e-12),
            np.minimum(np.sqrt(stacked_C), joint_C) * (1 + 1e-12))


def dp_structured_inf_bound(X: Interval, w: _Weights, k: StructuredConstants, radius: float | None = None,
                            scores: bool = True) -> np.ndarray:
    """Proven bound on max ||J(X)||_inf over each box X (..., N, D) for DP attention (the largest row sum), from the
    same three parts as `dp_structured_bound`. Row (i, F) of head h, with WVO = W_V W^O_h, y_l = x_l - xbar_i:

      - values: sum_{l, E} P_il |WVO[E, F]| = ||WVO[:, F]||_1 (the row of P sums to 1);
      - rank-one part: sum_{l, E} P_il |WVO[:, F] . y_l| |w_i[E]| = ||w_i||_1 sum_l P_il |WVO[:, F] . y_l|
        <= ||w_i||_1 ||WVO[:, F]||_2 Var_i^(1/2) (Cauchy-Schwarz with weights P_il);
      - covariance block (l = i): ||B^T Cov_i WVO[:, F]||_1 <= sum_l P_il |WVO[:, F] . y_l| ||B^T y_l||_1
        <= ||WVO[:, F]||_2 beta Var_i, beta >= max_{||y|| = 1} ||B^T y||_1;

    with Var_i <= V_i (`_weighted_second_moment`, and the box's / ball's second moment) and ||w_i||_1 <=
    min(sum_E |W_K q_i|_E / sqrt(d) over the box, ||B x_i||_1 + ||W_K b_Q||_1 / sqrt(d)). The heads add row by row
    (the same F), and the bound is the largest row. It needs no sqrt(N D) factor, unlike the 2-norm bound times
    sqrt(N D): on the trained digits ViT layer's LayerNorm ball (D = 48, N = 17) it is 24x smaller. Needs the
    constants of `structured_constants` for DP (``VO_1`` etc.); scores as in `dp_structured_bound`."""
    if not k.VO_1:
        raise ValueError("dp_structured_inf_bound needs the DP constants of structured_constants")
    dX = token_differences(X) if scores else None
    V = _second_moment_bound(X, radius)
    x_norm = np.sqrt(np.sum(X.mag**2, axis=-1)) * (1 + 1e-12)  # (..., N)
    if radius is not None:
        x_norm = np.minimum(x_norm, radius)
    inv_sqrt_d = 1.0 / math.sqrt(w.d) * (1 + 1e-15)
    rows = np.zeros((*X.shape[:-1], k.VO_1[0].shape[0]))  # (..., N, F)
    for h in range(w.H):
        w_1 = k.B_rows[h] * x_norm + k.KbQ_1[h]  # (..., N)
        if scores:
            Q, _, P = dp_scores(X, dX, w, h)
            Kq = point_einsum_any("...ic,Ec->...iE", Q, w.W_K[h])
            w_1 = np.minimum(w_1, np.sum(Kq.mag, axis=-1) * inv_sqrt_d)
            V_i = np.minimum(_weighted_second_moment(X, P), V[..., None])
        else:
            V_i = np.broadcast_to(V[..., None], x_norm.shape)
        spread = w_1 * np.sqrt(V_i) + k.B_21[h] * V_i  # (..., N)
        rows = rows + k.VO_1[h] + k.VO_2[h] * spread[..., None]
    return np.max(rows, axis=(-2, -1)) * (1 + 1e-9)


def l2_structured_bound(
    X: Interval, w: _Weights, k: StructuredConstants, N: int, radius: float | None = None, scores: bool = True
) -> np.ndarray:
    """Proven bound on max ||J(X)||_2 over each box X (..., N, D) for tied L2 attention (module docstring).

    With every token of norm <= r (box and ball), ||y_i - y_l|| <= 2 r ||W_Q||, which caps ||y_i - y_l||^2,
    Var_i <= (r ||W_Q||)^2 and every P_il <= 1 / (1 + (N - 1) exp(-s (2 r ||W_Q||)^2)). scores=False uses only
    these caps (no interval softmax, O(N^3 d) memory per head saved): the matrix-free path for large layers.
    """
    dX = token_differences(X) if scores else None
    token_norm = _token_norm(X, radius)
    s = 1.0 / math.sqrt(w.d)
    lemma = phi_inverse(N - 1) * math.sqrt(w.d) * (1 + 1e-15) if N > 1 else 0.0  # sup of Var_i in y coordinates
    column_cap = (N - 1) * math.sqrt(w.d) / math.e * (1 + 1e-15)
    total = 0.0
    for h in range(w.H):
        spread = (2 * token_norm * k.Q[h]) ** 2 * (1 + 1e-12)  # >= ||y_i - y_l||^2
        cap = _p_max(N, spread * s * (1 + 1e-12))[..., None, None]
        if scores:
            dY, P = l2_scores(dX, w, h)
            P_hi = np.minimum(P.hi, cap)
            D2 = np.maximum(isum(dY * dY, axis=-1).hi, 0.0)  # ||y_j - y_k||^2 upper, [..., j, k]
            D2 = np.minimum(D2, spread[..., None, None])
        else:
            P_hi = np.broadcast_to(cap, (*spread.shape, N, N))
            D2 = np.broadcast_to(spread[..., None, None], (*spread.shape, N, N))
        Pn, _ = _P_norm_and_colsum(P_hi)
        weighted = P_hi * np.swapaxes(D2, -1, -2)  # [i, l] = P_il ||y_l - y_i||^2 (upper)
        var_i = np.minimum(np.minimum(weighted.sum(axis=-1), lemma), ((token_norm * k.Q[h]) ** 2)[..., None])
        var = np.max(var_i, axis=-1)
        col = np.minimum(np.max(weighted.sum(axis=-2), axis=-1), column_cap)
        # ||T z||^2 <= sum_i Var_i sum_l P_il ||y_i - y_l||^2 ||z_l||^2 <= max_l sum_i Var_i weighted[i, l] ||z||^2
        T = np.minimum(np.sqrt(var * col), np.sqrt(np.max(np.sum(var_i[..., :, None] * weighted, axis=-2), axis=-1)))
        total = total + s * Pn * k.B[h] + 2 * s * s * (var + T) * k.G[h] * k.Q[h]
    return total * (1 + 1e-9)
