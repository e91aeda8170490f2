"""The accumulator's live trajectories: stepped and not yet stopped, then reserved while finishing.

A live trajectory (`_Live`: its steps so far, and what is known of it before it is scored) is
created on its first step and kept least recently active first. When it stops, or is finished
early, it is *reserved*: it leaves the live ones for `finishing` and its id maps to `RESERVED` in
the row store's `row_of` (the accumulator's index of stopped ids), until its row is scored;
resolutions arriving meanwhile still land on it.

When it is finished early is decided by `OpenRuns` (tps_tracer/open_runs.py), the lifetime rules the
LangChain handler and the span processor use: the idle test (`OpenRuns.idle`) and the memory of
runs finished early (`remember_gone`, by age), whose late steps are rejected instead of opening
a new trajectory under the same id (a summary-mode accumulator forgets folded rows, so `row_of`
alone would let them in; their ids' keys are kept in `FoldedIds`, online/folded_ids.py). The one
rule of its own is the count bound: past `max_live` live trajectories the least recently active
is evicted. With an adapter owning the lifetimes
(`Accumulator.leave_lifetimes_to`), the adapter's own OpenRuns decides and this store neither
evicts nor idles anything out.

A new run under an id already stopped (`begin_repeat`, called when an adapter sees a new root
run or trace) is live here as a *repeat*: it takes steps like any run, but it never touches
`row_of` (the first run's row stays the one scored) and its stop writes a record that is set
aside, never scored (online/accumulator.py, "Repeated ids").

Not thread-safe on its own: every call is made under the accumulator's lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from tps_tracer.online.folded_ids import FoldedIds
from tps_tracer.open_runs import OpenRuns
from tps_tracer.records.stop_reasons import StopReason

RESERVED = -1  # row_of value while a stopped trajectory is being scored outside the lock


@dataclass
class _Live:
    steps: list[dict[str, float | None]] = field(default_factory=list)
    last_seen: float = 0.0
    outcome: int | None = None
    q_z: float | None = None
    # Set at stop, while the trajectory waits in the scoring queue:
    reason: StopReason = StopReason.OTHER
    horizon: int = 0
    written: bool = False  # its record is in the sink, so later resolutions are appended as lines
    # A new run under an id already finished (`Accumulator.begin`): its record is written, never scored.
    repeat: bool = False


_NONE_EVICTED: list[tuple[str, _Live]] = []  # shared, never appended to: a step of a live run evicts nothing


class LiveStore:
    def __init__(
        self, idle_timeout: float | None, max_live: int, row_of: dict[str, int], folded: FoldedIds | None = None
    ):
        self.lifetimes: OpenRuns[_Live] = OpenRuns(idle_timeout)
        self.max_live = max_live
        self.live: OrderedDict[str, _Live] = OrderedDict()  # least recently active first
        self.finishing: dict[str, _Live] = {}  # reserved: stopped, not yet a row
        self._row_of = row_of  # the row store's index of stopped ids (shared, not copied)
        self._folded = folded  # summary mode: the ids folded away (no longer in row_of), by key

    def __len__(self) -> int:
        return len(self.live)

    def __contains__(self, tid: str) -> bool:
        return tid in self.live

    def stopped(self, tid: str) -> bool:
        """Stopped already (a row, or reserved; in summary mode also folded), or finished early and
        still remembered as such."""
        return tid in self._row_of or self.lifetimes.is_gone(tid) or (self._folded is not None and tid in self._folded)

    def step(self, tid: str, step: dict[str, float | None], now: float, evict: bool) -> list[tuple[str, _Live]] | None:
        """Append a step to `tid` (opened on first sight); the trajectories evicted (reserved) to
        keep at most max_live live, when `evict` (no adapter owns the lifetimes). None, and nothing
        appended, when `tid` is `stopped` (checked here, in one call: this runs on every step)."""
        live = self.live.get(tid)
        if live is None:
            if self.stopped(tid):  # only a run's first step pays this call
                return None
            live = self.live[tid] = _Live()
            evicted: list[tuple[str, _Live]] = []
            while evict and len(self.live) > self.max_live:
                evicted.append(self.take_oldest(now))
            live.steps.append(step)
            live.last_seen = now
            return evicted
        self.live.move_to_end(tid)
        live.steps.append(step)
        live.last_seen = now
        return _NONE_EVICTED

    def begin_repeat(self, tid: str, now: float) -> bool:
        """A new run of `tid` starts: if `tid` is `stopped` (and no run of it is live), open a repeat
        for it. True when one was opened."""
        if tid in self.live or not self.stopped(tid):
            return False
        self.live[tid] = _Live(last_seen=now, repeat=True)
        return True

    def reserve(self, tid: str, live: _Live) -> _Live:
        """Take `live` (trajectory `tid`) out of the live ones for finishing (a repeat just leaves:
        it is never scored, and the id's row index belongs to its first run)."""
        self.live.pop(tid, None)
        if live.repeat:
            return live
        self._row_of[tid] = RESERVED
        self.finishing[tid] = live
        return live

    def take_oldest(self, now: float) -> tuple[str, _Live]:
        """Reserve the least recently active trajectory, finished early: its late steps are rejected."""
        tid, live = self.live.popitem(last=False)
        self.lifetimes.remember_gone((tid,), now)
        return tid, self.reserve(tid, live)

    def take_idle(self, now: float) -> list[tuple[str, _Live]]:
        """Reserve every trajectory idle at `now` by OpenRuns' rule (they are oldest first)."""
        idle = []
        while self.live and self.lifetimes.idle(next(iter(self.live.values())).last_seen, now):
            idle.append(self.take_oldest(now))
        self.lifetimes.expire(now)
        return idle

    def take_all(self, now: float) -> list[tuple[str, _Live]]:
        return [self.take_oldest(now) for _ in range(len(self.live))]

    def scored(self, tid: str) -> None:
        """`tid` is a row now (the caller replaced its `row_of` entry): no longer finishing."""
        del self.finishing[tid]

    def target(self, tid: str) -> _Live | None:
        """The trajectory a resolution of `tid` lands on before it is a row: live or finishing."""
        if self._row_of.get(tid) == RESERVED:
            return self.finishing[tid]
        return self.live.get(tid)
