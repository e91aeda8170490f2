"""q_Z from real continuations: resume censored LangGraph runs from their checkpoints.

The exact censored score needs q_Z = P(Y=1 | H_Z) for every run the step budget cut short;
the paper's direct estimator resumes the stopped prefix M times under the same model,
harness and stopping rule and averages the branch outcomes (Appendix "q_Z Estimation"):

    q_hat_MC = (1/M) sum_m Y^(m).

With a checkpointer, LangGraph keeps the state of every superstep of a run. For each
censored record (stop reason max_steps; its thread id is in the record's metadata, put
there by `TPSCallbackHandler` from the run config), `resume_continuations`:

1. finds the fork point: the newest checkpoint of the run's thread that still had work
   to do (`next` not empty). For a run that raised GraphRecursionError that is its last
   checkpoint (the cut step's tool call is pending); for the prebuilt agent's graceful
   "Sorry, need more steps" it is the checkpoint before that last model call, which the
   branch makes again. Checkpoints tagged with another trajectory id are skipped, so a
   thread reused by later runs still forks at this run's prefix;
2. copies that checkpoint into M new threads (`<thread>#<trajectory id>#branch-<m>`)
   through the checkpointer itself: the state is copied, nothing is shared. The fork's
   pending writes are not copied: they are the outputs the cut superstep already produced
   (e.g. the "Sorry" message), which the branch must produce afresh;
3. continues each branch with `graph.invoke(None, ...)` under a fresh budget (the
   `recursion_limit` counts from the fork), concurrently (at most `concurrency` at a time);
4. takes each branch's stop reason from how it ended (the handler's rules:
   GraphRecursionError or the budget message is max_steps, malformed output parse_error,
   ...), grades clean branches' final state with the user's grader, and appends one line
   per branch to the continuation file `tps-tracer censoring --continuations` reads.

The file is the bookkeeping: a branch already in it is never rerun, so an interrupted call
continues where it stopped. A branch whose grader raised (or returned something that is
not 0/1) gets no line, is counted, and runs again on the next call; a branch whose fork
failed (checkpointer error) likewise. Nothing is raised for a branch: the summary counts.

Branch runs carry `tps_branch_of` / `tps_branch` in their run metadata (a callback or a
simulated model can tell a branch from an original run) and their own thread id, so
anything seeded by the thread id draws fresh randomness per branch.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tps_tracer.errors import InputError
from tps_tracer.evaluation.censoring.continuation_log import BRANCH_KEY, BRANCH_OF_KEY, ContinuationLog
from tps_tracer.health import HealthLedger
from tps_tracer.langchain.stop_detection import classify_error, classify_output
from tps_tracer.records.jsonl import read_trajectories
from tps_tracer.records.outcome import as_outcome
from tps_tracer.records.schema import TrajectoryRecord
from tps_tracer.records.stop_reasons import CensoringPolicy, Role, StopReason
from tps_tracer.tracking.keys import TRAJECTORY_ID_KEY

Grader = Callable[[Any], Any]  # final state values -> 0/1 (bool, int or float); may be async
THREAD_KEY = "thread_id"  # where the handler puts the run's LangGraph thread in the record metadata


def branch_thread_id(source_thread: str, trajectory_id: str, branch: int) -> str:
    """The thread of branch m: distinct per (source run, m), stable across resumed calls."""
    return f"{source_thread}#{trajectory_id}#branch-{branch}"


@dataclass
class ResumeSummary:
    """What one `resume_continuations` call did (every branch is in exactly one count)."""

    censored: int = 0  # censored records seen
    prefixes: int = 0  # censored records with a fork point
    without_thread: list[str] = field(default_factory=list)  # no thread id in the record metadata
    without_checkpoint: list[str] = field(default_factory=list)  # thread unknown to the checkpointer
    branches_per_prefix: int = 0
    already_done: int = 0  # branches found in the file, not rerun
    written: int = 0  # branches run and written now
    stop_reasons: Counter[str] = field(default_factory=Counter)  # of the written branches
    grader_errors: int = 0  # clean branches not written: the grader raised or returned a non-0/1
    fork_errors: int = 0  # branches not run: copying the checkpoint failed
    seconds: float = 0.0  # wall time of the call
    branch_seconds: float = 0.0  # summed wall time of the branches run (fork, run and grading)

    def as_dict(self) -> dict[str, Any]:
        ran = self.written + self.grader_errors
        return {
            "censored": self.censored,
            "prefixes": self.prefixes,
            "without_thread": len(self.without_thread),
            "without_checkpoint": len(self.without_checkpoint),
            "branches_per_prefix": self.branches_per_prefix,
            "already_done": self.already_done,
            "written": self.written,
            "stop_reasons": dict(sorted(self.stop_reasons.items())),
            "grader_errors": self.grader_errors,
            "fork_errors": self.fork_errors,
            "seconds": round(self.seconds, 3),
            # latency: one branch's wall time (fork, run, grading), inflated by its neighbours when
            # branches run concurrently; throughput: the call's wall time per branch run.
            "seconds_per_branch": round(self.branch_seconds / ran, 4) if ran else None,
            "wall_seconds_per_branch": round(self.seconds / ran, 4) if ran else None,
        }


@dataclass(frozen=True)
class _Prefix:
    trajectory_id: str
    thread_id: str
    fork: Any  # the CheckpointTuple to copy


class _Saver:
    """The checkpointer and graph calls, async when the saver supports it, else in threads.

    SqliteSaver (and other sync-only savers) raise NotImplementedError from their async
    methods; their sync methods are thread-safe, so those calls go through to_thread.
    """

    def __init__(self, graph: Any, use_async: bool):
        self.graph = graph
        self.saver = graph.checkpointer
        self.use_async = use_async

    async def fork_point(self, thread: str, trajectory_id: str) -> Any | None:
        """The newest checkpoint of this run that still had work to do (see the module docstring).

        Walks the thread newest first, one checkpoint per `list(before=..., limit=1)` call,
        and stops at the first hit: a checkpoint's values are deserialised only when reached
        (messages with logprobs make that the costly part), and no listing is still open
        when `get_state` runs (SqliteSaver holds its lock while a listing is iterated)."""
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        before = None
        while True:
            if self.use_async:
                batch = [t async for t in self.saver.alist(config, before=before, limit=1)]
            else:
                batch = await asyncio.to_thread(self._list_one, config, before)
            if not batch:
                return None
            tup = batch[0]
            if _ours(tup, trajectory_id):
                if self.use_async:
                    state = await self.graph.aget_state(tup.config)
                else:
                    state = await asyncio.to_thread(self.graph.get_state, tup.config)
                if state.next:
                    return tup
            before = tup.config

    def _list_one(self, config: dict[str, Any], before: Any) -> list[Any]:
        return list(self.saver.list(config, before=before, limit=1))

    async def get_tuple(self, config: dict[str, Any]) -> Any:
        if self.use_async:
            return await self.saver.aget_tuple(config)
        return await asyncio.to_thread(self.saver.get_tuple, config)

    async def put(self, config: dict[str, Any], checkpoint: Any, metadata: Any, versions: Any) -> Any:
        if self.use_async:
            return await self.saver.aput(config, checkpoint, metadata, versions)
        return await asyncio.to_thread(self.saver.put, config, checkpoint, metadata, versions)

    async def delete_thread(self, thread_id: str) -> None:
        if self.use_async:
            await self.saver.adelete_thread(thread_id)
        else:
            await asyncio.to_thread(self.saver.delete_thread, thread_id)

    async def invoke(self, config: dict[str, Any]) -> Any:
        if self.use_async:
            return await self.graph.ainvoke(None, config)
        return await asyncio.to_thread(self.graph.invoke, None, config)


async def _saver_for(graph: Any) -> _Saver:
    saver = getattr(graph, "checkpointer", None)
    if saver is None or saver is True or saver is False:
        raise InputError("the graph has no checkpointer: compile it with checkpointer=InMemorySaver() / SqliteSaver")
    probe = {"configurable": {"thread_id": "tps-tracer-probe", "checkpoint_ns": ""}}
    try:
        await saver.aget_tuple(probe)
    except NotImplementedError:
        return _Saver(graph, use_async=False)
    return _Saver(graph, use_async=True)


def _censored(records: Iterable[TrajectoryRecord], policy: CensoringPolicy) -> list[TrajectoryRecord]:
    return [r for r in records if policy.role(r.stop_reason) is Role.CENSORED]


def _ours(tup: Any, trajectory_id: str) -> bool:
    """False for a checkpoint another run on the same thread made (tagged with another id)."""
    tagged = (tup.metadata or {}).get(TRAJECTORY_ID_KEY)
    return tagged is None or str(tagged) == trajectory_id


async def _grade(grader: Grader, state: Any) -> int:
    if inspect.iscoroutinefunction(grader):
        value = await grader(state)
    else:
        value = await asyncio.to_thread(grader, state)
    y = as_outcome(value)  # the one outcome rule, as for the handler's grader; InvalidOutcome is a ValueError
    if y is None:
        raise InputError("the grader returned None: no verdict")
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
    """Async form of `resume_continuations` (use it inside a running event loop)."""
    if branches < 1:
        raise InputError("branches must be >= 1")
    if concurrency < 1:
        raise InputError("concurrency must be >= 1")
    if budget is not None and budget < 1:
        raise InputError("budget (the branch's recursion_limit) must be >= 1")
    started = time.perf_counter()
    health = health if health is not None else HealthLedger()
    recs = read_trajectories(records) if isinstance(records, str | os.PathLike) else list(records)
    ops = await _saver_for(graph)
    summary = ResumeSummary(branches_per_prefix=branches)
    prefixes: list[_Prefix] = []
    for rec in _censored(recs, policy or CensoringPolicy()):
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
        prefixes.append(_Prefix(rec.trajectory_id, str(thread), fork))
    summary.prefixes = len(prefixes)

    base = dict(config or {})
    base_metadata = dict(base.pop("metadata", None) or {})
    base_configurable = dict(base.pop("configurable", None) or {})
    if budget is not None:
        base["recursion_limit"] = budget

    with ContinuationLog(out, health) as log:
        todo = []
        for p in prefixes:
            for m in range(branches):
                if log.is_done(p.trajectory_id, m):
                    summary.already_done += 1
                else:
                    todo.append((p, m))

        async def one(p: _Prefix, m: int) -> None:
            try:
                await run_branch(p, m)
            finally:
                if progress is not None:
                    progress(1)

        async def run_branch(p: _Prefix, m: int) -> None:
            t0 = time.perf_counter()
            thread = branch_thread_id(p.thread_id, p.trajectory_id, m)
            try:
                # A thread left by an interrupted attempt is dropped, so the branch restarts
                # at the fork (and, seeded by its thread id, replays the same draws).
                await ops.delete_thread(thread)
                ckpt = p.fork.checkpoint
                target = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
                meta = {**(p.fork.metadata or {}), BRANCH_OF_KEY: p.trajectory_id, BRANCH_KEY: m}
                await ops.put(target, ckpt, meta, dict(ckpt["channel_versions"]))
            except Exception as exc:  # counted; the branch runs on the next call
                summary.fork_errors += 1
                health.count("error", "resume_fork", f"forking {thread!r} failed: {exc!r}")
                return
            run_config = {
                **base,
                "configurable": {**base_configurable, "thread_id": thread},
                "metadata": {**base_metadata, BRANCH_OF_KEY: p.trajectory_id, BRANCH_KEY: m},
            }
            outcome: int | None = None
            try:
                final = await ops.invoke(run_config)
            except Exception as exc:  # how the branch ended is its stop reason
                reason, detail = classify_error(exc)
            else:
                found, detail = classify_output(final)
                reason = found or StopReason.CLEAN
                if reason is StopReason.CLEAN:
                    try:
                        outcome = await _grade(grader, final)
                    except Exception as exc:  # counted, never raised
                        summary.grader_errors += 1
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
                await one(p, m)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(todo)) or 1)))
    summary.seconds = time.perf_counter() - started
    return summary


def resume_continuations(
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
    """Resume every censored run in `records` `branches` times and append the outcomes to `out`.

    graph: the compiled LangGraph graph the runs were made with, compiled with the same
    checkpointer (InMemorySaver, SqliteSaver, AsyncSqliteSaver, ...).
    records: the handler's trajectory records (a list or a JSON Lines path); only censored
    ones (max_steps under `policy`) with a `thread_id` in their metadata are resumed.
    out: the continuation file (created or extended; branches already in it are skipped).
    grader: final state values of a clean branch -> 0/1 or bool (sync or async).
    budget: the branches' recursion_limit (fresh, counted from the fork); default the
    graph's. config: extra run config for the branches (callbacks, configurable keys, ...).
    concurrency: branches in flight at once. progress: called with 1 after each branch.
    health: the ledger that counts what was skipped or failed (default: a new one).

    Then `tps-tracer censoring RECORDS --continuations OUT` attaches q_hat.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("resume_continuations was called inside a running event loop; await aresume_continuations")
    return asyncio.run(
        aresume_continuations(
            graph,
            records,
            out,
            branches=branches,
            grader=grader,
            budget=budget,
            concurrency=concurrency,
            config=config,
            policy=policy,
            health=health,
            progress=progress,
        )
    )


__all__ = ["ResumeSummary", "aresume_continuations", "branch_thread_id", "resume_continuations"]
