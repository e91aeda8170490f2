"""A LangChain chat model that plays a ReAct agent in the simulated world, its outputs scripted by `AgentWorld`
and delivered like `ChatOpenAI(logprobs=True, top_logprobs=5)`'s; in a continuation branch (`tps_branch_of`
metadata) each call is drawn from the world's law given the clues so far. `search_tool` is the world's tool."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import ensure_config
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.prebuilt import InjectedState
from pydantic import PrivateAttr

from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.continuations import BRANCH_OF_KEY
from tps_tracer.sim.world import (
    ANSWER,
    WRONG_ANSWER,
    AgentWorld,
    StepScript,
    TextStyle,
    continuation_clue,
    continuation_step,
    openai_logprobs,
    query_of,
    render,
    render_malformed,
    tokenize,
)

TASK_MARKER = re.compile(r"\[task:([\w.\-]+)\]")

Style = Literal["tool_calls", "tagged", "react"]  # prebuilt / create_agent, the paper's text, AgentExecutor


def task_prompt(task_id: str) -> str:
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


_CLUE = re.compile(r"Clue (?P<t>\d+): the evidence is (?P<word>positive|negative)\.")


def clue_text(t: int, evidence: int) -> str:
    """What the `search` tool answers for clue t (the model reads the evidence back from it)."""
    return f"Clue {t}: the evidence is {'positive' if evidence else 'negative'}."


def clues_seen(messages: Sequence[Any]) -> list[int]:
    """The evidence s_1.. in the tool messages of a conversation (what the prefix revealed)."""
    texts = (m.text for m in messages if isinstance(m, ToolMessage) and m.status != "error")
    return [int(found.group("word") == "positive") for found in map(_CLUE.search, texts) if found]


_ACTION = re.compile(r"<action>\s*finish\[(?P<answer>[^\]]*)\]\s*</action>")


def grade_final_state(state: Any) -> int:
    """The world's grader: 1 if the run's last message answers ANSWER, 0 for another answer; an
    InputError (a grader failure) when it gives none."""
    messages = state.get("messages") if isinstance(state, dict) else None
    if not messages:
        raise InputError("no messages in the final state")
    last = messages[-1]
    found = _ACTION.search(last.text if isinstance(last, BaseMessage) else str(last))
    if not found:
        raise InputError("the final message has no <action>finish[...]</action>")
    return int(found.group("answer").strip() == ANSWER)


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
        return self

    def _next_output(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any] | None]:
        found = next((hit for m in messages if (hit := TASK_MARKER.search(m.text))), None)
        if found is None:
            raise InputError("scripted model: no [task:ID] marker in the prompt")
        task_id = found.group(1)
        world: AgentWorld = self.world
        thread = branch_thread()
        if thread is not None:
            if self.style != "tool_calls":
                raise InputError(f"continuation branches are played in the tool_calls style, not {self.style!r}")
            step, outcome = continuation_step(world.config, world.seed, thread, clues_seen(messages))
            return self._message(task_id, step, step.malformed_before, ANSWER if outcome else WRONG_ANSWER)
        script = world[task_id]
        with self._lock:
            n = self._calls.get(task_id, 0)
            self._calls[task_id] = n + 1
        # the outputs that play each step: its malformed attempts (1..m), then the good one (0)
        plays = [(s, k) for s in script.steps[: script.length] for k in [*range(1, s.malformed_before + 1), 0]]
        step, attempt = plays[min(n, len(plays) - 1)]  # past the script: repeat the answer
        return self._message(task_id, step, attempt)

    def _message(
        self, task_id: str, step: StepScript, attempt: int, answer: str = ANSWER
    ) -> tuple[AIMessage, dict[str, Any] | None]:
        text_style: TextStyle = "react" if self.style == "react" else "tagged"
        calls: dict[str, Any] = {}
        if attempt:
            text = render_malformed(task_id, step, attempt, text_style)
            tokens = tokenize(text)
            probs = np.full(len(tokens), 0.6)
            bad = {"name": "search", "args": '{"query": "unterminated', "id": f"call_{task_id}_{step.t}_bad{attempt}"}
            bad |= {"error": "Function search arguments are not valid JSON", "type": "invalid_tool_call"}
            calls["invalid_tool_calls"] = [bad]
        else:
            r = render(task_id, step, text_style, answer)
            text, tokens, probs = r.text, r.tokens, r.probs
            call = {"name": "search", "args": {"query": query_of(task_id, step.t)}, "id": f"call_{task_id}_{step.t}"}
            calls["tool_calls"] = [] if step.final else [call]
        lp = openai_logprobs(tokens, probs) if self.logprobs else None
        return AIMessage(content=text, **(calls if self.style == "tool_calls" else {})), lp

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
        calls: list[tuple[Any, Any]] = [(c, json.dumps(c["args"])) for c in message.tool_calls]
        calls += [(c, c["args"]) for c in message.invalid_tool_calls]  # the raw text, as the model wrote it
        chunks: list[Any] = [
            {"name": c["name"], "args": a, "id": c["id"], "index": i} for i, (c, a) in enumerate(calls)
        ]
        tail = AIMessageChunk(content="", tool_call_chunks=chunks, chunk_position="last")
        finish = {"finish_reason": "tool_calls" if message.tool_calls else "stop"}
        yield ChatGenerationChunk(message=tail, generation_info=finish)


_QUERY = re.compile(r"^\s*(?P<task>[\w.\-]+)\s+clue\s+(?P<t>\d+)\s*$")


def search_tool(world: AgentWorld, branches: bool = False) -> BaseTool:
    """A scripted failure raises ToolException (ending the run); `branches`: a branch's
    clue is drawn given the clues in the graph state (InjectedState: LangGraph's ToolNode only)."""

    def search(query: str) -> str:
        """Look up one clue about the task, e.g. 'task-00017 clue 3'."""
        m = _QUERY.match(query)
        steps = world[m.group("task")].steps if m and m.group("task") in world.tasks else []
        t = int(m.group("t")) if m else 0
        if not 1 <= t <= len(steps):
            raise ToolException(f"no such clue: {query!r}")
        if steps[t - 1].tool_fails:
            raise ToolException("search backend unavailable")
        return clue_text(t, steps[t - 1].evidence)

    if not branches:
        return StructuredTool.from_function(search, name="search")

    def search_or_branch(query: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Look up one clue about the task, e.g. 'task-00017 clue 3'."""
        thread = branch_thread()
        if thread is None:
            return search(query)
        seen = clues_seen(state.get("messages", []))
        m = _QUERY.match(query)
        if not m or m.group("task") not in world.tasks or int(m.group("t")) != len(seen) + 1:
            raise ToolException(f"no such clue: {query!r} (clue {len(seen) + 1} is next)")
        fails, evidence = continuation_clue(world.config, world.seed, thread, seen)
        if fails:
            raise ToolException("search backend unavailable")
        return clue_text(len(seen) + 1, evidence)

    return StructuredTool.from_function(search_or_branch, name="search")
