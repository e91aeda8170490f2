"""A real LangChain chat model that plays a ReAct agent in the simulated world.

No LLM is reachable here, so the model's outputs are scripted by `AgentWorld`, but it is a
genuine `BaseChatModel`: agents bind tools to it, call it through the normal callback
machinery, stream from it, and get `AIMessage`s with tool calls, invalid tool calls and
OpenAI-format logprobs in `generation_info` (hence `response_metadata["logprobs"]`),
exactly where `ChatOpenAI(logprobs=True, top_logprobs=5)` puts them.

The model finds its task from a `[task:ID]` marker in the prompt and keeps a per-task call
counter (thread-safe), so it plays the same script under any runtime: the n-th call of a
task emits the task's n-th scripted output (malformed ones included).

Continuation branches (a censored run resumed from its LangGraph checkpoint by
`tps_tracer.langchain.resume`) are recognised by the `tps_branch_of` key in the run's
metadata: there the model plays no script but draws each call from the world's law given
the prefix it reads from the messages (the clues seen so far), seeded by the branch's
thread id (`world.continuation_step`). Only the "tool_calls" style plays branches.

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
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import ensure_config
from pydantic import PrivateAttr

from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.continuations import BRANCH_OF_KEY
from tps_tracer.sim.world import (
    ANSWER,
    WRONG_ANSWER,
    AgentWorld,
    StepScript,
    continuation_step,
    openai_logprobs,
    query_of,
    read_clues,
    render,
    render_malformed,
    tokenize,
)

TASK_MARKER = re.compile(r"\[task:([\w.\-]+)\]")

Style = Literal["tool_calls", "tagged", "react"]


def task_prompt(task_id: str) -> str:
    """The user message that starts a task (carries the marker the model keys on)."""
    return f"[task:{task_id}] Decide whether the claim of this task holds. Search for clues, then answer."


def branch_thread() -> str | None:
    """The thread id of the continuation branch this call runs in, or None in an original run."""
    config = ensure_config()  # the calling graph node's config (LangGraph sets it per task)
    if BRANCH_OF_KEY not in (config.get("metadata") or {}):
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None:
        raise InputError("a continuation branch runs without a thread_id")
    return str(thread)


def clues_seen(messages: Sequence[Any]) -> list[int]:
    """The evidence s_1.. in the tool messages of a conversation (what the prefix revealed)."""
    return read_clues(m.text for m in messages if isinstance(m, ToolMessage) and m.status != "error")


_ACTION = re.compile(r"<action>\s*finish\[(?P<answer>[^\]]*)\]\s*</action>")


def grade_final_state(state: Any) -> int:
    """The world's grader: 1 if the run's last message answers ANSWER, 0 for another answer.

    Raises ValueError when the last message gives no answer (a grader failure)."""
    messages = state.get("messages") if isinstance(state, dict) else None
    if not messages:
        raise InputError("no messages in the final state")
    last = messages[-1]
    found = _ACTION.search(last.text if isinstance(last, BaseMessage) else str(last))
    if not found:
        raise InputError("the final message has no <action>finish[...]</action>")
    return int(found.group("answer").strip() == ANSWER)


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
        raise InputError("scripted model: no [task:ID] marker in the prompt")

    def _next_output(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any] | None]:
        task_id = self._task_id(messages)
        world: AgentWorld = self.world
        thread = branch_thread()
        if thread is not None:
            return self._branch_output(task_id, messages, thread)
        script = world[task_id]
        with self._lock:
            n = self._calls.get(task_id, 0)
            self._calls[task_id] = n + 1
        plays = [c for s in script.steps[: script.length] for c in _calls_of(s)]
        step, attempt = plays[min(n, len(plays) - 1)]  # past the script: repeat the answer
        return self._message(task_id, step, attempt)

    def _branch_output(
        self, task_id: str, messages: list[BaseMessage], thread: str
    ) -> tuple[AIMessage, dict[str, Any] | None]:
        if self.style != "tool_calls":
            raise InputError(f"continuation branches are played in the tool_calls style, not {self.style!r}")
        world: AgentWorld = self.world
        draw = continuation_step(world.config, world.seed, thread, clues_seen(messages))
        answer = ANSWER if draw.outcome else WRONG_ANSWER
        return self._message(task_id, draw.step, draw.step.malformed_before, answer)

    def _message(
        self, task_id: str, step: StepScript, attempt: int, answer: str = ANSWER
    ) -> tuple[AIMessage, dict[str, Any] | None]:
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
        r = render(task_id, step, text_style, answer)
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
