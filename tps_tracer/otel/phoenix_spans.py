"""Spans exported from Arize Phoenix as SDK spans, for `tps-tracer import --format phoenix`.

What a user gets from Phoenix's own client, `Client().spans.get_spans(project_identifier=...)`
(the REST endpoint `GET /v1/projects/{project}/spans`), saved as JSON: a list of spans, the
endpoint's response body {"data": [...], "next_cursor": ...}, or one span per line. Each span:

    {"name", "context": {"trace_id", "span_id"}, "parent_id", "span_kind",
     "start_time", "end_time" (ISO 8601), "status_code", "status_message",
     "attributes": {flat key: value}, "events": [{"name", "timestamp", "attributes"}]}

Phoenix stores what the agent's instrumentor sent with two changes, undone here so the span
processor reads the span as it read it live:

    openinference.span.kind   moved out of the attributes into `span_kind`: put back
                              (Phoenix writes "UNKNOWN" when the span had none: left out)
    metadata                  the instrumentor's JSON string is parsed and flattened into
                              `metadata.<key>` attributes: joined back into one JSON object
                              (a metadata key that itself contains a dot comes back nested;
                              the `tps_*` keys the processor reads have none)

Times are microseconds (Phoenix's precision); the OpenTelemetry span kind (INTERNAL, CLIENT,
...) is not kept by Phoenix and is read as INTERNAL; the processor uses neither beyond order.
What cannot be read is counted as `otlp_json.py` counts it (per trace, per file).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from tps_tracer.otel.otlp_json import OtlpRead, add_span, known_ids

OI_KIND = "openinference.span.kind"
METADATA = "metadata"
_STATUS = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR, "UNSET": StatusCode.UNSET}
_SCOPE = InstrumentationScope("phoenix-export")  # Phoenix does not keep the instrumentation scope
_EMPTY = Resource({})  # nor the resource


def _nanos(value: Any) -> int | None:
    """ISO 8601 (Phoenix's times) as Unix nanoseconds, exactly (no float rounding)."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:
        return None  # a naive time would be read in the importer's zone: refuse it
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


def _nest(into: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        child = into.get(p)
        if not isinstance(child, dict):
            child = into[p] = {}
        into = child
    into[last] = value


def attributes(flat: Any, span_kind: Any, problems: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    if not isinstance(flat, dict):
        if flat is not None:
            problems["unreadable_attributes"] += 1
        flat = {}
    for key, v in flat.items():
        if key.startswith(METADATA + "."):
            _nest(metadata, key[len(METADATA) + 1 :], v)
            continue
        try:
            out[key] = _value(v)
        except TypeError:
            problems["unreadable_attributes"] += 1
    if metadata:
        out[METADATA] = json.dumps(metadata)
    if isinstance(span_kind, str) and span_kind and span_kind != "UNKNOWN":
        out[OI_KIND] = span_kind
    return out


def _events(raw: Any, problems: Counter[str]) -> list[Event]:
    events = []
    for e in raw or []:
        if not isinstance(e, dict):
            problems["unreadable_events"] += 1
            continue
        attrs = attributes(e.get("attributes") or {}, None, problems)
        events.append(Event(str(e.get("name", "")), attrs, _nanos(e.get("timestamp"))))
    return events


def _span(raw: dict[str, Any], out: OtlpRead, known: set[tuple[int, int]]) -> None:
    ctx: dict[str, Any] = raw["context"]  # a dict: read_phoenix_spans keeps only such spans
    ids = (ctx.get("trace_id"), ctx.get("span_id"), raw.get("parent_id"))

    def fields(problems: Counter[str]) -> dict[str, Any]:
        status = Status(_STATUS.get(str(raw.get("status_code")), StatusCode.UNSET), raw.get("status_message") or None)
        attrs = attributes(raw.get("attributes"), raw.get("span_kind"), problems)
        events = _events(raw.get("events"), problems)
        return dict(resource=_EMPTY, attributes=attrs, events=events, status=status, instrumentation_scope=_SCOPE)

    add_span(raw, out, ids, (_nanos(raw.get("start_time")), _nanos(raw.get("end_time"))), known, fields)


def _objects(text: str, out: OtlpRead) -> list[Any]:
    """The spans in a JSON document (list, or {"data": [...]}) or in JSON Lines (one span a line)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, list):
        out.lines += 1
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        out.lines += 1
        return list(doc["data"])
    spans = []
    for line in text.splitlines():
        if not line.strip():
            continue
        out.lines += 1
        try:
            spans.append(json.loads(line))
        except json.JSONDecodeError:
            out.per_file["lines_not_json"] += 1
    return spans


def read_phoenix_spans(texts: Iterable[str]) -> OtlpRead:
    out = OtlpRead()
    raws: list[dict[str, Any]] = []
    for text in texts:  # one text per file
        for obj in _objects(text, out):
            if isinstance(obj, dict) and isinstance(obj.get("context"), dict):
                raws.append(obj)
            else:
                out.per_file["spans_not_objects"] += 1
    known = known_ids((raw["context"].get("trace_id"), raw["context"].get("span_id")) for raw in raws)
    for raw in raws:
        _span(raw, out, known)
    return out
