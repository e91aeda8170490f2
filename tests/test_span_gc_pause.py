"""The span processor's reading of a large `output.value` (issue 28, cost): decoded with the cyclic
GC paused and its logprobs turned into arrays before the pause ends (capture/step_signals.py).

What must hold: no collection runs while a 300-token top-5 output is read (on the old reading
the ~2,600 decoded containers set off several: the test fails there); the collector's state is
restored whatever happens; and the forecasts are bit for bit those the extractor computes from
the output decoded by `json` (seeded random payloads and the adversarial corpus of
test_extraction_equivalence), with the same counts for malformed logprobs."""

from __future__ import annotations

import gc
import json
import math
import random
import threading

import numpy as np
import pytest

from tests.test_extraction_equivalence import ADVERSARIAL
from tps_tracer.capture import SignalExtractor
from tps_tracer.capture.step_signals import gc_paused
from tps_tracer.capture.token_logprobs import TokenLogprobs
from tps_tracer.otel import span_reading as sr


def _payload(rng: random.Random, n: int = 300) -> list[dict]:
    content = []
    for _ in range(n):
        logs = sorted((math.log(rng.random() + 1e-12) for _ in range(5)), reverse=True)
        tok = rng.choice(["a", " b", "<confidence>0.7</confidence>", "search[x]", "é", "Action:", " 0.7"])
        cands = [{"token": f"t{j}", "logprob": v, "bytes": [116]} for j, v in enumerate(logs)]
        content.append({"token": tok, "logprob": logs[0], "bytes": list(tok.encode()), "top_logprobs": cands})
    return content


def _attributes(content, text: str | None = None, pad: int = 0) -> dict:
    info = {"finish_reason": "stop", "logprobs": {"content": content}, "pad": "x" * pad}
    result = {"generations": [[{"text": text or "", "generation_info": info, "type": "ChatGeneration"}]]}
    value = json.dumps(result, default=float)
    return {"openinference.span.kind": "LLM", "output.value": value}


def _reference(attrs: dict) -> tuple[dict, dict]:
    """The extractor on the logprobs as `json` decodes them (no pause, no early parse)."""
    gen = json.loads(attrs["output.value"])["generations"][0][0]
    ex = SignalExtractor()
    return ex.forecasts(gen["text"], gen["generation_info"]["logprobs"]), dict(ex.counts)


def _through_span_reading(attrs: dict) -> tuple[dict, dict]:
    raw = sr.read_llm_step(attrs).raw
    ex = SignalExtractor()
    return ex.forecasts(raw.text, raw.logprobs), dict(ex.counts)


def _bits(x: float | None) -> bytes | None:
    return None if x is None else np.float64(x).tobytes()


def _same(a: dict, b: dict) -> bool:
    """Equal to the bit (None where None)."""
    return a.keys() == b.keys() and all(_bits(a[k]) == _bits(b[k]) for k in a)


def test_reading_a_large_output_runs_no_collection() -> None:
    attrs = _attributes(_payload(random.Random(1)))
    assert len(attrs["output.value"]) > 100_000
    starts: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(info["generation"])

    assert gc.isenabled()
    gc.collect()
    gc.callbacks.append(count)
    try:
        step = sr.read_llm_step(attrs)
    finally:
        gc.callbacks.remove(count)
    assert starts == []
    assert gc.isenabled()
    assert isinstance(step.raw.logprobs, TokenLogprobs) and step.raw.logprobs.n == 300


@pytest.mark.parametrize("seed", range(12))
def test_forecasts_are_those_of_the_json_decoded_output(seed: int) -> None:
    rng = random.Random(seed)
    content = _payload(rng, n=rng.choice([40, 300, 700]))
    if seed % 3 == 1:
        content[rng.randrange(len(content))]["top_logprobs"] = None
    attrs = _attributes(content, text="".join(e["token"] for e in content), pad=9000)
    got, got_counts = _through_span_reading(attrs)
    want, want_counts = _reference(attrs)
    assert _same(got, want), (got, want)
    assert got_counts == want_counts
    assert got["token_prob"] is not None


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_payloads_read_as_before(name: str) -> None:
    """Padded past the pause threshold: malformed ones are kept raw and rejected (counted) by the extractor."""
    attrs = _attributes(ADVERSARIAL[name], pad=9000)
    assert len(attrs["output.value"]) >= sr._PAUSE_GC_ABOVE
    got, got_counts = _through_span_reading(attrs)
    want, want_counts = _reference(attrs)
    assert _same(got, want), (got, want)
    assert got_counts == want_counts


def test_a_malformed_payload_stays_raw_and_is_counted() -> None:
    attrs = _attributes([{"token": 3, "logprob": -0.1}], pad=9000)
    raw = sr.read_llm_step(attrs).raw
    assert raw.logprobs == {"content": [{"token": 3, "logprob": -0.1}]}
    ex = SignalExtractor()
    ex.forecasts(raw.text, raw.logprobs)
    assert ex.counts["malformed_logprobs"] == 1


def test_gc_paused_restores_the_collectors_state() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still on
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def test_concurrent_pauses_end_with_the_collector_on() -> None:
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        for _ in range(2000):
            with gc_paused():
                pass

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_the_processor_records_the_forecasts_of_the_json_decoded_outputs(tmp_path) -> None:
    """End to end on the real OTel SDK: TPSSpanProcessor's records hold, step by step, the
    forecasts the extractor computes from each output as `json` decodes it."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from tps_tracer import Accumulator
    from tps_tracer.otel import TPSSpanProcessor
    from tps_tracer.records import read_trajectories

    sink = tmp_path / "runs.jsonl"
    acc = Accumulator(bootstrap=0, sink=sink)
    processor = TPSSpanProcessor(acc)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    rng = random.Random(7)
    want: dict[str, list[dict]] = {}
    for run in range(3):
        root = tracer.start_span(
            "agent",
            attributes={"openinference.span.kind": "CHAIN", "metadata": json.dumps({"tps_trajectory_id": f"r{run}"})},
        )
        ctx = trace.set_span_in_context(root)
        want[f"r{run}"] = []
        for _ in range(3):
            content = _payload(rng)
            attrs = _attributes(content, text="".join(e["token"] for e in content))
            want[f"r{run}"].append(_reference(attrs)[0])
            tracer.start_span("ChatModel", context=ctx, attributes=attrs).end()
        root.end()
    processor.force_flush()
    processor.shutdown()
    acc.close()
    records = {r.trajectory_id: r for r in read_trajectories(sink)}
    assert set(records) == set(want)
    for tid, steps in want.items():
        got = [s.forecasts for s in records[tid].steps]
        assert len(got) == len(steps)
        for g, w in zip(got, steps, strict=True):
            assert _same({k: g.get(k) for k in w}, w), (g, w)
            assert w["token_prob"] is not None and w["verbal"] == 0.7
