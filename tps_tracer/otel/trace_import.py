"""Stored traces (OTLP JSON, Phoenix's span export) replayed into a `TPSSpanProcessor` as a live one
would have seen them, so an imported run gives the live record (`tps-tracer import`). What cannot be
read is counted, per run (`metadata["import_unreadable"]`) or per file, never dropped (docs/traces.md).
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tps_tracer.errors import InputError
from tps_tracer.online.accumulator import Accumulator
from tps_tracer.otel.span_processor import TPSSpanProcessor
from tps_tracer.otel.span_reading import OI_KIND, OI_METADATA
from tps_tracer.output import write_text

UNREADABLE_KEY = "import_unreadable"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
MISSING, INVALID, ZERO = "missing", "invalid", "zero"

# Ids in hex (OTLP/JSON: 32 / 16 characters) or base64 (protobuf's JSON mapping: 24 / 12, padded,
# standard or URL-safe alphabet): the lengths differ, so an id is never readable both ways.
_HEX = {16: re.compile(r"[0-9a-fA-F]{32}"), 8: re.compile(r"[0-9a-fA-F]{16}")}
_B64 = {
    16: re.compile(r"[A-Za-z0-9+/]{22}==|[A-Za-z0-9_-]{22}=="),
    8: re.compile(r"[A-Za-z0-9+/]{11}=|[A-Za-z0-9_-]{11}="),
}
_URLSAFE = str.maketrans("-_", "+/")


def _parse_id(value: Any, n_bytes: int) -> int | str:
    """The id as an int, or why it cannot be one (MISSING, INVALID, ZERO); n_bytes is 16 or 8."""
    if value is None or value == "":
        return MISSING
    if not isinstance(value, str):
        return INVALID
    if _HEX[n_bytes].fullmatch(value):
        n = int(value, 16)
    elif _B64[n_bytes].fullmatch(value):  # alphabet, length and padding checked: it decodes to n_bytes
        n = int.from_bytes(base64.b64decode(value.translate(_URLSAFE), validate=True), "big")
    else:
        return INVALID
    return n if n else ZERO


@dataclass
class OtlpRead:
    spans: list[ReadableSpan] = field(default_factory=list)
    per_trace: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # trace hex -> counts
    per_file: Counter[str] = field(default_factory=Counter)
    lines: int = 0


def _id_problem(reason: str, which: str) -> str:
    return f"spans_without_{which}" if reason == MISSING else f"spans_with_{reason}_{which}"


# A span as a format stores it: (trace, span, parent) ids, (start, end) times, what reading it found
# unreadable, and ReadableSpan's other arguments (its name among them).
Stored = tuple[tuple[Any, Any, Any], tuple[int | None, int | None], Counter[str], dict[str, Any]]


def _add_spans(stored: list[Stored], out: OtlpRead) -> None:
    """The stored spans in `out`, or each counted under a reason."""
    ids = [(_parse_id(t, 16), _parse_id(sp, 8), _parse_id(p, 8)) for (t, sp, p), *_ in stored]
    # Every span the file holds, to tell a local parent from a remote one.
    known = {(t, sp) for t, sp, _ in ids if isinstance(t, int) and isinstance(sp, int)}
    for (trace_id, span_id, parent_id), (_, (start, end), read_problems, fields) in zip(ids, stored, strict=True):
        if isinstance(trace_id, str):
            out.per_file[_id_problem(trace_id, "trace_id")] += 1  # no run to count it against
            continue
        problems = out.per_trace[f"{trace_id:032x}"]
        if isinstance(span_id, str):
            problems[_id_problem(span_id, "span_id")] += 1
            continue
        if parent_id == INVALID:  # read as a root, the run would be split or misplaced: refused
            problems[_id_problem(parent_id, "parent_span_id")] += 1
            continue
        if start is None or end is None or end < start:
            problems["spans_with_unreadable_times"] += 1
            continue
        context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)
        parent = None  # missing, or all zeros (OpenTelemetry's "no parent"): a root
        if not isinstance(parent_id, str):
            # A parent the file does not hold was elsewhere: remote, as the live processor would see it.
            remote = (trace_id, parent_id) not in known
            parent = SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=_SAMPLED)
        problems.update(read_problems)
        out.spans.append(ReadableSpan(context=context, parent=parent, start_time=start, end_time=end, **fields))


# ---------------------------------------------------------------- OTLP JSON: one ExportTraceServiceRequest a line

_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_STATUS_NAMES = {f"STATUS_CODE_{code.name}": n for n, code in _STATUS.items()}
_KINDS = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER}
_KIND_NAMES = {f"SPAN_KIND_{kind.name}": n for n, kind in _KINDS.items()}


def _nanos(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _enum(value: Any, names: dict[str, int]) -> int:
    if isinstance(value, str):
        return names.get(value, 0)
    return value if isinstance(value, int) else 0


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue as an attribute value (arrays as tuples); InputError for kvlist / bytes / empty."""
    if not isinstance(value, dict) or len(value) != 1:
        raise InputError("not an AnyValue")
    kind, v = next(iter(value.items()))
    if kind == "stringValue" and isinstance(v, str):
        return v
    if kind == "boolValue" and isinstance(v, bool):
        return v
    if kind == "intValue" and not isinstance(v, bool):
        return int(v)
    if kind == "doubleValue" and isinstance(v, (int, float, str)) and not isinstance(v, bool):
        return float(v)  # "NaN" / "Infinity" are written as strings
    if kind == "arrayValue" and isinstance(v, dict):
        return tuple(_any_value(item) for item in v.get("values", []))
    raise InputError(kind)


