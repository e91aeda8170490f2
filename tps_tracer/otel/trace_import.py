"""Stored traces -> trajectory records, through the span processor's own code (`tps-tracer import`).

The spans read from a file (OTLP JSON: `otlp_json.py`; Phoenix's span export:
`phoenix_spans.py`) are handed to a `TPSSpanProcessor` in the order a
live processor would have seen them start and end (`span_events`), with no background
worker and no idle timeout; runs still open at the end of the file (a root that never ended)
are finished as the live processor finishes them at shutdown (capture_lost). So a run
imported from its trace file gives the record the live capture gave.

What the reader could not read is counted per run: the run's record gets
`metadata["import_unreadable"]` (e.g. {"unreadable_attributes": 2}); counts for traces that
gave no run, and for the file itself, are in the summary.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tps_tracer.online.accumulator import Accumulator
from tps_tracer.otel.otlp_json import OtlpRead, span_events
from tps_tracer.otel.span_processor import TPSSpanProcessor
from tps_tracer.output import write_text

UNREADABLE_KEY = "import_unreadable"


@dataclass
class ImportSummary:
    lines: int = 0
    spans: int = 0
    runs: int = 0
    per_file: dict[str, int] = field(default_factory=dict)
    unreadable_runs: dict[str, dict[str, int]] = field(default_factory=dict)  # trajectory id -> counts
    unreadable_traces_without_run: dict[str, dict[str, int]] = field(default_factory=dict)  # trace hex -> counts
    health: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def import_spans(read: OtlpRead, output: str | os.PathLike[str], **processor_options: Any) -> ImportSummary:
    """Spans already read (any format) into records, through the span processor."""
    summary = ImportSummary(lines=read.lines, spans=len(read.spans), per_file=dict(read.per_file))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "records.jsonl"
        acc = Accumulator(sink=str(raw), bootstrap=0, idle_timeout=None)
        processor = TPSSpanProcessor(acc, background=False, idle_timeout=None, **processor_options)
        for is_start, span in span_events(read.spans):
            if is_start:
                processor.on_start(span)  # type: ignore[arg-type]  # a ReadableSpan: all on_start reads
            else:
                processor.on_end(span)
        processor.shutdown()
        acc.close()
        summary.health = acc.health.snapshot()
        lines_out = []
        seen_traces = set()
        for line in raw.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            trace_hex = (rec.get("metadata") or {}).get("otel_trace_id")
            if "steps" in rec:
                summary.runs += 1
                problems = read.per_trace.get(trace_hex) if trace_hex else None
                if problems:
                    rec["metadata"][UNREADABLE_KEY] = dict(problems)
                    summary.unreadable_runs[rec["trajectory_id"]] = dict(problems)
                seen_traces.add(trace_hex)
            lines_out.append(json.dumps(rec, separators=(",", ":"), allow_nan=False))
    for trace_hex, problems in read.per_trace.items():
        if problems and trace_hex not in seen_traces:
            summary.unreadable_traces_without_run[trace_hex] = dict(problems)
    write_text(output, "".join(f"{line}\n" for line in lines_out))
    return summary
