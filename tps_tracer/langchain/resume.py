"""q_Z from real continuations: resume censored LangGraph runs from their checkpoints M times, the paper's
q_hat_MC = (1/M) sum_m Y^(m). Each branch forks at the run's newest checkpoint with work left and is
appended to the continuation file, the bookkeeping (a branch in it is never rerun).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import time
import types
import typing
import warnings
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, ParamSpec, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.continuations import BRANCH_KEY, BRANCH_OF_KEY, DEFAULT_MIN_VALID, ContinuationLog
from tps_tracer.health import HealthLedger
from tps_tracer.langchain.run_reading import classify_error, classify_output, final_message
from tps_tracer.records.jsonl import read_trajectories
from tps_tracer.records.record_shape import as_outcome
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.tracking.keys import TRAJECTORY_ID_KEY

Grader = Callable[[Any], Any]  # final state values -> 0/1 (bool, int or float); may be async
RECENSORED_SHARE = 0.2  # above this share of branches cut again by their budget, the summary warns
THREAD_KEY = "thread_id"  # where the handler puts the run's LangGraph thread in the record metadata


def branch_thread_id(source_thread: str, trajectory_id: str, branch: int) -> str:
    """Distinct per (source run, m), stable across resumed calls."""
    return f"{source_thread}#{trajectory_id}#branch-{branch}"


@dataclass
class ResumeSummary:
    """What one `resume_continuations` call did (every branch in exactly one count)."""

    censored: int = 0  # censored records seen
    prefixes: int = 0  # censored records with a fork point
    without_thread: list[str] = field(default_factory=list)  # no thread id in the record metadata
    without_checkpoint: list[str] = field(default_factory=list)  # thread unknown to the checkpointer
    branches_per_prefix: int = 0
    already_done: int = 0  # branches found in the file, not rerun
    written: int = 0  # branches run and written now
    stop_reasons: Counter[str] = field(default_factory=Counter)  # of the written branches
    grader_errors: int = 0  # clean branches not written: the grader raised or returned a non-0/1
    grader_error_example: str | None = None  # the first grader failure, as it was raised
    grader_given_message: int = 0  # graded on the final message after raising on the state (see above)
    fork_errors: int = 0  # branches not run: copying the checkpoint failed
    branch_budget: str = ""  # what bounded each branch
    warnings: list[str] = field(default_factory=list)  # e.g. fewer branches than a q_z needs
    seconds: float = 0.0  # wall time of the call
    branch_seconds: float = 0.0  # summed wall time of the branches run (fork, run and grading)

    def as_dict(self) -> dict[str, Any]:
        ran = self.written + self.grader_errors
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "branch_seconds"}
        out.update(
            without_thread=len(self.without_thread),
            without_checkpoint=len(self.without_checkpoint),
            stop_reasons=dict(sorted(self.stop_reasons.items())),
            warnings=list(self.warnings),
            seconds=round(self.seconds, 3),
        )
        # Latency (inflated by concurrent neighbours), then throughput.
        out["seconds_per_branch"] = round(self.branch_seconds / ran, 4) if ran else None
        out["wall_seconds_per_branch"] = round(self.seconds / ran, 4) if ran else None
        return out


@dataclass(frozen=True)
class _Prefix:
    trajectory_id: str
    thread_id: str
    fork: Any  # the CheckpointTuple to copy
    step_limit: int  # the original run's step limit (model calls): the record's horizon


class BranchStepBudgetExceeded(RuntimeError):
    """A resumed branch started more model calls than the original run's step limit (max_steps)."""


class _StepCap(BaseCallbackHandler):
    """Stops a branch at its (limit+1)-th model call (raise_error: LangChain raises it into the graph)."""

    raise_error = True

    def __init__(self, limit: int):
        self.limit = limit
        self.calls = 0

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls > self.limit:
            raise BranchStepBudgetExceeded(f"branch step budget of {self.limit} model calls used")

    on_llm_start = on_chat_model_start


def _quiet_step_cap(record: logging.LogRecord) -> bool:
    """LangChain logs every exception a callback raises; the step cap's is the branch's stop reason."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not (args and args[0] == _StepCap.__name__)


logging.getLogger("langchain_core.callbacks.manager").addFilter(_quiet_step_cap)


def _with_cap(callbacks: Any, cap: _StepCap) -> Any:
    if callbacks is None:
        return [cap]
    if isinstance(callbacks, list | tuple):
        return [*callbacks, cap]
    manager = callbacks.copy()  # a CallbackManager: a copy, so the user's is not changed
    manager.add_handler(cap, inherit=True)
    return manager


def _wants_message(grader: Grader) -> bool | None:
    """Whether the grader's first parameter is annotated as a message (or str); None: not annotated."""
    try:
        fn = grader if inspect.isfunction(grader) or inspect.ismethod(grader) else grader.__call__  # type: ignore[operator]
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        hints = typing.get_type_hints(fn)
    except Exception:  # builtins, odd callables, unresolvable annotations
        return None
    hint = hints.get(params[0].name) if params else None
    if hint is None or hint is Any:  # Any says nothing about what it reads
        return None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return any(isinstance(o, type) and (issubclass(o, BaseMessage) or o is str) for o in options)


