"""LangSmith's and Langfuse's endpoints that the tests' real SDKs call, served on 127.0.0.1.

No network: the real `langsmith` and `langfuse` clients, LangChain's LangSmith tracer and
Langfuse's LangChain handler are pointed here. Every feedback and score request is checked
against the vendor's API schema (schemas/, copied with source and licence) and kept:

    LangSmith  GET /info, GET /sessions?name=, runs (POST /runs/multipart | /runs/batch | /runs),
               POST /feedback (404 until the run was posted, 409 for a known id: the SDK's own
               retry-on-404 and the update path), PATCH /feedback/{id}
    Langfuse   POST /api/public/scores (a list; upserted by id, as Langfuse does), and the spans
               its handler exports (POST /api/public/otel/v1/traces: their trace ids kept)

`refuse` names Langfuse scores answered as rejected in a 207. `fail` makes every feedback and
score request (and the project look-up) answer that status (401, 429, 503), while runs and
spans are still taken; `stop()` makes the host unreachable.
Each server has its own Langfuse public key: the SDK keeps one client per key and process.
`violations` lists requests that broke the schema (a test asserts it is empty).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import gzip
import json
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonschema
import pytest

SCHEMAS = Path(__file__).with_name("schemas")
_LS = json.loads((SCHEMAS / "langsmith_feedback.json").read_text())
_CHECK = jsonschema.FormatChecker()
FEEDBACK_CREATE = jsonschema.Draft202012Validator({**_LS["create"], "$defs": _LS["$defs"]}, format_checker=_CHECK)
FEEDBACK_UPDATE = jsonschema.Draft202012Validator({**_LS["update"], "$defs": _LS["$defs"]}, format_checker=_CHECK)
SCORES = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "langfuse_scores.json").read_text()))
SECRET_KEY = "sk-lf-test"
LANGSMITH_API_KEY = "lsv2-test"
FAILING = ("/feedback", "/sessions", "/api/public/scores")  # what `fail` applies to
# The SDK's defaults for what /info tells it (langsmith/_internal/_background_thread.py)
INGEST = {
    "use_multipart_endpoint": True,
    "scale_up_qsize_trigger": 1000,
    "scale_up_nthreads_limit": 16,
    "scale_down_nempty_trigger": 4,
    "size_limit": 100,
    "size_limit_bytes": 20_971_520,
}


class ScorePlatform:
    def __init__(self) -> None:
        self.fail: int | None = None
        self.refuse: set[str] = set()  # Langfuse score names answered as rejected (207)
        self.public_key = f"pk-lf-{uuid.uuid4().hex[:12]}"
        self.lock = threading.RLock()
        self.received: list[tuple[str, str, Any]] = []  # (method, path, parsed body) of every request
        self.violations: list[str] = []
        self.runs: dict[str, dict[str, Any]] = {}  # LangSmith runs by id
        self.sessions: dict[str, str] = {}  # LangSmith project name -> id
        self.feedback: dict[str, dict[str, Any]] = {}  # by feedback id, as stored after updates
        self.scores: dict[str, dict[str, Any]] = {}  # Langfuse scores by id
        self.langfuse_traces: set[str] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def requests_to(self, method: str, prefix: str) -> list[Any]:
        with self.lock:
            return [body for m, p, body in self.received if m == method and p.startswith(prefix)]

    def session_id(self, name: str) -> str:
        with self.lock:
            return self.sessions.setdefault(name, str(uuid.uuid4()))

    # ------------------------------------------------------------------ LangSmith

    def _runs(self, body: Any) -> None:
        for run in body if isinstance(body, list) else [body]:
            if isinstance(run, dict) and "id" in run:
                stored = self.runs.setdefault(str(run["id"]), {})
                stored.update({k: v for k, v in run.items() if v is not None})
                if run.get("session_name"):
                    stored["session_id"] = self.session_id(run["session_name"])

    def langsmith(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "GET" and path == "/info":
            return 200, {"version": "0.10.0", "batch_ingest_config": INGEST}
        if method == "GET" and path == "/sessions":
            name = query.get("name", [""])[0]
            tenant = str(uuid.UUID(int=1))
            return 200, [{"id": self.session_id(name), "name": name, "tenant_id": tenant, "reference_dataset_id": None}]
        if method == "POST" and path == "/runs/batch":
            self._runs([*body.get("post", []), *body.get("patch", [])])
            return 202, {}
        if method in ("POST", "PATCH") and path.startswith("/runs"):
            self._runs(body)
            return 202, {}
        if method == "POST" and path == "/feedback":
            for error in FEEDBACK_CREATE.iter_errors(body):
                self.violations.append(f"POST /feedback: {error.message}")
            if str(body.get("run_id")) not in self.runs:
                return 404, {"detail": "run not found"}
            if body["id"] in self.feedback:
                return 409, {"detail": "feedback already exists"}
            self.feedback[body["id"]] = dict(body)
            return 200, body
        if method == "PATCH" and path.startswith("/feedback/"):
            for error in FEEDBACK_UPDATE.iter_errors(body):
                self.violations.append(f"PATCH /feedback: {error.message}")
            fid = path.rsplit("/", 1)[1]
            if fid not in self.feedback:
                return 404, {"detail": "feedback not found"}
            self.feedback[fid].update(body)
            return 200, self.feedback[fid]
        self.violations.append(f"LangSmith has no {method} {path} here")
        return 404, {"detail": "not found"}

    # ------------------------------------------------------------------ Langfuse

    def langfuse(self, method: str, path: str, headers: Any, body: Any, raw: bytes) -> tuple[int, Any]:
        expected = "Basic " + base64.b64encode(f"{self.public_key}:{SECRET_KEY}".encode()).decode()
        if headers.get("Authorization") != expected:
            return 401, {"message": "Invalid credentials"}
        if method == "POST" and path == "/api/public/otel/v1/traces":
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

            request = ExportTraceServiceRequest.FromString(raw)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.langfuse_traces.update(span.trace_id.hex() for span in scope.spans)
            return 200, {}
        if method == "POST" and path == "/api/public/scores":
            for error in SCORES.iter_errors(body):
                self.violations.append(f"POST /api/public/scores: {error.message}")
            refused = [score for score in body if score.get("name") in self.refuse]
            for score in body:
                if score not in refused:
                    self.scores[score.get("id") or str(uuid.uuid4())] = score  # upserted by id
            if refused:
                errors = [{"message": f"score {s['name']} rejected"} for s in refused]
                return 207, {"accepted": len(body) - len(refused), "rejected": len(refused), "errors": errors}
            return 202, {"message": "Accepted"}
        self.violations.append(f"Langfuse has no {method} {path} here")
        return 404, {"message": "not found"}


def _multipart_runs(content_type: str, raw: bytes) -> list[dict[str, Any]]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
    )
    runs: dict[str, dict[str, Any]] = {}
    for part in message.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition") or ""
        kind, _, rest = name.partition(".")
        if kind in ("post", "patch") and "." not in rest:
            runs.setdefault(rest, {"id": rest}).update(json.loads(part.get_payload(decode=True)))
    return list(runs.values())


def _handler(platform: ScorePlatform) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            url = urlparse(self.path)
            ctype = self.headers.get("Content-Type") or ""
            body: Any = None
            if ctype.startswith("multipart/"):
                body = _multipart_runs(ctype, raw)
            elif raw and "json" in ctype:
                body = json.loads(raw)
            with platform.lock:
                platform.received.append((self.command, url.path, body))
            if platform.fail is not None and url.path.startswith(FAILING):
                status, answer = platform.fail, {"detail": f"status {platform.fail}"}
            else:
                with platform.lock:
                    if url.path.startswith("/api/public"):
                        status, answer = platform.langfuse(self.command, url.path, self.headers, body, raw)
                    else:
                        status, answer = platform.langsmith(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

    return Handler


@pytest.fixture
def score_platform() -> Iterator[ScorePlatform]:
    server = ScorePlatform()
    yield server
    if "langfuse" in sys.modules:  # its client for this key would retry sending spans here at exit
        from langfuse import get_client

        get_client(public_key=server.public_key).shutdown()
    server.stop()
