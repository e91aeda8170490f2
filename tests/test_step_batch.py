"""Steps queued together on the capture worker share one numpy pass (issue 28, cost):
`SignalExtractor.forecasts_batch` and the worker that calls it must give, to the bit, the
forecasts (and the counts) of extracting each step alone, whatever the mix of payloads."""

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest

from tests.test_extraction_equivalence import ADVERSARIAL
from tps_tracer import Accumulator
from tps_tracer.capture import SignalExtractor, parse_logprobs
from tps_tracer.capture.step_signals import RawStep
from tps_tracer.capture.token_logprobs import batched_per_token
from tps_tracer.records import read_trajectories
from tps_tracer.tracking.tracker import STEP_BATCH, CaptureWorker, TrajectoryState


def _content(rng: random.Random, n: int, width: int, holes: bool = False) -> list[dict]:
    out = []
    for i in range(n):
        logs = sorted((math.log(rng.random() + 1e-12) for _ in range(width)), reverse=True)
        tok = rng.choice(["a", " b", "<action>", "search[x]", "</action>", "é", "Action:", " 0.7"])
        if i == n // 2:
            tok = f"<confidence>0.{rng.randrange(1, 10)}</confidence>"
        cands = [{"token": f"t{j}", "logprob": v} for j, v in enumerate(logs)]
        if holes and rng.random() < 0.1:
            cands = cands[: rng.randrange(width)]  # a short row: -inf padding
        out.append({"token": tok, "logprob": logs[0] if logs else -0.5, "top_logprobs": cands})
    return out


def _step(rng: random.Random) -> tuple[str | None, object, object, str | None]:
    kind = rng.choice(["top5", "top5", "top5", "top3", "top20", "holes", "none", "malformed", "empty", "adversarial"])
    n = rng.choice([1, 7, 300])
    logprobs: object = {
        "top5": lambda: {"content": _content(rng, n, 5)},
        "top3": lambda: {"content": _content(rng, n, 3)},
        "top20": lambda: {"content": _content(rng, n, 20)},
        "holes": lambda: {"content": _content(rng, n, 5, holes=True)},
        "none": lambda: None,
        "malformed": lambda: {"content": [{"token": 3, "logprob": -0.1}]},
        "empty": lambda: {"content": []},
        "adversarial": lambda: ADVERSARIAL[rng.choice(sorted(ADVERSARIAL))],
    }[kind]()
    text = rng.choice([None, "I am sure. confidence: 0.8", "no statement"])
    args = rng.choice([None, {"query": "x", "confidence": 0.6}])
    scale = rng.choice([None, None, "percent"])
    return text, logprobs, args, scale


def _bits(x: float | None) -> bytes | None:
    return None if x is None else np.float64(x).tobytes()


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_bits(a[k]) == _bits(b[k]) for k in a)


@pytest.mark.parametrize("seed", range(25))
def test_forecasts_batch_equals_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    steps = [_step(rng) for _ in range(rng.randrange(1, 9))]
    one, many = SignalExtractor(), SignalExtractor()
    want = [one.forecasts(t, lp, tool_arguments=a, verbal_scale=s) for t, lp, a, s in steps]
    got = many.forecasts_batch(steps)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert _same(g, w), (g, w)
    assert many.counts == one.counts
    assert many.health.category("malformed") == one.health.category("malformed")


def test_full_steps_of_one_width_are_computed_together() -> None:
    rng = random.Random(3)
    parsed = [parse_logprobs({"content": _content(rng, n, w)}) for n, w in ((300, 5), (7, 5), (40, 3), (300, 20))]
    parsed.append(None)
    arrays = batched_per_token(parsed, 5)
    assert sorted(arrays) == [0, 1, 3]  # width 5 (top-20 cut to 5): three steps; the top-3 one alone
    from tps_tracer.capture.token_logprobs import per_token_entropy_confidence

    for i, (prob, ent) in arrays.items():
        assert prob.tobytes() == np.exp(parsed[i].logprob).tobytes()
        assert ent.tobytes() == per_token_entropy_confidence(parsed[i], 5).tobytes()


class _CountingExtractor(SignalExtractor):
    """Records the size of every batch the worker hands over (forecasts itself is not overridden)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def forecasts_batch(self, steps):  # type: ignore[no-untyped-def]
        self.batches.append(len(steps))
        return super().forecasts_batch(steps)


def _records(tmp_path, name: str, background: bool, raws: list[RawStep], extractor: SignalExtractor) -> dict:
    sink = tmp_path / name
    acc = Accumulator(bootstrap=0, sink=sink)
    worker = CaptureWorker(acc, extractor=extractor, background=background, calibration={"verbal": lambda p: p / 2})
    gate = threading.Event()
    if background:
        worker.call(gate.wait)  # hold the worker so the steps queue up behind it
    runs = [TrajectoryState(f"run{r}") for r in range(3)]
    for i, raw in enumerate(raws):
        worker.step(runs[i % 3], raw)
    for run in runs:
        worker.stop(run, "clean", None, {})
    gate.set()
    worker.close()
    acc.close()
    return {rec.trajectory_id: [s.forecasts for s in rec.steps] for rec in read_trajectories(sink)}


def test_the_worker_batches_queued_steps_and_records_the_same_forecasts(tmp_path) -> None:
    rng = random.Random(11)
    raws = []
    for i in range(22):
        text, lp, args, scale = _step(rng)
        raws.append(RawStep(text, lp, args, forecasts={"verbal": 0.25} if i == 5 else None, verbal_scale=scale))
    batched = _CountingExtractor()
    got = _records(tmp_path, "batched.jsonl", True, raws, batched)
    want = _records(tmp_path, "alone.jsonl", False, raws, SignalExtractor())
    assert max(batched.batches) == STEP_BATCH > 1  # the queued steps were taken together
    assert got.keys() == want.keys() == {"run0", "run1", "run2"}
    for tid in want:
        assert len(got[tid]) == len(want[tid])
        for g, w in zip(got[tid], want[tid], strict=True):
            assert g.keys() == w.keys() and all(_bits(g[k]) == _bits(w[k]) for k in w), (g, w)


def test_counts_from_many_threads_lose_none() -> None:
    """`_count` takes no lock: each thread counts in its own Counter, summed by `counts`."""
    sig = SignalExtractor()
    start = threading.Barrier(8)

    def extract() -> None:
        start.wait()
        for _ in range(2_000):
            sig.forecasts("no statement here", None)

    threads = [threading.Thread(target=extract) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sig.counts == {"verbal_missing": 16_000, "no_logprobs": 16_000}