class _Saver:
    """The checkpointer and graph calls, async when the saver supports it, else (SqliteSaver) in threads."""

    def __init__(self, graph: Any, use_async: bool):
        self.graph = graph
        self.saver = graph.checkpointer
        self.use_async = use_async

    async def call(self, owner: Any, name: str, *args: Any) -> Any:
        """`owner.aNAME(*args)` awaited, or `owner.NAME(*args)` in a thread."""
        if self.use_async:
            return await getattr(owner, "a" + name)(*args)
        return await asyncio.to_thread(getattr(owner, name), *args)

    async def fork_point(self, thread: str, trajectory_id: str) -> Any | None:
        """The newest checkpoint of this run with work left, one `list(limit=1)` at a time (SqliteSaver
        holds its lock while a listing is iterated, and `get_state` runs in between)."""
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        before = None
        while True:
            if self.use_async:
                batch = [t async for t in self.saver.alist(config, before=before, limit=1)]
            else:
                batch = await asyncio.to_thread(list, self.saver.list(config, before=before, limit=1))  # a generator
            if not batch:
                return None
            tup = batch[0]
            tagged = (tup.metadata or {}).get(TRAJECTORY_ID_KEY)  # another run on the same thread: not ours
            if (tagged is None or str(tagged) == trajectory_id) and (
                await self.call(self.graph, "get_state", tup.config)
            ).next:
                return tup
            before = tup.config


async def _call(grader: Grader, value: Any) -> int:
    out = await grader(value) if inspect.iscoroutinefunction(grader) else await asyncio.to_thread(grader, value)
    y = as_outcome(out)  # the one outcome rule, as for the handler's grader; InvalidOutcome is a ValueError
    if y is None:
        raise InputError("the grader returned None: no verdict")
    return y


async def _grade(grader: Grader, state: Any, wants_message: bool | None, summary: ResumeSummary) -> int:
    """A clean branch's verdict: an unannotated grader that raises on the state gets the final message."""
    if wants_message:
        return await _call(grader, final_message(state))
    try:
        return await _call(grader, state)
    except (TypeError, AttributeError, KeyError, IndexError):
        if wants_message is not None:
            raise
        y = await _call(grader, final_message(state))  # the handler's grader, reused: it reads a message
        summary.grader_given_message += 1
        return y


