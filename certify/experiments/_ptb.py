"""Character-level Penn Treebank (MATH.md section 6), read from the directory given, by default
``../shared/data/ptb`` next to the repository (see the README.md there).

Only the validation (``ptb.valid.txt``) and test (``ptb.test.txt``) splits are available, so this module trains on
the first 90% of ``ptb.valid.txt``, validates on its last 10%, and reports on ``ptb.test.txt``. Characters are
read as they are, one sentence a line, with the usual convention of writing spaces as ``_``; newlines are kept as
a character (the end-of-sentence symbol). The vocabulary is the set of characters of both files.

`tiny_corpus` is a small built-in text for quick test runs of the code path only; its numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import pathlib

import torch

from .._errors import InvalidInputError

FILES = {"valid": "ptb.valid.txt", "test": "ptb.test.txt"}
TRAIN_FRACTION = 0.9


def default_data_dir() -> pathlib.Path:
    """``../shared/data/ptb`` relative to the repository root (the directory holding ``certify/``)."""
    return pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ptb"


@dataclasses.dataclass(frozen=True)
class CharCorpus:
    name: str
    vocabulary: tuple[str, ...]
    train: torch.Tensor  # int64 character ids
    valid: torch.Tensor
    test: torch.Tensor
    description: str

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def decode(self, ids: torch.Tensor) -> str:
        return "".join(self.vocabulary[int(i)] for i in ids)

    def bigram_bits(self) -> float:
        """Validation bits per character of the add-0.1 bigram model fitted on the training characters."""
        return bigram_bits(self.train, self.valid, self.vocab_size)

    def unigram_bits(self) -> float:
        """Entropy in bits per character of the training characters' frequencies (a model that learns nothing
        beyond them scores this on the training data)."""
        counts = torch.bincount(self.train, minlength=self.vocab_size).double()
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log2()).sum())


def bigram_bits(train: torch.Tensor, evaluate: torch.Tensor, vocab_size: int, alpha: float = 0.1) -> float:
    """Bits per character on ``evaluate`` of the bigram model p(c_t | c_{t-1}) fitted on ``train`` with add-alpha
    smoothing: the level a model reaches by reading only the current character, without using attention."""
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1, dtype=torch.float64), accumulate=True)
    p = (counts + alpha) / (counts.sum(1, keepdim=True) + alpha * vocab_size)
    return float(-p[evaluate[:-1], evaluate[1:]].log2().mean())


def _encode(text: str, index: dict[str, int]) -> torch.Tensor:
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def corpus_from_texts(name: str, train_text: str, test_text: str, description: str) -> CharCorpus:
    """Split ``train_text`` 90/10 into train/valid, keep ``test_text`` for test; spaces become ``_``."""
    train_text, test_text = train_text.replace(" ", "_"), test_text.replace(" ", "_")
    vocabulary = tuple(sorted(set(train_text) | set(test_text)))
    index = {c: i for i, c in enumerate(vocabulary)}
    cut = int(len(train_text) * TRAIN_FRACTION)
    return CharCorpus(name, vocabulary, _encode(train_text[:cut], index), _encode(train_text[cut:], index),
                      _encode(test_text, index), description)


def load_ptb(directory: str | pathlib.Path | None = None) -> CharCorpus:
    """Character-level PTB from ``directory`` (default `default_data_dir`); a clear error if files are missing."""
    root = pathlib.Path(directory) if directory is not None else default_data_dir()
    missing = [f for f in FILES.values() if not (root / f).is_file()]
    if missing:
        raise InvalidInputError(
            f"Penn Treebank text not found: {', '.join(missing)} missing in {root}. Put ptb.valid.txt and "
            f"ptb.test.txt (Mikolov's preprocessed PTB) there, pass --data DIR, or use --tiny for a code-path test "
            f"on the built-in toy corpus"
        )
    texts = {split: (root / f).read_text(encoding="utf-8") for split, f in FILES.items()}
    return corpus_from_texts(
        "ptb-char", texts["valid"], texts["test"],
        "character-level PTB: train = first 90% of ptb.valid.txt, valid = last 10%, test = ptb.test.txt "
        "(the PTB training split is not available)",
    )


_TINY = (
    "the cat sat on the mat .\nthe dog sat on the log .\na cat and a dog ran to the mat .\n"
    "the bird sat on the cat .\nthe dog and the bird ran to the log .\na mat is on the log .\n"
)


def tiny_corpus() -> CharCorpus:
    """A built-in toy corpus (a few hundred characters) for quick test runs only."""
    return corpus_from_texts("tiny", _TINY * 20, _TINY * 4, "TINY built-in toy corpus (code-path tests only)")
