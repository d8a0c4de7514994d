"""Plain-text tables of certificates. Formatting only: nothing here computes a bound."""

from __future__ import annotations

from typing import Iterable

from .._result import Certificate

COLUMNS = ("method", "kind", "scope", "value", "certified", "seconds")


def format_value(value: float) -> str:
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.4e}"


def format_table(certificates: Iterable[Certificate], title: str = "") -> str:
    """One row per certificate with the columns method, kind, scope, value, certified (yes/no), seconds."""
    rows = [
        (c.method, c.kind, c.scope, format_value(c.value), "yes" if c.certified else "no", f"{c.seconds:.2f}")
        for c in certificates
    ]
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()  # noqa: E731
    out = [title] if title else []
    out += [line(COLUMNS), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def format_rows(header: tuple[str, ...], rows: Iterable[tuple]) -> str:
    """A generic aligned table (for benchmarks and experiment summaries)."""
    text_rows = [tuple(format_value(v) if isinstance(v, float) else str(v) for v in row) for row in rows]
    widths = [max(len(h), *(len(r[k]) for r in text_rows)) if text_rows else len(h) for k, h in enumerate(header)]
    line = lambda cells: "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in text_rows])
