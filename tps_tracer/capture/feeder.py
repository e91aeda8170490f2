"""Off the agent's path: raw LLM outputs in, forecasts into the accumulator.

Adapters (the LangChain handler, the OpenTelemetry processor) only keep references to
what the model returned (`RawStep`) and hand them here in trajectory order. Signal
extraction (~1 ms for a 300-token response with top-5 logprobs) and the accumulator calls
run on one background worker thread, so a callback on the agent's path costs
microseconds. Events are applied in the order they were submitted: a trajectory's steps,
then its stop, then any outcome recorded later.

`flush()` waits until everything submitted so far is applied (call it before a snapshot);
`close()` flushes and stops the worker. With `background=False` every event is applied
in the caller's thread (deterministic, for scripts and tests).

Errors never reach the agent: an event that fails is counted in `errors` and logged once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tps_tracer.capture.step_signals import SignalExtractor
from tps_tracer.online.accumulator import Accumulator

logger = logging.getLogger("tps_tracer")

# A live calibration map per predictor; its output is recorded as "<predictor>+cal".
Calibration = Mapping[str, Callable[[float], float]]
CALIBRATED_SUFFIX = "+cal"
APPLY = "apply"  # event kind of `handoff()`: (APPLY, fn, arg)


@dataclass(frozen=True)
class RawStep:
    """What one LLM call returned, untouched: text, logprobs in any accepted format, tool args.

    `forecasts`: forecasts computed by the caller (e.g. a span's `tps.forecasts`), used as
    they are instead of extracting signals from the text and logprobs."""

    text: str | None
    logprobs: Any = None
    tool_arguments: Mapping[str, Any] | str | None = None
    forecasts: Mapping[str, Any] | None = None


class Feeder:
    def __init__(
        self,
        accumulator: Accumulator,
        extractor: SignalExtractor | None = None,
        calibration: Calibration | None = None,
        background: bool = True,
    ):
        self.accumulator = accumulator
        self.extractor = extractor or SignalExtractor()
        self.calibration = dict(calibration or {})
        self.background = background
        self.errors: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    # ------------------------------------------------------------------ submission (any thread)

    def step(self, trajectory_id: str, raw: RawStep) -> None:
        self._submit(("step", trajectory_id, raw))

    def stop(self, trajectory_id: str, reason: str, horizon: int | None, metadata: Mapping[str, Any]) -> None:
        self._submit(("stop", trajectory_id, reason, horizon, metadata))

    def resolve(self, trajectory_id: str, outcome: int | None = None, q_z: float | None = None) -> None:
        self._submit(("resolve", trajectory_id, outcome, q_z))

    def grade(self, trajectory_id: str, grader: Callable[[Any], Any], output: Any) -> None:
        """Run a grader on the run's final output (in the worker) and resolve with its verdict."""
        self._submit(("grade", trajectory_id, grader, output))

    def call(self, job: Callable[[], Any], where: str = "job") -> None:
        """Run `job()` on the worker, in order with the other events (errors counted under `where`)."""
        self._submit(("call", job, where))

    def handoff(self) -> Callable[[tuple[Any, ...]], None]:
        """The cheapest way in for per-span work: `put((APPLY, fn, arg))` runs `fn(arg)` on the worker.

        A bare queue put (~0.1 us), no checks: for callers on the hottest path (every span
        of an instrumented app) that keep their bookkeeping on the worker. Unlike `call`, an
        event put from the worker itself is queued too (after any flush barrier already in)."""
        if not self.background:
            return self._apply
        self._start()
        return self._queue.put

    def _submit(self, event: tuple[Any, ...]) -> None:
        # Events submitted by a job running on the worker are applied at once: queued, they
        # would land behind a flush() barrier submitted meanwhile, and flush() would return early.
        if not self.background or threading.current_thread() is self._thread:
            self._apply(event)
            return
        if self._thread is None:
            self._start()
        self._queue.put(event)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tps-tracer-feeder", daemon=True)
                self._thread.start()

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        small = 0
        while True:
            event = self._queue.get()
            if event is None:
                return
            self._apply(event)
            # Hand the GIL back after every event (every 64 small span events): an agent thread
            # waking from network I/O then waits for at most one event's work, not the
            # interpreter's 5 ms switch interval.
            if event[0] is APPLY:
                small += 1
                if small & 63:
                    continue
            time.sleep(0)

    def _apply(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        try:
            if kind is APPLY:
                _, fn, arg = event
                fn(arg)
            elif kind == "step":
                _, tid, raw = event
                self.accumulator.observe(tid, self.forecasts(raw))
            elif kind == "stop":
                _, tid, reason, horizon, metadata = event
                self.accumulator.stop(tid, reason, horizon=horizon, metadata=metadata)
            elif kind == "resolve":
                _, tid, outcome, q_z = event
                self.accumulator.resolve(tid, outcome=outcome, q_z=q_z)
            elif kind == "grade":
                _, tid, grader, output = event
                verdict = grader(output)
                if verdict is not None:
                    self.accumulator.resolve(tid, outcome=int(bool(verdict)))
            elif kind == "call":
                _, job, where = event
                kind = where
                job()
            elif kind == "barrier":
                event[1].set()
        except Exception as exc:  # never let one bad event stop the worker
            self._error(kind, exc)

    def forecasts(self, raw: RawStep) -> dict[str, float | None]:
        if raw.forecasts is not None:
            out = dict(raw.forecasts)  # the accumulator validates them (non-numbers are rejected, counted)
        else:
            out = self.extractor.forecasts(raw.text, raw.logprobs, tool_arguments=raw.tool_arguments)
        for name, fn in self.calibration.items():
            p = out.get(name)
            out[name + CALIBRATED_SUFFIX] = float(fn(p)) if isinstance(p, (int, float)) else None
        return out

    def _error(self, where: str, exc: BaseException) -> None:
        self.errors[where] += 1
        if where not in self._warned:
            self._warned.add(where)
            logger.warning(
                "tps-tracer: %s event failed (%s: %s); further failures only counted", where, type(exc).__name__, exc
            )

    # ------------------------------------------------------------------ control

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted so far is applied; False on timeout."""
        if not self.background or self._thread is None:
            return True
        done = threading.Event()
        self._queue.put(("barrier", done))
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None
