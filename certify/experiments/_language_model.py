"""A character-level Transformer language model with pluggable attention (MATH.md section 6, paper Sec. 5.3).

Attention variants (the CLI names):

- ``dp``: dot-product attention with biases (`DotProductMultiheadAttention`);
- ``l2``: L2 attention with separate W^K, values X W^V (`UntiedL2MultiheadAttention`; not Lipschitz);
- ``l2-tied``: L2 attention with W^K = W^Q, values X A W^V (`L2MultiheadAttention`; Theorem 3.2);
- ``contractive-l2``: tied L2 divided by its Theorem 3.2 inf-norm bound for N = context, times gamma
  (`ContractiveL2MultiheadAttention`).

A block is pre-LN, X + F(LN(X)) then X + FF(LN(X)), or post-LN, LN(X + F(X)) then LN(X + FF(X)). Attention is
causal: row i of the masked layer is row i of the same layer applied to the prefix x_1..x_i, computed here from
the layer's `attention_weights()` (so gradients flow through the contractive layer's bound).

After training, `certify_model` certifies every attention layer with `certify_layer` on N = context tokens,
for the layer's attention map WITHOUT the causal mask:

- tied and contractive L2: globally (Theorem 3.2 and the factorised bound);
- dot-product and untied L2 (not globally Lipschitz): on the ball ||x_i||_2 <= R that the model's own LayerNorm
  implies for that layer's input: R = max_k |gamma_k| sqrt(D) + ||beta||_2, because the normalised vector
  z = (x - mean) / sqrt(var + eps) has ||z||_2 < sqrt(D). (Post-LN, layer 1: R = max over characters c and
  positions t of ||E_c + P_t||.) R is rounded up by a relative 1e-5 for the float32 evaluation of LayerNorm.

On the causal mask: row block i of the masked Jacobian is row block i of the unmasked Jacobian on the prefix of i
tokens, so ||J_masked||_inf <= max_{n <= N} Lip_inf(F on n tokens). The Theorem 3.2 and Castin formulas increase
with N, so their inf-norm certificates for N also bound the masked layer; no such claim is made for the 2-norm.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import torch
from torch import nn

from .._certify import certify_layer
from .._domain import Global
from .._errors import CertifyError, InvalidInputError
from ..adversarial import lower_bound
from ..bounds import METHODS
from ..jacobian import jacobian, jacobian_norm
from .._domain import Ball
from ..attention import (
    AttentionWeights,
    attention_forward,
    DotProductMultiheadAttention,
    L2MultiheadAttention,
    UntiedL2MultiheadAttention,
)
from ..invertible import ContractiveL2MultiheadAttention
from ._ptb import CharCorpus

ATTENTIONS: tuple[str, ...] = ("dp", "l2", "l2-tied", "contractive-l2")
LAYER_NORMS: tuple[str, ...] = ("pre", "post")
RADIUS_MARGIN = 1e-5
# closed-form certified methods (milliseconds at N = 64, D = 64); pass methods=None to run every registered one
CLOSED_FORM_METHODS: tuple[str, ...] = ("paper", "factorised", "castin")


@dataclasses.dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    attention: str = "dp"
    layers: int = 2
    D: int = 64
    H: int = 4
    context: int = 64
    ff: int = 256
    layer_norm: str = "pre"
    gamma: float = 0.9

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise InvalidInputError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.layer_norm not in LAYER_NORMS:
            raise InvalidInputError(f"layer_norm must be one of {LAYER_NORMS}, got {self.layer_norm!r}")
        if self.D % self.H:
            raise InvalidInputError(f"D = {self.D} must be divisible by H = {self.H}")
        for name in ("vocab_size", "layers", "D", "H", "context", "ff"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {getattr(self, name)}")


def make_attention(config: LMConfig) -> nn.Module:
    if config.attention == "dp":
        return DotProductMultiheadAttention(config.D, config.H, bias=True)
    if config.attention == "l2":
        return UntiedL2MultiheadAttention(config.D, config.H)
    if config.attention == "l2-tied":
        return L2MultiheadAttention(config.D, config.H)
    return ContractiveL2MultiheadAttention(config.D, config.H, max_tokens=config.context, gamma=config.gamma)


def _heads(X: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.einsum("bnD,hDe->bhne", X, W)
    return out if b is None else out + b[None, :, None, :]


def causal_attention(X: torch.Tensor, weights: AttentionWeights) -> torch.Tensor:
    """F(X) with a causal mask (token i attends to j <= i); X (B, N, D) -> (B, N, D).

    L2 logits -||q_i - k_j||^2 / sqrt(d) are computed as (2 q_i.k_j - ||k_j||^2) / sqrt(d): the dropped term
    -||q_i||^2 is constant in j, so the softmax is the same.
    """
    N, d = X.shape[1], weights.d
    if weights.kind == "dp":
        Q, K = _heads(X, weights.W_Q, weights.b_Q), _heads(X, weights.W_K, weights.b_K)
        logits = Q @ K.transpose(-1, -2) / math.sqrt(d)
        values = _heads(X, weights.W_V, weights.b_V)
    else:
        Q = _heads(X, weights.W_Q) / d**0.25
        K = Q if weights.kind == "l2" else _heads(X, weights.W_K) / d**0.25
        logits = 2 * Q @ K.transpose(-1, -2) - (K * K).sum(-1).unsqueeze(-2)
        if weights.kind == "l2":  # values X A W^V = Y (V^T W^V) with V = W^Q / d^{1/4}
            values = Q @ (weights.W_Q.transpose(1, 2) @ weights.W_V / d**0.25)
        else:
            values = _heads(X, weights.W_V)
    mask = torch.ones(N, N, dtype=torch.bool, device=X.device).triu(1)
    P = torch.softmax(logits.masked_fill(mask, -math.inf), dim=-1)
    heads = P @ values
    B, H = heads.shape[:2]
    out = heads.transpose(1, 2).reshape(B, N, H * d) @ weights.W_O
    return out if weights.b_O is None else out + weights.b_O


class Block(nn.Module):
    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.layer_norm = config.layer_norm
        self.attention = make_attention(config)
        self.ln1, self.ln2 = nn.LayerNorm(config.D), nn.LayerNorm(config.D)
        self.ff = nn.Sequential(nn.Linear(config.D, config.ff), nn.ReLU(), nn.Linear(config.ff, config.D))

    def attend(self, X: torch.Tensor) -> torch.Tensor:
        self.last_input = X.detach() if getattr(self, "record", False) else None
        return causal_attention(X, self.attention.attention_weights())

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if self.layer_norm == "pre":
            X = X + self.attend(self.ln1(X))
            return X + self.ff(self.ln2(X))
        X = self.ln1(X + self.attend(X))
        return self.ln2(X + self.ff(X))


class CharTransformer(nn.Module):
    """Token + learned position embeddings, `layers` blocks, (pre-LN: a final LayerNorm,) a linear read-out."""

    def __init__(self, config: LMConfig, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.D)
        self.position = nn.Parameter(torch.randn(config.context, config.D) * 0.1)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.D) if config.layer_norm == "pre" else nn.Identity()
        self.readout = nn.Linear(config.D, config.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, N, vocab) for character ids (B, N), N <= context."""
        N = ids.shape[1]
        if N > self.config.context:
            raise InvalidInputError(f"sequence of {N} characters exceeds the context {self.config.context}")
        X = self.embedding(ids) + self.position[:N]
        for block in self.blocks:
            X = block(X)
        return self.readout(self.final_norm(X))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def attention_inputs(model: CharTransformer, ids: torch.Tensor) -> list[torch.Tensor]:
    """The input X (B, N, D) that each attention layer receives when the model reads ``ids`` (B, N)."""
    for block in model.blocks:
        block.record = True
    try:
        model(ids)
        return [block.last_input for block in model.blocks]
    finally:
        for block in model.blocks:
            block.record, block.last_input = False, None


