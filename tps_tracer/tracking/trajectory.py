"""One trajectory's capture state, and the rules that turn model calls into steps and a stop.

Both adapters (the LangChain handler, the OpenTelemetry span processor) translate their
events into these calls; the rules live only here:

- **Steps and repairs.** Each model call that returned is decided once (`decide_call`):
  well-formed output is a step; malformed output (only invalid tool calls, a parser that
  rejected it, AgentExecutor's `_Exception` retry) is a repair, counted. Parse errors follow
  the agent (the paper: malformed output *after the harness's retries*): the agent's own
  retry policy decides when it gives up, so a run that ends with an answer after any number
  of repairs is clean (its repairs counted in `parse_repairs`), and one that ends on
  malformed output is parse_error. A `repair_budget` given to the adapter states a harness
  budget the agent does not enforce itself: one more malformed output than that in a row
  then fixes parse_error ("repairs exhausted") and later calls are ignored (counted).
  Failed calls (the model raised) are counted, never steps; one that raised because its
  client could not parse the output (JSONDecodeError) is malformed output (a repair).
  The adapters mark as malformed the outputs create_agent discards: rejected structured
  answers, and calls a retry middleware replaced within one model node (capture/stop_signals.py).
- **Stop-reason precedence** (`decide_stop`): abandoned (finished before its end was
  seen) > a stop fixed during the run (declared by the user, or repairs exhausted) > what
  the run's end shows (the adapter's classification of the exception / final output). A
  run that looks clean, or raised the parse failure its last model call raised, right after
  malformed output is parse_error; one that looks clean after its last model call failed (a retry middleware
  answered for the model once its retries ran out) stops as that failure (other, timeout, ...).
- **The horizon rule** for max_steps: T = max(the budget, a declared horizon, the calls made).
  A stop the run's end shows (LangGraph's recursion_limit, a call-limit middleware, a budget
  text, `handler.budget`, a limit a framework's spans state) was made by the budget that
  actually stopped the run: its stated limit, else the calls it allowed (the calls made); a
  `horizon=` / `tps_horizon` label is not that budget (a different one is counted: ignored,
  horizon_label_not_the_budget). A stop the user declares takes the run's `tps_horizon` metadata
  / `tps.horizon` attribute, else the adapter's default. A value that is not a whole number in
  [1, MAX_HORIZON] ("8 steps", NaN, inf) is ignored and counted (rejected:
  invalid_horizon_label), never allowed to lose the stop.
- **Record metadata** (`record_metadata`): the JSON-safe scalars the user attached to the run
  (`config["metadata"]`, OpenInference metadata; bounded, see `user_metadata`), then source,
  calls made, task id (`tps_task_id`, else the plain `task_id`), stop detail, repair /
  tool-error / ignored-call counts, abandonment, adapter extras.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tps_tracer.capture.step_signals import RawStep
from tps_tracer.capture.stop_signals import MALFORMED_CALL_EXCEPTIONS
from tps_tracer.health import HealthLedger
from tps_tracer.records.record_shape import id_problem
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.tracking.keys import (
    ABANDONED_KEY,
    FRAMEWORK_PREFIXES,
    MAX_HORIZON,
    MAX_KEY_CHARS,
    MAX_USER_KEYS,
    MAX_VALUE_CHARS,
    TASK_ID_KEY,
)
from tps_tracer.validity import horizon as valid_horizon


@dataclass(frozen=True)
class FixedStop:
    """A stop reason fixed before the run ends: declared by the user, or repairs exhausted."""

    reason: StopReason
    horizon: int | None = None
    detail: str = "declared"


@dataclass(frozen=True)
class StopDecision:
    reason: StopReason
    horizon: int | None  # set for max_steps only
    detail: str
    abandoned: str | None = None


@dataclass
class TrajectoryState:
    """One run's record on the capture side: its calls, steps, stop and the outcomes known so far."""

    tid: str
    metadata: Mapping[str, Any] = field(default_factory=dict)  # the run's own metadata (user keys)
    n_calls: int = 0  # every model call, malformed and failed ones included (>= the steps fed)
    # Model calls started: one still in flight when the run ends (cancelled: its error comes later,
    # if at all) was made all the same.
    calls_started: int = 0
    failed_calls: int = 0
    repairs: int = 0
    consecutive_malformed: int = 0
    ignored_calls: int = 0
    tool_errors: int = 0
    last_tool_failed: bool = False  # a tool failed after the last model call
    last_call_failed: tuple[StopReason, str] | None = None  # the last model call raised: what it said
    fixed: FixedStop | None = None
    # The last model call that returned, held until the next call or the run's end (a parser may
    # still reject it), then decided: `TrajectoryTracker.commit`.
    pending: RawStep | None = None
    pending_malformed: bool = False
    texts: list[str] = field(default_factory=list)  # step texts, only with capture_content
    # Why an event of this run was lost on its way to the accumulator (the worker gave it up):
    # kept on the run itself, so the loss cannot be forgotten before the run's record is written.
    capture_lost: str | None = None
    # The run's forecasts, appended on the capture worker; the accumulator receives them with the
    # stop, in one call (`Accumulator.finished`).
    steps: list[dict[str, float | None]] = field(default_factory=list)
    # Outcome / q_Z recorded before the stop (as on the accumulator's live trajectory), and the
    # ones the stop carries (a label; values recorded while it waits on the worker). Guarded by
    # the worker's lock while `held` (indexed there by id, see CaptureWorker.resolve).
    outcome: int | None = None
    q_z: float | None = None
    held: bool = False
    stopping: bool = False
    stop_outcome: int | None = None
    stop_q_z: float | None = None

    def lose(self, why: str) -> None:
        """An event of this run was lost (called by the capture worker): the run will be capture_lost."""
        if self.capture_lost is None:
            self.capture_lost = why

    def call_failed(self, failure: tuple[StopReason, str] = (StopReason.OTHER, "")) -> None:
        """A model call raised: it counts toward the calls made (the horizon), not as a step.
        failure: what its exception says (`classify_failed_call`)."""
        self.n_calls += 1
        self.failed_calls += 1
        self.last_tool_failed = False
        self.last_call_failed = failure

    def decide_call(self, malformed: bool, repair_budget: int | None) -> bool:
        """Decide a model call that returned; True when it is a step to score. repair_budget None:
        the agent's own retry policy decides (the run's end shows a parse error, `decide_stop`)."""
        self.n_calls += 1
        self.last_tool_failed = False
        self.last_call_failed = None
        if self.fixed is not None:
            self.ignored_calls += 1
            return False
        if malformed:
            self.consecutive_malformed += 1
            if repair_budget is not None and self.consecutive_malformed > repair_budget:
                self.fixed = FixedStop(StopReason.PARSE_ERROR, None, "repairs exhausted")
            else:
                self.repairs += 1
            return False
        self.consecutive_malformed = 0
        return True

    def declare(self, reason: StopReason, horizon: int | None = None, detail: str = "declared") -> None:
        """Fix the stop reason now (the user's declare_stop); the first fixed stop wins."""
        if self.fixed is None:
            self.fixed = FixedStop(reason, horizon, detail)

    def tool_failed(self, ended_run: bool = True) -> None:
        self.tool_errors += 1
        if ended_run:
            self.last_tool_failed = True


