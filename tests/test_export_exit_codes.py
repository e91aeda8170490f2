"""`tps-tracer export`'s exit code tells a CI step whether the export happened (new-user trial).

A file whose records name no trace used to print "0 runs exported; N without trace ids" and
exit 0. Now: none linked -> exit 2 saying how records get trace ids; some unlinked -> exit 2
with nothing sent unless `--allow-unlinked`; with it, exactly the linked runs reach a real
OTLP/HTTP endpoint (a local receiver decoding the protobuf requests) and the exit code is 0.
"""

from __future__ import annotations

import gzip
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from cli_support import call, ok_records
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tps_tracer.otel.evaluations import EVALUATION_SPAN


class _Receiver(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        type(self).requests.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def receiver() -> Iterator[str]:
    _Receiver.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _received_spans() -> list[Any]:
    spans = []
    for body in _Receiver.requests:
        req = ExportTraceServiceRequest.FromString(body)
        spans += [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return spans


def _linked(rec: dict[str, Any], i: int) -> dict[str, Any]:
    return {**rec, "metadata": {"otel_trace_id": f"{i + 1:032x}", "otel_span_id": f"{i + 1:016x}"}}


def _write(tmp_path: Any, records: list[dict[str, Any]]) -> str:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_no_trace_ids_at_all_exits_2_and_says_how_to_get_them(tmp_path, capsys, receiver):
    path = _write(tmp_path, ok_records(12))
    code, out, err = call(["export", path, "--to", "otlp", "--endpoint", receiver, "--timeout", "5"], capsys)
    assert code == 2, err
    assert "none of the 12 runs can be exported: no record names a trace" in err
    assert "otel_trace_id" in err and "TPSSpanProcessor" in err and "OpenInference" in err
    assert out == "" and _Receiver.requests == []


def test_some_unlinked_refused_unless_allowed_then_exactly_the_linked_runs_go(tmp_path, capsys, receiver):
    records = [_linked(r, i) if i % 3 else r for i, r in enumerate(ok_records(12))]
    linked = {r["metadata"]["otel_trace_id"]: r["trajectory_id"] for r in records if "metadata" in r}
    unlinked = [r["trajectory_id"] for r in records if "metadata" not in r]
    path = _write(tmp_path, records)
    argv = ["export", path, "--to", "otlp", "--endpoint", receiver, "--timeout", "10", "--json"]

    code, out, err = call(argv, capsys)
    assert code == 2, err
    assert f"{len(unlinked)} of 12 runs name no trace" in err and "--allow-unlinked" in err
    assert f"export the other {len(linked)}" in err and unlinked[0] in err
    assert _Receiver.requests == []  # refused before any exporter was built

    code, out, err = call([*argv, "--allow-unlinked"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["exported"] == len(linked) and summary["complete"]
    assert summary["without_trace"] == {"count": len(unlinked), "ids": unlinked}
    assert f"{len(unlinked)} without trace ids, not exported" in err
    spans = _received_spans()
    assert [s.name for s in spans] == [EVALUATION_SPAN] * len(linked)
    assert {s.trace_id.hex(): s.parent_span_id.hex() for s in spans} == {t: t[16:] for t in linked}


def test_linked_runs_all_waiting_for_their_grade_exit_2(tmp_path, capsys, receiver):
    records = [{**_linked(r, i), "outcome": None, "outcome_pending": True} for i, r in enumerate(ok_records(4))]
    code, _, err = call(["export", _write(tmp_path, records), "--to", "otlp", "--endpoint", receiver], capsys)
    assert code == 2, err
    assert "none of the 4 runs can be exported: 4 clean runs still wait for their outcome" in err
    assert _Receiver.requests == []


class _Refusing(http.server.BaseHTTPRequestHandler):
    """An OTLP endpoint that refuses every request (400: not retried, so the test is quick)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(400)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_endpoint_that_refuses_every_span_is_not_an_export(tmp_path, capsys):
    # The batch processor's flush returned True though every export failed: the command said
    # "12 runs exported" and exited 0 with nothing delivered.
    server = http.server.HTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = _write(tmp_path, [_linked(r, i) for i, r in enumerate(ok_records(12))])
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, out, err = call(["export", path, "--to", "otlp", "--endpoint", url, "--timeout", "10", "--json"], capsys)
    finally:
        server.shutdown()
    assert code == 1, err
    assert "runs exported" not in err and "12 runs sent to otlp; delivery incomplete" in err
    summary = json.loads(out)
    assert summary["complete"] is False
    assert summary["delivery"]["delivered"] == 0 and summary["delivery"]["gave_up"] == 12


def test_more_runs_than_the_batch_queue_holds_all_arrive(tmp_path, capsys, receiver):
    # The SDK's batch processor holds 2,048 spans and drops the rest without a word.
    n = 5000
    path = _write(tmp_path, [_linked(r, i) for i, r in enumerate(ok_records(n))])
    code, out, err = call(["export", path, "--to", "otlp", "--endpoint", receiver, "--timeout", "60", "--json"], capsys)
    assert code == 0, err
    received = _received_spans()
    assert len(received) == n == json.loads(out)["delivery"]["delivered"]
    assert len({bytes(s.trace_id) for s in received}) == n
