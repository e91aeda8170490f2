"""Plain-text tables for terminal reports (no third-party dependency)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

# Terminal reports stay within this many columns unless the user asks for wide tables (--wide).
WIDTH = 100


def fmt(x: float | None, digits: int = 4) -> str:
    """A number with `digits` significant digits; '-' for missing."""
    if x is None:
        return "-"
    return f"{x:.{digits}g}"


def fmt_ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    return f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def _numeric(cell: str) -> bool:
    return bool(cell) and (cell[0].isdigit() or cell[0] in "-+.")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Right-align columns whose cells are all numbers (or intervals), left-align text columns."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [i > 0 and all(_numeric(r[i]) for r in cells[1:]) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        parts = [c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right, strict=True)]
        lines.append(indent + "  ".join(parts).rstrip())
        if k == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def wrap(text: str, prefix: str = "", width: int = WIDTH) -> list[str]:
    """One line of prose wrapped to `width`; continuation lines indent two more than `prefix`.

    Words are never split at hyphens (paths, predictor names and 'complete-only' stay whole);
    a single word longer than the width (a long path) is broken only if it must be."""
    return textwrap.wrap(
        text, width, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2), break_on_hyphens=False
    ) or [prefix.rstrip()]


def fit_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ", width: int | None = WIDTH
) -> str:
    """`render_table`, or, when a line would pass `width` (long predictor names, many columns),
    the same cells as one block per row (first cell, then 'header: value' lines), so no line
    of a report is cut or wrapped mid-table. width=None: always the table (`--wide`)."""
    table = render_table(headers, rows, indent)
    if width is None or max((len(line) for line in table.splitlines()), default=0) <= width:
        return table
    lines: list[str] = []
    for r in rows:
        lines += wrap(f"{headers[0]}: {r[0]}", indent, width)
        for h, c in zip(headers[1:], r[1:], strict=True):
            lines += wrap(f"{h}: {c}", indent + "    ", width)
    return "\n".join(lines)


def render_skipped(skipped: Sequence[dict[str, str]]) -> str | None:
    """The 'Skipped predictors' note of every command (None when nothing was skipped)."""
    if not skipped:
        return None
    lines = ["Skipped predictors (no usable data for this command; the rest is unaffected)"]
    for s in skipped:
        lines += wrap(f"{s['predictor']}: {s['reason']}", "  ")
    return "\n".join(lines)
