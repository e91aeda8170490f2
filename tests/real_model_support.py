"""Shared by the real-model tests and benchmark: the test's own capture of what the server sent,
and the signals recomputed from it with numpy, independently of tps_tracer's capture code.

- `PayloadRecorder`: a plain BaseCallbackHandler keeping, per model call, the text and the
  logprob entries the served response carried (streamed chunks concatenated).
- `RawHttpLog`: an httpx transport that keeps the bytes the server sent (JSON or SSE), to
  check that the callback capture is the payload itself.
- `expected_signals`: token probability, entropy confidence and their action-span versions
  from the raw entries, as the paper defines them (Appendix "Predictor Transparency Tables").
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import httpx
import numpy as np
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

TOP_K = 5  # the paper's 1 - H / ln 5
TOKEN_SIGNALS = ("token_prob", "entropy_conf", "action_token_prob", "action_entropy_conf")
_ACTION = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_CONFIDENCE = re.compile(r"<confidence>\s*([0-9]*\.?[0-9]+)\s*</confidence>")


@dataclass
class Call:
    trajectory_id: str | None
    text: str = ""
    entries: list[dict[str, Any]] = field(default_factory=list)  # the served logprobs "content" list
    final_entries: list[dict[str, Any]] | None = None  # what the merged LLMResult carried (streaming)
    streamed: bool = False
    tool_args: dict[str, Any] | None = None  # the first valid tool call's arguments
    invalid_tool_call: bool = False


class PayloadRecorder(BaseCallbackHandler):
    """The test's own capture: every model call's text and served logprob entries, per trajectory id."""

    run_inline = True  # in call order in async runs too

    def __init__(self) -> None:
        self.calls: dict[UUID, Call] = {}
        self.order: list[UUID] = []
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        metadata = kwargs.get("metadata") or {}
        with self._lock:
            self.calls[run_id] = Call(metadata.get("tps_trajectory_id"))
            self.order.append(run_id)

    def on_llm_new_token(self, token: str, *, run_id: UUID, chunk: Any = None, **kwargs: Any) -> None:
        info = getattr(chunk, "generation_info", None) or {}
        logprobs = info.get("logprobs")
        call = self.calls[run_id]
        call.streamed = True
        if logprobs:
            call.entries.extend(logprobs["content"])

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        gen = response.generations[0][0]
        call = self.calls[run_id]
        call.text = gen.text
        message = getattr(gen, "message", None)
        calls = getattr(message, "tool_calls", None) or []
        call.tool_args = calls[0]["args"] if calls else None
        call.invalid_tool_call = bool(getattr(message, "invalid_tool_calls", None)) and not calls
        logprobs = (gen.generation_info or {}).get("logprobs")
        if logprobs is None:
            logprobs = gen.message.response_metadata.get("logprobs")  # type: ignore[attr-defined]
        final = None if logprobs is None else list(logprobs["content"])
        if call.streamed:
            call.final_entries = final
        else:
            call.entries = final or []

    def by_trajectory(self) -> dict[str, list[Call]]:
        out: dict[str, list[Call]] = {}
        for run_id in self.order:
            call = self.calls[run_id]
            if call.trajectory_id is not None:
                out.setdefault(call.trajectory_id, []).append(call)
        return out


class RawHttpLog(httpx.BaseTransport):
    """Keeps every chat-completion response body as sent (JSON, or the SSE lines of a stream)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.bodies: list[tuple[bool, bytes]] = []  # (streamed, body)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        body = response.read()
        if request.url.path.endswith("/chat/completions"):
            self.bodies.append((json.loads(request.content).get("stream", False), body))
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "transfer-encoding"]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)

    def close(self) -> None:
        self.inner.close()

    def served_entries(self) -> list[list[dict[str, Any]]]:
        """Per response, its logprobs content entries in the order the server sent them."""
        out = []
        for streamed, body in self.bodies:
            if not streamed:
                out.append(json.loads(body)["choices"][0]["logprobs"]["content"])
                continue
            entries: list[dict[str, Any]] = []
            for line in body.decode().splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choices = json.loads(line[len("data: ") :])["choices"]
                    if choices and choices[0].get("logprobs"):
                        entries.extend(choices[0]["logprobs"]["content"] or [])
            out.append(entries)
        return out


def _action_mask(tokens: list[str]) -> np.ndarray | None:
    """Tokens overlapping the inner text of the last <action>...</action> (None if there is none)."""
    text = "".join(tokens)
    opens = [m.end() for m in re.finditer(r"<action>", text, re.IGNORECASE)]
    if not opens:
        return None
    close = re.compile(r"</action>", re.IGNORECASE).search(text, opens[-1])
    if close is None:
        return None
    start, end = opens[-1], close.start()
    ends = np.cumsum([len(t) for t in tokens])
    starts = ends - np.array([len(t) for t in tokens])
    return (starts < end) & (ends > start)


def expected_signals(entries: list[dict[str, Any]], k: int = TOP_K) -> dict[str, float | None]:
    """The four token signals from served entries: numpy over the raw numbers, nothing from tps_tracer.

    token_prob = mean_i exp(l_i); entropy_conf = 1 - mean_i H_i / ln k, H_i the entropy of the
    token's k highest candidates renormalised to one."""
    chosen = np.array([e["logprob"] for e in entries], dtype=np.float64)
    prob = np.exp(chosen)
    conf = np.empty(len(entries))
    for i, e in enumerate(entries):
        cands = np.sort(np.array([c["logprob"] for c in e["top_logprobs"]], dtype=np.float64))[::-1][:k]
        q = np.exp(cands - cands.max())
        q /= q.sum()
        conf[i] = 1.0 - float(-(q * np.log(q)).sum()) / np.log(k)
    out: dict[str, float | None] = {"token_prob": float(prob.mean()), "entropy_conf": float(conf.mean())}
    mask = _action_mask([e["token"] for e in entries])
    out["action_token_prob"] = None if mask is None or not mask.any() else float(prob[mask].mean())
    out["action_entropy_conf"] = None if mask is None or not mask.any() else float(conf[mask].mean())
    return out


def stated_confidence(text: str) -> float | None:
    found = _CONFIDENCE.findall(text)
    return float(found[-1]) if found else None


def argument_confidence(args: dict[str, Any]) -> float | None:
    """A `confidence` tool argument as the docs say it is read with no scale declared: 0 and a
    decimal at most 1 as written, below 0 clipped to 0; 10 < x <= 100 a percentage (the only
    scale it fits), above 100 clipped to 1; 1..10 otherwise could be on several scales: None."""
    raw = args["confidence"]
    value = float(raw)
    point = isinstance(raw, float) or (isinstance(raw, str) and any(c in raw.lower() for c in ".e"))
    if value < 0.0:
        return 0.0
    if value == 0.0 or (point and value <= 1.0):
        return value
    if value > 100.0:
        return 1.0
    return value / 100.0 if value > 10.0 else None


def parses(text: str) -> bool:
    """The loop's parser accepts it: `<action>tool[argument]</action>`."""
    return any(re.fullmatch(r"\s*\w+\[[^\]]*\]\s*", m) for m in _ACTION.findall(text))
