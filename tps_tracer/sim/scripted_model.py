"""A real LangChain chat model that plays a ReAct agent in the simulated world.

No LLM is reachable here, so the model's outputs are scripted by `AgentWorld`, but it is a
genuine `BaseChatModel`: agents bind tools to it, call it through the normal callback
machinery, stream from it, and get `AIMessage`s with tool calls, invalid tool calls and
OpenAI-format logprobs in `generation_info` (hence `response_metadata["logprobs"]`),
exactly where `ChatOpenAI(logprobs=True, top_logprobs=5)` puts them.

The model finds its task from a `[task:ID]` marker in the prompt and keeps a per-task call
counter (thread-safe), so it plays the same script under any runtime: the n-th call of a
task emits the task's n-th scripted output (malformed ones included).

Styles: "tool_calls" (tagged text plus a `search` tool call; for `create_agent` and
LangGraph's prebuilt agent), "tagged" (the paper's `<think>/<action>/<confidence>/
<explanation>` text, for a hand-built text loop), "react" (LangChain's
`Thought/Action/Action Input` text, for AgentExecutor).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import PrivateAttr

from tps_tracer.sim.world import AgentWorld, StepScript, openai_logprobs, query_of, render, render_malformed, tokenize

TASK_MARKER = re.compile(r"\[task:([\w.\-]+)\]")

Style = Literal["tool_calls", "tagged", "react"]


def task_prompt(task_id: str) -> str:
    """The user message that starts a task (carries the marker the model keys on)."""
    return f"[task:{task_id}] Decide whether the claim of this task holds. Search for clues, then answer."


def _calls_of(step: StepScript) -> list[tuple[StepScript, int]]:
    """The outputs that play one step: its malformed attempts (1..m), then the good one (0)."""
    return [(step, k) for k in range(1, step.malformed_before + 1)] + [(step, 0)]


class ScriptedReActModel(BaseChatModel):
    world: Any  # AgentWorld (typed Any: pydantic cannot validate the plain class)
    style: Style = "tool_calls"
    logprobs: bool = True
    _calls: dict[str, int] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "tps-tracer-scripted-react"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedReActModel:
        # The script already knows the one tool (`search`); binding changes nothing.
        return self

    # ------------------------------------------------------------------ script

    def _task_id(self, messages: list[BaseMessage]) -> str:
        for m in messages:
            found = TASK_MARKER.search(m.text if hasattr(m, "text") else str(m.content))
            if found:
                return found.group(1)
        raise ValueError("scripted model: no [task:ID] marker in the prompt")

    def _next_output(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any] | None]:
        task_id = self._task_id(messages)
        world: AgentWorld = self.world
        script = world[task_id]
        with self._lock:
            n = self._calls.get(task_id, 0)
            self._calls[task_id] = n + 1
        plays = [c for s in script.steps[: script.length] for c in _calls_of(s)]
        step, attempt = plays[min(n, len(plays) - 1)]  # past the script: repeat the answer
        return self._message(task_id, step, attempt)

    def _message(self, task_id: str, step: StepScript, attempt: int) -> tuple[AIMessage, dict[str, Any] | None]:
        text_style = "react" if self.style == "react" else "tagged"
        if attempt:
            text = render_malformed(task_id, step, attempt, text_style)
            tokens = tokenize(text)
            lp = openai_logprobs(tokens, np.full(len(tokens), 0.6)) if self.logprobs else None
            if self.style == "tool_calls":
                bad = {
                    "name": "search",
                    "args": '{"query": "unterminated',
                    "id": f"call_{task_id}_{step.t}_bad{attempt}",
                }
                bad |= {"error": "Function search arguments are not valid JSON", "type": "invalid_tool_call"}
                return AIMessage(content=text, invalid_tool_calls=[bad]), lp
            return AIMessage(content=text), lp
        r = render(task_id, step, text_style)
        lp = openai_logprobs(r.tokens, r.probs) if self.logprobs else None
        if self.style == "tool_calls" and not step.final:
            call = {"name": "search", "args": {"query": query_of(task_id, step.t)}, "id": f"call_{task_id}_{step.t}"}
            return AIMessage(content=r.text, tool_calls=[call]), lp
        return AIMessage(content=r.text), lp

    # ------------------------------------------------------------------ BaseChatModel

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message, lp = self._next_output(messages)
        info: dict[str, Any] = {"finish_reason": "tool_calls" if message.tool_calls else "stop"}
        if lp is not None:
            info["logprobs"] = lp
        return ChatResult(generations=[ChatGeneration(message=message, generation_info=info)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """One chunk per token, each carrying its own logprobs entry (as OpenAI streams them)."""
        message, lp = self._next_output(messages)
        tokens = tokenize(message.text)
        entries: list[Any] = lp["content"] if lp is not None else [None] * len(tokens)
        for token, entry in zip(tokens, entries, strict=True):
            info = {"logprobs": {"content": [entry]}} if entry else None
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token), generation_info=info)
            if run_manager:
                run_manager.on_llm_new_token(token, chunk=chunk, logprobs=info and info["logprobs"])
            yield chunk
        valid = [
            {"name": c["name"], "args": _json(c["args"]), "id": c["id"], "index": i}
            for i, c in enumerate(message.tool_calls)
        ]
        invalid = [
            {"name": c["name"], "args": c["args"], "id": c["id"], "index": len(valid) + i}
            for i, c in enumerate(message.invalid_tool_calls)
        ]
        chunks: list[Any] = valid + invalid
        tail = AIMessageChunk(content="", tool_call_chunks=chunks, chunk_position="last")
        finish = {"finish_reason": "tool_calls" if message.tool_calls else "stop"}
        yield ChatGenerationChunk(message=tail, generation_info=finish)


def _json(args: dict[str, Any]) -> str:
    return json.dumps(args)
