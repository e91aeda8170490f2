"""Shared by the framework matrix: scripted model turns, a local OpenAI-compatible server, expected forecasts.

A `Turn` is what the scripted model says at one call: a text with a stated confidence, an
optional tool call, and the probability of each of its tokens. The server on 127.0.0.1
answers the three OpenAI endpoints the frameworks use (chat completions, streamed chat
completions, Responses) from a list of turns, in order, with OpenAI-shaped logprobs
(each token's chosen probability p and one alternative with 1 - p) when the request asks
for them. `expected_forecasts` computes what tps-tracer must record for a turn from the
paper's formulas with `math` only, independently of the package.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOP_K = 5  # the package's default k in 1 - H / ln k


@dataclass(frozen=True)
class Turn:
    text: str
    tool: tuple[str, dict[str, Any]] | None = None
    probs: tuple[float, ...] = field(default=())  # one per token of `tokens()`; default: all 0.9

    def tokens(self) -> list[str]:
        words = self.text.split(" ")
        return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]

    def token_probs(self) -> list[float]:
        toks = self.tokens()
        probs = list(self.probs) or [0.9] * len(toks)
        assert len(probs) == len(toks), (self.text, probs)
        return probs

    @property
    def verbal(self) -> float:
        return float(self.text.split("<confidence>")[1].split("</confidence>")[0])


def react_turns(n: int, final: bool, verbals: Sequence[float] | None = None) -> list[Turn]:
    """n tool-calling turns (a search each), then a final answer turn when `final`."""
    verbals = list(verbals or [round(0.35 + 0.1 * i, 2) for i in range(n + 1)])
    turns = []
    for i in range(n):
        text = f"Searching step {i + 1} <confidence>{verbals[i]}</confidence>"
        probs = tuple(0.5 + 0.05 * ((i + j) % 9) for j in range(len(text.split(" "))))
        turns.append(Turn(text, ("search", {"q": f"q{i}"}), probs))
    if final:
        text = f"The answer is Paris <confidence>{verbals[n]}</confidence>"
        turns.append(Turn(text, None, tuple(0.95 - 0.1 * j for j in range(len(text.split(" "))))))
    return turns


def expected_forecasts(turn: Turn, logprobs: bool) -> dict[str, float | None]:
    """verbal from the text; token_prob = mean p; entropy_conf = 1 - mean H(p, 1-p) / ln 5."""
    out: dict[str, float | None] = {"verbal": turn.verbal}
    if not logprobs:
        out.update(token_prob=None, entropy_conf=None)
        return out
    ps = turn.token_probs()
    out["token_prob"] = sum(ps) / len(ps)
    ent = [-(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0 for p in ps]
    out["entropy_conf"] = 1 - (sum(ent) / len(ent)) / math.log(TOP_K)
    return out


# ---------------------------------------------------------------- OpenAI-shaped payloads


def _token_entries(turn: Turn, top: bool = True) -> list[dict[str, Any]]:
    entries = []
    for tok, p in zip(turn.tokens(), turn.token_probs(), strict=True):
        entry: dict[str, Any] = {"token": tok, "logprob": math.log(p), "bytes": list(tok.encode())}
        if top:
            entry["top_logprobs"] = [
                {"token": tok, "logprob": math.log(p), "bytes": list(tok.encode())},
                {"token": "~", "logprob": math.log(1 - p), "bytes": [126]},
            ]
        entries.append(entry)
    return entries


def _call(turn: Turn, n: int) -> dict[str, Any] | None:
    if turn.tool is None:
        return None
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": turn.tool[0], "arguments": json.dumps(turn.tool[1])},
    }


def chat_completion(turn: Turn, n: int, logprobs: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    call = _call(turn, n)
    if call:
        message["tool_calls"] = [call]
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": "tool_calls" if call else "stop",
        "logprobs": {"content": _token_entries(turn)} if logprobs else None,
    }
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [choice],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": len(turn.tokens()),
            "total_tokens": 10 + len(turn.tokens()),
        },
    }


def chat_chunks(turn: Turn, n: int, logprobs: bool) -> list[dict[str, Any]]:
    """The streamed form: one chunk per token (with its logprobs entry), the tool call, the finish, the usage."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    chunks = []
    for i, (tok, entry) in enumerate(zip(turn.tokens(), _token_entries(turn), strict=True)):
        delta: dict[str, Any] = {"content": tok}
        if i == 0:
            delta["role"] = "assistant"
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": None,
            "logprobs": {"content": [entry]} if logprobs else None,
        }
        chunks.append({**base, "choices": [choice]})
    call = _call(turn, n)
    if call:
        delta = {"tool_calls": [{"index": 0, **call}]}
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if call else "stop"}]})
    usage = {"prompt_tokens": 10, "completion_tokens": len(turn.tokens()), "total_tokens": 10 + len(turn.tokens())}
    chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def response_object(turn: Turn, n: int, logprobs: bool) -> dict[str, Any]:
    """A Responses-API response: a message item (output_text with logprobs), then the function call item."""
    text: dict[str, Any] = {"type": "output_text", "text": turn.text, "annotations": []}
    if logprobs:
        text["logprobs"] = _token_entries(turn)
    output: list[dict[str, Any]] = [
        {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": [text]}
    ]
    if turn.tool is not None:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": turn.tool[0],
                "arguments": json.dumps(turn.tool[1]),
                "status": "completed",
            }
        )
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "model": "scripted",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "output_tokens": len(turn.tokens()),
            "total_tokens": 10 + len(turn.tokens()),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


@dataclass
class ScriptedServer:
    base_url: str
    requests: list[tuple[str, dict[str, Any]]]


@contextmanager
def scripted_openai_server(turns: Sequence[Turn]) -> Iterator[ScriptedServer]:
    """Serve `turns` in order at http://127.0.0.1:PORT/v1 (chat completions, streamed or not, and Responses).

    A request past the end of the script gets HTTP 500 (the test then sees the run fail)."""
    lock = threading.Lock()
    served = ScriptedServer("", [])
    queue = list(turns)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                served.requests.append((self.path, body))
                n = len(served.requests)
                turn = queue.pop(0) if queue else None
            if turn is None:
                self._send(500, b'{"error": {"message": "script exhausted"}}')
                return
            if self.path.endswith("/responses"):
                wants = bool(body.get("top_logprobs")) or "message.output_text.logprobs" in (body.get("include") or [])
                self._send(200, json.dumps(response_object(turn, n, wants)).encode())
            elif body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chat_chunks(turn, n, bool(body.get("logprobs"))):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
            else:
                self._send(200, json.dumps(chat_completion(turn, n, bool(body.get("logprobs")))).encode())

        def _send(self, code: int, payload: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
