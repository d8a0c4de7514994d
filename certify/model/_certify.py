"""Certified local Lipschitz constant of a whole model on an eps-ball, and an attained (adversarial) estimate.

Theorem (chain rule on convex sets). Let f = f_L o ... o f_1 and B_0 = {x : ||x - x0||_p <= eps} (convex). Let
S_0 be the box x0 +- eps (it contains B_0) and S_k a box containing f_k(S_{k-1}) (interval propagation,
`_enclosure.analyse`). If L_k >= sup_{s in S_{k-1}} ||J_{f_k}(s)||_p (wherever f_k is differentiable; ReLU's
kinks are covered by its Clarke Jacobian diag([0, 1])), then for x, y in B_0:

    ||f(x) - f(y)||_p <= (prod_k L_k) ||x - y||_p.

Proof: by induction u = f_{<k}(x), v = f_{<k}(y) lie in S_{k-1}; the box is convex, so the segment [u, v] lies in
it and the mean-value inequality gives ||f_k(u) - f_k(v)|| <= L_k ||u - v||. The same p-norm is used on vec of
every intermediate state (MATH.md section 0), so the factors compose. Each L_k is proven and rounded up
(`_enclosure`), and the product is rounded up after every factor.

Per block (on its propagated box): Linear ||W^T||_p; LayerNorm max|gamma| / sqrt(var_min + eps) (2-norm) or the
exact row sum of its interval Jacobian (inf); FeedForward the norm of the interval matrix W2^T diag(act'(box))
W1^T per row (or ||W2|| max|act'| ||W1||); attention certify's own `taylor` bound (MATH.md section 7) on the cube
about the box's midpoint that contains the box; a residual x + g(x): 1 + prod Lip(g), or, for a LayerNorm +
feed-forward inner part, the interval Jacobian I + J_FF J_LN directly, whichever is smaller.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np
import torch

from .._errors import InvalidInputError
from ..interval import Interval, round_down, round_up
from ._blocks import ATTENTION_TYPES, Attention, Model, Residual
from ._enclosure import analyse, enclose, intersect
from ._forward import apply_block, as_state, forward_blocks
from ._jacobian_chain import ChainEnclosure, enclose_chain
from ._jacobian_chain import Domain, ModelInterrupted, PrefixBound, memory_estimate

CHAIN_MEMORY_LIMIT = 4 * 2**30
"""The largest memory estimate of the Jacobian enclosure that `certify_model` runs."""


@dataclasses.dataclass(frozen=True)
class BlockFactor:
    """One top-level block: its name, its certified local constant on its input box, the box's largest radius."""

    block: str
    factor: float
    input_radius: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class ModelCertificate:
    """A certified upper bound on Lip_p of the model on the eps-ball (label 'certified'): with method "product" its
    per-block factors; with method "jacobian" the certified bound on each prefix of the model (`PrefixBound`)."""

    value: float
    norm: str
    eps: float
    factors: tuple[BlockFactor, ...]
    output_radius: float
    seconds: float
    label: str = "certified"
    direct_residuals: bool = True
    method: str = "product"
    prefixes: tuple[PrefixBound, ...] = ()
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "label": self.label, "norm": self.norm, "eps": self.eps, "method": self.method,
                "seconds": self.seconds, "output_radius": self.output_radius,
                "direct_residuals": self.direct_residuals, "note": self.note,
                "factors": [dataclasses.asdict(f) for f in self.factors],
                "prefixes": [dataclasses.asdict(p) for p in self.prefixes]}


@dataclasses.dataclass(frozen=True)
class AttainedEstimate:
    """max ||J(x)||_p found at points x of the eps-ball: a lower bound on Lip_p there, labelled 'estimate'."""

    value: float
    norm: str
    eps: float
    point: np.ndarray
    seconds: float
    label: str = "estimate"

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "label": self.label, "norm": self.norm, "eps": self.eps, "seconds": self.seconds}


def _check(norm: str, eps: float) -> None:
    if norm not in ("2", "inf"):
        raise InvalidInputError(f"norm must be '2' or 'inf', got {norm!r}")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise InvalidInputError(f"eps must be a positive finite number, got {eps!r}")


