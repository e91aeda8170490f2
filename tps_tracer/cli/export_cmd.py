"""`tps-tracer export RECORDS --to phoenix|mlflow|otlp|langsmith|langfuse`: a records file's scores onto their
traces. Exit 0 when every linked run was delivered, 1 when some were not; runs that name no trace: exit 2
with nothing sent unless `--allow-unlinked` (a CI step must not read "exported" when runs were left behind)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tps_tracer.errors import InputError


def _otlp(args: argparse.Namespace, options: dict[str, Any]) -> tuple[Any, Any, Any, None]:
    """(listener, flush(timeout) -> bool, status(), no closer) for an OTLP/HTTP endpoint: evaluation spans."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from tps_tracer.otel.evaluations import DeliveryCount, EvaluationSpanExporter
    from tps_tracer.otel.trace_links import TraceLinks

    endpoint = args.endpoint or "http://127.0.0.1:4318"
    url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
    resource = {"service.name": "tps-tracer"}
    for pair in args.resource:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--resource takes KEY=VALUE, got {pair!r}")
        resource[key] = value
    provider = TracerProvider(resource=Resource.create(resource))
    counted = DeliveryCount(OTLPSpanExporter(endpoint=url))
    # The default queue (2,048) drops spans when full; a file's export is bounded, so the queue holds it all.
    provider.add_span_processor(BatchSpanProcessor(counted, max_queue_size=1 << 30))
    spans = EvaluationSpanExporter(provider, TraceLinks(), **options)  # span ids derived: idempotent

    def flush(timeout: float) -> bool:
        # Every span created must have reached the endpoint, not just left the queue (DeliveryCount).
        flushed = bool(provider.force_flush(int(timeout * 1000)))
        return flushed and counted.delivered == spans.counts["spans"]

    def status() -> dict[str, Any]:
        created = spans.counts["spans"]
        pending = max(created - counted.delivered - counted.gave_up, 0)
        sent = {"delivered": counted.delivered, "gave_up": counted.gave_up, "pending": pending}
        return {"spans": created, **sent, "endpoint": url}

    return spans, flush, status, None


def _exporter(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """Phoenix annotations, MLflow assessments, LangSmith feedback or Langfuse scores (the last two with
    clients from the SDKs' own settings: API keys, project)."""
    from tps_tracer.otel.backends import LangfuseScores, LangSmithFeedback, MlflowUpsert, PhoenixAnnotations

    if args.to == "phoenix":
        return PhoenixAnnotations(args.endpoint or "http://127.0.0.1:6006", **options)
    if args.to == "mlflow":
        return MlflowUpsert(args.endpoint, not_stored_timeout=args.timeout, **options)
    if args.to == "langsmith":
        from langsmith import Client

        client = Client(api_url=args.endpoint) if args.endpoint else Client()
        if client.api_key is None and "smith.langchain.com" in client.api_url:
            # The hosted service answers 401 to every write, retried until --timeout.
            raise InputError("--to langsmith needs LANGSMITH_API_KEY (an API key of your LangSmith workspace)")
        return LangSmithFeedback(client, not_stored_timeout=args.timeout, **options)
    from langfuse import Langfuse

    if not (os.environ.get("LANGFUSE_PUBLIC_KEY") and os.environ.get("LANGFUSE_SECRET_KEY")):
        # Without them the SDK's client is disabled and every write would fail until --timeout.
        raise InputError("--to langfuse needs LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY (the project's API keys)")
    return LangfuseScores(Langfuse(base_url=args.endpoint) if args.endpoint else None, **options)


def cmd_export(args: argparse.Namespace) -> int:
    from tps_tracer.otel.backends import OTEL_LINK, export_records
    from tps_tracer.records.jsonl import read_trajectories
    from tps_tracer.records.reading import is_parquet
    from tps_tracer.scoring import parse_rules
    from tps_tracer.tracking.keys import RUN_ID_KEY

    if is_parquet(args.records):
        raise InputError("export reads JSON Lines records (convert Parquet with `tps-tracer convert`)")
    records = read_trajectories(args.records)
    rules = parse_rules(args.rules)  # commas inside beta(a,b) kept
    link = (RUN_ID_KEY,) if args.to in BY_RUN_ID else OTEL_LINK
    check_linked(records, args.allow_unlinked, link)  # before any exporter is built: nothing sent on refusal
    options: dict[str, Any] = {"predictor": args.predictor, "weights": args.weights, "censoring": args.censoring}
    if args.to == "otlp":
        listener, flush, status, closer = _otlp(args, options)
    else:
        exporter = _exporter(args, options)
        listener, flush, status, closer = exporter, exporter.flush, exporter.status, exporter.close
    summary = export_records(records, listener, rules, [args.weights], link)
    delivered = flush(args.timeout)
    summary.delivery = status()
    if closer is not None:
        closer(1.0)
    failed = not delivered or summary.delivery.get("gave_up", 0) or summary.delivery.get("dropped", 0)
    if args.json:
        print(json.dumps({**summary.as_dict(), "to": args.to, "complete": not failed}, indent=2))
    # "exported" only when the backend took them all: a CI log is read for that word.
    parts = [f"tps-tracer: {len(summary.exported)} runs {'sent to' if failed else 'exported to'} {args.to}"]
    if summary.without_trace:
        parts.append(f"{len(summary.without_trace)} without trace ids, not exported ({_ids(summary.without_trace)})")
    if summary.pending_outcome:
        waiting = summary.pending_outcome
        parts.append(f"{len(waiting)} clean runs still waiting for their outcome ({_ids(waiting)})")
    if failed:
        parts.append(f"delivery incomplete: {summary.delivery}")
    print("; ".join(parts), file=sys.stderr)
    return 1 if failed else 0


BY_RUN_ID = ("langsmith", "langfuse")  # backends a record joins by its LangChain run id
HOW_TO_LINK_RUN = (
    "records get a LangChain run id (metadata langchain_run_id) when TPSCallbackHandler captures a LangChain "
    "or LangGraph run (docs/traces.md)"
)
HOW_TO_LINK = (
    "records get trace ids (metadata otel_trace_id / otel_span_id) when they are captured by "
    "TPSSpanProcessor, or by TPSCallbackHandler while OpenInference instruments LangChain or an "
    "OpenTelemetry span is current when the run starts (docs/traces.md)"
)


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")


def check_linked(records: list[Any], allow_unlinked: bool, link: tuple[str, ...]) -> None:
    """Refuse (InputError: exit 2) an export that would leave runs behind for want of a trace id."""
    from tps_tracer.otel.backends import OTEL_LINK, has_trace

    how = HOW_TO_LINK if link == OTEL_LINK else HOW_TO_LINK_RUN
    unlinked = [rec.trajectory_id for rec in records if not has_trace(rec, link)]
    if len(unlinked) == len(records):
        raise InputError(f"none of the {len(records)} runs can be exported: no record names a trace; {how}")
    pending = sum(1 for rec in records if has_trace(rec, link) and rec.is_pending)
    if pending + len(unlinked) == len(records):  # a pending run is exported once graded: not a refusal alone
        raise InputError(
            f"none of the {len(records)} runs can be exported: {pending} clean runs still wait for their outcome "
            f"(grade them with JsonlSink(path).resolve(run_id, outcome=...)) and {len(unlinked)} name no trace"
        )
    if unlinked and not allow_unlinked:
        raise InputError(
            f"{len(unlinked)} of {len(records)} runs name no trace ({_ids(unlinked)}); nothing exported. "
            f"Pass --allow-unlinked to export the other {len(records) - len(unlinked)} and count these; {how}"
        )
