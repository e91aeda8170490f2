"""Malformed logprob payloads: parse_logprobs raises LogprobsFormatError and nothing else;
SignalExtractor.forecasts never raises, keeps the verbal confidence, gives None token
signals and counts the payload (extractor.counts and the health ledger)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tps_tracer.capture import LogprobsFormatError, LogprobsStream, SignalExtractor, parse_logprobs
from tps_tracer.health import HealthLedger


def good_entry(token="ab", p=0.5):
    return {
        "token": token,
        "logprob": math.log(p),
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": token, "logprob": math.log(p), "bytes": list(token.encode())}],
    }


def chat(**changes):
    """A two-entry chat payload whose second entry has `changes` applied (None deletes a key)."""
    bad = good_entry("cd")
    for k, v in changes.items():
        if v is None:
            bad.pop(k)
        else:
            bad[k] = v
    return {"content": [good_entry(), bad]}


def legacy(**changes):
    lp = {
        "tokens": ["Action", ":", " x"],
        "token_logprobs": [None, -0.1, -0.2],
        "top_logprobs": [None, {":": -0.1}, {" x": -0.2}],
        "text_offset": [0, 6, 7],
    }
    lp.update(changes)
    return lp


MALFORMED = {
    # chat entries
    "bytes 256 (split character)": chat(token="bytes:\\xff", bytes=[256]),
    "bytes negative": chat(token="\ufffd", bytes=[-1]),
    "bytes not integers": chat(token="\ufffd", bytes=["a"]),
    "bytes not a list of ints": chat(token="\ufffd", bytes=[[1, 2]]),
    "token an int": chat(token=7),
    "token None": chat(token=None),
    "token a list": chat(token=["a"]),
    "no token": {"content": [good_entry(), {"logprob": -1.0}]},
    "logprob NaN": chat(logprob=float("nan")),
    "logprob +inf": chat(logprob=float("inf")),
    "logprob positive": chat(logprob=0.3),
    "logprob huge int": chat(logprob=10**400),
    "logprob a string": chat(logprob="x"),
    "logprob a list": chat(logprob=[-1.0]),
    "logprob a dict": chat(logprob={"v": -1.0}),
    "top_logprobs a dict": chat(top_logprobs={"a": -1.0}),
    "top_logprobs a string": chat(top_logprobs="abc"),
    "top_logprobs an int": chat(top_logprobs=5),
    "top_logprobs of lists": chat(top_logprobs=[[-1.0]]),
    "candidate logprob NaN": chat(top_logprobs=[{"token": "a", "logprob": float("nan")}]),
    "candidate logprob huge": chat(top_logprobs=[{"token": "a", "logprob": -(10**400)}]),
    "candidate logprob positive": chat(top_logprobs=[{"token": "a", "logprob": 2.0}]),
    "entry None": {"content": [good_entry(), None]},
    "entry a string": {"content": [good_entry(), "ab"]},
    "content a string": {"content": "abc"},
    "content an int": {"content": 3},
    "content None": {"content": None},  # the parser refuses it; the extractor reads it as a tool-call step
    "not a payload": 42,
    "a set": {1, 2},
    # legacy completions
    "legacy text_offset not numeric": legacy(text_offset=["a", "b", "c"]),
    "legacy text_offset huge": legacy(text_offset=[10**30, 10**30 + 6, 10**30 + 7]),
    "legacy text_offset NaN": legacy(text_offset=[0, float("nan"), 7]),
    "legacy text_offset negative": legacy(text_offset=[-5, 1, 2]),
    "legacy text_offset a string": legacy(text_offset="abc"),
    "legacy text_offset wrong length": legacy(text_offset=[0, 6]),
    "legacy token not a string": legacy(tokens=["Action", 1, " x"]),
    "legacy lengths differ": legacy(token_logprobs=[None, -0.1]),
    "legacy top_logprobs shorter": legacy(top_logprobs=[None, {":": -0.1}]),
    "legacy top_logprobs a dict": legacy(top_logprobs={"a": -1.0}),
    "legacy top_logprobs of lists": legacy(top_logprobs=[None, [-0.1], [-0.2]]),
    "legacy top_logprobs non-numeric": legacy(top_logprobs=[None, {":": "x"}, {" x": -0.2}]),
    "legacy logprob NaN": legacy(token_logprobs=[None, float("nan"), -0.2]),
    "legacy logprob positive": legacy(token_logprobs=[None, 0.5, -0.2]),
    "legacy logprob huge": legacy(token_logprobs=[None, 10**400, -0.2]),
    "legacy token_logprobs a string": legacy(token_logprobs="abc"),
    "legacy tokens None": legacy(tokens=None),
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_payload_raises_only_logprobs_format_error(payload):
    with pytest.raises(LogprobsFormatError):
        parse_logprobs(payload)


@pytest.mark.parametrize(
    "payload",
    [p for k, p in MALFORMED.items() if k != "content None"],
    ids=[k for k in MALFORMED if k != "content None"],
)
def test_the_step_keeps_its_verbal_confidence_and_the_payload_is_counted(payload):
    ledger = HealthLedger()
    sig = SignalExtractor(health=ledger)
    out = sig.forecasts("Thought: ok\n<confidence>0.4</confidence>", payload)
    assert out == {
        "verbal": 0.4,
        "token_prob": None,
        "entropy_conf": None,
        "action_token_prob": None,
        "action_entropy_conf": None,
    }
    assert sig.counts["malformed_logprobs"] == 1
    assert ledger.category("malformed") == {"logprobs": 1}
    assert ledger.get("error") == 0


def test_well_formed_neighbours_of_the_malformed_payloads_still_parse():
    # The same payloads without the defect are read, with the values they hold.
    lp = parse_logprobs(chat())
    assert lp.text == "abcd" and np.allclose(lp.logprob, math.log(0.5))
    leg = parse_logprobs(legacy())
    assert leg.offsets.tolist() == [0, 6, 7, 9]
    # text_offset from a completion that echoed a prompt: shifted, consistent, accepted.
    assert parse_logprobs(legacy(text_offset=[100, 106, 107])).offsets.tolist() == [0, 6, 7, 9]
    # Inconsistent (but well-typed) offsets are ignored, as before: the tokens' own are used.
    assert parse_logprobs(legacy(text_offset=[0, 1, 2])).offsets.tolist() == [0, 6, 7, 9]
    assert parse_logprobs(legacy(text_offset=None)).offsets.tolist() == [0, 6, 7, 9]


def test_a_token_with_a_million_candidates_keeps_the_twenty_highest():
    rng = np.random.default_rng(5)
    cands = rng.uniform(-30, 0, size=1_000_000)
    entry = {"token": "a", "logprob": float(cands.max()), "top_logprobs": [{"logprob": float(c)} for c in cands]}
    small = {"token": "b", "logprob": -0.1, "top_logprobs": [{"logprob": -0.1}]}
    lp = parse_logprobs([entry, small])
    assert lp.top_logprobs.shape == (2, 20)
    assert lp.top_logprobs[0].tolist() == sorted(cands.tolist(), reverse=True)[:20]
    assert lp.top_logprobs[1, 0] == -0.1 and np.isneginf(lp.top_logprobs[1, 1:]).all()
    # Entropy confidence over the top 5 (renormalised), computed directly.
    top5 = np.exp(np.sort(cands)[::-1][:5])
    q = top5 / top5.sum()
    ec0 = 1 + (q * np.log(q)).sum() / math.log(5)
    out = SignalExtractor().forecasts("ab", [entry, small])
    assert out["entropy_conf"] == pytest.approx((ec0 + 1.0) / 2, abs=1e-12)


def test_a_stream_with_a_malformed_chunk_never_raises_on_add():
    stream = LogprobsStream()
    stream.add({"content": [good_entry()]})
    stream.add({"content": 5})  # not a list of entries
    stream.add(None)
    with pytest.raises(LogprobsFormatError, match="streamed chunk"):
        stream.result()
    bad_entry = LogprobsStream()
    bad_entry.add({"content": [good_entry(), {"token": 3, "logprob": -1.0}]})
    with pytest.raises(LogprobsFormatError, match="malformed token entry"):
        bad_entry.result()