def _name(block: object) -> str:
    if isinstance(block, Residual):
        return "Residual(" + "+".join(type(b).__name__ for b in block.inner) + ")"
    return type(block).__name__


METHODS: tuple[str, ...] = ("jacobian", "product")


def _sizes(blocks: tuple, S: torch.Tensor, states: list[int], attention: list[tuple[int, int, str]]) -> torch.Tensor:
    """Run the blocks on a zero state, recording every state's size and every attention input's (N, D) with the
    seeds of its Taylor form ("slopes" for DP, "directional" for L2: `_enclosure.attention_jacobian`)."""
    for block in blocks:
        if isinstance(block, Residual):
            S = S + _sizes(block.inner, S, states, attention)
        else:
            if isinstance(block, ATTENTION_TYPES):
                attention.append((S.shape[1], S.shape[2], "slopes" if isinstance(block, Attention) else "directional"))
            S = apply_block(block, S)
        states.append(S[0].numel())
    return S


def chain_memory(model: Model) -> int:
    """Bytes `enclose_model` needs for this model (`_jacobian_chain.memory_estimate`)."""
    states: list[int] = []
    attention: list[tuple[int, int, str]] = []
    with torch.no_grad():
        _sizes(model.blocks, torch.zeros(1, *model.state_shape, dtype=torch.float64), states, attention)
    n0 = int(np.prod(model.state_shape))
    return memory_estimate(max(states + [n0]), n0, attention)


def model_enclosure(model: Model, x0: Any, eps: float | np.ndarray, norm: str = "inf",
                    progress: Callable[[int], None] | None = None, smaller: tuple = ()) -> ChainEnclosure:
    """The first-order enclosure of the model's output over the ball {||x - x0||_norm <= eps} (norm "inf": eps may
    be an array of per-coordinate radii of the input's shape, a box) (`_jacobian_chain`). ``smaller``: the
    ``slopes`` of enclosures of smaller balls about the same x0 in the same norm, which narrow its boxes
    (`_jacobian_chain.nested_spread`)."""
    if norm not in ("2", "inf"):
        raise InvalidInputError(f"norm must be '2' or 'inf', got {norm!r}")
    x = as_state(model, x0)[0].numpy()
    radius = np.asarray(eps, dtype=np.float64)
    if radius.ndim and (norm != "inf" or radius.shape != tuple(model.input_shape)):
        raise InvalidInputError(f"eps must be a number (or, for norm 'inf', an array of shape {model.input_shape}), "
                                f"got shape {radius.shape}")
    if not (np.all(np.isfinite(radius)) and np.all(radius >= 0) and (radius.ndim or radius > 0)):
        raise InvalidInputError("eps must be finite and > 0 (an array of radii: >= 0)")
    radius = np.broadcast_to(radius, x.shape).reshape(-1).copy() if norm == "inf" else radius.reshape(1)
    need = chain_memory(model)
    if need > CHAIN_MEMORY_LIMIT:
        raise InvalidInputError(f"the Jacobian enclosure of this model needs about {need / 2**30:.1f} GiB "
                                f"(limit {CHAIN_MEMORY_LIMIT / 2**30:.0f} GiB)")
    names = [_name(b) for b in model.blocks]
    return enclose_chain(model.blocks, x, Domain(x, radius, norm), names, progress, smaller)


NESTED_MAX = 8
"""The most smaller balls `certify_model` encloses first (``nested``)."""


def smaller_radius(eps: float, level: int, levels: int) -> float:
    """eps 2^(-level / levels): the radius of `certify_model`'s smaller ball ``level`` of ``levels``."""
    return float(eps) * 2.0 ** (-level / levels)


