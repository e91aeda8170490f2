"""The OTel path decodes model outputs (`output.value`, up to ~100 KB with logprobs) with orjson
(issue 28, cost): what it reads must be what `json` reads, and what orjson refuses must still be
read as `json` reads it (NaN, Infinity, numbers beyond float range, lone surrogates)."""

from __future__ import annotations

import json
import math

import pytest

from tps_tracer.capture import SignalExtractor
from tps_tracer.otel import span_reading as sr

CASES = [
    '{"a": 1, "a": 2}',
    "[NaN, Infinity, -Infinity]",
    "1e400",
    "[-" + "9" * 400 + "]",
    '"\\ud800 lone surrogate"',
    '"\\u0000"',
    "-0.0",
    "5e-324",
    "[1,]",
    "not json",
    "",
    '{"generations": [[{"text": "x", "generation_info": {"logprobs": {"content": []}}}]]}',
]


@pytest.mark.parametrize("text", CASES)
def test_output_json_reads_as_json(text: str) -> None:
    try:
        want = json.loads(text)
    except ValueError:
        want = None
    got = sr._output_json(text)
    assert json.dumps(got, allow_nan=True) == json.dumps(want, allow_nan=True)
    assert type(got) is type(want)


def test_a_64_bit_overflowing_integer_is_read_as_the_same_float() -> None:
    text = "[-123456789012345678901234567890]"
    assert sr._output_json(text)[0] == float(json.loads(text)[0])


def _llm_span(entries: str) -> dict[str, str]:
    gen = '{"generations": [[{"text": "<action>finish[yes]</action> confidence: 0.8", "generation_info": '
    return {"openinference.span.kind": "LLM", "output.value": gen + '{"logprobs": {"content": ' + entries + "}}}]]}"}


def _entry(token: str, logprob: str, cands: list[str]) -> str:
    tops = ", ".join('{"token": "c", "logprob": ' + c + "}" for c in cands)
    return '{"token": ' + json.dumps(token) + ', "logprob": ' + logprob + ', "top_logprobs": [' + tops + "]}"


ACTION = ("<action>", "finish[yes]", "</action>")


@pytest.mark.parametrize(
    "entries",
    [
        "[" + ", ".join(_entry(t, "-0.25", ["-0.25", "-1.5", "-3"]) for t in ACTION) + "]",
        "[" + _entry("a", "NaN", ["-0.1"]) + "]",  # malformed either way
        "[" + _entry("a", "-" + "9" * 400, ["-0.1"]) + "]",  # beyond float range: json's int, malformed
        "[" + _entry("a", "-123456789012345678901234567890", ["-0.1"]) + "]",  # a huge but finite logprob
        "[" + _entry("a", "-Infinity", ["-Infinity", "-0.5"]) + "]",
    ],
)
def test_llm_steps_read_from_spans_give_the_forecasts_json_gives(entries: str) -> None:
    attrs = _llm_span(entries)
    step = sr.read_llm_step(attrs)
    expected_output = json.loads(attrs["output.value"])
    expected_lp = expected_output["generations"][0][0]["generation_info"]["logprobs"]
    got = SignalExtractor().forecasts(step.raw.text, step.raw.logprobs, step.raw.tool_arguments)
    want = SignalExtractor().forecasts(step.raw.text, expected_lp, step.raw.tool_arguments)
    assert got.keys() == want.keys()
    assert got == want  # forecasts are None or finite floats in [0, 1]: plain equality
    assert all(v is None or math.isfinite(v) for v in got.values())
