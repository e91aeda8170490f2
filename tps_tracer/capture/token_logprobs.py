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

Anything else raises LogprobsFormatError with the reason, and nothing else: a malformed
entry (a token that is not a string, a logprob that is not a finite number <= 0 or is too
large for a float, `bytes` outside 0..255, `top_logprobs` that is not a list of
{token, logprob}, a `text_offset` that is not a list of non-negative integers, lists of
different lengths...) is reported by its reason, and any other exception raised while
reading a payload is re-raised as LogprobsFormatError naming it. Callers turn it into
missing token signals and a counted warning; the step itself is kept.

Candidates: at most MAX_CANDIDATES (20, the OpenAI API's maximum) per token are kept, the
highest ones, so one entry with a million candidates cannot allocate n x 10^6 floats.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Logprobs are <= 0; APIs sometimes round a near-certain token to a tiny positive value.
_POSITIVE_TOLERANCE = 1e-6
MAX_CANDIDATES = 20
_MAX_OFFSET = 1 << 53
_TOKEN = itemgetter("token")
_LOGPROB = itemgetter("logprob")


class LogprobsFormatError(InputError):
    """The logprobs object is not in a recognised format or holds invalid numbers."""


class TokenLogprobs:
    """tokens; logprob (n,) chosen-token logprobs, NaN where the API gave none (legacy echo);
    top_logprobs (n, k) candidate logprobs, highest first, -inf padding, k may be 0; offsets
    (n + 1,) character offsets of token starts in `text`, then len(text); text.

    `offsets=None` means "from the token strings", computed on first use: only an action span
    (action_span.token_mask) needs them, and most steps have none (~20-130 us per 300 tokens)."""

    __slots__ = ("_offsets", "logprob", "text", "tokens", "top_logprobs")

    def __init__(
        self, tokens: list[str], logprob: FloatArray, top_logprobs: FloatArray, offsets: IntArray | None, text: str
    ) -> None:
        self.tokens = tokens
        self.logprob = logprob
        self.top_logprobs = top_logprobs
        self._offsets = offsets
        self.text = text

    @property
    def offsets(self) -> IntArray:
        if self._offsets is None:
            self._offsets, _ = _offsets_from_strings(self.tokens)
        return self._offsets

    @property
    def n(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"TokenLogprobs(n={self.n}, k={self.top_logprobs.shape[1]}, text={self.text[:40]!r})"


def _check_logprobs(values: FloatArray, what: str) -> FloatArray:
    """Logprobs must be <= 0 (a tiny positive rounding is clipped) and not NaN, unless NaN marks "none"."""
    finite = values[~np.isnan(values)] if what == "token_logprobs" else values
    # One pass decides the common case: NaN fails `<=`, +inf and positives exceed the tolerance.
    if not (finite <= _POSITIVE_TOLERANCE).all():
        if np.isnan(finite).any() or np.isposinf(finite).any():
            raise LogprobsFormatError(f"{what} holds NaN or +inf")
        raise LogprobsFormatError(f"{what} holds a positive logprob ({float(finite.max())!r}); logprobs are <= 0")
    return np.minimum(values, 0.0)


def _highest(flat: FloatArray, counts: list[int], keep: int) -> tuple[FloatArray, list[int]]:
    """The `keep` highest candidates of each token (rows longer than that are cut)."""
    cnt = np.asarray(counts, dtype=np.int64)
    rows = np.repeat(np.arange(cnt.size), cnt)
    order = np.lexsort((-flat, rows))  # by token, then highest first
    rank = np.arange(flat.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return flat[order][rank < keep], np.minimum(cnt, keep).tolist()


def _candidates(flat: FloatArray, counts: list[int]) -> FloatArray:
    """Flat candidate logprobs (counts[i] for token i) as an (n, k) array, highest first, -inf padded."""
    if max(counts, default=0) > MAX_CANDIDATES:
        flat, counts = _highest(_check_logprobs(flat, "top_logprobs"), counts, MAX_CANDIDATES)
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
    try:
        raw = b"".join(map(bytes, chunks))
    except (TypeError, ValueError, OverflowError) as exc:  # bytes([256]), bytes(["a"]), bytes([-1])
        raise LogprobsFormatError(f"malformed 'bytes' ({type(exc).__name__}: {exc})") from None
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


def _floats(n: int, values: Any) -> FloatArray:
    """`n` Python numbers as float64. struct converts each with PyFloat_AsDouble, as np.fromiter
    does for a number, ~5x faster; anything else (a string, None, a count that differs) raises.
    Packed into a bytearray so the array is writable, as every other parsed array is."""
    buf = bytearray(8 * n)
    struct.pack_into(f"{n}d", buf, 0, *values)
    return np.frombuffer(buf, dtype=np.float64)


def _read_common(content: list[Any]) -> tuple[list[str], str, FloatArray, list[int]] | None:
    """(tokens, text, values, counts) of a payload of plain dict entries, read with C-level maps
    only (no Python bytecode per token or candidate): `values` holds the n chosen logprobs, then
    the candidates' (counts[i] for token i), converted in one call. None when the payload holds
    anything else (a non-dict entry, a value that is not a number...): the general reading in
    `from_openai_chat` then decides, so both give the same result or the same error.

    Per 300-token top-5 payload this is ~1,800 dict lookups, the floor of reading Python dicts;
    the old per-value np.fromiter over a chain of generators cost ~3x that."""
    try:
        tokens = list(map(_TOKEN, content))
        text = "".join(tokens)
        cand_lists: list[Any] = list(map(dict.get, content, repeat("top_logprobs")))
        try:
            counts = list(map(len, cand_lists))
        except TypeError:  # a null top_logprobs: no candidates, as in the general reading
            cand_lists = [c or () for c in cand_lists]
            counts = list(map(len, cand_lists))
        values = _floats(
            len(tokens) + sum(counts), chain(map(_LOGPROB, content), map(_LOGPROB, chain.from_iterable(cand_lists)))
        )
    except Exception:  # whatever it is, the general reading below names it
        return None
    return tokens, text, values, counts


def _checked_common(values: FloatArray, counts: list[int]) -> tuple[FloatArray, FloatArray] | None:
    """(chosen, top) of `_read_common`'s values exactly as `_check_logprobs` and `_candidates` give
    them, for the usual payload only: every logprob <= the tolerance, every token with the same
    number (<= MAX_CANDIDATES) of candidates, sorted. None otherwise: the general checks then
    sort, pad, cut, or name the error.

    One max checks both parts (NaN propagates, so NaN and +inf fail `<=`); the clip to 0 is
    skipped when every value is below it (np.minimum would return them unchanged, -0.0 included
    only when clipped); sortedness is compared on the contiguous transpose (the (n, k) strided
    slices cost ~3x more)."""
    n = len(counts)
    k = counts[0] if n else 0
    if k > MAX_CANDIDATES or counts.count(k) != n:
        return None
    if values.size:
        peak = values.max()
        if not peak <= _POSITIVE_TOLERANCE:
            return None
        if peak >= 0.0:
            values = np.minimum(values, 0.0)
    top = values[n:].reshape(n, k)
    if k > 1:
        cols = top.T.copy()
        if not (cols[1:] <= cols[:-1]).all():
            return None
    return values[:n], top


def _read_general(content: Sequence[Any]) -> tuple[list[str], str, FloatArray, FloatArray, list[int]]:
    try:
        tokens = list(map(_TOKEN, content))
        text = "".join(tokens)  # TypeError unless every token is a string
        chosen = np.fromiter(map(_LOGPROB, content), dtype=np.float64, count=len(tokens))
        # A top_logprobs that is not a list of {token, logprob} (a dict, a string) fails in
        # _LOGPROB (TypeError), so no separate type check is spent on every entry.
        cand_lists = [e.get("top_logprobs") or () for e in content]
        counts = list(map(len, cand_lists))
        flat = np.fromiter(map(_LOGPROB, chain.from_iterable(cand_lists)), dtype=np.float64, count=sum(counts))
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise LogprobsFormatError(f"malformed token entry ({type(exc).__name__}: {exc})") from None
    return tokens, text, chosen, flat, counts


def _arrays(content: Sequence[Any]) -> tuple[list[str], str, FloatArray, FloatArray]:
    """(tokens, text, chosen, top) of the entries: the usual payload by the fast reading and
    checks, anything else (or a payload they decline) by the general ones."""
    read = _read_common(content) if type(content) is list else None
    if read is not None:
        tokens, text, values, counts = read
        checked = _checked_common(values, counts)
        if checked is not None:
            return tokens, text, *checked
        chosen, flat = values[: len(tokens)], values[len(tokens) :]
    else:
        tokens, text, chosen, flat, counts = _read_general(content)
    return tokens, text, _check_logprobs(chosen, "logprob"), _candidates(flat, counts)


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
    tokens, text, chosen, top = _arrays(content)
    # Token strings spell the text unless a character was split across tokens (the API then
    # shows partial bytes as "bytes:\\x.." or U+FFFD); only then rebuild from the raw bytes.
    offsets: IntArray | None = None  # from the token strings, when first needed
    if ("bytes:" in text or "\ufffd" in text) and content and all(isinstance(e.get("bytes"), list) for e in content):
        offsets, text = _offsets_from_bytes([e["bytes"] for e in content])
    return TokenLogprobs(tokens, chosen, top, offsets, text)


def from_legacy_completion(logprobs: Mapping[str, Any]) -> TokenLogprobs:
    """Legacy completions logprobs (tokens / token_logprobs / top_logprobs / text_offset)."""
    try:
        tokens = list(logprobs["tokens"])
        given_lp = logprobs["token_logprobs"]
        if not isinstance(given_lp, (list, tuple)):
            raise TypeError("token_logprobs must be a list")
        # None marks "no logprob" (the echoed prompt's first token); a NaN value is malformed.
        if any(isinstance(v, float) and math.isnan(v) for v in given_lp):
            raise InputError("token_logprobs holds NaN")
        chosen = np.fromiter((math.nan if v is None else v for v in given_lp), dtype=np.float64, count=len(given_lp))
        top_maps = logprobs.get("top_logprobs") or [None] * len(tokens)
        if not isinstance(top_maps, (list, tuple)):
            raise TypeError("top_logprobs must be a list of {token: logprob} maps")
        tops = [sorted((m or {}).values(), reverse=True) for m in top_maps]
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise LogprobsFormatError(f"malformed legacy logprobs ({type(exc).__name__}: {exc})") from None
    if not (len(tokens) == chosen.size == len(tops)):
        raise LogprobsFormatError("tokens, token_logprobs and top_logprobs differ in length")
    if not all(isinstance(t, str) for t in tokens):
        raise LogprobsFormatError("tokens must be strings")
    chosen = _check_logprobs(chosen, "token_logprobs")
    try:
        top = _pad(tops)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, LogprobsFormatError):
            raise
        raise LogprobsFormatError(f"malformed top_logprobs ({exc})") from None
    offsets, text = _offsets_from_strings(tokens)
    given = _text_offsets(logprobs.get("text_offset"), len(tokens))
    if given is not None and tokens:
        rel = given - given[0]
        # Use the API's offsets only if they describe the same text the tokens spell.
        if np.array_equal(rel, offsets[:-1]):
            offsets = np.append(rel, len(text))
    return TokenLogprobs(tokens, chosen, top, offsets, text)


def _text_offsets(given: Any, n: int) -> IntArray | None:
    """The legacy `text_offset` list as integers, None if absent; malformed unless n integers in [0, 2^53)."""
    if given is None:
        return None
    if not isinstance(given, (list, tuple)) or len(given) != n:
        raise LogprobsFormatError(f"text_offset must be a list of {n} integers (one per token)")
    if not all(type(v) is int and 0 <= v < _MAX_OFFSET for v in given):
        raise LogprobsFormatError("text_offset holds a value that is not an integer in [0, 2^53)")
    return np.fromiter(given, dtype=np.int64, count=n)


def parse_logprobs(logprobs: Any) -> TokenLogprobs:
    """Any supported format (or an already parsed TokenLogprobs); raises only LogprobsFormatError."""
    if isinstance(logprobs, TokenLogprobs):
        return logprobs
    try:
        if isinstance(logprobs, Mapping) and "token_logprobs" in logprobs:
            return from_legacy_completion(logprobs)
        if isinstance(logprobs, (Mapping, list, tuple)):
            return from_openai_chat(logprobs)
    except LogprobsFormatError:
        raise
    except Exception as exc:  # whatever a malformed payload trips on, it is a format error
        raise LogprobsFormatError(f"unreadable logprobs ({type(exc).__name__}: {exc})") from None
    raise LogprobsFormatError(f"unrecognised logprobs object of type {type(logprobs).__name__}")


class LogprobsStream:
    """Accumulates streamed chat chunks (each with one or a few entries) into one TokenLogprobs."""

    def __init__(self) -> None:
        self._entries: list[Any] = []
        self._malformed: str | None = None

    def add(self, chunk_logprobs: Mapping[str, Any] | Sequence[Any] | None) -> None:
        """Never raises: a chunk that is not a list of entries makes `result()` raise LogprobsFormatError."""
        if chunk_logprobs is None:
            return
        content = chunk_logprobs.get("content") if isinstance(chunk_logprobs, Mapping) else chunk_logprobs
        if content is None:
            return
        if isinstance(content, (list, tuple)):
            self._entries.extend(content)
        elif self._malformed is None:
            self._malformed = f"a streamed chunk's logprobs are a {type(content).__name__}, not a list of entries"

    def __len__(self) -> int:
        return len(self._entries)

    def result(self) -> TokenLogprobs:
        if self._malformed is not None:
            raise LogprobsFormatError(self._malformed)
        return parse_logprobs(self._entries)
