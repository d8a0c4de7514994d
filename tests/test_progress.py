"""Progress bars only on a terminal: a log or a pipe gets no carriage-return lines (certify._progress)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import torch

from certify import DotProductMultiheadAttention, save_layer
from certify._progress import progress_bar
from certify.cli import main


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


def test_command_with_stderr_not_a_terminal_prints_no_carriage_return(tmp_path: Path, capfd) -> None:
    """`certify layer` without --quiet runs the adversarial lower bound and the local branch and bound, the two
    places that make bars; with its output captured (not a terminal), it writes no '\\r'."""
    torch.manual_seed(0)
    save_layer(DotProductMultiheadAttention(2, 1, dtype=torch.float64), tmp_path / "dp.pt")
    code = main(["layer", str(tmp_path / "dp.pt"), "--tokens", "2", "--norm", "2", "--radius", "1", "--method", "bnb",
                 "--time-budget", "0.3"])
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert "bnb" in captured.out
    assert "\r" not in captured.out + captured.err
