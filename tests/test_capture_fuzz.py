"""Fuzzing the signal extractor (hypothesis): random and adversarial texts, tool arguments and
logprob payloads (valid OpenAI chat / legacy shapes and their mutations).

Asserted on every example: nothing raises out of `SignalExtractor.forecasts`, every forecast
is None or a float in [0, 1], parse_logprobs raises nothing but LogprobsFormatError, each
call takes bounded time; and, for generated well-formed statements, the verbal value equals
an independent reference reading (built from how each number was written, not by parsing
the text) of the LAST statement. Valid payloads give the token signals a plain-Python
computation gives.

Default run: well under a minute. A longer campaign (the number of examples per test is
multiplied by TPS_FUZZ_SCALE):
    TPS_FUZZ_SCALE=50 .venv/bin/python -m pytest -q tests/test_capture_fuzz.py --hypothesis-show-statistics
"""

from __future__ import annotations

import copy
import json
import math
import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tps_tracer.capture import (
    PREDICTORS,
    LogprobsFormatError,
    SignalExtractor,
    VerbalConfidenceExtractor,
    parse_logprobs,
)
from tps_tracer.capture.verbal_confidence import DEFAULT_PATTERNS

SCALE = float(os.environ.get("TPS_FUZZ_SCALE", "1"))
SECONDS_PER_CALL = 1.0  # generous: every call here is on < 300 KB; the linear code needs milliseconds


def fuzz_settings(examples: int):
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def check_forecasts(out: dict[str, float | None]) -> None:
    assert set(out) == set(PREDICTORS)
    for name, v in out.items():
        assert v is None or (type(v) is float and 0.0 <= v <= 1.0), (name, v)


def timed(fn, *args, **kwargs):
    # This thread's CPU time, not the wall clock: the bound catches super-linear work, and on a
    # loaded machine (CI sharing its cores) wall time tripled for a 300 KB text (3.3 s) while
    # the work itself did not change.
    t0 = time.thread_time()
    out = fn(*args, **kwargs)
    elapsed = time.thread_time() - t0
    assert elapsed < SECONDS_PER_CALL, elapsed
    return out


# ------------------------------------------------------------------ statements with a reference


SCALE_TOPS = {"percent": 100, "0-1": 1, "1-10": 10, "1-5": 5}


def plain_reference(x: float, point: bool, scale: str | None) -> tuple[float | None, str]:
    """A plain non-negative number x (written with a point or not) on the declared scale, as
    the grammar states it: 0 and decimals <= 1 are probabilities; else x / top (clipped above
    top); undeclared, only 10 < x <= 100 (percent alone fits) is read, above 100 clipped."""
    if x == 0 or (point and x <= 1):
        return x, "ok"
    if scale is None:
        return (1.0, "clipped") if x > 100 else (x / 100, "ok") if x > 10 else (None, "ambiguous")
    top = SCALE_TOPS[scale]
    return (x / top, "ok") if x <= top else (1.0, "clipped")


@st.composite
def written_values(draw, scale: str | None = None):
    """(VALUE as written, reference reading (value, status)) from how the number is written.
    The reference is None for words that are prose after a label (not a statement there)."""
    kind = draw(
        st.sampled_from(
            ["unit", "percent", "int", "decimal_above", "plus_int", "negative", "fraction", "level", "word", "prose"]
        )
    )
    if kind == "unit":  # a decimal in [0, 1]
        x = draw(st.integers(0, 10**4)) / 10**4
        return f"{x:.4f}", (x, "ok")
    if kind == "percent":
        x = draw(st.integers(0, 2000)) / 10
        text = f"{x:.1f}%" if draw(st.booleans()) else f"{x:.1f} %"
        v = x / 100
        return text, ((v, "ok") if v <= 1 else (1.0, "clipped"))
    if kind in ("int", "plus_int"):  # digits only: on the declared scale
        n = draw(st.integers(0, 400))
        return ("+" if kind == "plus_int" else "") + str(n), plain_reference(n, False, scale)
    if kind == "decimal_above":  # written with a point and above 1: on the declared scale too
        x = draw(st.integers(1001, 10**6)) / 1000
        return f"{x:.3f}", plain_reference(x, True, scale)
    if kind == "negative":
        x = draw(st.integers(1, 10**6)) / 1000
        return f"-{x:.3f}", (0.0, "clipped")
    if kind == "fraction":  # a/b carries its own scale
        b = draw(st.integers(1, 20))
        a = draw(st.integers(0, 25))
        text = f"{a}/{b}" if draw(st.booleans()) else f"{a} out of {b}"
        return text, ((a / b, "ok") if a <= b else (1.0, "clipped"))
    if kind == "level":
        return draw(st.sampled_from(["high", "low", "medium"])), (None, "ambiguous")
    if kind == "prose":  # after a label, not a statement; in a tag or a JSON key, malformed
        return draw(st.sampled_from(["n/a", "unknown", "nan", "unsure"])), None
    return draw(st.sampled_from(["?", "0.5x", "1e"])), (None, "malformed")


