"""What Arize Phoenix does with OpenInference EVALUATOR spans, checked on a real server (127.0.0.1).

The OpenInference spec defines evaluator spans (`openinference.span.kind = EVALUATOR`, a span
link to the evaluated span, `evaluations.*` attributes). tps-tracer would emit them only if
Phoenix showed them next to the run they evaluate. This test pins down what the installed
Phoenix does, so the README's statement fails here the day Phoenix changes: it keeps the span
kind (the evaluator icon), but stores no span link and turns no `evaluations.*` attribute into
an evaluation or annotation of the target span, in the same trace or linked from another.
"""

from __future__ import annotations

import json
import time
import urllib.request

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link

PROJECT = "evaluator-spans"


def _graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_phoenix_shows_the_evaluator_kind_but_not_the_link_or_the_evaluations(phoenix):
    import phoenix.client as phoenix_client

    provider = TracerProvider(resource=Resource({"openinference.project.name": PROJECT}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{phoenix.url}/v1/traces")))
    tracer = provider.get_tracer("evaluator-check")
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}) as root:
        pass
    target = root.get_span_context()
    evaluation = {
        "openinference.span.kind": "EVALUATOR",
        "evaluations.0.evaluation.name": "tps.log",
        "evaluations.0.evaluation.score": -0.3,
        "evaluations.0.evaluation.label": "success",
        "evaluations.0.evaluation.explanation": "TPS, log rule",
    }
    # The spec's shape (own trace, linked to the target) and a child of the target in its trace.
    tracer.start_span(
        "evaluator.linked",
        context=trace.set_span_in_context(trace.INVALID_SPAN),
        links=[Link(target)],
        attributes=evaluation,
    ).end()
    tracer.start_span(
        "evaluator.child", context=trace.set_span_in_context(root), links=[Link(target)], attributes=evaluation
    ).end()
    provider.force_flush()
    provider.shutdown()

    client = phoenix_client.Client(base_url=phoenix.url)
    deadline = time.monotonic() + 120
    spans: list = []
    while len(spans) < 3 and time.monotonic() < deadline:
        try:
            spans = client.spans.get_spans(project_identifier=PROJECT, limit=100)
        except Exception:  # 404 until the project's first span is stored
            spans = []
        time.sleep(0.5)
    by_name = {s["name"]: s for s in spans}
    assert set(by_name) == {"agent", "evaluator.linked", "evaluator.child"}
    assert by_name["evaluator.linked"]["span_kind"] == by_name["evaluator.child"]["span_kind"] == "EVALUATOR"
    target_hex = f"{target.span_id:016x}"
    time.sleep(2)  # give any derived annotation time to appear
    assert client.spans.get_span_annotations(span_ids=[target_hex], project_identifier=PROJECT) == []

    kinds = _graphql(
        phoenix.url,
        "query { projects { edges { node { name spans(first: 10) { edges { node { name spanKind "
        "spanAnnotations { name } } } } } } } }",
    )
    [project] = [e["node"] for e in kinds["data"]["projects"]["edges"] if e["node"]["name"] == PROJECT]
    shown = {e["node"]["name"]: e["node"] for e in project["spans"]["edges"]}
    assert shown["evaluator.linked"]["spanKind"] == shown["evaluator.child"]["spanKind"] == "evaluator"
    assert all(not node["spanAnnotations"] for node in shown.values())
    # Span links are not part of Phoenix's span model: neither the REST spans nor the GraphQL Span carry them.
    fields = _graphql(phoenix.url, '{ __type(name: "Span") { fields { name } } }')["data"]["__type"]["fields"]
    assert not {f["name"] for f in fields} & {"links", "spanLinks"}
    assert all("links" not in s for s in spans)
