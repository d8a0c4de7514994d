"""certify._memory: the allocator setting the branch and bound relies on for speed is really applied here."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from certify._memory import retain_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux only")
def test_glibc_accepts_the_settings_and_results_do_not_change() -> None:
    before = np.linalg.norm(np.arange(12.0).reshape(3, 4) ** 2)
    assert retain_freed_memory() is True
    assert retain_freed_memory() is True  # idempotent (cached)
    assert np.linalg.norm(np.arange(12.0).reshape(3, 4) ** 2) == before
