"""Plain-text tables for terminal reports (no third-party dependency)."""

from __future__ import annotations

from collections.abc import Sequence


def fmt(x: float | None, digits: int = 4) -> str:
    """A number with `digits` significant digits; '-' for missing."""
    if x is None:
        return "-"
    return f"{x:.{digits}g}"


def fmt_ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    return f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Left-align the first column, right-align the others."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(indent + "  ".join(parts).rstrip())
        if k == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
