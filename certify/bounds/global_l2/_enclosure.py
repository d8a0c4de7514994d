"""Interval enclosure of the L2 core Jacobian M(Y) and of its derivatives over a box of configurations.

MATH.md sections 2 and 7. For N points y_k in R^d, with P_ij = softmax_j(-||y_i - y_j||^2),

    M_ij = P_ij I_d + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T.

Configurations are parametrised linearly, y_k = sum_l A[k, :, l] theta_l (gap coordinates for d = 1, anchored
coordinates for d = 2; see ``_domain``). Everything is evaluated in the forms MATH.md section 7
recommends against interval dependency:

- differences D_jk = y_j - y_k and sums S_ijk = y_j + y_k - 2 y_i as linear forms of theta (exact for gaps);
- P_ij = 1 / sum_k exp(D_jk . S_ijk)     (D_jk . S_ijk = ||y_i - y_j||^2 - ||y_i - y_k||^2), clipped to [0, 1];
  its gradient is also enclosed as sum_k P_ij P_ik (a_ij - a_ik), a_ij = grad(-||y_i - y_j||^2) (a linear form
  of theta), and the two gradient enclosures are intersected;
- y_j - ybar_i = sum_k P_ik D_jk;
- Cov_i = 1/2 sum_{k,l} P_ik P_il D_kl D_kl^T.

Forward-mode differentiation in interval arithmetic (:class:`Dual`) gives an enclosure of dM/dtheta_l over the
whole box, which the mean-value form in ``_mean_value`` uses. All arithmetic is outward rounded
(``certify.interval``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import interval as iv
from ...interval import Interval


@dataclass(frozen=True)
class Dual:
    """A value enclosure, the enclosure of its gradient with respect to theta (trailing axis of length L) and,
    optionally, of its Hessian (two trailing axes L, L).

    ``g`` is None in value-only evaluations. ``second`` says whether second derivatives are tracked; then ``h`` is
    their enclosure, or None where they are exactly zero (linear forms of theta). Sums and products carry them by
    (u w)'' = u'' w + u w'' + u' w'^T + w' u'^T; the nonlinear functions below are first order only (the second
    derivatives of P come from the softmax form in ``enclose_core_jacobian``).

    Centred forms. With ``c`` (the same quantity evaluated at the box centre theta_c: a Dual of point enclosures,
    with its gradient when ``h`` is tracked) and ``t`` (an enclosure of theta - theta_c, shape (B, L)), every
    nonlinear operation intersects (``tightened``)

    - the value with the mean-value form c.v + sum_l g_l t_l (g encloses the gradient over the whole box) and,
      with a Hessian, with the second-order form c.v + sum_l c.g_l t_l + 1/2 sum_{l,m} h_lm t_l t_m;
    - the gradient, with a Hessian, with its mean-value form c.g + sum_m h_lm t_m.

    Each is valid by Taylor's theorem on the segment from theta_c to theta, which lies in the box.

    Third derivatives. ``third`` (which needs ``second``) says whether they are tracked; ``k`` is their enclosure
    (three trailing axes L, L, L), None where exactly zero. Products carry them by
    (u w)^(3) = u^(3) w + u w^(3) + sym3(u'' w') + sym3(w'' u'), with
    sym3(A b)_lmn = A_lm b_n + A_ln b_m + A_mn b_l for symmetric A. They are not tightened by centred forms.
    """

    v: Interval
    g: Interval | None
    c: "Dual | None" = None
    t: Interval | None = None
    h: Interval | None = None
    second: bool = False
    k: Interval | None = None
    third: bool = False

    def _with(self, v: Interval, g: Interval | None, c: "Dual | None", h: Interval | None,
              second: bool, k: Interval | None = None) -> "Dual":
        return Dual(v, g, c, self.t, h, second, k, self.third and second).tightened()

    def tightened(self) -> "Dual":
        if self.c is None or self.g is None or self.t is None:
            return self
        B, L = self.t.lo.shape
        t = self.t.reshape(*((B,) + (1,) * (self.g.lo.ndim - 2) + (L,)))
        g = self.g
        curved = self.h is not None and self.c.g is not None
        if curved:
            g = iv.intersect(g, self.c.g + iv.isum(self.h * t.expand(-2), axis=-1))
        v = iv.intersect(self.v, self.c.v + iv.isum(g * t, axis=-1))
        if curved:
            quadratic = iv.isum(iv.isum(self.h * _outer_offsets(self.t, self.g.lo.ndim - 2), axis=-1), axis=-1)
            v = iv.intersect(v, self.c.v + iv.isum(self.c.g * t, axis=-1) + quadratic * 0.5)
        return Dual(v, g, self.c, self.t, self.h, self.second, self.k, self.third)

    def _same_order(self, o: "Dual") -> None:
        # h = None means "exactly zero" only for a second-order Dual: mixing orders would drop an unknown Hessian
        if self.second != o.second:
            raise ValueError("cannot combine a second-order Dual with a first-order one")
        if self.third != o.third:
            raise ValueError("cannot combine a third-order Dual with a second-order one")

    def __add__(self, o: "Dual") -> "Dual":
        self._same_order(o)
        return Dual(self.v + o.v, None if self.g is None else self.g + o.g,
                    None if self.c is None else self.c + o.c, self.t, _add(self.h, o.h), self.second,
                    _add(self.k, o.k), self.third)

    def __mul__(self, o: "Dual") -> "Dual":
        self._same_order(o)
        g = None if self.g is None else self.g * o.v.expand(-1) + self.v.expand(-1) * o.g
        h = None
        if self.second:
            cross = _outer(self.g, o.g)
            h = _add(_add(None if self.h is None else self.h * _expand2(o.v),
                          None if o.h is None else _expand2(self.v) * o.h), cross + cross.swapaxes(-1, -2))
        k = None
        if self.third:
            k = _add(_add(None if self.k is None else self.k * _expand3(o.v),
                          None if o.k is None else _expand3(self.v) * o.k),
                     _add(_sym3(self.h, o.g), _sym3(o.h, self.g)))
        return self._with(self.v * o.v, g, None if self.c is None else self.c * o.c, h, self.second, k)

    def sum(self, axis: int) -> "Dual":
        """Sum over a value axis (negative axes count from the end of the value shape)."""
        ax = axis if axis >= 0 else self.v.lo.ndim + axis
        return Dual(iv.isum(self.v, axis=ax), None if self.g is None else iv.isum(self.g, axis=ax),
                    None if self.c is None else self.c.sum(ax), self.t,
                    None if self.h is None else iv.isum(self.h, axis=ax), self.second,
                    None if self.k is None else iv.isum(self.k, axis=ax), self.third)

    def reshape(self, *shape: int) -> "Dual":
        """Reshape the value; the gradient keeps its trailing L axis and the Hessian its trailing L, L axes."""
        L = None if self.g is None else self.g.lo.shape[-1]
        return Dual(self.v.reshape(*shape), None if self.g is None else self.g.reshape(*shape, L),
                    None if self.c is None else self.c.reshape(*shape), self.t,
                    None if self.h is None else self.h.reshape(*shape, L, L), self.second,
                    None if self.k is None else self.k.reshape(*shape, L, L, L), self.third)

    def select(self, axis: int, index: np.ndarray) -> "Dual":
        """The entries ``index`` along value axis ``axis`` (counted from the batch axis 0, so >= 1)."""
        def take(x: Interval | None) -> Interval | None:
            return None if x is None else Interval(np.take(x.lo, index, axis=axis), np.take(x.hi, index, axis=axis))

        return Dual(take(self.v), take(self.g), None if self.c is None else self.c.select(axis, index), self.t,
                    take(self.h), self.second, take(self.k), self.third)

    def first_order(self) -> "Dual":
        """The same quantity with second derivatives no longer tracked."""
        return Dual(self.v, self.g, self.c, self.t)


def _add(a: Interval | None, b: Interval | None) -> Interval | None:
    """Sum of two Hessian enclosures, None standing for zero."""
    if a is None:
        return b
    return a if b is None else a + b


def _expand2(x: Interval) -> Interval:
    return x.expand(-1).expand(-1)


def _expand3(x: Interval) -> Interval:
    return x.expand(-1).expand(-1).expand(-1)


def _moveaxis(x: Interval, source: int, destination: int) -> Interval:
    return Interval(np.moveaxis(x.lo, source, destination), np.moveaxis(x.hi, source, destination))


def _sym3(A: Interval | None, b: Interval | None) -> Interval | None:
    """A_lm b_n + A_ln b_m + A_mn b_l for symmetric A (..., L, L) and b (..., L): (..., L, L, L); None (zero)
    if either is None."""
    if A is None or b is None:
        return None
    X = A.expand(-1) * b.expand(-2).expand(-2)  # X_lmn = A_lm b_n
    return X + X.swapaxes(-1, -2) + _moveaxis(X, -1, -3)  # + A_ln b_m + A_mn b_l


def _outer3(x: Interval) -> Interval:
    """x_l x_m x_n over the trailing axis: (..., L) -> (..., L, L, L)."""
    return _outer(x, x).expand(-1) * x.expand(-2).expand(-2)


def _outer(a: Interval, b: Interval) -> Interval:
    """a_l b_m over the trailing gradient axes: (..., L) x (..., L) -> (..., L, L)."""
    return a.expand(-1) * b.expand(-2)


def _outer_self(x: Interval) -> Interval:
    """x_l x_m over the trailing axis (..., L) -> (..., L, L); the diagonal x_l^2 without dependency."""
    L = x.lo.shape[-1]
    xx = _outer(x, x)
    sq = iv.square(x)
    idx = np.arange(L)
    lo, hi = xx.lo.copy(), xx.hi.copy()
    lo[..., idx, idx], hi[..., idx, idx] = sq.lo, sq.hi
    return Interval(lo, hi)


def _outer_offsets(t: Interval, extra: int) -> Interval:
    """t_l t_m (B, 1.., L, L) with ``extra`` singleton value axes; the diagonal t_l^2 without dependency."""
    B, L = t.lo.shape
    return _outer_self(t).reshape(*((B,) + (1,) * extra + (L, L)))


def _first_order_only(x: Dual, name: str) -> None:
    if x.second:
        raise ValueError(f"{name} is first order only: enclose_core_jacobian gets the second derivatives of P from "
                         f"the softmax form, not through {name}")


def dual_exp(x: Dual) -> Dual:
    _first_order_only(x, "dual_exp")
    e = iv.exp(x.v)
    return x._with(e, None if x.g is None else x.g * e.expand(-1), None if x.c is None else dual_exp(x.c), None,
                   False)


def probability(z: Interval) -> Interval:
    """1 / z for a softmax denominator z >= 1 (it contains exp(0) = 1), clipped to [0, 1]."""
    zc = Interval(np.maximum(z.lo, 1.0), np.maximum(z.hi, 1.0))
    p = iv.reciprocal(zc)
    return Interval(np.minimum(p.lo, 1.0), np.minimum(p.hi, 1.0))


def dual_reciprocal_probability(z: Dual) -> Dual:
    """1 / z for z >= 1 (a softmax denominator containing exp(0) = 1); the value is clipped to [0, 1]."""
    _first_order_only(z, "dual_reciprocal_probability")
    p = probability(z.v)
    return z._with(p, None if z.g is None else -(iv.square(p).expand(-1) * z.g),
                   None if z.c is None else dual_reciprocal_probability(z.c), None, False)


def dual_square(x: Dual) -> Dual:
    """x^2 without the dependency of x * x: the value by ``iv.square`` and, for a second-order Dual, the Hessian
    2 (x x'' + x' x'^T) with the diagonal (x'_l)^2 of the outer product also by ``iv.square``."""
    g = None if x.g is None else x.g * x.v.expand(-1) * 2.0
    h = k = None
    if x.second:
        h = _outer_self(x.g) * 2.0
        if x.h is not None:
            h = h + _expand2(x.v) * x.h * 2.0
    if x.third:  # (x^2)^(3) = 2 (x x^(3) + sym3(x'' x'))
        k = _add(None if x.k is None else _expand3(x.v) * x.k, _sym3(x.h, x.g))
        k = None if k is None else k * 2.0
    return x._with(iv.square(x.v), g, None if x.c is None else dual_square(x.c), h, x.second, k)


@dataclass(frozen=True)
class Parametrisation:
    """y_k = sum_l A[k, c, l] theta_l: A has shape (N, d, L) with small integer entries (exact linear forms)."""

    A: np.ndarray

    @property
    def N(self) -> int:
        return self.A.shape[0]

    @property
    def d(self) -> int:
        return self.A.shape[1]

    @property
    def L(self) -> int:
        return self.A.shape[2]

    def points(self, theta: np.ndarray) -> np.ndarray:
        """Float configurations Y (B, N, d) from parameters theta (B, L)."""
        return np.einsum("kcl,bl->bkc", self.A, theta)


def gap_parametrisation(N: int) -> Parametrisation:
    """d = 1, y_1 = 0 and y_{k+1} = y_k + g_k: the gaps g_1..g_{N-1} are the parameters."""
    A = np.zeros((N, 1, N - 1))
    for k in range(N):
        A[k, 0, :k] = 1.0
    return Parametrisation(A)


def _linear(theta: Interval, coef: np.ndarray, with_grad: bool, centre: np.ndarray | None = None,
            offset: Interval | None = None, with_hessian: bool = False, with_third: bool = False) -> Dual:
    """sum_l coef[..., l] theta_l for theta (B, L) and integer coef (..., L): value, constant gradient and zero
    Hessian."""
    B = theta.lo.shape[0]
    value = iv.linear_combination(theta, coef)
    grad = Interval.point(np.broadcast_to(coef[None], (B,) + coef.shape)) if with_grad else None
    c = None
    if centre is not None:
        c = Dual(iv.linear_combination(Interval.point(centre), coef), grad if with_hessian else None)
    return Dual(value, grad, c, offset, None, with_hessian, None, with_third)  # zero Hessian and third derivatives


def enclose_core_jacobian(theta: Interval, par: Parametrisation, with_grad: bool = True,
                          centre: np.ndarray | None = None, with_hessian: bool = False,
                          with_third: bool = False) -> Dual:
    """Enclosure of M and dM/dtheta over the box theta (B, L): value (B, n, n), gradient (B, n, n, L), n = N d;
    with ``with_hessian`` also of the second derivatives d^2 M / dtheta_l dtheta_m (B, n, n, L, L), and with
    ``with_third`` (which needs ``with_hessian``) of the third derivatives (``k``, (B, n, n, L, L, L)).

    The row/column order is token by token (row i*d + c), as in ``certify.jacobian.l2_core_jacobian`` flattened.
    With ``with_grad=False`` only the value is enclosed (the gradient is None). With ``centre`` (B, L), a point
    of each box, the result also carries ``c``, an enclosure of M at the centre, and every intermediate value is
    tightened by its centred form (``Dual.tightened``).
    """
    A = par.A
    N, d, L = par.N, par.d, par.L
    B = theta.lo.shape[0]
    pair_k, pair_l = np.triu_indices(N, 1)  # the pairs k < l
    pairs = pair_k.size

    def pairwise_cov2(P: Dual, D: Dual) -> Dual:
        """2 Cov_i = sum_{k,l} P_ik P_il D_kl D_kl^T (B, N, d, d), as twice the sum over k < l (the terms are
        symmetric in (k, l) and vanish at k = l)."""
        PP = P.select(2, pair_k) * P.select(2, pair_l)  # (B, i, pair)
        D_pair = D.reshape(B, N * N, d).select(1, pair_k * N + pair_l)  # (B, pair, d)
        Q = (dual_square(D_pair) if d == 1 else
             D_pair.reshape(B, pairs, d, 1) * D_pair.reshape(B, pairs, 1, d))
        half = (PP.reshape(B, N, pairs, 1, 1) * Q.reshape(B, 1, pairs, d, d)).sum(2)
        return half + half
    # D[j, k, c] = y_j - y_k;  S[i, j, k, c] = y_j + y_k - 2 y_i
    cD = A[:, None] - A[None, :]  # (N, N, d, L)
    cS = A[None, :, None] + A[None, None, :] - 2.0 * A[:, None, None]  # (N, N, N, d, L)
    offset = None
    if centre is not None and with_grad:
        offset = Interval(iv.round_down(theta.lo - centre), iv.round_up(theta.hi - centre))
    else:
        centre = None
    with_hessian = with_hessian and with_grad
    with_third = with_third and with_hessian
    D = _linear(theta, cD, with_grad, centre, offset, with_hessian, with_third)  # (B, N, N, d)
    S = _linear(theta, cS, with_grad, centre, offset, with_hessian, with_third)  # (B, N, N, N, d)
    # E[i, j, k] = D_jk . S_ijk = ||y_i - y_j||^2 - ||y_i - y_k||^2
    # P by the chain rule, first order only: its second derivatives come from the softmax form below
    E = (D.first_order().reshape(B, 1, N, N, d) * S.first_order()).sum(-1)  # (B, N, N, N)
    P = dual_reciprocal_probability(dual_exp(E).sum(-1))  # (B, N, N) [i, j]
    if with_grad:
        # second enclosure of dP_ij/dtheta_l = sum_k P_ij P_ik (a_ijl - a_ikl), a_ijl = d(-||y_i - y_j||^2)/dtheta_l,
        # where a_ijl - a_ikl is a linear form of theta (evaluated without dependency); intersect the two.
        Qc = -2.0 * np.einsum("ijcl,ijcm->ijlm", cD, cD)  # a_ij = Qc[i, j] theta
        A_diff = _linear(theta, Qc[:, :, None] - Qc[:, None, :], False).v  # (B, N, N, N, L) [i, j, k, l]
        PP_ijk = P.v.reshape(B, N, N, 1) * P.v.reshape(B, N, 1, N)
        g2 = iv.isum(PP_ijk.expand(-1) * A_diff, axis=3)
        hessian = third = None
        if with_hessian:
            # softmax form of the second derivatives, without the cancellations of the chain rule above:
            # d^2 P_ij = P_ij [ m_ij m_ij^T - Cov_i(a) + sum_k P_ik (Qc_ij - Qc_ik) ],  m_ij = sum_k P_ik (a_ij - a_ik),
            # Cov_i(a) = 1/2 sum_{j,k} P_ij P_ik (a_ij - a_ik)(a_ij - a_ik)^T,  da_ij / dtheta = Qc[i, j]
            m = iv.isum(P.v.reshape(B, N, 1, N, 1) * A_diff, axis=3)  # (B, i, j, L)
            # (the terms are symmetric in (j, k) and vanish at j = k: half the sum is the sum over j < k)
            cov_a = iv.isum(_expand2(PP_ijk[:, :, pair_k, pair_l]) * _outer_self(A_diff[:, :, pair_k, pair_l]),
                            axis=2)  # (B, i, L, L)
            const = iv.isum(_expand2(P.v).reshape(B, N, 1, N, 1, 1) * (Qc[:, :, None] - Qc[:, None, :])[None],
                            axis=3)  # (B, i, j, L, L)
            inner = _outer_self(m) - cov_a.reshape(B, N, 1, L, L) + const
            hessian = _expand2(P.v) * inner
            if with_third:
                # d^3 P_ij = P_ij [ m_ij m_ij m_ij + sym3(m'_ij m_ij) + m''_i ], differentiating the form above with
                # m'_ij = Qc_ij - sum_k P_ik Qc_ik - Cov_i(a) and, since sum_k P_ik m_ik = 0,
                # m''_i = -sum_k P_ik [ m_ik m_ik m_ik + sym3(Qc_ik m_ik) ]   (proofs/third_order.py)
                m_prime = const - cov_a.reshape(B, N, 1, L, L)
                Qc_box = Interval.point(np.broadcast_to(Qc[None], (B, N, N, L, L)))
                m_second = -iv.isum(_expand3(P.v) * (_outer3(m) + _sym3(Qc_box, m)), axis=2)  # (B, i, L, L, L)
                third = _expand3(P.v) * (_outer3(m) + _sym3(m_prime, m) + m_second.reshape(B, N, 1, L, L, L))
        P = Dual(P.v, iv.intersect(P.g, g2), P.c, P.t, hessian, with_hessian, third, with_third).tightened()
    # U[i, j, c] = y_j - ybar_i = sum_k P_ik D_jk, and 2 Cov_i[c, c'] = sum_{k, l} P_ik P_il D_kl[c] D_kl[c']:
    # values and gradients in these forms (no dependency between P and the points), first order only
    P1, D1 = P.first_order(), D.first_order()
    U = (P1.reshape(B, N, 1, N, 1) * D1.reshape(B, 1, N, N, d)).sum(3)  # (B, N, N, d)
    cov2 = pairwise_cov2(P1, D1)  # (B, N, d, d)
    if with_hessian:
        # second derivatives in forms N times smaller: U_ij = D_ji - w_i with w_i = sum_k P_ik D_ki (D_ji is linear,
        # so d^2 U_ij = -d^2 w_i), and 2 Cov_i = 2 sum_k P_ik U_ik U_ik^T
        DT = _linear(theta, np.swapaxes(cD, 0, 1), True, centre, offset, True, with_third)  # DT[i, k] = y_k - y_i
        w = (P.reshape(B, N, N, 1) * DT).sum(2)  # (B, N, d)

        def broadcast_j(x: Interval) -> Interval:  # w_i -> [i, j] for every j
            shape = (B, N, N) + x.lo.shape[2:]
            return Interval(np.broadcast_to(x.lo[:, :, None], shape), np.broadcast_to(x.hi[:, :, None], shape))

        U = Dual(U.v, U.g, U.c, U.t, -broadcast_j(w.h), True, -broadcast_j(w.k) if with_third else None,
                 with_third).tightened()
        UU = dual_square(U) if d == 1 else U.reshape(B, N, N, d, 1) * U.reshape(B, N, N, 1, d)
        cov2_u = (P.reshape(B, N, N, 1, 1) * UU.reshape(B, N, N, d, d)).sum(2)  # (B, N, d, d), halved below
        # and the pairwise form 2 Cov_i = sum_{k,l} P_ik P_il D_kl D_kl^T to second order: neither form's interval
        # Hessian contains the other (measured on N = 6 boxes of half-width 0.1: the intersection's magnitudes sum to
        # 27% less than the U form's, and the Taylor remainder of M is 20% smaller)
        cov2_pair = pairwise_cov2(P, D)
        cov2 = Dual(iv.intersect(iv.intersect(cov2.v, cov2_u.v * 2.0), cov2_pair.v),
                    iv.intersect(iv.intersect(cov2.g, cov2_u.g * 2.0), cov2_pair.g), cov2.c, cov2.t,
                    iv.intersect(cov2_u.h * 2.0, cov2_pair.h), True,
                    iv.intersect(cov2_u.k * 2.0, cov2_pair.k) if with_third else None, with_third).tightened()
    # 2 P_ij U_ij[c] (y_i - y_j)[c'],  (y_i - y_j) = D[i, j]
    R = (P.reshape(B, N, N, 1) * U).reshape(B, N, N, d, 1) * D.reshape(B, N, N, 1, d)  # (B, i, j, c, c')
    eye = np.eye(d)
    idx = np.arange(N)

    def assemble(r: Interval, p: Interval, c2: Interval, trailing: tuple[int, ...]) -> Interval:
        p_eye = p.reshape(*p.shape[:3], 1, 1, *trailing) * eye.reshape((d, d) + (1,) * len(trailing))
        lo, hi = np.zeros(r.shape), np.zeros(r.shape)
        lo[:, idx, idx], hi[:, idx, idx] = c2.lo, c2.hi
        m = r * 2.0 + p_eye + Interval(lo, hi)
        return Interval(np.swapaxes(m.lo, 2, 3).reshape(B, N * d, N * d, *trailing),
                        np.swapaxes(m.hi, 2, 3).reshape(B, N * d, N * d, *trailing))

    M_v = assemble(R.v, P.v, cov2.v, ())
    if not with_grad:
        return Dual(M_v, None)
    M_g = assemble(R.g, P.g.reshape(B, N, N, L), cov2.g, (L,))
    M_h = None if not with_hessian else assemble(R.h, P.h.reshape(B, N, N, L, L), cov2.h, (L, L))
    M_k = None if not with_third else assemble(R.k, P.k.reshape(B, N, N, L, L, L), cov2.k, (L, L, L))
    if centre is None:
        return Dual(M_v, M_g, h=M_h, k=M_k)
    M_c = Dual(assemble(R.c.v, P.c.v, cov2.c.v, ()),
               None if not with_hessian else assemble(R.c.g, P.c.g.reshape(B, N, N, L), cov2.c.g, (L,)))
    return Dual(M_v, M_g, M_c, offset, M_h, k=M_k).tightened()


def core_jacobian_float(Y: np.ndarray) -> np.ndarray:
    """M(Y) in float64 (no enclosure), Y (B, N, d) -> (B, N d, N d); the same formula as l2_core_jacobian."""
    Y = np.asarray(Y, dtype=np.float64)
    B, N, d = Y.shape
    diff = Y[:, :, None, :] - Y[:, None, :, :]  # [i, j] = y_i - y_j
    logits = -np.sum(diff**2, axis=-1)
    logits -= logits.max(axis=-1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=-1, keepdims=True)
    ybar = P @ Y
    U = Y[:, None, :, :] - ybar[:, :, None, :]  # [i, j] = y_j - ybar_i
    M = 2.0 * P[..., None, None] * U[..., :, None] * diff[..., None, :] + P[..., None, None] * np.eye(d)
    dev = Y[:, None, :, :] - ybar[:, :, None, :]  # [i, k] = y_k - ybar_i
    cov = np.einsum("bik,bikc,bike->bice", P, dev, dev)
    idx = np.arange(N)
    M[:, idx, idx] += 2.0 * cov
    return M.transpose(0, 1, 3, 2, 4).reshape(B, N * d, N * d)