async def aresume_continuations(
    graph: Any,
    records: Iterable[TrajectoryRecord] | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    branches: int,
    grader: Grader,
    budget: int | None = None,
    concurrency: int = 4,
    config: dict[str, Any] | None = None,
    policy: CensoringPolicy | None = None,
    health: HealthLedger | None = None,
    progress: Callable[[int], Any] | None = None,
) -> ResumeSummary:
    """Resume every censored run in `records` (with a `thread_id`) `branches` times from `graph`'s checkpointer
    and append the outcomes to the continuation file `out` (options: docs/censoring.md, "q_Z from your checkpoints")."""
    if branches < 1:
        raise InputError("branches must be >= 1")
    if concurrency < 1:
        raise InputError("concurrency must be >= 1")
    if budget is not None and budget < 1:
        raise InputError("budget (the branch's recursion_limit) must be >= 1")
    started = time.perf_counter()
    summary = ResumeSummary(branches_per_prefix=branches)
    if branches < DEFAULT_MIN_VALID:
        message = (
            f"branches={branches} is below the {DEFAULT_MIN_VALID} valid branches `tps-tracer censoring` needs per "
            f"prefix (--min-valid {DEFAULT_MIN_VALID}), so no censored run would get a q_z: use branches >= "
            f"{2 * DEFAULT_MIN_VALID} (room for invalid branches), or pass --min-valid {branches} knowingly"
        )
        summary.warnings.append(message)
        warnings.warn(message, UserWarning, stacklevel=3)
    summary.branch_budget = (
        f"recursion_limit {budget} (given)"
        if budget is not None
        else "the original run's step limit (the record's horizon, in model calls), counted from the fork"
    )
    health = health if health is not None else HealthLedger()
    recs = read_trajectories(records) if isinstance(records, str | os.PathLike) else list(records)
    saver = getattr(graph, "checkpointer", None)
    if saver is None or saver is True or saver is False:
        raise InputError("the graph has no checkpointer: compile it with checkpointer=InMemorySaver() / SqliteSaver")
    try:
        await saver.aget_tuple({"configurable": {"thread_id": "tps-tracer-probe", "checkpoint_ns": ""}})
        ops = _Saver(graph, use_async=True)
    except NotImplementedError:
        ops = _Saver(graph, use_async=False)
    wants_message = _wants_message(grader)
    prefixes: list[_Prefix] = []
    policy = policy or CensoringPolicy()
    for rec in recs:
        if policy.role(rec.stop_reason) is not Role.CENSORED:
            continue
        summary.censored += 1
        thread = rec.metadata.get(THREAD_KEY)
        if not thread:
            summary.without_thread.append(rec.trajectory_id)
            health.count("ignored", "resume_without_thread_id")
            continue
        fork = await ops.fork_point(str(thread), rec.trajectory_id)
        if fork is None:
            summary.without_checkpoint.append(rec.trajectory_id)
            health.count("ignored", "resume_without_checkpoint")
            continue
        prefixes.append(_Prefix(rec.trajectory_id, str(thread), fork, rec.horizon or len(rec.steps) or 1))
    summary.prefixes = len(prefixes)

    base = dict(config or {})
    base_metadata = dict(base.pop("metadata", None) or {})
    base_configurable = dict(base.pop("configurable", None) or {})
    if budget is not None:
        base["recursion_limit"] = budget

    with ContinuationLog(out, health) as log:
        todo = [(p, m) for p in prefixes for m in range(branches) if not log.is_done(p.trajectory_id, m)]
        summary.already_done = len(prefixes) * branches - len(todo)

        async def run_branch(p: _Prefix, m: int) -> None:
            t0 = time.perf_counter()
            thread = branch_thread_id(p.thread_id, p.trajectory_id, m)
            try:
                # A thread left by an interrupted attempt is dropped: the branch restarts at the fork.
                await ops.call(ops.saver, "delete_thread", thread)
                ckpt = p.fork.checkpoint
                target = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
                meta = {**(p.fork.metadata or {}), BRANCH_OF_KEY: p.trajectory_id, BRANCH_KEY: m}
                await ops.call(ops.saver, "put", target, ckpt, meta, dict(ckpt["channel_versions"]))
            except Exception as exc:  # counted; the branch runs on the next call
                summary.fork_errors += 1
                health.count("error", "resume_fork", f"forking {thread!r} failed: {exc!r}")
                return
            run_config = {
                **base,
                "configurable": {**base_configurable, "thread_id": thread},
                "metadata": {**base_metadata, BRANCH_OF_KEY: p.trajectory_id, BRANCH_KEY: m},
            }
            if budget is None:  # the original run's step limit, not LangGraph's default recursion limit
                run_config["callbacks"] = _with_cap(base.get("callbacks"), _StepCap(p.step_limit))
            outcome: int | None = None
            try:
                final = await ops.call(graph, "invoke", None, run_config)
            except Exception as exc:  # how the branch ended is its stop reason
                reason, detail = classify_error(exc)
            else:
                found, detail = classify_output(final)
                reason = found or StopReason.CLEAN
                if reason is StopReason.CLEAN:
                    try:
                        outcome = await _grade(grader, final, wants_message, summary)
                    except Exception as exc:  # counted, never raised
                        summary.grader_errors += 1
                        summary.grader_error_example = summary.grader_error_example or f"{thread}: {exc!r}"
                        summary.branch_seconds += time.perf_counter() - t0
                        health.count("error", "resume_grader", f"grading {thread!r} failed: {exc!r}")
                        return
            seconds = time.perf_counter() - t0
            summary.branch_seconds += seconds
            log.append(
                p.trajectory_id,
                m,
                reason,
                outcome,
                stop_detail=detail or None,
                thread_id=thread,
                source_thread_id=p.thread_id,
                fork_checkpoint_id=p.fork.config["configurable"].get("checkpoint_id"),
                seconds=round(seconds, 4),
            )
            summary.written += 1
            summary.stop_reasons[reason.value] += 1

        queue = iter(todo)

        async def worker() -> None:
            for p, m in queue:  # the iterator is shared: each branch is taken by one worker
                try:
                    await run_branch(p, m)
                finally:
                    if progress is not None:
                        progress(1)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(todo)) or 1)))
    summary.seconds = time.perf_counter() - started
    again = summary.stop_reasons.get(StopReason.MAX_STEPS.value, 0)
    if summary.written and again > RECENSORED_SHARE * summary.written:
        summary.warnings.append(
            f"{again} of {summary.written} branches hit the step budget again ({summary.branch_budget}): they are "
            "unresolved, left out of q_hat by default (`tps-tracer censoring --unresolved` for the sensitivity "
            "analysis); give the branches more room with budget=<recursion_limit> if that is affordable"
        )
    return summary


P = ParamSpec("P")
T = TypeVar("T")


def _sync(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """`fn` (named `aNAME`) as NAME, for a caller outside any event loop."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(f"{run.__name__} was called inside a running event loop; await {fn.__name__}")
        return asyncio.run(fn(*args, **kwargs))

    run.__name__ = run.__qualname__ = fn.__name__[1:]
    return run


resume_continuations = _sync(aresume_continuations)


__all__ = [
    "BranchStepBudgetExceeded",
    "ResumeSummary",
    "aresume_continuations",
    "branch_thread_id",
    "resume_continuations",
]
