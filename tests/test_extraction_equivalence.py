"""The fast extraction (issue 28: C-level reading of chat logprobs, fewer numpy calls for the
signals) gives what a straightforward implementation gives, on random and adversarial payloads.

References kept here:
- `reference_parse`: one Python loop per entry and per candidate, applying the rules of
  token_logprobs' docstring (token a string, logprob a finite number <= 0 up to 1e-6, the 20
  highest candidates sorted, -inf padding, offsets from the strings or, for split characters,
  from the bytes). Parsed arrays must be EXACTLY equal, and a payload one rejects the other must
  reject (LogprobsFormatError and nothing else).
- `reference_entropy_confidence` / `reference_masked_mean`: the plain numpy formulas (every row
  shifted by its max, `np.where` over q > 0, NaN filtered before the mean); the fast code claims
  the same bits, so equality is exact.
- `math_forecasts`: the token signals again with `math.exp` / `math.log`, per token (within
  1e-12: libm and numpy may differ in the last bit).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tps_tracer.capture import LogprobsFormatError, SignalExtractor, parse_logprobs
from tps_tracer.capture.step_signals import DEFAULT_ACTION_SPAN
from tps_tracer.capture.token_logprobs import _read_common, masked_mean, per_token_entropy_confidence

TOLERANCE = 1e-6
MAX_CANDIDATES = 20


class Rejected(Exception):
    pass


def _number(v):
    """What the parser accepts as a logprob: a real number (bool and int included) within float range."""
    if isinstance(v, (bool, int, float, np.floating)):
        try:
            x = float(v)
        except OverflowError:
            raise Rejected from None
        if math.isnan(x) or x > TOLERANCE:  # NaN, +inf and positives
            raise Rejected
        return min(x, 0.0)
    raise Rejected


def reference_parse(payload):
    content = payload.get("content") if isinstance(payload, dict) else payload
    if not isinstance(content, (list, tuple)):
        raise Rejected
    tokens, chosen, rows = [], [], []
    for e in content:
        if not isinstance(e, dict) or "token" not in e or "logprob" not in e:
            raise Rejected
        if not isinstance(e["token"], str):
            raise Rejected
        tokens.append(e["token"])
        chosen.append(_number(e["logprob"]))
        cands = e.get("top_logprobs") or []
        if not isinstance(cands, (list, tuple)):
            raise Rejected
        row = []
        for c in cands:
            if not isinstance(c, dict) or "logprob" not in c:
                raise Rejected
            row.append(_number(c["logprob"]))
        rows.append(sorted(row, reverse=True)[:MAX_CANDIDATES])
    k = max((len(r) for r in rows), default=0)
    top = np.full((len(rows), k), -np.inf)
    for i, r in enumerate(rows):
        top[i, : len(r)] = r
    text = "".join(tokens)
    offsets = [0]
    if ("bytes:" in text or "\ufffd" in text) and content and all(isinstance(e.get("bytes"), list) for e in content):
        raw = b""
        ends = []
        for e in content:
            if not all(isinstance(b, int) and 0 <= b <= 255 for b in e["bytes"]):
                raise Rejected
            raw += bytes(e["bytes"])
            ends.append(len(raw))
        text = raw.decode("utf-8", errors="replace")
        ascii_only = len(raw) == len(text)
        # character index of a byte offset: the bytes before it that start a character
        starts = [0]
        for b in raw:
            starts.append(starts[-1] + ((b & 0xC0) != 0x80))
        offsets += [o if ascii_only else starts[o] for o in ends]
    else:
        for t in tokens:
            offsets.append(offsets[-1] + len(t))
    return tokens, np.array(chosen, dtype=float), top, np.array(offsets, dtype=np.int64), text


def reference_entropy_confidence(top, k=5):
    top = top[:, :k]
    if top.shape[1] == 0:
        return np.full(top.shape[0], np.nan)
    has = np.isfinite(top[:, 0])
    shifted = top - np.where(has, top[:, 0], 0.0)[:, None]
    p = np.exp(shifted)
    total = p.sum(axis=1)
    q = p / np.where(total > 0, total, 1.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(q), 0.0)
    conf = 1.0 + terms.sum(axis=1) / math.log(k)
    return np.where(has, np.clip(conf, 0.0, 1.0), np.nan)


def reference_masked_mean(values, mask=None):
    sel = values if mask is None else values[mask]
    sel = sel[~np.isnan(sel)]
    return None if sel.size == 0 else float(min(1.0, max(0.0, sel.mean())))


def math_forecasts(tokens, chosen, top, offsets, text, k=5):
    probs = [math.exp(v) for v in chosen]
    ents = []
    for row in top:
        row = [v for v in row[:k] if v > -math.inf]
        if not row:
            ents.append(None)
            continue
        ps = [math.exp(v - row[0]) for v in row]
        h = -sum(p / sum(ps) * math.log(p / sum(ps)) for p in ps if p / sum(ps) > 0)
        ents.append(min(1.0, max(0.0, 1.0 - h / math.log(k))))

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return min(1.0, max(0.0, sum(xs) / len(xs))) if xs else None

    out = {"token_prob": mean(probs), "entropy_conf": mean(ents)}
    span = DEFAULT_ACTION_SPAN(text)
    if span is not None:
        inside = [i for i in range(len(tokens)) if offsets[i] < span[1] and offsets[i + 1] > span[0]]
        out["action_token_prob"] = mean([probs[i] for i in inside])
        out["action_entropy_conf"] = mean([ents[i] for i in inside])
    else:
        out["action_token_prob"] = out["action_entropy_conf"] = None
    return out


def assert_same_parse(content):
    try:
        ref = reference_parse(content)
    except Rejected:
        ref = None
    try:
        got = parse_logprobs(content)
    except LogprobsFormatError:
        got = None
    assert (got is None) == (ref is None), (ref is None, content)
    if got is None:
        return None
    tokens, chosen, top, offsets, text = ref
    assert got.tokens == tokens
    assert got.text == text
    assert np.array_equal(got.logprob, chosen)
    assert got.top_logprobs.shape == top.shape
    assert np.array_equal(got.top_logprobs, top)
    assert np.array_equal(got.offsets, offsets)
    # the signals: exactly the plain numpy formulas, and the math-module ones within 1e-12
    ent = per_token_entropy_confidence(got)
    assert np.array_equal(ent, reference_entropy_confidence(top), equal_nan=True)
    probs = np.exp(got.logprob)
    for values in (probs, ent):
        assert masked_mean(values) == reference_masked_mean(values)
        mask = np.arange(values.size) % 3 == 1
        assert masked_mean(values, mask) == reference_masked_mean(values, mask)
    out = SignalExtractor().forecasts(text, content)
    for name, want in math_forecasts(*ref).items():
        assert (out[name] is None) == (want is None), (name, out[name], want)
        if want is not None:
            assert out[name] == pytest.approx(want, abs=1e-12), name
    return got


# ------------------------------------------------------------------ random payloads

good_logprob = st.one_of(
    st.floats(min_value=-40.0, max_value=0.0),
    st.floats(min_value=0.0, max_value=TOLERANCE),  # a near-certain token rounded up
    st.sampled_from([-0.0, 0.0, -math.inf, -1e-300, -700.0, -746.0, -1e308]),
    st.integers(min_value=-3, max_value=0),
)
bad_logprob = st.sampled_from(
    [math.nan, math.inf, 0.5, 10**400, -(10**400), "x", None, [-1.0], {"v": -1.0}, b"\x00", True]
)
token_text = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["<action>", "</action>", "Action:", " search", "\nAction Input:", " x", "bytes:\\xe2", "\ufffd"]),
)


@st.composite
def candidate(draw, bad: bool):
    value = draw(st.one_of(good_logprob, bad_logprob) if bad else good_logprob)
    return {"token": draw(st.text(max_size=3)), "logprob": value, "bytes": None}


@st.composite
def entry(draw, bad: bool, width: int | None):
    tok = draw(token_text)
    e = {"token": tok, "logprob": draw(st.one_of(good_logprob, bad_logprob) if bad else good_logprob)}
    e["bytes"] = list(tok.encode("utf-8", "surrogatepass"))
    n = width if width is not None else draw(st.integers(0, 25))
    e["top_logprobs"] = [draw(candidate(bad)) for _ in range(n)]
    if bad:
        mutation = draw(st.integers(0, 12))
        if mutation == 0:
            e["top_logprobs"] = None
        elif mutation == 1:
            del e["top_logprobs"]
        elif mutation == 2:
            e["top_logprobs"] = draw(st.sampled_from([{"a": -1.0}, "abc", 5, [[-1.0]], (), 0]))
        elif mutation == 3:
            e["token"] = draw(st.sampled_from([7, None, ["a"], b"ab"]))
        elif mutation == 4:
            del e[draw(st.sampled_from(["token", "logprob"]))]
        elif mutation == 5:
            e["bytes"] = draw(st.sampled_from([[256], [-1], ["a"], None, [[1, 2]]]))
            e["token"] = "\ufffd"
        elif mutation == 6:
            return draw(st.sampled_from([None, "ab", 3, ["token", -1.0]]))
    return e


@st.composite
def payload(draw):
    bad = draw(st.booleans())
    uniform = draw(st.booleans())
    width = draw(st.sampled_from([0, 1, 2, 5, 20, 21])) if uniform else None
    return [draw(entry(bad, width)) for _ in range(draw(st.integers(0, 12)))]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload())
def test_random_payloads_parse_and_score_as_the_reference(content):
    assert_same_parse(content)
    assert_same_parse({"content": content})


def test_random_realistic_payloads_are_read_by_the_fast_path_exactly():
    """300 tokens, top-5, the shape the APIs send; also the ones the fast path declines."""
    rng = random.Random(0)
    for trial in range(30):
        content = []
        for _ in range(300):
            logs = sorted((math.log(rng.random() + 1e-12) for _ in range(5)), reverse=True)
            tok = rng.choice(["a", " b", "<action>", "search[x]", "</action>", "é", "Action:", " 0.7"])
            cands = [{"token": f"t{j}", "logprob": v, "bytes": [116]} for j, v in enumerate(logs)]
            if trial % 3 == 1:
                rng.shuffle(cands)  # unsorted candidates: sorted by the parser
            content.append({"token": tok, "logprob": logs[0], "bytes": list(tok.encode()), "top_logprobs": cands})
        if trial % 3 == 2:
            content[rng.randrange(300)]["top_logprobs"] = None  # no candidates for one token
        assert _read_common(content) is not None  # the fast reading took it (a null top_logprobs too)
        assert assert_same_parse({"content": content}) is not None


ADVERSARIAL = {
    "empty": [],
    "no candidates anywhere": [{"token": "a", "logprob": -0.1, "top_logprobs": []}] * 3,
    "null candidates": [{"token": "a", "logprob": -0.1, "top_logprobs": None}] * 3,
    "missing candidates": [{"token": "a", "logprob": -0.1}],
    "ragged rows": [
        {"token": "a", "logprob": -0.1, "top_logprobs": [{"logprob": -0.1}, {"logprob": -3.0}]},
        {"token": "b", "logprob": -0.2, "top_logprobs": [{"logprob": -0.2}]},
    ],
    "all candidates -inf": [{"token": "a", "logprob": -0.1, "top_logprobs": [{"logprob": -math.inf}] * 5}],
    "q underflows": [{"token": "a", "logprob": 0.0, "top_logprobs": [{"logprob": 0.0}, {"logprob": -800.0}] * 3}],
    "30 candidates": [{"token": "a", "logprob": -0.1, "top_logprobs": [{"logprob": -j / 7} for j in range(30)]}],
    "int and bool logprobs": [{"token": "a", "logprob": 0, "top_logprobs": [{"logprob": False}, {"logprob": -2}]}],
    "tiny positive": [{"token": "a", "logprob": 1e-7, "top_logprobs": [{"logprob": 1e-7}]}],
    "a dict subclass entry": [type("D", (dict,), {})(token="a", logprob=-0.1, top_logprobs=[])],
    "a tuple of candidates": [{"token": "a", "logprob": -0.1, "top_logprobs": ({"logprob": -0.1},)}],
    "candidate count mismatch text": [{"token": 1.5, "logprob": -0.1}],
    "split character": [
        {"token": "bytes:\\xe2\\x82", "logprob": -0.1, "bytes": [226, 130], "top_logprobs": [{"logprob": -0.1}]},
        {"token": "bytes:\\xac", "logprob": -0.2, "bytes": [172], "top_logprobs": [{"logprob": -0.2}]},
        {"token": " ok", "logprob": -0.3, "bytes": [32, 111, 107], "top_logprobs": [{"logprob": -0.3}]},
    ],
    "numpy scalars": [{"token": "a", "logprob": np.float32(-0.5), "top_logprobs": [{"logprob": np.float64(-0.5)}]}],
    "huge int candidate": [{"token": "a", "logprob": -0.1, "top_logprobs": [{"logprob": -(10**400)}]}],
    "a list entry": [["token", "logprob"]],
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_payloads_parse_as_the_reference(name):
    content = ADVERSARIAL[name]
    assert_same_parse(content)
    assert_same_parse({"content": content})
