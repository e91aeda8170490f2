"""Signal extraction: hand-computed values on small logprob fixtures, all input formats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tps_tracer.capture import (
    LogprobsStream,
    SignalExtractor,
    VerbalConfidenceExtractor,
    from_legacy_completion,
    from_openai_chat,
    react_span,
    tag_span,
    token_mask,
)
from tps_tracer.capture.token_logprobs import LogprobsFormatError

LN = math.log


def entry(token, p, cands=None, with_bytes=True):
    """An OpenAI chat logprobs entry; cands are candidate probabilities (the chosen one included)."""
    e = {"token": token, "logprob": LN(p)}
    if with_bytes:
        e["bytes"] = list(token.encode("utf-8"))
    e["top_logprobs"] = [{"token": f"c{i}", "logprob": LN(q), "bytes": [99]} for i, q in enumerate(cands or [p])]
    return e


def h(qs):
    """Entropy of the renormalised candidate probabilities, the reference formula."""
    total = sum(qs)
    return -sum(q / total * LN(q / total) for q in qs)


# A paper-format step whose action is split across tokens: "<action>sea|rch[Par|is]</act|ion>"
TOKENS = [
    ("<think>", 0.9, [0.9, 0.1]),
    ("go", 0.5, [0.5, 0.25, 0.25]),
    ("</think>", 0.99, [0.99, 0.01]),
    ("<action>sea", 0.6, [0.6, 0.2, 0.1, 0.05, 0.05]),
    ("rch[Par", 0.4, [0.4, 0.4, 0.2]),
    ("is]</act", 0.8, [0.8, 0.2]),
    ("ion>", 1.0, [1.0]),
    ("<confidence>0.85</confidence>", 0.7, [0.7, 0.3]),
]
TEXT = "".join(t for t, _, _ in TOKENS)


def chat_logprobs():
    return {"content": [entry(t, p, c) for t, p, c in TOKENS]}


def test_completion_and_action_signals_match_hand_computation():
    out = SignalExtractor().forecasts(TEXT, chat_logprobs())
    probs = [p for _, p, _ in TOKENS]
    ec = [1 - h(c) / LN(5) for _, _, c in TOKENS]
    assert out["verbal"] == 0.85
    assert out["token_prob"] == pytest.approx(sum(probs) / 8, abs=1e-12)
    assert out["entropy_conf"] == pytest.approx(sum(ec) / 8, abs=1e-12)
    # The action "search[Paris]" overlaps tokens 3..6 (0-based), tag fragments included.
    assert out["action_token_prob"] == pytest.approx((0.6 + 0.4 + 0.8) / 3, abs=1e-12)
    assert out["action_entropy_conf"] == pytest.approx(sum(ec[3:6]) / 3, abs=1e-12)
    # A known value: candidates (1/2, 1/4, 1/4) have H = 1.5 ln 2.
    assert ec[1] == pytest.approx(1 - 1.5 * LN(2) / LN(5), abs=1e-15)


def test_action_span_maps_to_the_overlapping_tokens():
    lp = from_openai_chat(chat_logprobs())
    span = tag_span("action")(lp.text)
    assert lp.text[span[0] : span[1]] == "search[Paris]"
    assert token_mask(lp, span).tolist() == [False, False, False, True, True, True, False, False]


def test_streamed_chunks_accumulate_to_the_same_signals():
    stream = LogprobsStream()
    for e in chat_logprobs()["content"]:
        stream.add({"content": [e]})
    stream.add(None)  # chunks without logprobs (e.g. the final one) are fine
    ex = SignalExtractor()
    assert ex.forecasts(TEXT, stream.result()) == ex.forecasts(TEXT, chat_logprobs())
    assert len(stream) == 8


def test_legacy_completion_format():
    legacy = {
        "tokens": ["Action", ":", " search", "\n", "Action Input", ":", " Paris", "\nConfidence: 80%"],
        "token_logprobs": [None, LN(0.9), LN(0.5), LN(0.9), LN(0.8), LN(0.9), LN(0.25), LN(0.6)],
        "top_logprobs": [None] + [{"a": LN(0.5), "b": LN(0.5)}] * 7,
        "text_offset": [100, 106, 107, 114, 115, 127, 128, 134],
    }
    lp = from_legacy_completion(legacy)
    assert lp.offsets.tolist() == [0, 6, 7, 14, 15, 27, 28, 34, 50]
    out = SignalExtractor().forecasts(None, legacy)
    assert out["verbal"] == pytest.approx(0.8)
    # The echoed first token has no logprob and no candidates: left out of the means.
    assert out["token_prob"] == pytest.approx((0.9 + 0.5 + 0.9 + 0.8 + 0.9 + 0.25 + 0.6) / 7, abs=1e-12)
    assert out["entropy_conf"] == pytest.approx(1 - LN(2) / LN(5), abs=1e-12)
    span = react_span(lp.text)
    assert lp.text[span[0] : span[1]] == "search\nAction Input: Paris"
    assert out["action_token_prob"] == pytest.approx((0.5 + 0.9 + 0.8 + 0.9 + 0.25) / 5, abs=1e-12)


def test_bytes_give_character_offsets_for_split_multibyte_characters():
    # "é" (2 bytes) split over two tokens whose strings are byte escapes, then an action.
    content = [
        {"token": "caf", "logprob": LN(0.5), "bytes": [99, 97, 102], "top_logprobs": []},
        {"token": "bytes:\\xc3", "logprob": LN(0.5), "bytes": [0xC3], "top_logprobs": []},
        {"token": "bytes:\\xa9", "logprob": LN(0.5), "bytes": [0xA9], "top_logprobs": []},
        {"token": "<action>x</action>", "logprob": LN(0.2), "bytes": list(b"<action>x</action>"), "top_logprobs": []},
    ]
    lp = from_openai_chat(content)
    assert lp.text == "café<action>x</action>"
    assert lp.offsets.tolist() == [0, 3, 4, 4, 22]
    out = SignalExtractor().forecasts(None, content)
    assert out["action_token_prob"] == pytest.approx(0.2)
    assert out["entropy_conf"] is None  # no candidates were requested


def test_fewer_candidates_than_k_are_divided_by_ln_k_and_more_are_cut_to_k():
    one = from_openai_chat([entry("a", 0.5, [0.5, 0.5])])
    seven = from_openai_chat([entry("a", 0.3, [0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1])])
    ex = SignalExtractor()
    assert ex.forecasts("", one)["entropy_conf"] == pytest.approx(1 - LN(2) / LN(5), abs=1e-15)
    assert ex.forecasts("", seven)["entropy_conf"] == pytest.approx(1 - h([0.3, 0.2, 0.1, 0.1, 0.1]) / LN(5), abs=1e-15)
    assert SignalExtractor(top_k=3).forecasts("", seven)["entropy_conf"] == pytest.approx(
        1 - h([0.3, 0.2, 0.1]) / LN(3), abs=1e-15
    )


@pytest.mark.parametrize(
    "bad, why",
    [
        ({"content": [{"token": "a", "logprob": 0.5, "top_logprobs": []}]}, "positive"),
        ({"content": [{"token": "a", "logprob": float("nan"), "top_logprobs": []}]}, "NaN"),
        ({"content": [{"token": "a", "top_logprobs": []}]}, "malformed token entry"),
        ({"content": [{"token": "a", "logprob": "x", "top_logprobs": []}]}, "malformed token entry"),
        ({"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [{"logprob": "z"}]}]}, "malformed token entry"),
        (
            {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [{"logprob": 0.3}]}]},
            "top_logprobs holds a positive",
        ),
        ({"tokens": ["a"], "token_logprobs": [-1.0], "top_logprobs": [{"x": "z"}]}, "malformed top_logprobs"),
        ({"content": "abc"}, "must be a list"),
        (42, "unrecognised"),
        ({"tokens": ["a", "b"], "token_logprobs": [-1.0], "top_logprobs": None}, "differ in length"),
    ],
)
def test_malformed_logprobs_give_missing_values_and_are_counted(bad, why, caplog):
    from tps_tracer.capture import parse_logprobs

    with pytest.raises(LogprobsFormatError, match=why):
        parse_logprobs(bad)
    ex = SignalExtractor()
    out = ex.forecasts("<confidence>0.4</confidence>", bad)
    assert out == {
        "verbal": 0.4,
        "token_prob": None,
        "entropy_conf": None,
        "action_token_prob": None,
        "action_entropy_conf": None,
    }
    ex.forecasts("x", bad)
    assert ex.counts["malformed_logprobs"] == 2
    assert sum("malformed logprobs" in r.message for r in caplog.records) == 1


def test_a_tool_call_only_step_uses_the_arguments_logprobs_when_given_else_is_a_counted_gap(caplog):
    """OpenAI answers a tool-call-only message with {"content": null, "refusal": null}: no logprobs for
    the arguments, so the token predictors are a gap (counted, not 'malformed'; the missing-forecast
    policy scores it). A provider that returns the call's tokens in "content" gets them scored."""
    ex = SignalExtractor()
    args = {"query": "weather in Oslo"}
    out = ex.forecasts("", {"content": None, "refusal": None}, tool_arguments=args)
    assert out["token_prob"] is None and out["entropy_conf"] is None
    assert ex.counts["no_content_logprobs"] == 1 and "malformed_logprobs" not in ex.counts
    assert not any("malformed" in r.message for r in caplog.records)
    lps = [-0.1, -0.5, -0.05]
    tokens = ['{"query"', ': "weather', ' in Oslo"}']
    content = [
        {"token": t, "logprob": lp, "top_logprobs": [{"token": t, "logprob": lp}]}
        for t, lp in zip(tokens, lps, strict=True)
    ]
    out = ex.forecasts("", {"content": content, "refusal": None}, tool_arguments=args)
    assert out["token_prob"] == pytest.approx(sum(math.exp(v) for v in lps) / 3, rel=1e-12)


