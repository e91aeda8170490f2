"""Stored traces in OTLP JSON (the Collector file exporter's format) as SDK spans, for `tps-tracer import`.

Each line of the file is one `ExportTraceServiceRequest` in OTLP's JSON encoding:
resourceSpans[].scopeSpans[].spans[], with trace and span ids in hex (or in base64, as
protobuf's own JSON mapping writes them: `parse_id`), 64-bit integers as strings, enums
as integers (names accepted too), attribute values as {"stringValue": ...}, {"intValue": "7"},
{"doubleValue": ...}, {"boolValue": ...}, {"arrayValue": {"values": [...]}}.

`read_otlp_json` turns them into `ReadableSpan`s (the SDK's own type) so that the span
processor's own code (`TPSSpanProcessor`) reads them exactly as it reads live spans; nothing
about runs is decided here. What cannot be read is counted, never dropped silently:

    per trace    spans without a readable span id, parent id or times (skipped, by reason:
                 spans_with_invalid_span_id, spans_with_unreadable_times, ...), attribute
                 values that are not OpenTelemetry attribute types (kvlist, bytes: left out)
    per file     lines that are not JSON / not an ExportTraceServiceRequest, spans without
                 a readable trace id (spans_without_trace_id, spans_with_invalid_trace_id,
                 spans_with_zero_trace_id: no run to count them against)

A span whose parent is not in the file is read as the child of a remote span (the agent ran
inside a request traced elsewhere), as the live processor sees such a span.
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tps_tracer.errors import InputError

_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_KINDS = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER}
_KIND_NAMES = {
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}


# Trace and span ids of stored spans, in hex or in base64, told apart by their length. OTLP/JSON
# says hex (32 characters for a trace id, 16 for a span id), as the Collector's file exporter
# writes; protobuf's own JSON mapping (`MessageToJson`, any proto3 JSON encoder) writes `bytes`
# in base64 (24 and 12 characters, `=`-padded). The lengths differ, so an id is never readable
# both ways. An id that is neither is refused with a reason the reader counts: `missing`
# (absent or empty), `invalid` (not text, wrong length or alphabet, base64 that does not decode
# to exactly the id's bytes, alphabets mixed), `zero` (OpenTelemetry's invalid id).
_HEX = {16: re.compile(r"[0-9a-fA-F]{32}"), 8: re.compile(r"[0-9a-fA-F]{16}")}
# Standard alphabet or URL-safe (protobuf's parser accepts both), padded to a multiple of 4.
_B64 = {
    16: re.compile(r"[A-Za-z0-9+/]{22}==|[A-Za-z0-9_-]{22}=="),
    8: re.compile(r"[A-Za-z0-9+/]{11}=|[A-Za-z0-9_-]{11}="),
}
_URLSAFE = str.maketrans("-_", "+/")

MISSING, INVALID, ZERO = "missing", "invalid", "zero"


def parse_id(value: Any, n_bytes: int) -> int | str:
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


class Unreadable(InputError):
    """A value this reader cannot turn into an OpenTelemetry attribute."""


@dataclass
class OtlpRead:
    spans: list[ReadableSpan] = field(default_factory=list)
    per_trace: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # trace hex -> counts
    per_file: Counter[str] = field(default_factory=Counter)
    lines: int = 0


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


def any_value(value: Any) -> Any:
    """An OTLP AnyValue as an attribute value (arrays as tuples); Unreadable for kvlist / bytes / empty."""
    if not isinstance(value, dict) or len(value) != 1:
        raise Unreadable("not an AnyValue")
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
        return tuple(any_value(item) for item in v.get("values", []))
    raise Unreadable(kind)


def attributes(items: Any, problems: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        try:
            out[item["key"]] = any_value(item.get("value"))
        except (Unreadable, KeyError, TypeError, ValueError):
            problems["unreadable_attributes"] += 1
    return out


_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _id_problem(reason: str, which: str) -> str:
    """The count's name for an id that cannot be read: spans_without_trace_id, spans_with_invalid_span_id, ..."""
    return f"spans_without_{which}" if reason == MISSING else f"spans_with_{reason}_{which}"


def checked_context(
    out: OtlpRead,
    ids: tuple[Any, Any, Any],
    times: tuple[int | None, int | None],
    known: set[tuple[int, int]],
) -> tuple[SpanContext, SpanContext | None, Counter[str]] | None:
    """(context, parent, the trace's problem counts) of a stored span from its (trace, span, parent)
    ids, hex or base64 (`parse_id`), and (start, end) times; None, counted under a named reason,
    when the span cannot be placed (shared by every format)."""
    trace_id = parse_id(ids[0], 16)
    if isinstance(trace_id, str):
        out.per_file[_id_problem(trace_id, "trace_id")] += 1  # no run to count it against
        return None
    problems = out.per_trace[f"{trace_id:032x}"]
    span_id = parse_id(ids[1], 8)
    parent_id = parse_id(ids[2], 8)
    start, end = times
    if isinstance(span_id, str):
        problems[_id_problem(span_id, "span_id")] += 1
        return None
    if parent_id == INVALID:  # read as a root, the run would be split or misplaced: refused
        problems[_id_problem(parent_id, "parent_span_id")] += 1
        return None
    if start is None or end is None or end < start:
        problems["spans_with_unreadable_times"] += 1
        return None
    context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)
    if isinstance(parent_id, str):  # missing, or all zeros (OpenTelemetry's "no parent"): a root
        return context, None, problems
    # A parent the file does not hold was elsewhere: remote, as the live processor would see it.
    remote = (trace_id, parent_id) not in known
    return context, SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=_SAMPLED), problems