def certify_model(model: Model, x0: Any, eps: float, norm: str = "inf", *, method: str = "jacobian",
                  direct: bool = True, progress: Callable[[int], None] | None = None,
                  nested: int = 0) -> ModelCertificate:
    """Certified Lip_norm of ``model`` on {x : ||x - x0||_norm <= eps}.

    Args:
        model: a `Model`.
        x0: one input of shape ``model.input_shape``.
        eps: the ball's radius (> 0).
        norm: "2" or "inf": the ball's norm and the norm of the Lipschitz constant (on every vec).
        method: "jacobian" (default): the model's Jacobian enclosed over the ball as one interval matrix
            (`_jacobian_chain`; falls back to "product", saying so in ``note``, when its memory estimate exceeds
            CHAIN_MEMORY_LIMIT); "product": the product of per-block certified constants on propagated boxes (module
            docstring's theorem).
        direct: ("product") use the direct interval Jacobian of LayerNorm + feed-forward residual blocks (else 1 + Lip).
        progress: called with the index of each top-level block when it is done (by every chain of ``nested``).
        nested: ("jacobian") first enclose K = nested balls about x0, of radii eps 2^(-k/K) for k = K, ..., 1
            (evenly spaced in log radius between eps/2 and eps: the slope is paid on the outer shell, so dense radii
            near eps matter and smaller ones hardly do), each with the slopes of the ones before, and narrow every
            box of the chain on the eps-ball by their slopes (`_jacobian_chain.nested_spread`): K + 1 chains' time,
            tighter where the chain's error grows faster than linearly in eps. A Ctrl-C during those smaller balls
            certifies nothing (their prefixes bound smaller balls, not this one).

    Raises:
        ModelInterrupted: on Ctrl-C (KeyboardInterrupt), carrying the certified bound of every prefix of the model
            completed before it (a bound on the prefix, not on the whole model).
    """
    _check(norm, eps)
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(nested, bool) or not isinstance(nested, int) or not 0 <= nested <= NESTED_MAX:
        raise InvalidInputError(f"nested must be an integer in [0, {NESTED_MAX}], got {nested!r}")
    try:
        return _certify_model(model, x0, eps, norm, method, direct, progress, nested)
    except ModelInterrupted:
        raise
    except KeyboardInterrupt:  # outside the per-block loops (input checks, memory estimate): nothing certified
        raise ModelInterrupted((), len(model.blocks)) from None


def _certify_model(model: Model, x0: Any, eps: float, norm: str, method: str, direct: bool,
                   progress: Callable[[int], None] | None, nested: int = 0) -> ModelCertificate:
    """`certify_model` after its argument checks."""
    start = time.perf_counter()
    note = ""
    if method == "jacobian":
        need = chain_memory(model)
        if need <= CHAIN_MEMORY_LIMIT:
            smaller: list = []
            for level in range(nested, 0, -1):
                try:
                    inner = model_enclosure(model, x0, smaller_radius(eps, level, nested), norm, progress,
                                            tuple(smaller))
                except KeyboardInterrupt:
                    raise ModelInterrupted((), len(model.blocks)) from None
                if inner.slopes is not None:
                    smaller.append(inner.slopes)
            enclosure = model_enclosure(model, x0, eps, norm, progress, tuple(smaller))
            return ModelCertificate(enclosure.lipschitz(norm), norm, float(eps), (), float(np.max(enclosure.box.rad)),
                                    time.perf_counter() - start, direct_residuals=direct, method="jacobian",
                                    prefixes=enclosure.prefixes)
        note = (f"the Jacobian enclosure needs about {need / 2**30:.1f} GiB (limit "
                f"{CHAIN_MEMORY_LIMIT / 2**30:.0f} GiB): the product of per-block constants instead")
    done: list[PrefixBound] = []
    try:
        total, factors, box = _product(model, x0, float(eps), norm, direct, progress, done)
    except ModelInterrupted:
        raise
    except KeyboardInterrupt:
        raise ModelInterrupted(tuple(done), len(model.blocks)) from None
    return ModelCertificate(total, norm, float(eps), tuple(factors), float(np.max(box.rad)),
                            time.perf_counter() - start, direct_residuals=direct, method="product", note=note)


