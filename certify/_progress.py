"""Progress bars, shown only on a terminal.

tqdm redraws its bar with carriage returns; written to a log file or a pipe (CI, ``certify demo > log``) every
redraw becomes a line of ``\\r`` noise. `progress_bar` is the one place bars are created: it returns a disabled
bar unless they are wanted and standard error is a terminal.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm


def stderr_is_terminal() -> bool:
    """Whether sys.stderr (where tqdm writes) is an interactive terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(enabled: bool = True, **options: Any) -> tqdm:
    """``tqdm(**options)``, disabled unless ``enabled`` and standard error is a terminal."""
    return tqdm(disable=not (enabled and stderr_is_terminal()), **options)
