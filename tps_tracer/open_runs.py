"""`OpenRuns`: a run's lifetime rules (idle, paused by LangGraph's `interrupt()`, late events of runs finished
early; docs/design.md, "A run's lifetime"), shared by both adapters and the accumulator's live store; not
thread-safe (called under the owner's lock)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from tps_tracer.errors import InputError

DEFAULT_PAUSE_TIMEOUT = 7 * 86400.0  # seconds a paused run waits for its resume before it is finished
GONE_MEMORY = 4.0  # finished-early runs' keys are remembered for this many idle timeouts (late events)
INTERRUPTS = frozenset({"GraphInterrupt", "NodeInterrupt"})  # LangGraph's interrupt(): the run pauses

R = TypeVar("R")


def is_interrupt(exception_type: Any) -> bool:
    """Whether an exception (its class, or the dotted name a span records) is LangGraph's interrupt."""
    if isinstance(exception_type, str):
        return exception_type.rpartition(".")[2] in INTERRUPTS
    if isinstance(exception_type, type):
        return any(c.__name__ in INTERRUPTS for c in exception_type.__mro__)
    return False


def check_timeout(name: str, value: float | None) -> float | None:
    """A lifetime bound in seconds, > 0 or None (never); anything else is the caller's error."""
    if value is not None and not (isinstance(value, (int, float)) and value > 0):
        raise InputError(f"{name} must be > 0 seconds or None, got {value!r}")
    return value


def tighter(*timeouts: float | None) -> float | None:
    """The smallest of the bounds given (None: no bound)."""
    return min((t for t in timeouts if t is not None), default=None)


class OpenRuns(Generic[R]):
    def __init__(self, idle_timeout: float | None, pause_timeout: float | None = DEFAULT_PAUSE_TIMEOUT):
        self.idle_timeout = idle_timeout
        self.pause_timeout = pause_timeout
        # trajectory id -> the paused run, since when, its thread (oldest first)
        self._paused: dict[str, tuple[R, float, str | None]] = {}
        self._threads: dict[str, str] = {}  # LangGraph thread id -> trajectory id of the run paused on it
        self.gone: OrderedDict[Hashable, float] = OrderedDict()  # finished early: key -> when (oldest first)

    def pause(self, tid: str, thread: Any, run: R, now: float, *, by_id: bool = True) -> bool:
        """Keep `run` for its resume (by_id: a later run can name `tid`); False when nothing could resume it."""
        if not by_id and thread is None:
            return False
        old = self._paused.pop(tid, None)  # re-inserted: the oldest pause stays first
        key = str(thread) if thread is not None else (old[2] if old else None)
        self._paused[tid] = (run, now, key)
        if thread is not None:
            self._threads[str(thread)] = tid
        return True

    def resume(self, tid: str | None, thread: Any = None) -> R | None:
        """The paused run a new run continues (same trajectory id, else same thread), unpaused."""
        if not self._paused:
            return None
        if tid is None or tid not in self._paused:
            tid = self._threads.get(str(thread)) if thread is not None else None
        return None if tid is None else self.unpause(tid)

    def unpause(self, tid: str, run: R | None = None) -> R | None:
        """Take `tid` out of the paused ones; with `run`, only if that is the run paused under it."""
        kept = self._paused.get(tid)
        if kept is None or (run is not None and kept[0] is not run):
            return None
        del self._paused[tid]
        thread = kept[2]
        if thread is not None and self._threads.get(thread) == tid:
            del self._threads[thread]
        return kept[0]

    def is_paused(self, tid: str) -> bool:
        return tid in self._paused

    def paused(self) -> list[R]:
        return [kept[0] for kept in self._paused.values()]

    def expired(self, now: float) -> list[R]:
        """The runs paused for `pause_timeout` or longer, taken out (their owner finishes them)."""
        if self.pause_timeout is None:
            return []
        cutoff = now - self.pause_timeout
        gone: list[R] = []
        while self._paused:
            tid, (run, since, _) = next(iter(self._paused.items()))
            if since > cutoff:
                break
            self.unpause(tid)
            gone.append(run)
        return gone

    @property
    def n_paused(self) -> int:
        return len(self._paused)

    def forget_all(self) -> int:
        """A forked child's copy: the runs are the parent's; how many paused were dropped."""
        n = len(self._paused)
        self._paused.clear()
        self._threads.clear()
        self.gone.clear()
        return n

    def idle(self, last_seen: float, now: float) -> bool:
        return self.idle_timeout is not None and now - last_seen >= self.idle_timeout

    def remember_gone(self, keys: Iterable[Hashable], now: float) -> None:
        for key in keys:
            self.gone[key] = now

    def expire(self, now: float) -> None:
        """Forget the runs finished early more than GONE_MEMORY idle timeouts ago."""
        if self.idle_timeout is None:
            return
        cutoff = now - GONE_MEMORY * self.idle_timeout
        while self.gone and next(iter(self.gone.values())) < cutoff:
            self.gone.popitem(last=False)
