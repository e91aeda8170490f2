"""Summary mode's fold: its cost against the service's age, and how long the agent waits for it.

    .venv/bin/python tests/benchmarks/bench_summary_fold.py [--small 10000] [--large 1000000]
        [--bootstrap 1000] [--batch 64] [--batches 40] [--seconds 8]

1. Fold cost vs folded runs. Two summary-mode accumulators, one already holding `--small`
   folded runs, one `--large`; each then takes `--batches` batches of `--batch` graded runs
   (3 steps, 2 predictors; the last stop of a batch scores it and folds it). Printed: the
   median time of a whole batch and of the stop() that folds, for both, and large / small.
   Flat (ratio ~1) means the fold costs what the batch holds, not what was folded before.
   The folded runs are preloaded (a real state of 2,000 runs, its per-trajectory arrays tiled
   to the size; the sums' sizes do not depend on n) rather than fed: feeding 1M runs through a
   fold that copies everything folded so far is the quadratic cost being measured (hours).
2. The agent's wait. One thread keeps feeding graded runs to a summary-mode accumulator
   holding `--large` folded runs (a fold every `--batch` runs), while another thread calls
   observe() on its own runs (20 steps, then a budget stop) in a loop. Baselines in the same
   process: the observe loop alone, and the same two threads on a row-mode accumulator (no
   fold: what sharing the GIL and two cores costs by itself). Printed: observe() latency
   median / p99 / p99.9 / max in each, the duration of the feeding thread's folding stops, and
   the longest holds of the accumulator's lock (timed by swapping in a timing lock): the most
   any agent thread can wait for the accumulator. The observe() max also includes waiting for
   the GIL and the OS scheduler on a loaded machine (see the row-mode control); p99.9 and the
   lock holds are the steadier figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import threading
import time

import numpy as np

from tps_tracer import Accumulator

PREDICTORS = ["a", "b"]


def make(bootstrap: int, batch: int) -> Accumulator:
    return Accumulator(predictors=PREDICTORS, bootstrap=bootstrap, mode="summary", idle_timeout=None, batch_size=batch)


def feed(
    acc: Accumulator, start: int, k: int, times: list[float] | None = None, all_stops: list[float] | None = None
) -> None:
    """k graded runs; `times` gets the duration of each stop() that folded (the batch's last, when
    this thread alone stops runs), `all_stops` the duration of every stop()."""
    for i in range(start, start + k):
        tid = f"run-{i}"
        for t in range(3):
            acc.observe(tid, {"a": ((i * 7 + t) % 97 + 1) / 99, "b": ((i * 13 + t) % 89 + 1) / 91})
        clean = i % 5 != 0
        if clean:
            acc.resolve(tid, outcome=i % 2)  # graded before the stop: settled at once
        t0 = time.perf_counter()
        acc.stop(tid, "clean" if clean else "max_steps", horizon=None if clean else 5)
        dt = time.perf_counter() - t0
        if all_stops is not None:
            all_stops.append(dt)
        if times is not None and (i - start) % acc.batch_size == acc.batch_size - 1:
            times.append(dt)


def preloaded(n: int, bootstrap: int, batch: int) -> Accumulator:
    """A summary-mode accumulator whose summary holds n folded runs (see the module docstring)."""
    seed = make(bootstrap, batch)
    feed(seed, 10**9, 2000)
    state = seed.partial_state()

    def tiled(a: np.ndarray) -> np.ndarray:
        reps = -(-n // max(1, a.shape[0]))
        return np.ascontiguousarray(np.concatenate([a] * reps)[:n])

    predictors = {
        name: dataclasses.replace(p, summaries=tiled(p.summaries), outcomes=tiled(p.outcomes))
        for name, p in state.predictors.items()
    }
    big = dataclasses.replace(
        state, n=n, predictors=predictors, base=dataclasses.replace(state.base, outcomes=tiled(state.base.outcomes))
    )
    acc = make(bootstrap, batch)
    acc._summaries.summary = big  # the folded state of n runs (private: there is no public way short of folding them)
    feed(acc, 0, 2 * batch)  # warm-up: the first fold after a load copies once into an appendable buffer
    return acc


def fold_cost(args: argparse.Namespace) -> None:
    print(f"1. fold cost: batches of {args.batch} graded runs, bootstrap {args.bootstrap}")
    result = {}
    for n in (args.small, args.large):
        acc = preloaded(n, args.bootstrap, args.batch)
        batch_times: list[float] = []
        fold_times: list[float] = []
        for b in range(args.batches):
            t0 = time.perf_counter()
            feed(acc, 10_000 + b * args.batch, args.batch, fold_times)
            batch_times.append(time.perf_counter() - t0)
        acc._background.wait_idle()  # the last batches' folds run on the background thread
        assert acc._summaries.summary is not None and acc._summaries.summary.n >= n + args.batches * args.batch
        result[n] = (statistics.median(batch_times), statistics.median(fold_times), max(fold_times))
        print(
            f"   {n:>9,} folded: batch median {1e3 * result[n][0]:8.2f} ms; folding stop() median "
            f"{1e3 * result[n][1]:8.2f} ms, max {1e3 * result[n][2]:8.2f} ms"
        )
    s, big = result[args.small], result[args.large]
    print(f"   ratio {args.large:,} / {args.small:,}: batch {big[0] / s[0]:.2f}x, folding stop() {big[1] / s[1]:.2f}x")


def observe_loop(acc: Accumulator, stop: threading.Event, seconds: float, lat: list[float], name: str) -> None:
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end and not stop.is_set():
        t0 = time.perf_counter()
        acc.observe(f"{name}-{i // 20}", {"a": 0.5, "b": 0.25})
        lat.append(time.perf_counter() - t0)
        i += 1
        if i % 20 == 0:  # runs of 20 steps, stopped by budget (a stop may score and fold: not timed)
            acc.stop(f"{name}-{i // 20 - 1}", "max_steps", horizon=20)
        if i % 50 == 0:
            time.sleep(0.0002)  # an agent thread does other work between steps


def describe(lat: list[float]) -> str:
    a = np.array(lat) * 1e6
    return (
        f"median {np.median(a):7.1f} us, p99 {np.percentile(a, 99):8.1f} us, p99.9 {np.percentile(a, 99.9):8.1f} us, "
        f"max {a.max() / 1e3:7.2f} ms, {int(np.sum(a > 1000)):,} over 1 ms  ({a.size:,} calls)"
    )


class GcPauses:
    """Durations of the garbage collector's runs (a full collection holds the GIL in whichever
    thread triggers it: it shows up in the observe() max of every scenario, folds or not)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._t0)

    def take(self) -> str:
        out, self.pauses = self.pauses, []
        return f"longest GC pause meanwhile {1e3 * max(out, default=0.0):.1f} ms"


