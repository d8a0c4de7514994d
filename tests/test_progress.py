"""Progress bars only on a terminal: a log or a pipe gets no carriage-return lines (certify._progress)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import torch

from certify import DotProductMultiheadAttention, save_layer
from certify._progress import progress_bar

ROOT = Path(__file__).resolve().parents[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_is_shown_on_a_terminal_only(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert not progress_bar(total=3).disable
    assert progress_bar(False, total=3).disable
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_bar(total=3).disable


def test_bar_on_a_terminal_does_redraw_with_carriage_returns(monkeypatch) -> None:
    """The converse of the next test: on a terminal the same bar writes '\\r', so its absence there means something."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress_bar(total=3, file=terminal, mininterval=0) as bar:
        bar.update(3)
    assert "\r" in terminal.getvalue()


def test_command_with_stderr_not_a_terminal_prints_no_carriage_return(tmp_path: Path) -> None:
    """`certify layer` without --quiet runs the adversarial lower bound and the local branch and bound, the two
    places that make bars; piped, its output has no '\\r'."""
    torch.manual_seed(0)
    save_layer(DotProductMultiheadAttention(2, 1, dtype=torch.float64), tmp_path / "dp.pt")
    completed = subprocess.run(
        [sys.executable, "-m", "certify", "layer", str(tmp_path / "dp.pt"), "--tokens", "2", "--norm", "2",
         "--radius", "1", "--method", "bnb", "--time-budget", "1"],
        cwd=ROOT, capture_output=True, timeout=300)
    assert completed.returncode == 0, completed.stderr.decode()
    assert b"bnb" in completed.stdout
    assert b"\r" not in completed.stdout + completed.stderr