FORMS = (
    "<confidence>{}</confidence>",
    "Confidence: {}",
    "confidence = {}",
    "Confidence level: {}",
    "**Confidence:** {}",
    "*Confidence*: {}",
    "__Confidence__: {}",
    '{{"answer": 1, "confidence": "{}"}}',
)
# Filler cannot spell the keyword (no c or C) but holds everything else: markdown, tags,
# digits, NUL, lone surrogates, RTL marks, emoji.
FILLER = st.text(
    st.characters(exclude_characters="cC", exclude_categories=()),
    max_size=200,
) | st.sampled_from(["", "<", "</", ">", "**", "Action:", "Final Answer:", "\r\n", "0.5", "%", "\ud800", "🙂"])


SCALES = st.sampled_from([None, "percent", "0-1", "1-10", "1-5"])


@st.composite
def statements_on_a_scale(draw):
    scale = draw(SCALES)
    items = draw(st.lists(st.tuples(st.sampled_from(FORMS), written_values(scale), FILLER), max_size=6))
    return scale, items


@given(statements_on_a_scale(), FILLER)
@fuzz_settings(400)
def test_the_last_generated_statement_is_the_reading(scaled, tail):
    scale, statements = scaled
    parts, expected = [], (None, "missing")
    for form, (written, reference), filler in statements:
        if form.startswith("{"):  # a key's unquoted VALUE ends at a space: "85 %" is written "85%" there
            written = written.replace(" %", "%")
        parts.append(filler + "\n" + form.format(written) + "\n")
        if reference is None:  # prose after a label is no statement; a tag or a key is one
            reference = (None, "malformed") if form.startswith(("<", "{")) else expected
        expected = reference
    text = "".join(parts) + tail
    found = timed(VerbalConfidenceExtractor(verbal_scale=scale).from_text, text)
    value, status = expected
    assert found.status == status, (text, found, expected)
    if value is None:
        assert found.value is None
    else:
        assert math.isclose(found.value, value, abs_tol=1e-12), (text, found, expected)


# ------------------------------------------------------------------ adversarial texts

FRAGMENTS = st.sampled_from(
    [
        "<confidence>",
        "</confidence>",
        "<confidence>0.7",
        "confidence",
        "Confidence:",
        "Confidence: ",
        "**Confidence:** ",
        '"confidence"',
        '"confidence": ',
        "Action:",
        "Action: search",
        "Action Input:",
        "Final Answer:",
        "<action>",
        "</action>",
        " ",
        "\t",
        "\n",
        "\r\n",
        "9",
        "0.",
        "%",
        ",",
        "*",
        "_",
        "\x00",
        "\ud800",
        "\u202e",
        "\u0130",
        "🙂",
    ]
)


@st.composite
def adversarial_texts(draw):
    """Fragments repeated up to thousands of times (up to ~300 KB): what made the old regexes
    blow up, mixed with random text."""
    pieces = draw(st.lists(st.tuples(FRAGMENTS | st.text(max_size=20), st.integers(1, 5000)), min_size=1, max_size=8))
    return "".join(fragment * reps for fragment, reps in pieces)[:300_000]


