"""Who decides when the accumulator's runs end: itself (idle sweep, eviction), or an adapter.

A mixin of `Accumulator` (online/accumulator.py). Used on its own, the accumulator finishes a
run early by OpenRuns' rules through its live store (online/live_store.py): idle for
`idle_timeout` seconds, or the least recently active past `max_live`. An adapter that knows more
(the LangChain handler, the span processor: a run paused by an interrupt, or busy behind a
backlog of queued steps) takes that over with `leave_lifetimes_to`; its own OpenRuns decides,
bounded by this accumulator's `idle_timeout` as well (`TrajectoryTracker.lifetimes`).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

from tps_tracer.online.live_store import LiveStore
from tps_tracer.records.stop_reasons import StopReason


class Lifetimes:
    # Owned by Accumulator (see its __init__); declared here for the type checker.
    idle_timeout: float | None
    lifetime_owner: str | None
    _drains: list[Callable[[], Callable[[], Any] | None]]
    _finishers: list[Callable[[], Callable[[str], Any] | None]]
    _lock: threading.Lock
    _store: LiveStore
    _clock: Callable[[], float]
    _last_sweep: float
    _sweep_every: float

    def _internal(self, where: str, exc: BaseException) -> None:
        raise NotImplementedError  # Accumulator's: count an internal error

    def _close(
        self, tid: str, live: Any, reason: StopReason, horizon: int | None, metadata: Any, abandoned: str | None
    ) -> None:
        raise NotImplementedError  # Accumulator's: write and queue a reserved trajectory

    def leave_lifetimes_to(self, owner: str, drain: Callable[[], Any] | None = None) -> None:
        """Let an adapter (the LangChain handler, the span processor) decide when its runs end.

        The adapter knows what the accumulator cannot: that a run is paused by an interrupt
        and will resume, or still busy behind a backlog of queued steps. So this accumulator
        no longer idles out or evicts live trajectories (`sweep()` does nothing); the
        adapter's idle rule (its own `sweep`, with this accumulator's idle_timeout if tighter)
        bounds memory instead.

        drain: applies the events the adapter has queued (its capture worker's flush). flush(),
        and so snapshot/state/close, call it first: a user who closes the accumulator straight
        after `agent.invoke()` returns would otherwise close runs whose last steps and stop were
        still in the adapter's queue, and record them capture_lost although nothing was lost.
        Held weakly: an accumulator does not keep a dropped handler alive."""
        self.lifetime_owner = owner
        if drain is not None:
            self._drains.append(weakref.WeakMethod(drain) if inspect.ismethod(drain) else lambda: drain)

    def finish_on_close(self, finish: Callable[[str], Any]) -> None:
        """`finish(why)` records an adapter's runs still open as abandoned (`why`: closed, exit);
        close() calls it before it drains, so a run still in flight when the accumulator closes
        leaves its capture_lost record (its last model output may still be held by the adapter,
        never observed here, so the accumulator alone would lose it). Held weakly."""
        self._finishers.append(weakref.WeakMethod(finish) if inspect.ismethod(finish) else lambda: finish)

    def _finish_adapters(self, why: str) -> None:
        """Record the attached adapters' open runs as abandoned (see finish_on_close); never under the lock."""
        for ref in list(self._finishers):
            finish = ref()
            if finish is None:
                continue
            try:
                finish(why)
            except Exception as exc:  # as a failed drain: counted, never raised
                self._internal("finish", exc)

    def _drain_adapters(self) -> None:
        """Apply what attached adapters have queued (see leave_lifetimes_to). Never under the lock:
        the adapter's worker calls back into this accumulator."""
        for ref in list(self._drains):
            drain = ref()
            if drain is None:
                continue
            try:
                drain()
            except Exception as exc:  # an adapter's failure to drain is counted, never raised
                self._internal("drain", exc)

    def _maybe_sweep(self, now: float) -> None:
        if self.lifetime_owner is not None:
            return
        if self.idle_timeout is not None and now - self._last_sweep >= self._sweep_every:
            self.sweep(now)

    def sweep(self, now: float | None = None) -> int:
        """Stop as capture_lost (abandoned: idle) every live trajectory idle for idle_timeout; returns how many.

        Nothing when an adapter owns the runs' lifetimes (`leave_lifetimes_to`)."""
        if self.idle_timeout is None or self.lifetime_owner is not None:
            return 0
        now = self._clock() if now is None else now
        with self._lock:
            self._last_sweep = now
            idle = self._store.take_idle(now)
        for tid, live in idle:
            self._close(tid, live, StopReason.CAPTURE_LOST, None, {"tps_abandoned": "idle"}, "idle")
        return len(idle)
