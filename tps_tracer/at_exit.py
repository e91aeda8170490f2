"""At interpreter exit, what was captured reaches the file: the registered adapters are drained (open runs
recorded `tps_abandoned: exit`), then the accumulators closed, bounded by `set_timeout` (30 s). A forked
child forgets the runs open at the fork (counted), so the parent's runs are never written twice."""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import weakref
from typing import Any

from tps_tracer.errors import InputError

logger = logging.getLogger("tps_tracer")

ABANDONED_AT_EXIT = "exit"  # metadata.tps_abandoned of a run still open at interpreter exit

_adapters: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with _close_at_exit(timeout) -> int
_accumulators: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with _close_at_exit() -> int, and .sink
_armed = False
_arm_lock = threading.Lock()
_timeout = 30.0  # seconds


def set_timeout(seconds: float) -> None:
    global _timeout
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (0 <= seconds < math.inf):
        raise InputError(f"the exit timeout must be a number of seconds >= 0, got {seconds!r}")
    _timeout = float(seconds)


def register(obj: Any, *, adapter: bool) -> None:
    """Close `obj` at exit: the adapters first, as they drain into the accumulators."""
    global _armed
    with _arm_lock:
        if not _armed:
            atexit.register(_at_exit)
            _armed = True
        (_adapters if adapter else _accumulators).add(obj)


def _after_fork_in_child() -> None:
    global _arm_lock
    _arm_lock = threading.Lock()
    for obj in (*list(_adapters), *list(_accumulators)):
        try:
            obj._forget_at_fork()
        except Exception as exc:  # never into the code that forked
            logger.warning(
                "tps-tracer: a %s could not forget the runs open at a fork (%s: %s)",
                type(obj).__name__,
                type(exc).__name__,
                exc,
            )


if hasattr(os, "register_at_fork"):  # not on Windows (no fork)
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    adapters, accumulators = list(_adapters), list(_accumulators)
    if not adapters and not accumulators:
        return
    timeout = _timeout
    deadline = time.monotonic() + timeout
    done = threading.Event()

    def work() -> None:
        """Adapters first, then accumulators."""
        try:
            abandoned = sum(_guarded(adapter, max(0.0, deadline - time.monotonic())) for adapter in adapters)
            if time.monotonic() >= deadline:  # a worker was given up on (close(timeout)): its queue may be cut
                logger.warning(
                    "tps-tracer: the capture workers did not finish within the exit timeout; %s may lack the last runs",
                    _sinks(accumulators),
                )
            abandoned += sum(_guarded(accumulator) for accumulator in accumulators)
            if abandoned:
                logger.warning(
                    "tps-tracer: %d run(s) still open at interpreter exit were recorded as capture_lost "
                    "(metadata.tps_abandoned: %s)",
                    abandoned,
                    ABANDONED_AT_EXIT,
                )
        finally:
            done.set()

    try:
        # On a helper thread so that a grader or listener that hangs cannot hold the exit.
        threading.Thread(target=work, name="tps-tracer-exit", daemon=True).start()
    except RuntimeError:  # no new threads this late (some interpreters): do it here, unbounded
        work()
    if not done.wait(timeout):
        logger.warning(
            "tps-tracer: capture did not finish within %s s of interpreter exit; %s may lack the last runs "
            "(call handler.close() and acc.close() before exiting, or raise tps_tracer.at_exit.set_timeout())",
            timeout,
            _sinks(accumulators),
        )


def _sinks(accumulators: list[Any]) -> str:
    return ", ".join(str(getattr(a.sink, "path", a.sink)) for a in accumulators) or "the sinks"


def _guarded(obj: Any, *args: float) -> int:
    try:
        return int(obj._close_at_exit(*args))
    except Exception as exc:  # one object's failure must not cost the others their records
        logger.warning(
            "tps-tracer: closing a %s at interpreter exit failed (%s: %s)", type(obj).__name__, type(exc).__name__, exc
        )
        return 0