@given(adversarial_texts() | st.text(max_size=2000))
@fuzz_settings(200)
def test_any_text_gives_forecasts_in_range_in_bounded_time(text):
    sig = SignalExtractor()
    check_forecasts(timed(sig.forecasts, text))
    # The same text spelled by logprob tokens (the action-span path runs on it too).
    content = [{"token": text[i : i + 7], "logprob": -0.5, "top_logprobs": []} for i in range(0, len(text), 7)]
    out = timed(sig.forecasts, text, {"content": content})
    check_forecasts(out)
    if content:
        assert math.isclose(out["token_prob"], math.exp(-0.5))
    assert sig.health.get("error") == 0


ASCII = st.text(st.sampled_from("confidenceCONFIDENCE<>/:=*_%.,;\"' \t\n0123456789-+elvsor"), max_size=300)


@given(ASCII)
@fuzz_settings(300)
def test_the_linear_path_equals_the_patterns_run_one_by_one(text):
    # The default grammar's one-pass search and the same patterns run with finditer (the
    # custom-patterns path, a list instead of the default tuple) read every text the same.
    fast = VerbalConfidenceExtractor()
    slow = VerbalConfidenceExtractor(patterns=list(DEFAULT_PATTERNS))
    assert fast.from_text(text) == slow.from_text(text)


# ------------------------------------------------------------------ tool arguments

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
CALL = st.dictionaries(st.sampled_from(["confidence", "query", "q"]), JSON_VALUES, max_size=3)
TOOL_ARGUMENTS = (
    JSON_VALUES
    | CALL
    | CALL.map(lambda d: json.dumps(d, default=str))
    | st.lists(CALL | CALL.map(lambda d: json.dumps(d, default=str)) | st.none() | JSON_VALUES, max_size=5)
    | st.text(max_size=50)
)


@given(st.none() | st.text(max_size=100), TOOL_ARGUMENTS)
@fuzz_settings(300)
def test_any_tool_arguments_give_a_verbal_in_range(text, arguments):
    sig = SignalExtractor()
    check_forecasts(timed(sig.forecasts, text, None, tool_arguments=arguments))
    assert sig.health.get("error") == 0


@given(st.lists(st.one_of(st.just(None), written_values()), min_size=1, max_size=5))
@fuzz_settings(200)
def test_the_last_call_stating_a_confidence_wins(calls):
    args, expected = [], (None, "missing")
    for i, call in enumerate(calls):
        if call is None:
            args.append({"query": f"q{i}"})
        else:
            written, reference = call
            args.append({"query": f"q{i}", "confidence": written})
            expected = (None, "malformed") if reference is None else reference  # an argument is a statement
    found = VerbalConfidenceExtractor().from_arguments(args)
    assert found.status == expected[1]
    assert (found.value is None) == (expected[0] is None)
    if expected[0] is not None:
        assert math.isclose(found.value, expected[0], abs_tol=1e-12)
    # The text has priority when it states one.
    assert SignalExtractor().verbal("<confidence>0.25</confidence>", args) == 0.25


# ------------------------------------------------------------------ logprob payloads

LOGPROBS = st.floats(-30.0, 0.0)
TOKENS = st.text(max_size=6)


@st.composite
def chat_payloads(draw):
    """(payload, reference token_prob, reference entropy_conf) for a valid OpenAI chat payload."""
    n = draw(st.integers(0, 30))
    content, probs, ecs = [], [], []
    for _ in range(n):
        tok = draw(TOKENS)
        lp = draw(LOGPROBS)
        cands = sorted(draw(st.lists(LOGPROBS, max_size=7)), reverse=True)
        entry = {"token": tok, "logprob": lp, "top_logprobs": [{"token": "x", "logprob": c} for c in cands]}
        if draw(st.booleans()):
            entry["bytes"] = list(tok.encode("utf-8", "surrogatepass"))
        content.append(entry)
        probs.append(math.exp(lp))
        if cands:
            top = cands[:5]
            ps = [math.exp(c - top[0]) for c in top]
            total = sum(ps)
            h = -sum(p / total * math.log(p / total) for p in ps if p > 0)
            ecs.append(min(1.0, max(0.0, 1 - h / math.log(5))))
    payload = {"content": content} if draw(st.booleans()) else content
    return payload, _mean(probs), _mean(ecs)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@st.composite