def test_no_logprobs_and_no_action_are_missing_not_defaults():
    ex = SignalExtractor()
    assert ex.forecasts("Confidence: 0.3", None)["token_prob"] is None
    out = ex.forecasts("no action here", [entry("no action here", 0.9, [0.9, 0.1])])
    assert out["token_prob"] == pytest.approx(0.9) and out["action_token_prob"] is None
    assert out["verbal"] is None
    assert ex.counts == {"no_logprobs": 1, "no_action_span": 1, "verbal_missing": 1}


def test_action_text_locates_a_tool_call_string():
    args = '{"query": "Paris"}'
    content = [entry('{"query": ', 0.9), entry('"Par', 0.3), entry('is"}', 0.6)]
    out = SignalExtractor().forecasts(None, content, action_text='"Paris"')
    assert out["action_token_prob"] == pytest.approx((0.3 + 0.6) / 2)
    assert SignalExtractor().forecasts(None, content, action_text=args)["action_token_prob"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    "text, value, status",
    [
        ("<confidence>0.85</confidence>", 0.85, "ok"),
        ("<think>a</think><confidence> 0.2 </confidence> then <confidence>0.7</confidence>", 0.7, "ok"),
        ("Confidence: 85%", 0.85, "ok"),
        ("confidence level = 60", 0.6, "ok"),
        ("My confidence: 0.9.", 0.9, "ok"),
        ('{"answer": "x", "confidence": 0.35}', 0.35, "ok"),
        ('{"confidence": "72%"}', 0.72, "ok"),
        ("<confidence>1.3e0</confidence>", None, "ambiguous"),  # above 1, no scale declared: 1-5? 1-10? percent?
        ("Confidence: 150%", 1.0, "clipped"),
        ("<confidence>-0.2</confidence>", 0.0, "clipped"),
        ("<confidence>high</confidence>", None, "ambiguous"),  # a level, and no mapping of levels given
        ("<confidence>unsure</confidence>", None, "malformed"),
        ("<confidence></confidence>", None, "malformed"),
        ("I am fairly confident.", None, "missing"),
        ("", None, "missing"),
    ],
)
def test_verbal_confidence_variants(text, value, status):
    found = VerbalConfidenceExtractor().from_text(text)
    assert found.status == status
    assert found.value == (None if value is None else pytest.approx(value))