def whole_number(value: Any) -> int | None:
    """A step budget read from metadata or an attribute: an integer in [1, MAX_HORIZON], else None
    (the one rule: tps_tracer/validity.py)."""
    return valid_horizon(value, labels=True)


def run_budget(label: Any, default: int | None, tid: str, health: HealthLedger) -> int | None:
    """The run's step budget: its label (metadata / attribute) if valid, else the default (bad label counted)."""
    if label is None:
        return default
    budget = whole_number(label)
    if budget is None:
        health.count(
            "rejected",
            "invalid_horizon_label",
            f"{tid!r}: step budget {str(label)[:40]!r} is not a whole number in [1, {MAX_HORIZON}]; "
            "using the calls made",
        )
        return default
    return budget


def decide_stop(
    state: TrajectoryState,
    observed: tuple[StopReason, str],
    budget: int | None,
    abandoned: str | None = None,
) -> StopDecision:
    """The stop reason and horizon of a finished trajectory (see the module docstring for the order).

    observed: what the run's end shows, as the adapter classified it (CLEAN when nothing
    else). budget: the run's step budget (`run_budget`), for max_steps."""
    if abandoned is not None:
        return StopDecision(StopReason.CAPTURE_LOST, None, f"abandoned: {abandoned}", abandoned)
    if state.fixed is not None:
        reason, declared_horizon, detail = state.fixed.reason, state.fixed.horizon, state.fixed.detail
    else:
        reason, detail = observed
        declared_horizon = None
        failed = state.last_call_failed
        ended_malformed = state.consecutive_malformed > 0 and failed is None
        if reason is StopReason.CLEAN and failed is not None:
            reason, detail = failed[0], f"last model call failed: {failed[1] or 'error'}"
        elif reason is StopReason.CLEAN and ended_malformed:
            reason, detail = StopReason.PARSE_ERROR, "ended on malformed output"
        elif reason is StopReason.OTHER and ended_malformed and detail in MALFORMED_CALL_EXCEPTIONS:
            reason = StopReason.PARSE_ERROR  # the run raised what its last model call raised (JSONDecodeError)
    horizon = None
    if reason is StopReason.MAX_STEPS:
        horizon = max(budget or 0, whole_number(declared_horizon) or 0, state.n_calls, 1)
    return StopDecision(reason, horizon, detail)


