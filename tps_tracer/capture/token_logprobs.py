"""Token logprobs from the formats LLM APIs return, as flat numpy arrays.

Accepted inputs:

- OpenAI chat completions (also what ChatOpenAI puts in `generation_info["logprobs"]` /
  `response_metadata["logprobs"]`): `{"content": [{"token", "logprob", "bytes",
  "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...]}`, or the bare list;
- streamed chat chunks, one (or a few) entries each: feed them to `LogprobsStream`;
- legacy completions: `{"tokens": [...], "token_logprobs": [...], "top_logprobs":
  [{token: logprob, ...}, ...], "text_offset": [...]}`.

Character offsets: each token's start in the completion text, so action spans found in
the text map back to tokens. Token strings do not always concatenate to the text (a
multi-byte character split across tokens shows up as partial bytes), so when every
entry carries `bytes` the offsets are computed from the UTF-8 bytes; otherwise from the
token strings; legacy completions use `text_offset` when it is consistent.

Anything else raises LogprobsFormatError with the reason; callers turn it into missing
values and a counted warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Logprobs are <= 0; APIs sometimes round a near-certain token to a tiny positive value.
_POSITIVE_TOLERANCE = 1e-6


class LogprobsFormatError(ValueError):
    """The logprobs object is not in a recognised format or holds invalid numbers."""


@dataclass
class TokenLogprobs:
    tokens: list[str]
    logprob: FloatArray  # (n,) chosen-token logprobs; NaN where the API gave none (legacy echo)
    top_logprobs: FloatArray  # (n, k) candidate logprobs, highest first, -inf padding; k may be 0
    offsets: IntArray  # (n + 1,) character offsets of token starts in `text`, then len(text)
    text: str

    @property
    def n(self) -> int:
        return len(self.tokens)


def _check_logprobs(values: FloatArray, what: str) -> FloatArray:
    """Logprobs must be <= 0 (a tiny positive rounding is clipped) and not NaN, unless NaN marks "none"."""
    finite = values[~np.isnan(values)] if what == "token_logprobs" else values
    # One pass decides the common case: NaN fails `<=`, +inf and positives exceed the tolerance.
    if not (finite <= _POSITIVE_TOLERANCE).all():
        if np.isnan(finite).any() or np.isposinf(finite).any():
            raise LogprobsFormatError(f"{what} holds NaN or +inf")
        raise LogprobsFormatError(f"{what} holds a positive logprob ({float(finite.max())!r}); logprobs are <= 0")
    return np.minimum(values, 0.0)


def _candidates(flat: FloatArray, counts: list[int]) -> FloatArray:
    """Flat candidate logprobs (counts[i] for token i) as an (n, k) array, highest first, -inf padded."""
    n, k = len(counts), max(counts, default=0)
    if flat.size == n * k:
        arr = flat.reshape(n, k)
    else:
        arr = np.full((n, k), -np.inf)
        cnt = np.asarray(counts, dtype=np.int64)
        rows = np.repeat(np.arange(n), cnt)
        cols = np.arange(flat.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        arr[rows, cols] = flat
    arr = _check_logprobs(arr, "top_logprobs")
    if k > 1 and not (arr[:, 1:] <= arr[:, :-1]).all():  # APIs send them sorted; sort only if not
        arr = -np.sort(-arr, axis=1)
    return arr


def _pad(rows: list[list[float]]) -> FloatArray:
    flat = np.array([v for r in rows for v in r], dtype=np.float64)
    return _candidates(flat, [len(r) for r in rows])


def _offsets_from_strings(tokens: list[str]) -> tuple[IntArray, str]:
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens)), out=offsets[1:])
    return offsets, "".join(tokens)


def _offsets_from_bytes(chunks: list[Sequence[int]]) -> tuple[IntArray, str]:
    raw = b"".join(map(bytes, chunks))
    text = raw.decode("utf-8", errors="replace")
    byte_offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in chunks], out=byte_offsets[1:])
    if len(raw) == len(text):  # ASCII: bytes are characters
        return byte_offsets, text
    # A byte starts a character unless it is a UTF-8 continuation byte (10xxxxxx); the
    # character index of byte offset o is the number of character starts before o.
    buf = np.frombuffer(raw, dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum((buf & 0xC0) != 0x80)))
    return starts[byte_offsets].astype(np.int64), text


def from_openai_chat(logprobs: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> TokenLogprobs:
    """Chat-completions logprobs: the `{"content": [...]}` object or the list of entries."""
    if isinstance(logprobs, Mapping):
        content = logprobs.get("content")
        if content is None:
            raise LogprobsFormatError("no 'content' list (the response carries no token logprobs)")
    else:
        content = logprobs
    if not isinstance(content, Sequence) or isinstance(content, (str, bytes)):
        raise LogprobsFormatError(f"'content' must be a list of token entries, got {type(content).__name__}")
    try:
        tokens = [e["token"] for e in content]
        chosen = np.array([e["logprob"] for e in content], dtype=np.float64)
        cand_lists = [e.get("top_logprobs") or () for e in content]
        counts = list(map(len, cand_lists))
        flat = np.array([c["logprob"] for cands in cand_lists for c in cands], dtype=np.float64)
        text = "".join(tokens)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise LogprobsFormatError(f"malformed token entry ({type(exc).__name__}: {exc})") from None
    chosen = _check_logprobs(chosen, "logprob")
    top = _candidates(flat, counts)
    # Token strings spell the text unless a character was split across tokens (the API then
    # shows partial bytes as "bytes:\\x.." or U+FFFD); only then rebuild from the raw bytes.
    if ("bytes:" in text or "\ufffd" in text) and content and all(isinstance(e.get("bytes"), list) for e in content):
        offsets, text = _offsets_from_bytes([e["bytes"] for e in content])
    else:
        offsets, _ = _offsets_from_strings(tokens)
    return TokenLogprobs(tokens, chosen, top, offsets, text)


def from_legacy_completion(logprobs: Mapping[str, Any]) -> TokenLogprobs:
    """Legacy completions logprobs (tokens / token_logprobs / top_logprobs / text_offset)."""
    try:
        tokens = list(logprobs["tokens"])
        raw = [math.nan if v is None else v for v in logprobs["token_logprobs"]]
        chosen = np.array(raw, dtype=np.float64)
        top_maps = logprobs.get("top_logprobs") or [None] * len(tokens)
        tops = [sorted((m or {}).values(), reverse=True) for m in top_maps]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise LogprobsFormatError(f"malformed legacy logprobs ({type(exc).__name__}: {exc})") from None
    if not (len(tokens) == chosen.size == len(tops)) or not all(isinstance(t, str) for t in tokens):
        raise LogprobsFormatError("tokens, token_logprobs and top_logprobs differ in length")
    chosen = _check_logprobs(chosen, "token_logprobs")
    try:
        top = _pad(tops)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, LogprobsFormatError):
            raise
        raise LogprobsFormatError(f"malformed top_logprobs ({exc})") from None
    offsets, text = _offsets_from_strings(tokens)
    given = logprobs.get("text_offset")
    if isinstance(given, Sequence) and len(given) == len(tokens) and tokens:
        rel = np.asarray(given, dtype=np.int64) - int(given[0])
        # Use the API's offsets only if they describe the same text the tokens spell.
        if np.array_equal(rel, offsets[:-1]):
            offsets = np.append(rel, len(text))
    return TokenLogprobs(tokens, chosen, top, offsets, text)


def parse_logprobs(logprobs: Any) -> TokenLogprobs:
    """Any supported format (or an already parsed TokenLogprobs)."""
    if isinstance(logprobs, TokenLogprobs):
        return logprobs
    if isinstance(logprobs, Mapping) and "token_logprobs" in logprobs:
        return from_legacy_completion(logprobs)
    if isinstance(logprobs, (Mapping, list, tuple)):
        return from_openai_chat(logprobs)
    raise LogprobsFormatError(f"unrecognised logprobs object of type {type(logprobs).__name__}")


class LogprobsStream:
    """Accumulates streamed chat chunks (each with one or a few entries) into one TokenLogprobs."""

    def __init__(self) -> None:
        self._entries: list[Any] = []

    def add(self, chunk_logprobs: Mapping[str, Any] | Sequence[Any] | None) -> None:
        if chunk_logprobs is None:
            return
        content = chunk_logprobs.get("content") if isinstance(chunk_logprobs, Mapping) else chunk_logprobs
        if content:
            self._entries.extend(content)

    def __len__(self) -> int:
        return len(self._entries)

    def result(self) -> TokenLogprobs:
        return from_openai_chat(self._entries)