def legacy_payloads(draw):
    n = draw(st.integers(0, 30))
    tokens = [draw(TOKENS) for _ in range(n)]
    lps = [None if i == 0 and draw(st.booleans()) else draw(LOGPROBS) for i in range(n)]
    tops = [draw(st.none() | st.dictionaries(st.text(max_size=3), LOGPROBS, max_size=5)) for _ in range(n)]
    offsets, pos = [], draw(st.integers(0, 1000))
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


BAD_VALUES = st.sampled_from(
    [None, 7, -1, 256, 10**400, -(10**400), float("nan"), float("inf"), -float("inf"), 0.5, True, "x", "-0.5",
     [], [256], [-1], ["a"], [[1]], {}, {"a": 1}, "bytes:\\xff", "\ufffd", "\ud800"]
)  # fmt: skip


def bad(draw):
    return copy.deepcopy(draw(BAD_VALUES))  # the pool's lists must not be mutated across examples


@st.composite
def mutated_payloads(draw):
    """A valid payload with one field of one entry (or of the whole payload) replaced."""
    if draw(st.booleans()):
        payload, _, _ = draw(chat_payloads())
        content = payload["content"] if isinstance(payload, dict) else payload
        if content:
            entry = draw(st.sampled_from(content))
            field = draw(st.sampled_from(["token", "logprob", "bytes", "top_logprobs"]))
            entry[field] = bad(draw)
            if entry["top_logprobs"] and isinstance(entry["top_logprobs"], list) and draw(st.booleans()):
                entry["top_logprobs"][0] = {"token": "x", "logprob": bad(draw)}
        elif isinstance(payload, dict):
            payload["content"] = bad(draw)
        return payload
    payload = draw(legacy_payloads())
    field = draw(st.sampled_from(["tokens", "token_logprobs", "top_logprobs", "text_offset"]))
    if payload[field] and draw(st.booleans()):
        payload[field][draw(st.integers(0, len(payload[field]) - 1))] = bad(draw)
    else:
        payload[field] = bad(draw)
    return payload


@given(chat_payloads(), st.none() | st.text(max_size=50))
@fuzz_settings(300)
def test_valid_chat_payloads_give_the_reference_token_signals(generated, text):
    payload, token_prob, entropy_conf = generated
    out = timed(SignalExtractor().forecasts, text, payload)
    check_forecasts(out)
    for name, ref in (("token_prob", token_prob), ("entropy_conf", entropy_conf)):
        if ref is None:
            assert out[name] is None
        else:
            assert math.isclose(out[name], ref, rel_tol=1e-9, abs_tol=1e-12), (name, out[name], ref)


@given(legacy_payloads())
@fuzz_settings(200)
def test_valid_legacy_payloads_parse_with_consistent_offsets(payload):
    lp = parse_logprobs(payload)
    assert lp.text == "".join(payload["tokens"])
    assert lp.offsets.tolist()[:-1] == [o - payload["text_offset"][0] for o in payload["text_offset"]][: lp.n]
    check_forecasts(SignalExtractor().forecasts(None, payload))


@given(mutated_payloads() | JSON_VALUES, st.text(max_size=50))
@fuzz_settings(500)
def test_mutated_payloads_raise_only_format_errors_and_keep_the_step(payload, text):
    try:
        parse_logprobs(payload)
    except LogprobsFormatError:
        # None is "no logprobs" to the extractor, {"content": null, ...} a tool-call-only message: not malformed
        no_content = isinstance(payload, dict) and "content" in payload and payload["content"] is None
        malformed = payload is not None and not no_content
    else:
        malformed = False
    sig = SignalExtractor()
    stated = "\n<confidence>0.4</confidence>"
    out = timed(sig.forecasts, text + stated, payload)
    check_forecasts(out)
    assert out["verbal"] == 0.4
    assert sig.health.get("error") == 0
    if malformed:
        assert all(out[p] is None for p in PREDICTORS[1:])
        assert sig.health.get("malformed", "logprobs") == 1