def _product(model: Model, x0: Any, eps: float, norm: str, direct: bool, progress: Callable[[int], None] | None,
             done: list[PrefixBound]) -> tuple[float, list[BlockFactor], Interval]:
    """The product of per-block constants (module docstring), appending the certified bound of each completed
    prefix (the product so far) to ``done``."""
    x = as_state(model, x0)[0].numpy()
    box = Interval.centred(x, np.full(x.shape, eps))
    point = Interval.point(x)
    # ||s_k(x) - s_k(x0)||_inf <= ||.||_2 <= (prod of 2-norm factors) ||x - x0||_2, and likewise with inf-norm
    # factors: a ball about the enclosed image of x0 that keeps the correlations the boxes lose
    eps2 = float(round_up(eps * math.sqrt(x.size))) if norm == "inf" else eps
    chain = {"2": eps2, "inf": eps}
    total, factors = 1.0, []
    for k, block in enumerate(model.blocks):
        t = time.perf_counter()
        radius = float(np.max(box.rad))
        box, L = analyse(block, box, ("2", "inf"), direct)
        point = enclose(block, point)
        chain = {n: float(round_up(chain[n] * L[n])) for n in chain}
        r = min(chain.values())
        if math.isfinite(r):
            box = intersect(box, Interval(round_down(point.lo - r), round_up(point.hi + r)))
        total = float(round_up(total * L[norm]))
        factors.append(BlockFactor(_name(block), L[norm], radius, time.perf_counter() - t))
        if not np.all(np.isfinite(box.lo) & np.isfinite(box.hi)):
            total = math.inf
        done.append(PrefixBound(factors[-1].block, total, float(np.max(box.rad)), factors[-1].seconds))
        if progress is not None:
            progress(k)
    return total, factors, box


def _jacobian_norm(J: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "inf":
        return J.abs().sum(1).max()
    return torch.linalg.matrix_norm(J, 2)


def _project(x: torch.Tensor, x0: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    d = x - x0
    if norm == "inf":
        return x0 + d.clamp(-eps, eps)
    n = d.norm()
    return x0 + (d * (eps / n) if n > eps else d)


def attained_lipschitz(model: Model, x0: Any, eps: float, norm: str = "inf", *, restarts: int = 8,
                       steps: int = 20, seed: int = 0) -> AttainedEstimate:
    """max ||J(x)||_norm over points of the eps-ball (labelled 'estimate'; a lower bound on the local constant).

    The full Jacobian of vec(output) by vec(input) in float64 (torch.func.jacrev), at x0, at random points, and
    along projected sign-gradient (inf) or gradient (2) ascent of ||J(x)|| from each random start.
    """
    _check(norm, eps)
    start = time.perf_counter()
    x0_state = as_state(model, x0)[0]
    shape = x0_state.shape

    def f(v: torch.Tensor) -> torch.Tensor:
        return forward_blocks(model.blocks, v.reshape(1, *shape)).reshape(-1)

    def value(v: torch.Tensor) -> torch.Tensor:
        return _jacobian_norm(torch.func.jacrev(f)(v), norm)

    c = x0_state.reshape(-1)
    generator = torch.Generator().manual_seed(seed)
    best, best_x = float(value(c)), c
    for r in range(restarts):
        d = torch.rand(c.shape, generator=generator, dtype=torch.float64) * 2 - 1
        x = _project(c + eps * (d.sign() if norm == "inf" else d / d.norm()), c, eps, norm)
        step = eps / 4
        for _ in range(steps):
            x = x.detach().requires_grad_(True)
            v = value(x)
            if float(v.detach()) > best:
                best, best_x = float(v.detach()), x.detach()
            (grad,) = torch.autograd.grad(v, x)
            if not torch.isfinite(grad).all() or float(grad.abs().max()) == 0:
                break
            move = grad.sign() if norm == "inf" else grad / grad.norm()
            x = _project(x.detach() + step * move, c, eps, norm)
            step *= 0.9
        with torch.no_grad():
            v = float(value(x))
        if v > best:
            best, best_x = v, x.detach()
    return AttainedEstimate(best, norm, float(eps), best_x.reshape(model.input_shape).numpy(),
                            time.perf_counter() - start)
