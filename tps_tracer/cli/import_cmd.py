"""`tps-tracer import TRACES... -o records.jsonl`: stored OTLP JSON traces into trajectory records.

The work is `tps_tracer.otel.trace_import` (the span processor's own code reads the spans);
this opens the files, writes the records and prints what could not be read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from contextlib import ExitStack

from tps_tracer.errors import InputError


def cmd_import(args: argparse.Namespace) -> int:
    from tps_tracer.otel.trace_import import import_traces

    with ExitStack() as stack:
        files = [stack.enter_context(open(path, encoding="utf-8-sig")) for path in args.traces]
        summary = import_traces(itertools.chain.from_iterable(files), args.output, horizon=args.horizon)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    line = (
        f"tps-tracer: {summary.runs} runs from {summary.spans} spans ({summary.lines} lines) written to {args.output}"
    )
    if summary.unreadable_runs:
        line += f"; {len(summary.unreadable_runs)} runs with unreadable parts (metadata import_unreadable)"
    if summary.per_file:
        line += f"; unreadable in the file: {summary.per_file}"
    if summary.unreadable_traces_without_run:
        line += f"; {len(summary.unreadable_traces_without_run)} traces with unreadable parts and no run"
    print(line, file=sys.stderr)
    if summary.runs == 0:
        raise InputError(f"no agent run found in {', '.join(args.traces)} (expected OTLP JSON, one request per line)")
    return 0
