"""Interval enclosure of the L2 core Jacobian M(Y) and of its derivatives over a box of configurations.

MATH.md sections 2 and 7. For N points y_k in R^d, with P_ij = softmax_j(-||y_i - y_j||^2),

    M_ij = P_ij I_d + 2 delta_ij Cov_i + 2 P_ij (y_j - ybar_i)(y_i - y_j)^T.

Configurations are parametrised linearly, y_k = sum_l A[k, :, l] theta_l (gap coordinates for d = 1, anchored
coordinates for d = 2; see ``_global_l2_domain``). Everything is evaluated in the forms MATH.md section 7
recommends against interval dependency:

- differences D_jk = y_j - y_k and sums S_ijk = y_j + y_k - 2 y_i as linear forms of theta (exact for gaps);
- P_ij = 1 / sum_k exp(D_jk . S_ijk)     (D_jk . S_ijk = ||y_i - y_j||^2 - ||y_i - y_k||^2), clipped to [0, 1];
  its gradient is also enclosed as sum_k P_ij P_ik (a_ij - a_ik), a_ij = grad(-||y_i - y_j||^2) (a linear form
  of theta), and the two gradient enclosures are intersected;
- y_j - ybar_i = sum_k P_ik D_jk;
- Cov_i = 1/2 sum_{k,l} P_ik P_il D_kl D_kl^T.

Forward-mode differentiation in interval arithmetic (:class:`Dual`) gives an enclosure of dM/dtheta_l over the
whole box, which the mean-value form in ``_global_l2_mvf`` uses. All arithmetic is outward rounded
(``certify.interval``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import interval as iv
from ..interval import Interval


@dataclass(frozen=True)
class Dual:
    """A value enclosure and the enclosure of its gradient with respect to theta (trailing axis of length L).

    ``g`` is None in value-only evaluations (then every operation skips the gradient). With ``c`` (an enclosure
    of the value at the box centre theta_c) and ``t`` (an enclosure of theta - theta_c, shape (B, L)), every
    nonlinear operation also intersects its value with the centred (mean-value) form c + sum_l g_l t_l, which is
    valid because g encloses the gradient over the whole box.
    """

    v: Interval
    g: Interval | None
    c: Interval | None = None
    t: Interval | None = None

    def _with(self, v: Interval, g: Interval | None, c: Interval | None) -> "Dual":
        return Dual(v, g, c, self.t).tightened()

    def tightened(self) -> "Dual":
        if self.c is None or self.g is None or self.t is None:
            return self
        B, L = self.t.lo.shape
        t = self.t.reshape(*((B,) + (1,) * (self.g.lo.ndim - 2) + (L,)))
        centred = self.c + iv.isum(self.g * t, axis=-1)
        return Dual(iv.intersect(self.v, centred), self.g, self.c, self.t)

    def __add__(self, o: "Dual") -> "Dual":
        return Dual(self.v + o.v, None if self.g is None else self.g + o.g,
                    None if self.c is None else self.c + o.c, self.t)

    def __mul__(self, o: "Dual") -> "Dual":
        g = None if self.g is None else self.g * o.v.expand(-1) + self.v.expand(-1) * o.g
        return self._with(self.v * o.v, g, None if self.c is None else self.c * o.c)

    def sum(self, axis: int) -> "Dual":
        """Sum over a value axis (negative axes count from the end of the value shape)."""
        ax = axis if axis >= 0 else self.v.lo.ndim + axis
        return Dual(iv.isum(self.v, axis=ax), None if self.g is None else iv.isum(self.g, axis=ax),
                    None if self.c is None else iv.isum(self.c, axis=ax), self.t)

    def reshape(self, *shape: int) -> "Dual":
        """Reshape the value; the gradient keeps its trailing L axis."""
        return Dual(self.v.reshape(*shape), None if self.g is None else self.g.reshape(*shape, -1),
                    None if self.c is None else self.c.reshape(*shape), self.t)


def dual_exp(x: Dual) -> Dual:
    e = iv.exp(x.v)
    return x._with(e, None if x.g is None else x.g * e.expand(-1), None if x.c is None else iv.exp(x.c))


def _probability(z: Interval) -> Interval:
    zc = Interval(np.maximum(z.lo, 1.0), np.maximum(z.hi, 1.0))
    p = iv.reciprocal(zc)
    return Interval(np.minimum(p.lo, 1.0), np.minimum(p.hi, 1.0))


def dual_reciprocal_probability(z: Dual) -> Dual:
    """1 / z for z >= 1 (a softmax denominator containing exp(0) = 1); the value is clipped to [0, 1]."""
    p = _probability(z.v)
    return z._with(p, None if z.g is None else -(iv.square(p).expand(-1) * z.g),
                   None if z.c is None else _probability(z.c))


def dual_square(x: Dual) -> Dual:
    return x._with(iv.square(x.v), None if x.g is None else x.g * x.v.expand(-1) * 2.0,
                   None if x.c is None else iv.square(x.c))


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
            offset: Interval | None = None) -> Dual:
    """sum_l coef[..., l] theta_l for theta (B, L) and integer coef (..., L): value and constant gradient."""
    B, L = theta.lo.shape
    extra = coef.ndim - 1
    shape = (B,) + (1,) * extra + (L,)
    value = iv.isum(theta.reshape(*shape) * coef[None], axis=-1)
    grad = Interval.point(np.broadcast_to(coef[None], (B,) + coef.shape)) if with_grad else None
    c = None if centre is None else iv.isum(Interval.point(centre.reshape(shape)) * coef[None], axis=-1)
    return Dual(value, grad, c, offset)


def enclose_core_jacobian(theta: Interval, par: Parametrisation, with_grad: bool = True,
                          centre: np.ndarray | None = None) -> Dual:
    """Enclosure of M and dM/dtheta over the box theta (B, L): value (B, n, n), gradient (B, n, n, L), n = N d.

    The row/column order is token by token (row i*d + c), as in ``certify.jacobian.l2_core_jacobian`` flattened.
    With ``with_grad=False`` only the value is enclosed (the gradient is None). With ``centre`` (B, L), a point
    of each box, the result also carries ``c``, an enclosure of M at the centre, and every intermediate value is
    tightened by its centred form (``Dual.tightened``).
    """
    A = par.A
    N, d = par.N, par.d
    B = theta.lo.shape[0]
    # D[j, k, c] = y_j - y_k;  S[i, j, k, c] = y_j + y_k - 2 y_i
    cD = A[:, None] - A[None, :]  # (N, N, d, L)
    cS = A[None, :, None] + A[None, None, :] - 2.0 * A[:, None, None]  # (N, N, N, d, L)
    offset = None
    if centre is not None and with_grad:
        offset = Interval(iv.round_down(theta.lo - centre), iv.round_up(theta.hi - centre))
    else:
        centre = None
    D = _linear(theta, cD, with_grad, centre, offset)  # (B, N, N, d)
    S = _linear(theta, cS, with_grad, centre, offset)  # (B, N, N, N, d)
    # E[i, j, k] = D_jk . S_ijk = ||y_i - y_j||^2 - ||y_i - y_k||^2
    E = (D.reshape(B, 1, N, N, d) * S).sum(-1)  # (B, N, N, N)
    P = dual_reciprocal_probability(dual_exp(E).sum(-1))  # (B, N, N) [i, j]
    if with_grad:
        # second enclosure of dP_ij/dtheta_l = sum_k P_ij P_ik (a_ijl - a_ikl), a_ijl = d(-||y_i - y_j||^2)/dtheta_l,
        # where a_ijl - a_ikl is a linear form of theta (evaluated without dependency); intersect the two.
        Qc = -2.0 * np.einsum("ijcl,ijcm->ijlm", cD, cD)  # a_ij = Qc[i, j] theta
        A_diff = _linear(theta, Qc[:, :, None] - Qc[:, None, :], False).v  # (B, N, N, N, L) [i, j, k, l]
        PP_ijk = P.v.reshape(B, N, N, 1) * P.v.reshape(B, N, 1, N)
        g2 = iv.isum(PP_ijk.expand(-1) * A_diff, axis=3)
        P = Dual(P.v, iv.intersect(P.g, g2), P.c, P.t).tightened()
    # U[i, j, c] = y_j - ybar_i = sum_k P_ik D_jk
    U = (P.reshape(B, N, 1, N, 1) * D.reshape(B, 1, N, N, d)).sum(3)  # (B, N, N, d)
    # 2 Cov_i[c, c'] = sum_{k, l} P_ik P_il D_kl[c] D_kl[c']
    PP = P.reshape(B, N, N, 1) * P.reshape(B, N, 1, N)  # (B, i, k, l)
    if d == 1:
        Q = dual_square(D).reshape(B, 1, N, N, 1, 1)
    else:
        Q = (D.reshape(B, N, N, d, 1) * D.reshape(B, N, N, 1, d)).reshape(B, 1, N, N, d, d)
    cov2 = (PP.reshape(B, N, N, N, 1, 1) * Q).sum(2).sum(2)  # (B, N, d, d)
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
    L = par.L
    M_g = assemble(R.g, P.g.reshape(B, N, N, L), cov2.g, (L,))
    if centre is None:
        return Dual(M_v, M_g)
    M_c = assemble(R.c, P.c, cov2.c, ())
    return Dual(M_v, M_g, M_c, offset).tightened()


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
