"""A toy sequence classifier for the certified-robustness comparison (issue 6): embedding, attention, pooling, linear.

Task: a sequence of N tokens x_i in R^{D_in}. Each class c has a prototype mu_c (orthonormal, fixed by the task
seed). A sequence of class c holds ``signal`` tokens mu_c + noise at random positions; the other tokens are
distractors, mu_k + noise for random classes k (each distractor class used at most signal - 1 times), so the label
is the prototype that occurs most often. Training takes a few seconds on a CPU.

Model (float64), with F the attention layer (L2, tied, or dot-product, no biases):

    logits(X) = W_c mean_i F(X W_e^T)_i + b_c,      W_e (D, D_in) token embedding, W_c (C, D), b_c (C,).

Lipschitz composition used for certified radii (`certify.lirpa.lipschitz_radius`), on vec(X):
- 2-norm: ||W_e||_2 for the embedding, Lip_2(F), 1/sqrt(N) for the mean over tokens, ||w_y - w_j||_2 per margin;
- inf-norm: ||W_e||_inf for the embedding, Lip_inf(F), 1 for the mean, ||w_y - w_j||_1 per margin.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile

import torch
from torch import nn

from .._errors import CheckpointError
from ..attention import AttentionWeights, DotProductMultiheadAttention, L2MultiheadAttention

FORMAT = "certify.classifier"


@dataclasses.dataclass(frozen=True)
class ClassifierTask:
    N: int = 6
    D_in: int = 4
    D: int = 8
    H: int = 2
    classes: int = 3
    signal: int = 4
    noise: float = 0.3
    seed: int = 1234

    def prototypes(self) -> torch.Tensor:
        """The class prototypes mu_c, (classes, D_in): orthonormal when classes <= D_in, else unit vectors."""
        generator = torch.Generator().manual_seed(self.seed)
        mu = torch.randn(max(self.classes, self.D_in), self.D_in, generator=generator, dtype=torch.float64)
        if self.classes <= self.D_in:
            mu = torch.linalg.qr(mu.T).Q.T
        return mu[: self.classes] / mu[: self.classes].norm(dim=1, keepdim=True)


def classifier_batch(task: ClassifierTask, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, labels): X (batch, N, D_in) float64, labels (batch,) int64."""
    if task.classes < 2 or not 1 <= task.signal <= task.N:
        raise ValueError(f"need classes >= 2 and signal in [1, N] = [1, {task.N}], got {task.classes}, {task.signal}")
    if (task.classes - 1) * (task.signal - 1) < task.N - task.signal:
        raise ValueError("too few distractor slots: need (classes - 1)(signal - 1) >= N - signal so that the "
                         f"label's prototype is the most frequent, got {task.classes}, {task.signal}, N = {task.N}")
    mu = task.prototypes()
    labels = torch.randint(task.classes, (batch,), generator=generator)
    token_class = torch.empty(batch, task.N, dtype=torch.long)
    for b in range(batch):
        y = int(labels[b])
        others = [k for k in range(task.classes) if k != y] or [y]
        pool = [k for k in others for _ in range(task.signal - 1)]
        picks = torch.randperm(len(pool), generator=generator)[: task.N - task.signal]
        classes = [y] * task.signal + [pool[int(p)] for p in picks]
        order = torch.randperm(task.N, generator=generator)
        token_class[b] = torch.tensor(classes)[order]
    X = mu[token_class] + task.noise * torch.randn(batch, task.N, task.D_in, generator=generator, dtype=torch.float64)
    return X, labels


class ToyClassifier(nn.Module):
    """logits = W_c mean_i F(X W_e^T)_i + b_c with F an L2 ("l2") or dot-product ("dp") attention layer."""

    def __init__(self, task: ClassifierTask, kind: str, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if kind not in ("l2", "dp"):
            raise ValueError(f"kind must be 'l2' or 'dp', got {kind!r}")
        self.task, self.kind = task, kind
        self.embedding = nn.Linear(task.D_in, task.D, bias=False, dtype=torch.float64)
        if kind == "l2":
            self.attention = L2MultiheadAttention(task.D, task.H, dtype=torch.float64, generator=generator)
        else:
            self.attention = DotProductMultiheadAttention(task.D, task.H, bias=False, dtype=torch.float64,
                                                          generator=generator)
        self.head = nn.Linear(task.D, task.classes, dtype=torch.float64)

    def attention_weights(self) -> AttentionWeights:
        return self.attention.attention_weights()

    def embed(self, X: torch.Tensor) -> torch.Tensor:
        return self.embedding(X)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.head(self.attention(self.embed(X)).mean(dim=1))


def train_classifier(kind: str, task: ClassifierTask = ClassifierTask(), steps: int = 300, seed: int = 0,
                     batch: int = 64) -> tuple[ToyClassifier, float]:
    """Train a `ToyClassifier` with Adam; returns (model in eval mode, test accuracy on 512 fresh sequences)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = ToyClassifier(task, kind, generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        X, y = classifier_batch(task, batch, generator)
        loss = nn.functional.cross_entropy(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        X, y = classifier_batch(task, 512, generator)
        accuracy = float((model(X).argmax(-1) == y).double().mean())
    return model, accuracy


def save_classifier(model: ToyClassifier, path: str | os.PathLike) -> None:
    """Save in the ``certify.classifier`` format (task, kind and state dict; loadable with weights_only)."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"format": FORMAT, "version": 1, "kind": model.kind, "task": dataclasses.asdict(model.task),
                "state_dict": state}, path)


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The payload of a checkpoint, loaded with weights_only=True; CheckpointError if it cannot be read."""
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"cannot read checkpoint {str(path)!r} as a torch file with weights only: "
                              f"{first_line}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(payload).__name__}, not a dict")
    return payload


def is_classifier_checkpoint(path: str | os.PathLike) -> bool:
    return read_checkpoint(path).get("format") == FORMAT


def load_classifier(path: str | os.PathLike) -> ToyClassifier:
    """Load a classifier written by `save_classifier`."""
    payload = read_checkpoint(path)
    if payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r} is not a {FORMAT} file (format {payload.get('format')!r})")
    try:
        task = ClassifierTask(**payload["task"])
        model = ToyClassifier(task, payload["kind"])
        model.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"checkpoint {str(path)!r} is a damaged {FORMAT} file: {error}") from None
    return model.eval()