def _attributes(items: Any, problems: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        try:
            out[item["key"]] = _any_value(item.get("value"))
        except (KeyError, TypeError, ValueError):
            problems["unreadable_attributes"] += 1
    return out


def _otlp_span(raw: dict[str, Any], resource: Resource, scope: InstrumentationScope) -> Stored:
    problems: Counter[str] = Counter()
    status = raw.get("status") or {}
    events = [
        Event(e.get("name", ""), _attributes(e.get("attributes"), problems), _nanos(e.get("timeUnixNano")))
        for e in raw.get("events") or []
        if isinstance(e, dict)
    ]
    fields = {
        "name": str(raw.get("name", "")),
        "resource": resource,
        "attributes": _attributes(raw.get("attributes"), problems),
        "events": events,
        "kind": _KINDS.get(_enum(raw.get("kind"), _KIND_NAMES), SpanKind.INTERNAL),
        "status": Status(_STATUS[_enum(status.get("code"), _STATUS_NAMES) % 3], status.get("message") or None),
        "instrumentation_scope": scope,
    }
    ids = (raw.get("traceId"), raw.get("spanId"), raw.get("parentSpanId"))
    return ids, (_nanos(raw.get("startTimeUnixNano")), _nanos(raw.get("endTimeUnixNano"))), problems, fields


def _json_lines(lines: Iterable[str], out: OtlpRead) -> Iterator[Any]:
    for line in lines:
        if not line.strip():
            continue
        out.lines += 1
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            out.per_file["lines_not_json"] += 1


def read_otlp_json(lines: Iterable[str]) -> OtlpRead:
    out = OtlpRead()
    stored: list[Stored] = []
    for obj in _json_lines(lines, out):  # one ExportTraceServiceRequest a line
        if not isinstance(obj, dict) or not isinstance(obj.get("resourceSpans"), list):
            out.per_file["lines_not_a_trace_request"] += 1
            continue
        for rs in obj["resourceSpans"]:
            resource = Resource(_attributes(((rs or {}).get("resource") or {}).get("attributes"), out.per_file))
            for ss in (rs or {}).get("scopeSpans") or []:
                sc = (ss or {}).get("scope") or {}
                scope = InstrumentationScope(str(sc.get("name", "")), sc.get("version") or None)
                for raw in (ss or {}).get("spans") or []:
                    if isinstance(raw, dict):
                        stored.append(_otlp_span(raw, resource, scope))
                    else:
                        out.per_file["spans_not_objects"] += 1
    _add_spans(stored, out)
    return out


# ---------------------------------------------------------------- Phoenix: spans from `Client().spans.get_spans`
# Phoenix moves `openinference.span.kind` out of the attributes into `span_kind` ("UNKNOWN" when
# absent) and flattens the instrumentor's `metadata` JSON into `metadata.<key>`: both are put back
# (a metadata key containing a dot comes back nested; the `tps_*` keys the processor reads have
# none). Times are ISO 8601 at microsecond precision; the span kind is not kept (read as INTERNAL).

_PHOENIX_STATUS = {code.name: code for code in StatusCode}
_PHOENIX_SCOPE = InstrumentationScope("phoenix-export")  # Phoenix keeps neither the scope
_EMPTY = Resource({})  # nor the resource


def _iso_nanos(value: Any) -> int | None:
    """ISO 8601 as Unix nanoseconds, exactly (no float rounding); a naive time is refused."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:
        return None  # it would be read in the importer's zone
    whole = int(t.replace(microsecond=0).timestamp())
    return whole * 1_000_000_000 + t.microsecond * 1_000


def _value(v: Any) -> Any:
    """A stored attribute value as an OpenTelemetry one (lists as tuples of one primitive type)."""
    if isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, list) and all(isinstance(x, (str, bool, int, float)) for x in v):
        kinds = {type(x) for x in v}
        if len(kinds) <= 1 or kinds == {int, float}:
            return tuple(v)
    raise TypeError(type(v).__name__)


def _phoenix_attributes(flat: Any, span_kind: Any, problems: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    if not isinstance(flat, dict):
        if flat is not None:
            problems["unreadable_attributes"] += 1
        flat = {}
    for key, v in flat.items():
        if key.startswith(OI_METADATA + "."):  # "metadata.a.b" back into {"a": {"b": v}}
            *parents, last = key.split(".")[1:]
            into = metadata
            for p in parents:
                if not isinstance(into.get(p), dict):
                    into[p] = {}
                into = into[p]
            into[last] = v
            continue
        try:
            out[key] = _value(v)
        except TypeError:
            problems["unreadable_attributes"] += 1
    if metadata:
        out[OI_METADATA] = json.dumps(metadata)
    if isinstance(span_kind, str) and span_kind and span_kind != "UNKNOWN":
        out[OI_KIND] = span_kind
    return out


def _phoenix_span(raw: dict[str, Any]) -> Stored:
    ctx: dict[str, Any] = raw["context"]  # a dict: read_phoenix_spans keeps only such spans
    problems: Counter[str] = Counter()
    attributes = _phoenix_attributes(raw.get("attributes"), raw.get("span_kind"), problems)  # counted first
    events = []
    for e in raw.get("events") or []:
        if not isinstance(e, dict):
            problems["unreadable_events"] += 1
            continue
        attrs = _phoenix_attributes(e.get("attributes") or {}, None, problems)
        events.append(Event(str(e.get("name", "")), attrs, _iso_nanos(e.get("timestamp"))))
    code = _PHOENIX_STATUS.get(str(raw.get("status_code")), StatusCode.UNSET)
    fields = {
        "name": str(raw.get("name", "")),
        "resource": _EMPTY,
        "attributes": attributes,
        "events": events,
        "status": Status(code, raw.get("status_message") or None),
        "instrumentation_scope": _PHOENIX_SCOPE,
    }
    ids = (ctx.get("trace_id"), ctx.get("span_id"), raw.get("parent_id"))
    return ids, (_iso_nanos(raw.get("start_time")), _iso_nanos(raw.get("end_time"))), problems, fields


def _phoenix_objects(text: str, out: OtlpRead) -> list[Any]:
    """The spans in a JSON document (list, or {"data": [...]}) or in JSON Lines (one span a line)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        doc = doc["data"]
    if isinstance(doc, list):
        out.lines += 1
        return list(doc)
    return list(_json_lines(text.splitlines(), out))


def read_phoenix_spans(texts: Iterable[str]) -> OtlpRead:
    out = OtlpRead()
    stored: list[Stored] = []
    for text in texts:  # one text per file
        for obj in _phoenix_objects(text, out):
            if isinstance(obj, dict) and isinstance(obj.get("context"), dict):
                stored.append(_phoenix_span(obj))
            else:
                out.per_file["spans_not_objects"] += 1
    _add_spans(stored, out)
    return out


# ---------------------------------------------------------------- replay into the span processor


def span_events(spans: list[ReadableSpan]) -> Iterator[tuple[bool, ReadableSpan]]:
    """(is_start, span) in the order a live processor would have seen them: by time, a parent
    starting before its children and ending after them when the clock cannot tell them apart."""
    keys = [(s.context.trace_id, s.context.span_id) for s in spans]
    parent_of = {key: s.parent for key, s in zip(keys, spans, strict=True)}

    def depth_of(key: tuple[int, int]) -> int:
        d, seen = 0, set()
        while (p := parent_of.get(key)) is not None and key not in seen:
            seen.add(key)
            key = (p.trace_id, p.span_id)
            if key not in parent_of:
                break
            d += 1
        return d

    depth = {key: depth_of(key) for key in parent_of}
    events = [(s.start_time or 0, 0, depth[k], i, True, s) for i, (k, s) in enumerate(zip(keys, spans, strict=True))]
    events += [(s.end_time or 0, 1, -depth[k], i, False, s) for i, (k, s) in enumerate(zip(keys, spans, strict=True))]
    events.sort(key=lambda e: e[:4])
    for *_, is_start, span in events:
        yield is_start, span


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
    """Spans already read (any format) into records: no background worker, no idle timeout; a run
    still open at the end (its root never ended) is finished as at shutdown (capture_lost)."""
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
