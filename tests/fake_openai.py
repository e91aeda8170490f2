"""A local OpenAI-compatible HTTP endpoint (127.0.0.1) serving the simulated world's script.

Lets the tests drive the real `ChatOpenAI(logprobs=True, top_logprobs=5)` loading path: the
request goes over HTTP through the openai client, and the JSON answer (content, tool calls,
logprobs) is parsed by langchain-openai exactly as a real server's would be.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.messages import HumanMessage

from tps_tracer.sim.scripted_model import ScriptedReActModel


def _completion(model: ScriptedReActModel, body: dict[str, Any], native: bool = False) -> dict[str, Any]:
    prompts = [HumanMessage(str(m.get("content") or "")) for m in body["messages"] if m.get("role") == "user"]
    message, lp = model._next_output(prompts)
    out: dict[str, Any] = {"role": "assistant", "content": message.text}
    calls = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
        for c in message.tool_calls
    ] + [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
        for c in message.invalid_tool_calls
    ]
    if calls:
        out["tool_calls"] = calls
    choice = {"index": 0, "message": out, "finish_reason": "tool_calls" if calls else "stop"}
    choice["logprobs"] = lp if body.get("logprobs") else None
    if native and calls:  # a native tool-calling model: the message is the call alone, as OpenAI sends it
        out["content"] = None
        choice["logprobs"] = {"content": None, "refusal": None} if body.get("logprobs") else None
    usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    return {
        "id": "chatcmpl-sim",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "sim"),
        "choices": [choice],
        "usage": usage,
    }


@contextmanager
def fake_openai_server(model: ScriptedReActModel, native_tool_calls: bool = False) -> Iterator[str]:
    """Serve the scripted model at http://127.0.0.1:PORT/v1; yields the base URL. native_tool_calls:
    a step that calls a tool answers with the call alone (no content, `{"content": null}` logprobs)."""
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            payload = json.dumps(_completion(model, body, native_tool_calls)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