class TimedLock:
    """The accumulator's lock, timing how long each `with` holds it (the accumulator only uses `with`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[tuple[float, str]] = []
        self._t0 = 0.0

    def __enter__(self) -> TimedLock:
        self._lock.acquire()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.holds.append((time.perf_counter() - self._t0, sys._getframe(1).f_code.co_name))
        self._lock.release()


def contended(acc: Accumulator, args: argparse.Namespace, name: str) -> tuple[list[float], list[float]]:
    """observe() latencies of this thread while another feeds graded runs; and that thread's stop() times."""
    done = threading.Event()
    stops: list[float] = []

    def folder() -> None:
        b = 0
        while not done.is_set():
            feed(acc, 10**7 + b * args.batch, args.batch, all_stops=stops)
            b += 1

    t = threading.Thread(target=folder, daemon=True)
    t.start()
    time.sleep(0.2)
    during: list[float] = []
    observe_loop(acc, done, args.seconds, during, name)
    done.set()
    t.join()
    return during, stops


def agent_wait(args: argparse.Namespace) -> None:
    print(f"2. observe() from another thread while folds run ({args.large:,} folded, bootstrap {args.bootstrap})")
    acc = preloaded(args.large, args.bootstrap, args.batch)
    gcs = GcPauses()
    alone: list[float] = []
    observe_loop(acc, threading.Event(), args.seconds / 2, alone, "alone")
    print(f"   alone:                          {describe(alone)}; {gcs.take()}")
    # Control: the same feeding thread on a row-mode accumulator (no folds): what sharing the GIL
    # and two busy cores with another thread costs by itself.
    rows = Accumulator(predictors=PREDICTORS, bootstrap=args.bootstrap, idle_timeout=None, batch_size=args.batch)
    control, _ = contended(rows, args, "control")
    print(f"   row mode fed meanwhile (no fold): {describe(control)}; {gcs.take()}")
    del rows
    timed = TimedLock()
    acc._lock = acc._summaries.lock = timed  # type: ignore[assignment]  # private: how long the agent could wait at most
    during, stops = contended(acc, args, "during")
    print(f"   summary mode folding meanwhile:   {describe(during)}; {gcs.take()}")
    longest = sorted(timed.holds)[-3:]
    print(
        "   longest holds of the accumulator's lock: "
        + ", ".join(f"{1e3 * d:.2f} ms ({where})" for d, where in reversed(longest))
        + f"  of {len(timed.holds):,}"
    )
    # Both threads stop runs, so which stop() scores and folds varies: the longest 1/batch of the
    # feeding thread's stop() calls are the ones that did.
    k = max(1, len(stops) // args.batch)
    fold_times = sorted(stops)[-k:]
    print(
        f"   feeding thread: {len(stops):,} stop() calls; the longest {k} (those that scored and folded) "
        f"median {1e3 * statistics.median(fold_times):.2f} ms, max {1e3 * max(fold_times):.2f} ms"
    )
    p999 = np.percentile(during, 99.9) / np.percentile(control, 99.9)
    print(
        f"   p99.9 observe(): folding / row-mode control {p999:.2f}x; "
        f"longest observe() wait / median folding stop(): {max(during) / statistics.median(fold_times):.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--only", choices=("cost", "wait"))
    args = ap.parse_args()
    if args.only != "wait":
        fold_cost(args)
    if args.only != "cost":
        agent_wait(args)


if __name__ == "__main__":
    main()
