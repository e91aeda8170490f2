"""`tps-tracer convert IN OUT`: trajectory JSON Lines <-> Parquet (schema in records/parquet.py); `tps-tracer import
TRACES... -o records.jsonl`: stored traces into records (`otel/trace_import.py`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from tps_tracer.errors import InputError
from tps_tracer.records.convert import jsonl_to_parquet, parquet_to_jsonl
from tps_tracer.records.reading import is_parquet


def cmd_convert(args: argparse.Namespace) -> int:
    src, dst = args.input, args.output
    from_parquet = Path(src).is_dir() or is_parquet(src)
    if from_parquet == is_parquet(dst):
        raise InputError("convert JSON Lines to a .parquet file, or Parquet (a file or a directory) to a .jsonl file")
    summary = parquet_to_jsonl(src, dst) if from_parquet else jsonl_to_parquet(src, dst)
    print(f"tps-tracer: {summary.describe(dst)}", file=sys.stderr)
    return 0


FORMAT_HINT = {
    "otlp": "OTLP JSON, one ExportTraceServiceRequest per line",
    "phoenix": "Phoenix spans: a JSON list, the REST response {'data': [...]}, or one span per line",
}


def format_of(text: str) -> str:
    """'phoenix' when the first span is Phoenix's (a `context` object), else 'otlp' (`resourceSpans`)."""
    text = text.lstrip()
    if text.startswith("["):
        return "phoenix"
    for candidate in (text.split("\n", 1)[0], text):  # the first line, else one indented document
        with contextlib.suppress(json.JSONDecodeError):
            obj = json.loads(candidate)
            phoenix = isinstance(obj, dict) and ("context" in obj or isinstance(obj.get("data"), list))
            return "phoenix" if phoenix else "otlp"
    return "otlp"  # not JSON: counted as such lines by the OTLP reader


def cmd_import(args: argparse.Namespace) -> int:
    from tps_tracer.otel.trace_import import import_spans, read_otlp_json, read_phoenix_spans

    texts = [Path(path).read_text(encoding="utf-8-sig") for path in args.traces]
    formats = {format_of(t) for t in texts} if args.format == "auto" else {args.format}
    if len(formats) > 1:
        raise InputError("the trace files mix OTLP JSON and Phoenix spans: import them separately (or pass --format)")
    fmt = formats.pop()
    read = read_phoenix_spans(texts) if fmt == "phoenix" else read_otlp_json(ln for t in texts for ln in t.splitlines())
    summary = import_spans(read, args.output, horizon=args.horizon)
    if args.json:
        print(json.dumps({**summary.as_dict(), "format": fmt}, indent=2))
    line = (
        f"tps-tracer: {summary.runs} runs from {summary.spans} spans ({summary.lines} lines, {fmt}) "
        f"written to {args.output}"
    )
    if summary.unreadable_runs:
        line += f"; {len(summary.unreadable_runs)} runs with unreadable parts (metadata import_unreadable)"
    if summary.per_file:
        line += f"; unreadable in the file: {summary.per_file}"
    if summary.unreadable_traces_without_run:
        line += f"; {len(summary.unreadable_traces_without_run)} traces with unreadable parts and no run"
    print(line, file=sys.stderr)
    if summary.runs == 0:
        raise InputError(f"no agent run found in {', '.join(args.traces)} (read as {FORMAT_HINT[fmt]})")
    return 0
