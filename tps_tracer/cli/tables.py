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


def render_skipped(skipped: Sequence[dict[str, str]]) -> str | None:
    """The 'Skipped predictors' note of every command (None when nothing was skipped)."""
    if not skipped:
        return None
    lines = ["Skipped predictors (no usable data for this command; the rest is unaffected)"]
    lines += [f"  {s['predictor']}: {s['reason']}" for s in skipped]
    return "\n".join(lines)