def test_verbal_confidence_from_tool_arguments_and_configuration():
    ex = VerbalConfidenceExtractor()
    assert ex.from_arguments({"query": "x", "confidence": 0.4}).value == 0.4
    assert ex.from_arguments('{"confidence": 90}').value == pytest.approx(0.9)
    assert ex.from_arguments({"confidence": True}).status == "malformed"
    assert ex.from_arguments({"query": "x"}).status == "missing"
    strict = VerbalConfidenceExtractor(verbal_scale="0-1", argument_keys=("p_success",))
    assert strict.from_text("Confidence: 85").status == "clipped"
    assert strict.from_arguments({"p_success": "0.25"}).value == 0.25
    custom = VerbalConfidenceExtractor(patterns=(r"P\(success\)\s*=\s*(\S+)",))
    assert custom("P(success) = 0.66") == 0.66
    # The text wins over tool arguments; arguments fill in when the text has none.
    sig = SignalExtractor()
    assert sig.verbal("<confidence>0.1</confidence>", {"confidence": 0.9}) == 0.1
    assert sig.verbal("calling the tool", {"confidence": 0.9}) == 0.9


def test_per_token_arrays_against_a_loop():
    rng = np.random.default_rng(3)
    content = []
    for i in range(50):
        cands = sorted(rng.dirichlet(np.ones(6))[:5], reverse=True)
        content.append(entry(f"t{i} ", float(cands[0]), [float(c) for c in cands]))
    out = SignalExtractor().forecasts(None, content)
    ref_tp = np.mean([math.exp(e["logprob"]) for e in content])
    ref_ec = np.mean([1 - h([math.exp(c["logprob"]) for c in e["top_logprobs"]]) / LN(5) for e in content])
    assert out["token_prob"] == pytest.approx(ref_tp, abs=1e-12)
    assert out["entropy_conf"] == pytest.approx(ref_ec, abs=1e-12)


def test_offsets_are_computed_only_when_an_action_span_needs_them():
    """Issue 28: the token offsets (one pass over every token string) are built on first use, by
    token_mask; a step with no action span never pays for them, and the lazy ones are the same."""
    plain = "".join(t for t, _, _ in TOKENS[:3]) + "<confidence>0.85</confidence>"
    lp = from_openai_chat({"content": [entry(t, p, c) for t, p, c in TOKENS[:3]] + [entry(*TOKENS[-1])]})
    ex = SignalExtractor()
    out = ex.forecasts(plain, lp)
    assert out["action_token_prob"] is None and out["token_prob"] is not None
    assert lp._offsets is None  # no action span: never built
    want = np.cumsum([0] + [len(t) for t in lp.tokens])
    assert lp.offsets.tolist() == want.tolist() == [0, 7, 9, 17, 46]
    full = from_openai_chat(chat_logprobs())
    assert full._offsets is None
    assert ex.forecasts(TEXT, full)["action_token_prob"] == pytest.approx((0.6 + 0.4 + 0.8) / 3, abs=1e-12)
    assert full._offsets is not None and full.offsets[-1] == len(TEXT)
