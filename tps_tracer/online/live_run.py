"""A live trajectory in the accumulator: its steps so far, and what is known of it before it is scored.

Its lifetime (when it is idle, evicted or finished) is decided by `OpenRuns` (tps_tracer/open_runs.py):
the accumulator's own (online/live_store.py) when nothing above owns the run, else the adapter's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tps_tracer.records.stop_reasons import StopReason


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