def input_radius(model: CharTransformer, layer: int) -> float:
    """R with ||x_i||_2 <= R for every input token of attention layer ``layer`` (see the module docstring)."""
    config = model.config
    with torch.no_grad():
        if config.layer_norm == "post" and layer == 0:
            E, P = model.embedding.weight.double(), model.position.double()
            radius = float((E[:, None, :] + P[None, :, :]).norm(dim=-1).max())
        else:
            norm = model.blocks[layer].ln1 if config.layer_norm == "pre" else model.blocks[layer - 1].ln2
            gamma, beta = norm.weight.double(), norm.bias.double()
            radius = float(gamma.abs().max()) * math.sqrt(config.D) + float(beta.norm())
    return radius * (1 + RADIUS_MARGIN)


def sample_batch(ids: torch.Tensor, context: int, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs ids[s : s + context], targets ids[s + 1 : s + context + 1]."""
    if len(ids) < context + 2:
        raise InvalidInputError(f"the training text has {len(ids)} characters, fewer than context + 2 = {context + 2}")
    starts = torch.randint(0, len(ids) - context - 1, (batch,), generator=generator)
    window = starts[:, None] + torch.arange(context + 1)
    chunk = ids[window]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def evaluate_bpc(model: CharTransformer, ids: torch.Tensor, batch: int = 64, max_chars: int | None = None) -> float:
    """Bits per character over ``ids`` (the first ``max_chars``), in consecutive non-overlapping windows of
    ``context`` characters: each character after the first is predicted from the earlier ones in its window."""
    model.eval()
    ids = ids if max_chars is None else ids[:max_chars]
    context = model.config.context
    windows = [ids[s : s + context + 1] for s in range(0, len(ids) - 1, context)]
    full = [w for w in windows if len(w) == context + 1]
    rest = [w for w in windows if len(w) < context + 1 and len(w) > 1]
    total, count = 0.0, 0
    groups = [torch.stack(full[k : k + batch]) for k in range(0, len(full), batch)] + [w[None] for w in rest]
    for chunk in groups:
        logits = model(chunk[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                           reduction="sum")
        total, count = total + float(loss), count + chunk[:, 1:].numel()
    model.train()
    return total / count / math.log(2)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    model: CharTransformer
    steps: int
    seconds: float
    diverged: bool  # a non-finite loss stopped training
    curve: tuple[dict[str, float], ...]  # {step, seconds, train_bpc[, valid_bpc]}

    def final_train_bpc(self) -> float:
        finite = [p["train_bpc"] for p in self.curve if math.isfinite(p["train_bpc"])]
        return finite[-1] if finite else math.nan


def train_language_model(config: LMConfig, corpus: CharCorpus, minutes: float, max_steps: int | None = None,
                         learning_rate: float = 1e-3, batch: int = 32, seed: int = 0, log_every: int = 25,
                         eval_every: int = 200, eval_chars: int = 8192, clip: float | None = None,
                         callback: Callable[[dict[str, float]], None] | None = None) -> TrainResult:
    """Adam at a fixed learning rate (no warm-up, no schedule) for ``minutes`` of wall time (or ``max_steps``).

    The curve holds the mean training loss (bits per character) of every ``log_every`` steps and, every
    ``eval_every`` steps, the bits per character on the first ``eval_chars`` validation characters.
    """
    if not (minutes > 0 and math.isfinite(minutes)):
        raise InvalidInputError(f"minutes must be a positive number, got {minutes}")
    model = CharTransformer(config, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    start, step, diverged, window, curve = time.perf_counter(), 0, False, [], []
    while time.perf_counter() - start < 60 * minutes and (max_steps is None or step < max_steps):
        inputs, targets = sample_batch(corpus.train, config.context, batch, generator)
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1))
        step += 1
        if not torch.isfinite(loss):
            diverged = True
            curve.append({"step": step, "seconds": time.perf_counter() - start, "train_bpc": math.nan})
            break
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        window.append(float(loss.detach()) / math.log(2))
        last = (max_steps is not None and step >= max_steps) or time.perf_counter() - start >= 60 * minutes
        if step % log_every == 0 or last:
            point = {"step": step, "seconds": time.perf_counter() - start, "train_bpc": sum(window) / len(window)}
            window = []
            if step % eval_every == 0 or last:
                point["valid_bpc"] = evaluate_bpc(model, corpus.valid, max_chars=eval_chars)
                if not math.isfinite(point["valid_bpc"]):
                    diverged = True
            curve.append(point)
            if callback is not None:
                callback(point)
            if diverged:
                break
    return TrainResult(model.eval(), step, time.perf_counter() - start, diverged, tuple(curve))


def data_jacobian_norm(X: torch.Tensor, weights: AttentionWeights, norm: str, sampled_tokens: int = 4) -> float:
    """max over the sequences of X (B, N, D) of ||J(X_b)||_norm for the unmasked layer, one sequence at a time.

    Closed form for dp and tied L2. For untied L2 (autodiff only, N D backward passes for the full Jacobian) only
    the rows of ``sampled_tokens`` evenly spaced output tokens are computed: a submatrix of rows has no larger
    inf- or 2-norm, so the value is still attained, hence still a lower bound."""
    values = []
    for x in X:
        if weights.kind == "l2-untied":
            N = x.shape[0]
            tokens = sorted({round(k * (N - 1) / max(sampled_tokens - 1, 1)) for k in range(sampled_tokens)})
            rows = lambda y: attention_forward(y.unsqueeze(0), weights)[0, tokens]  # noqa: E731
            J = torch.func.jacrev(rows)(x.detach()).reshape(1, len(tokens) * x.shape[1], N * x.shape[1])
            values.append(float(J.abs().sum(-1).max() if norm == "inf" else torch.linalg.matrix_norm(J[0], 2)))
        else:
            with torch.no_grad():
                values.append(float(jacobian_norm(jacobian(x[None], weights), norm).max()))
    return max(values)


def certify_model(model: CharTransformer, norms: tuple[str, ...] = ("inf", "2"), lower_steps: int = 0,
                  lower_restarts: int = 1, lower_norms: tuple[str, ...] = ("inf",),
                  text: torch.Tensor | None = None, windows: int = 2,
                  methods: tuple[str, ...] | None = CLOSED_FORM_METHODS) -> list[dict[str, Any]]:
    """Certify every attention layer of ``model`` with `certify_layer` on N = context tokens (module docstring).

    Returns one JSON-friendly row per (layer, norm): the domain, the best certified upper bound and its method,
    attained lower bounds (in the norms ``lower_norms`` only: a 2-norm value needs an SVD of an (N D) x (N D)
    matrix), and every certificate. Lower bounds: ``data_lower`` = max ||J(X)|| of the unmasked layer over the
    inputs X it receives on the first ``windows`` context windows of ``text`` (X lies in the certified domain),
    and, if ``lower_steps`` > 0, the adversarial search of `certify_layer` (``lower_restarts`` starts).
    ``methods``: the certified methods to try where they apply (None: every registered method that applies).
    """
    config, rows = model.config, []
    data_inputs = None
    if text is not None:
        ids = text[: windows * config.context].reshape(-1, config.context)
        data_inputs = attention_inputs(model, ids)
    for index, block in enumerate(model.blocks):
        weights = block.attention.attention_weights().to(torch.float64, "cpu")
        radius = None if weights.kind == "l2" else input_radius(model, index)
        for norm in norms:
            row: dict[str, Any] = {"layer": index, "norm": norm, "kind": weights.kind,
                                   "domain": "global" if radius is None else Ball(radius).scope, "radius": radius}
            options = {"restarts": lower_restarts, "steps": lower_steps}
            lower = lower_steps > 0 and norm in lower_norms
            domain = Global() if radius is None else Ball(radius)
            chosen = None if methods is None else [
                m for m in methods if m in METHODS and METHODS[m].applies(weights, domain, config.context, norm)
            ]
            try:
                report = certify_layer(weights, config.context, norm, radius=radius, lower=lower,
                                       lower_options=options, methods=chosen)
                certificates = list(report.certificates)
                upper = report.best_upper()
            except CertifyError as error:  # e.g. no certified method for untied L2 on a ball
                row["error"] = str(error)
                certificates, upper = [], None
                if lower:
                    certificates.append(lower_bound(weights, config.context, norm, Ball(radius), **options))
            lowers = [c.value for c in certificates if c.kind == "lower"]
            if data_inputs is not None and norm in lower_norms:
                row["data_lower"] = data_jacobian_norm(data_inputs[index].to(torch.float64), weights, norm)
                lowers.append(row["data_lower"])
            row["upper"] = None if upper is None else upper.value
            row["upper_method"] = None if upper is None else upper.method
            row["lower"] = max(lowers, default=None)
            row["certificates"] = [c.as_row() for c in certificates]
            rows.append(row)
    return rows


def lm_experiment(corpus: CharCorpus, config: LMConfig, minutes: float, test_chars: int | None = None,
                  certify: bool = True, lower_steps: int = 0, **train_options: Any) -> dict[str, Any]:
    """Train, report test bits per character (the first ``test_chars`` test characters; all by default), and
    certify every attention layer. Returns a JSON-friendly dict."""
    result = train_language_model(config, corpus, minutes, **train_options)
    row: dict[str, Any] = {
        "attention": config.attention, "layers": config.layers, "config": dataclasses.asdict(config),
        "parameters": result.model.parameter_count(), "corpus": corpus.description, "minutes": minutes,
        "steps": result.steps, "train_seconds": result.seconds, "diverged": result.diverged,
        "train_bpc": result.final_train_bpc(), "curve": list(result.curve),
    }
    row["test_bpc"] = math.nan if result.diverged else evaluate_bpc(result.model, corpus.test, max_chars=test_chars)
    row["test_chars"] = len(corpus.test) if test_chars is None else min(test_chars, len(corpus.test))
    if certify and not result.diverged:
        start = time.perf_counter()
        row["certificates"] = certify_model(result.model, lower_steps=lower_steps, text=corpus.test)
        row["certify_seconds"] = time.perf_counter() - start
    return row


def stability_experiment(corpus: CharCorpus, depths: tuple[int, ...], attentions: tuple[str, ...], minutes: float,
                         callback: Callable[[dict[str, Any]], None] | None = None, **options: Any) -> list[dict[str, Any]]:
    """Train every (depth, attention) pair for ``minutes`` at the same fixed Adam learning rate, no warm-up
    (paper Sec. 5.3); record the loss curves, whether training diverged (a non-finite loss), and whether the
    model learned more than character frequencies (final validation bits per character below the unigram
    entropy of the training text) and more than the current character tells (below the bigram baseline, which
    needs no attention)."""
    config_options = {k: options.pop(k) for k in ("D", "H", "context", "ff", "layer_norm", "gamma") if k in options}
    unigram, bigram, rows = corpus.unigram_bits(), corpus.bigram_bits(), []
    for depth in depths:
        for attention in attentions:
            config = LMConfig(corpus.vocab_size, attention, depth, **config_options)
            result = train_language_model(config, corpus, minutes, **options)
            valid = [p["valid_bpc"] for p in result.curve if "valid_bpc" in p]
            final_valid = valid[-1] if valid else math.nan
            row = {
                "attention": attention, "layers": depth, "parameters": result.model.parameter_count(),
                "minutes": minutes, "steps": result.steps, "seconds": result.seconds, "diverged": result.diverged,
                "train_bpc": result.final_train_bpc(), "valid_bpc": final_valid, "unigram_bits": unigram,
                "learned": bool(math.isfinite(final_valid) and final_valid < unigram),
                "bigram_bits": bigram, "beats_bigram": bool(math.isfinite(final_valid) and final_valid < bigram),
                "curve": list(result.curve), "config": dataclasses.asdict(config),
            }
            rows.append(row)
            if callback is not None:
                callback(row)
    return rows
