"""The gate's `input` block: the lines its input held that the gate did not judge.

The readers set some lines aside rather than refuse the file (records/set_aside.py: a re-run
appended to the sink, resolution lines without their record, empty shards). They are not in the
gated sample, so a verdict on it must say they were left out, as `report` does: the block has
`report --json`'s shape (`input.set_aside`), with the baseline's under `input.baseline.set_aside`.
It is present only when something was set aside, so a clean input's result is unchanged.
"""

from __future__ import annotations

from typing import Any

from tps_tracer.records.set_aside import KINDS, SetAside


def input_block(candidate: SetAside, baseline: SetAside | None = None) -> dict[str, Any] | None:
    """`{"set_aside": ..., "baseline": {"set_aside": ...}}`, each side only when it set lines aside."""
    block: dict[str, Any] = {}
    if candidate:
        block["set_aside"] = candidate.as_dict()
    if baseline:
        block["baseline"] = {"set_aside": baseline.as_dict()}
    return block or None


def from_report(report: dict[str, Any]) -> dict[str, Any] | None:
    """A saved report's own `input` block (a snapshot gate has no files to read)."""
    section = report.get("input")
    if isinstance(section, dict) and section.get("set_aside"):
        return {"set_aside": section["set_aside"]}
    return None


def _line(set_aside: dict[str, Any]) -> str:
    return "; ".join(
        f"{kind} {set_aside[kind]['count']} (first: {set_aside[kind]['first']})" for kind in KINDS if kind in set_aside
    )


def set_aside_lines(block: dict[str, Any] | None) -> list[str]:
    """One line per side that set lines aside, for the text and Markdown headlines."""
    if not block:
        return []
    lines = []
    if block.get("set_aside"):
        lines.append("set aside (not scored): " + _line(block["set_aside"]))
    if (block.get("baseline") or {}).get("set_aside"):
        lines.append("baseline: set aside (not scored): " + _line(block["baseline"]["set_aside"]))
    return lines
