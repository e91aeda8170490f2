"""The fast logprob path (issue 28, round 7) against the arrays path it replaces, bit for bit.

- Parsing: `from_openai_chat` reads a `list` of plain dicts with C-level maps into one buffer and
  checks it with one max (`_read_common` / `_checked_common`); any other sequence (a tuple) takes
  the general reading and the per-array checks (`_read_general`, `_check_logprobs`,
  `_candidates`), the path every payload took before. The same payload as a list and as a tuple
  must give the same arrays to the bit (-0.0, NaN and -inf included) or the same error.
- Entropy confidence: rows of width <= 7 are computed as contiguous columns (`_entropy_confidence`);
  `row_wise` below is the row-wise computation used before (and still used above width 7), so
  equality is exact.
- Forecasts: the five values of `SignalExtractor.forecasts` on the fast path equal those of the
  general path with the row-wise entropy.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tps_tracer.capture import LogprobsFormatError, SignalExtractor, from_openai_chat
from tps_tracer.capture.token_logprobs import (
    _checked_common,
    _entropy_confidence,
    _read_common,
    masked_mean,
    per_token_entropy_confidence,
)


def row_wise(top: np.ndarray, k: int) -> np.ndarray:
    """The full-rows entropy confidence as computed before the column path (row broadcasting)."""
    p = np.exp(top - top[:, :1])
    q = p / p.sum(axis=1)[:, None]
    log_q = np.log(q, out=np.zeros_like(q), where=q > 0)
    conf = 1.0 + (q * log_q).sum(axis=1) / math.log(k)
    return np.minimum(np.maximum(conf, 0.0), 1.0)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def parsed_or_error(payload):
    try:
        return from_openai_chat(payload)
    except LogprobsFormatError as exc:
        return str(exc)


def assert_fast_equals_general(content: list, *, fast: bool) -> None:
    """`content` read as a list (fast path) and as a tuple (general path): identical results."""
    read = _read_common(content)
    took_fast = read is not None and _checked_common(read[2], read[3]) is not None
    assert took_fast == fast, "the fast path was (not) taken"
    got, want = parsed_or_error(content), parsed_or_error(tuple(content))
    if isinstance(want, str):
        assert got == want  # the same LogprobsFormatError message
        return
    assert not isinstance(got, str), got
    assert got.tokens == want.tokens and got.text == want.text
    assert same_bits(got.logprob, want.logprob)
    assert same_bits(got.top_logprobs, want.top_logprobs)
    assert same_bits(got.offsets, want.offsets)
    assert got.logprob.flags.writeable and got.top_logprobs.flags.writeable  # as the general path's
    ex = SignalExtractor()
    assert ex.forecasts(None, content) == ex.forecasts(None, tuple(content))


def api_entry(rng: random.Random, i: int, width: int = 5) -> dict:
    logs = sorted((math.log(rng.random() + 1e-300) for _ in range(max(width, 1))), reverse=True)
    tok = rng.choice([f"w{i} ", "<action>", "search[x]", "</action>", " é", "Action:", " 0.7"])
    cands = [{"token": f"t{j}", "logprob": v, "bytes": [116, 48 + j]} for j, v in enumerate(logs[:width])]
    return {"token": tok, "logprob": logs[0], "bytes": list(tok.encode()), "top_logprobs": cands}


def api_payload(n: int, seed: int, width: int = 5) -> list:
    rng = random.Random(seed)
    return [api_entry(rng, i, width) for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 300, 10_000])
@pytest.mark.parametrize("width", [0, 1, 2, 5, 7, 8, 20])
def test_api_shaped_payloads_take_the_fast_path_and_equal_the_general_one(n: int, width: int) -> None:
    assert_fast_equals_general(api_payload(n, seed=n * 31 + width, width=width), fast=True)


def _with(content: list, i: int, **changes) -> list:
    out = [dict(e) for e in content]
    out[i] = {**out[i], **changes}
    return out


def _hostile() -> dict[str, tuple[list, bool]]:
    """name: (payload, whether the fast path keeps it). Each one differs from a valid API payload
    in one place: the fast path must either give what the general path gives, or decline."""
    base = api_payload(40, seed=7)
    cand = base[3]["top_logprobs"]
    return {
        "empty content": ([], True),
        "one token": (api_payload(1, seed=1), True),
        "NaN chosen": (_with(base, 3, logprob=math.nan), False),
        "NaN candidate": (_with(base, 3, top_logprobs=[*cand[:4], {"token": "x", "logprob": math.nan}]), False),
        "-inf chosen": (_with(base, 3, logprob=-math.inf), True),
        "-inf candidate (last)": (_with(base, 3, top_logprobs=[*cand[:4], {"token": "x", "logprob": -math.inf}]), True),
        "-inf candidates everywhere": (
            [{**e, "top_logprobs": [{"logprob": -math.inf}] * 5} for e in base],
            True,
        ),
        "+inf chosen": (_with(base, 3, logprob=math.inf), False),
        "positive chosen": (_with(base, 3, logprob=0.25), False),
        "tiny positive (clipped)": (_with(base, 3, logprob=1e-7), True),
        "-0.0 and 0.0": (
            _with(_with(base, 3, logprob=-0.0), 4, top_logprobs=[{"logprob": 0.0}, *cand[1:]]),
            True,
        ),
        "missing top_logprobs": (_with(base, 3, top_logprobs=None), False),
        "top_logprobs key absent": ([*base[:3], {"token": "a", "logprob": -0.1}, *base[4:]], False),
        "no candidates at all": ([{**e, "top_logprobs": []} for e in base], True),
        "ragged rows": (_with(base, 3, top_logprobs=cand[:2]), False),
        "unsorted row": (_with(base, 3, top_logprobs=cand[::-1]), False),
        "21 candidates": (_with(base, 3, top_logprobs=[{"logprob": -j / 3} for j in range(21)]), False),
        "all rows of 21": ([{**e, "top_logprobs": [{"logprob": -j / 3} for j in range(21)]} for e in base], False),
        "bool and int logprobs": (_with(base, 3, logprob=0, top_logprobs=[{"logprob": False}] * 5), True),
        "string logprob": (_with(base, 3, logprob="-0.5"), False),
        "None logprob": (_with(base, 3, logprob=None), False),
        "huge int": (_with(base, 3, logprob=-(10**400)), False),
        "non-string token": (_with(base, 3, token=7), False),
        "bytes lists of a split character": (
            [
                *base[:3],
                {"token": "bytes:\\xe2\\x82", "logprob": -0.1, "bytes": [226, 130], "top_logprobs": cand},
                {"token": "bytes:\\xac", "logprob": -0.2, "bytes": [172], "top_logprobs": cand},
                *base[5:],
            ],
            True,
        ),
        "malformed bytes list": (
            _with(base, 3, token="\ufffd", bytes=[256]),
            True,  # the arrays are fine; the bytes are rejected after, on both paths
        ),
        "q underflows": ([{**e, "top_logprobs": [{"logprob": 0.0}, {"logprob": -800.0}] * 2} for e in base], False),
        "q underflows, sorted": (
            [{**e, "top_logprobs": [{"logprob": 0.0}, {"logprob": -1.0}, {"logprob": -800.0}]} for e in base],
            True,
        ),
    }


@pytest.mark.parametrize("name", sorted(_hostile()))
def test_hostile_payloads_give_what_the_general_path_gives(name: str) -> None:
    content, fast = _hostile()[name]
    assert_fast_equals_general(content, fast=fast)


def test_random_payloads_give_what_the_general_path_gives() -> None:
    """Random mixtures of the hostile changes above, several per payload."""
    rng = random.Random(28)
    changes = [
        {"logprob": math.nan},
        {"logprob": -math.inf},
        {"logprob": -0.0},
        {"logprob": 3e-7},
        {"logprob": 0.5},
        {"top_logprobs": None},
        {"top_logprobs": []},
        {"top_logprobs": [{"logprob": -math.inf}] * 5},
        {"top_logprobs": [{"logprob": v} for v in (0.0, -900.0, -901.0, -1e308, -math.inf)]},
    ]
    for trial in range(300):
        content = api_payload(rng.choice([1, 3, 50]), seed=trial)
        for _ in range(rng.randint(0, 3)):
            content = _with(content, rng.randrange(len(content)), **rng.choice(changes))
        read = _read_common(content)
        fast = read is not None and _checked_common(read[2], read[3]) is not None
        assert_fast_equals_general(content, fast=fast)


@pytest.mark.parametrize("n", [1, 2, 3, 300, 10_000])
def test_column_entropy_equals_the_row_wise_computation(n: int) -> None:
    """Widths up to 9: from 8 on, numpy sums a row pairwise, so the column path must not be used."""
    rng = np.random.default_rng(n)
    for width in range(1, 10):
        for k in sorted({max(2, width), 5, 20}):
            for scale in (1e-3, 1.0, 50.0):
                top = -np.sort(rng.exponential(scale, (n, width)), axis=1)
                top[rng.random(n) < 0.05, 0] = -0.0  # a certain token
                top[rng.random(n) < 0.05, width - 1 :] -= 900.0  # q underflows to 0
                top[rng.random(n) < 0.05] = -1.5  # ties
                if width <= 7:
                    assert same_bits(_entropy_confidence(top, k), row_wise(top, k)), (width, k)
                # through the public function, which picks the path itself
                lp = from_openai_chat(
                    [
                        {"token": "a", "logprob": float(r[0]), "top_logprobs": [{"logprob": float(v)} for v in r]}
                        for r in top
                    ]
                )
                ent = per_token_entropy_confidence(lp, k)
                want = row_wise(top[:, :k], k)  # the first k candidates
                assert same_bits(ent, want), (width, k, scale)
                assert masked_mean(ent) == masked_mean(want)