def user_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The JSON-safe scalars the user attached to the run, bounded; and how many entries were left out.

    Kept: a str / bool / int / finite float value under a text key of at most MAX_KEY_CHARS
    characters, strings of at most MAX_VALUE_CHARS, at most MAX_USER_KEYS of them. Left out,
    counted in `tps_metadata_dropped`: anything longer or not a scalar (lists, objects, None).
    Not user data, skipped silently: tps_* keys (read by tps-tracer itself) and the frameworks' own
    (FRAMEWORK_PREFIXES)."""
    kept: dict[str, Any] = {}
    dropped = 0
    for key, value in metadata.items():
        if isinstance(key, str) and key.startswith(FRAMEWORK_PREFIXES):
            continue
        if (
            len(kept) < MAX_USER_KEYS
            and isinstance(key, str)
            and 0 < len(key) <= MAX_KEY_CHARS
            and id_problem(key) is None
            and _json_scalar(value)
        ):
            kept[key] = value
        else:
            dropped += 1
    return kept, dropped


def _json_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) < 2**53  # exact as a JSON number in every reader
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and len(value) <= MAX_VALUE_CHARS and id_problem(value or "x") is None


def task_id_label(metadata: Mapping[str, Any]) -> Any:
    """The run's task: its `tps_task_id`, else its plain `task_id` (None when it names none)."""
    task = metadata.get(TASK_ID_KEY)
    return metadata.get("task_id") if task is None else task


def record_metadata(
    state: TrajectoryState,
    decision: StopDecision,
    source: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metadata written with the trajectory's record: the user's own scalars (`user_metadata`),
    then tps-tracer's keys, which win a clash (source, calls made, task id, stop detail, counts)."""
    run_md = state.metadata if isinstance(state.metadata, Mapping) else {}
    md, dropped = user_metadata(run_md)
    if dropped:
        md["tps_metadata_dropped"] = dropped
    md.update(source=source, llm_calls=state.n_calls)
    task = task_id_label(run_md)
    if task is not None:
        md["task_id"] = str(task)
    if decision.detail:
        md["stop_detail"] = decision.detail
    if decision.abandoned is not None:
        md[ABANDONED_KEY] = decision.abandoned
    for key, n in (
        ("parse_repairs", state.repairs),
        ("failed_calls", state.failed_calls),
        ("tool_errors", state.tool_errors),
        ("ignored_calls", state.ignored_calls),
    ):
        if n:
            md[key] = n
    if extra:
        md.update(extra)
    return md