def known_ids(pairs: Iterable[tuple[Any, Any]]) -> set[tuple[int, int]]:
    """The (trace id, span id) of every span a file holds, to tell a local parent from a remote one."""
    out = set()
    for trace_text, span_text in pairs:
        t, sp = parse_id(trace_text, 16), parse_id(span_text, 8)
        if isinstance(t, int) and isinstance(sp, int):
            out.add((t, sp))
    return out


def _span(
    raw: dict[str, Any], resource: Resource, scope: InstrumentationScope, out: OtlpRead, known: set[tuple[int, int]]
) -> None:
    def fields(problems: Counter[str]) -> dict[str, Any]:
        status = raw.get("status") or {}
        events = [
            Event(e.get("name", ""), attributes(e.get("attributes"), problems), _nanos(e.get("timeUnixNano")))
            for e in raw.get("events") or []
            if isinstance(e, dict)
        ]
        kind = _KINDS.get(_enum(raw.get("kind"), _KIND_NAMES), SpanKind.INTERNAL)
        code = _STATUS[_enum(status.get("code"), _STATUS_NAMES) % 3]
        return dict(
            resource=resource,
            attributes=attributes(raw.get("attributes"), problems),
            events=events,
            kind=kind,
            status=Status(code, status.get("message") or None),
            instrumentation_scope=scope,
        )

    ids = (raw.get("traceId"), raw.get("spanId"), raw.get("parentSpanId"))
    add_span(raw, out, ids, (_nanos(raw.get("startTimeUnixNano")), _nanos(raw.get("endTimeUnixNano"))), known, fields)


def add_span(
    raw: dict[str, Any],
    out: OtlpRead,
    ids: tuple[Any, Any, Any],
    times: tuple[int | None, int | None],
    known: set[tuple[int, int]],
    fields: Callable[[Counter[str]], dict[str, Any]],
) -> None:
    """The stored span `raw` as a ReadableSpan in `out`, unless it cannot be placed (`checked_context`);
    `fields(problems)`: its format's other ReadableSpan arguments (shared by every format)."""
    placed = checked_context(out, ids, times, known)
    if placed is None:
        return
    context, parent, problems = placed
    out.spans.append(
        ReadableSpan(
            name=str(raw.get("name", "")),
            context=context,
            parent=parent,
            start_time=times[0],
            end_time=times[1],
            **fields(problems),
        )
    )


def _request(obj: Any, out: OtlpRead, pending: list[tuple[dict[str, Any], Resource, InstrumentationScope]]) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("resourceSpans"), list):
        out.per_file["lines_not_a_trace_request"] += 1
        return
    for rs in obj["resourceSpans"]:
        resource_problems: Counter[str] = Counter()
        resource = Resource(attributes(((rs or {}).get("resource") or {}).get("attributes"), resource_problems))
        out.per_file.update(resource_problems)
        for ss in (rs or {}).get("scopeSpans") or []:
            sc = (ss or {}).get("scope") or {}
            scope = InstrumentationScope(str(sc.get("name", "")), sc.get("version") or None)
            for raw in (ss or {}).get("spans") or []:
                if isinstance(raw, dict):
                    pending.append((raw, resource, scope))
                else:
                    out.per_file["spans_not_objects"] += 1


def read_otlp_json(lines: Iterable[str]) -> OtlpRead:
    out = OtlpRead()
    pending: list[tuple[dict[str, Any], Resource, InstrumentationScope]] = []
    for line in lines:
        if not line.strip():
            continue
        out.lines += 1
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            out.per_file["lines_not_json"] += 1
            continue
        _request(obj, out, pending)
    known = known_ids((raw.get("traceId"), raw.get("spanId")) for raw, _, _ in pending)
    for raw, resource, scope in pending:
        _span(raw, resource, scope, out, known)
    return out


def span_events(spans: list[ReadableSpan]) -> Iterator[tuple[bool, ReadableSpan]]:
    """(is_start, span) in the order a live processor would have seen them: by time, a parent
    starting before its children and ending after them when the clock cannot tell them apart."""
    depth: dict[tuple[int, int], int] = {}
    parent_of = {(s.context.trace_id, s.context.span_id): s.parent for s in spans}

    def depth_of(key: tuple[int, int]) -> int:
        d, seen = 0, set()
        while (p := parent_of.get(key)) is not None and key not in seen:
            seen.add(key)
            key = (p.trace_id, p.span_id)
            if key not in parent_of:
                break
            d += 1
        return d

    for s in spans:
        depth[(s.context.trace_id, s.context.span_id)] = depth_of((s.context.trace_id, s.context.span_id))
    events = [
        (s.start_time or 0, 0, depth[(s.context.trace_id, s.context.span_id)], i, True, s) for i, s in enumerate(spans)
    ]
    events += [
        (s.end_time or 0, 1, -depth[(s.context.trace_id, s.context.span_id)], i, False, s) for i, s in enumerate(spans)
    ]
    events.sort(key=lambda e: e[:4])
    for *_, is_start, span in events:
        yield is_start, span
