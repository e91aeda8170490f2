"""Token logprobs from the formats LLM APIs return (OpenAI chat, streamed chunks, legacy completions),
as flat numpy arrays, and the per-step signals computed from them. A malformed payload raises
LogprobsFormatError and nothing else: the caller counts it and keeps the step without token signals."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from tps_tracer.constants import DEFAULT_TOP_K
from tps_tracer.errors import InputError
from tps_tracer.scoring import BoolArray, FloatArray, IntArray

# Logprobs are <= 0; APIs sometimes round a near-certain token to a tiny positive value.
_POSITIVE_TOLERANCE = 1e-6
MAX_CANDIDATES = 20  # per token, the highest kept (the OpenAI API's maximum): no n x 10^6 arrays
_MAX_OFFSET = 1 << 53
_TOKEN = itemgetter("token")
_LOGPROB = itemgetter("logprob")


class LogprobsFormatError(InputError):
    """The logprobs object is not in a recognised format or holds invalid numbers."""


@dataclass(eq=False, slots=True)
class TokenLogprobs:
    """logprob (n,): chosen-token logprobs, NaN where the API gave none (legacy echo); top_logprobs
    (n, k): candidates, highest first, -inf padded; offsets (n + 1,): token starts in `text`, then
    len(text), from the token strings on first use when None (only an action span needs them)."""

    tokens: list[str]
    logprob: FloatArray
    top_logprobs: FloatArray
    _offsets: IntArray | None
    text: str

    @property
    def offsets(self) -> IntArray:
        if self._offsets is None:
            self._offsets = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, self.tokens), dtype=np.int64, count=self.n), out=self._offsets[1:])
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


def _positions(counts: list[int]) -> tuple[IntArray, IntArray, IntArray]:
    """(counts, token, rank within the token) of each flat candidate, counts[i] of them for token i."""
    cnt = np.asarray(counts, dtype=np.int64)
    return cnt, np.repeat(np.arange(cnt.size), cnt), np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)


def _candidates(flat: FloatArray, counts: list[int]) -> FloatArray:
    """Flat candidate logprobs (counts[i] for token i) as an (n, k) array, highest first, -inf padded."""
    if max(counts, default=0) > MAX_CANDIDATES:  # each token's highest MAX_CANDIDATES kept
        cnt, rows, rank = _positions(counts)
        checked = _check_logprobs(flat, "top_logprobs")
        flat = checked[np.lexsort((-checked, rows))][rank < MAX_CANDIDATES]  # by token, then highest first
        counts = np.minimum(cnt, MAX_CANDIDATES).tolist()
    n, k = len(counts), max(counts, default=0)
    if flat.size == n * k:
        arr = flat.reshape(n, k)
    else:
        arr = np.full((n, k), -np.inf)
        _, rows, cols = _positions(counts)
        arr[rows, cols] = flat
    arr = _check_logprobs(arr, "top_logprobs")
    if k > 1 and not (arr[:, 1:] <= arr[:, :-1]).all():  # APIs send them sorted; sort only if not
        arr = -np.sort(-arr, axis=1)
    return arr


def _read_common(content: list[Any]) -> tuple[list[str], str, FloatArray, list[int]] | None:
    """(tokens, text, values: the n chosen logprobs then the candidates', counts) of plain dict entries, by
    C-level maps only (no bytecode per token); None for anything else, which the general reading decides."""
    try:
        tokens = list(map(_TOKEN, content))
        text = "".join(tokens)
        cand_lists: list[Any] = list(map(dict.get, content, repeat("top_logprobs")))
        try:
            counts = list(map(len, cand_lists))
        except TypeError:  # a null top_logprobs: no candidates, as in the general reading
            cand_lists = [c or () for c in cand_lists]
            counts = list(map(len, cand_lists))
        # The numbers as float64, as np.fromiter converts them, faster; anything else raises. A bytearray
        # keeps the array writable, as every other parsed array is.
        n = len(tokens) + sum(counts)
        buf = bytearray(8 * n)
        struct.pack_into(
            f"{n}d", buf, 0, *chain(map(_LOGPROB, content), map(_LOGPROB, chain.from_iterable(cand_lists)))
        )
        values = np.frombuffer(buf, dtype=np.float64)
    except Exception:  # whatever it is, the general reading below names it
        return None
    return tokens, text, values, counts


def _checked_common(values: FloatArray, counts: list[int]) -> tuple[FloatArray, FloatArray] | None:
    """(chosen, top) exactly as `_check_logprobs` and `_candidates` give them, for the usual payload only (the
    same number of sorted candidates per token, one max checking all: NaN propagates); else None."""
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
        cols = top.T.copy()  # contiguous: the strided (n, k) slices cost ~3x more
        if not (cols[1:] <= cols[:-1]).all():
            return None
    return values[:n], top


def _read_general(content: Sequence[Any]) -> tuple[list[str], str, FloatArray, FloatArray, list[int]]:
    try:
        tokens = list(map(_TOKEN, content))
        text = "".join(tokens)  # TypeError unless every token is a string
        chosen = np.fromiter(map(_LOGPROB, content), dtype=np.float64, count=len(tokens))
        # A top_logprobs that is not a list of {token, logprob} fails in _LOGPROB (TypeError).
        cand_lists = [e.get("top_logprobs") or () for e in content]
        counts = list(map(len, cand_lists))
        flat = np.fromiter(map(_LOGPROB, chain.from_iterable(cand_lists)), dtype=np.float64, count=sum(counts))
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise LogprobsFormatError(f"malformed token entry ({type(exc).__name__}: {exc})") from None
    return tokens, text, chosen, flat, counts


def _arrays(content: Sequence[Any]) -> tuple[list[str], str, FloatArray, FloatArray]:
    """(tokens, text, chosen, top): the usual payload by the fast reading, anything else the general one."""
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
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else logprobs
    if content is None and isinstance(logprobs, Mapping):
        raise LogprobsFormatError("no 'content' list (the response carries no token logprobs)")
    if not isinstance(content, Sequence) or isinstance(content, (str, bytes)):
        raise LogprobsFormatError(f"'content' must be a list of token entries, got {type(content).__name__}")
    tokens, text, chosen, top = _arrays(content)
    # Token strings spell the text unless a character was split across tokens (shown as "bytes:\\x.."
    # or U+FFFD): only then are text and offsets rebuilt from the UTF-8 bytes.
    split = ("bytes:" in text or "\ufffd" in text) and content
    if not (split and all(isinstance(e.get("bytes"), list) for e in content)):
        return TokenLogprobs(tokens, chosen, top, None, text)
    chunks = [e["bytes"] for e in content]
    try:
        raw = b"".join(map(bytes, chunks))
    except (TypeError, ValueError, OverflowError) as exc:  # bytes([256]), bytes(["a"]), bytes([-1])
        raise LogprobsFormatError(f"malformed 'bytes' ({type(exc).__name__}: {exc})") from None
    text = raw.decode("utf-8", errors="replace")
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in chunks], out=offsets[1:])
    if len(raw) != len(text):  # not ASCII: byte offsets as character offsets
        # A byte starts a character unless it is a UTF-8 continuation byte (10xxxxxx); the
        # character index of byte offset o is the number of character starts before o.
        buf = np.frombuffer(raw, dtype=np.uint8)
        offsets = np.concatenate(([0], np.cumsum((buf & 0xC0) != 0x80)))[offsets].astype(np.int64)
    return TokenLogprobs(tokens, chosen, top, offsets, text)


def from_legacy_completion(logprobs: Mapping[str, Any]) -> TokenLogprobs:
    """Legacy completions logprobs (tokens / token_logprobs / top_logprobs / text_offset)."""
    try:
        tokens = list(logprobs["tokens"])
        given_lp = logprobs["token_logprobs"]
        if not isinstance(given_lp, (list, tuple)):
            raise TypeError("token_logprobs must be a list")
        # None marks "no logprob" (the echoed prompt's first token); NaN is malformed.
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
        flat = np.array([v for r in tops for v in r], dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LogprobsFormatError(f"malformed top_logprobs ({exc})") from None
    top = _candidates(flat, list(map(len, tops)))
    # text_offset is only checked: offsets that spell the text equal the token strings' (built on first use).
    given, n = logprobs.get("text_offset"), len(tokens)
    if given is not None:
        if not isinstance(given, (list, tuple)) or len(given) != n:
            raise LogprobsFormatError(f"text_offset must be a list of {n} integers (one per token)")
        if not all(type(v) is int and 0 <= v < _MAX_OFFSET for v in given):
            raise LogprobsFormatError("text_offset holds a value that is not an integer in [0, 2^53)")
    return TokenLogprobs(tokens, chosen, top, None, "".join(tokens))


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


@dataclass(eq=False)
class LogprobsStream:
    """Accumulates streamed chat chunks (each with one or a few entries) into one TokenLogprobs."""

    _entries: list[Any] = field(default_factory=list)
    _malformed: str | None = None

    def add(self, chunk_logprobs: Mapping[str, Any] | Sequence[Any] | None) -> None:
        """Never raises: a chunk that is not a list of entries makes `result()` raise LogprobsFormatError."""
        content = chunk_logprobs.get("content") if isinstance(chunk_logprobs, Mapping) else chunk_logprobs
        if isinstance(content, (list, tuple)):
            self._entries.extend(content)
        elif content is not None and self._malformed is None:
            self._malformed = f"a streamed chunk's logprobs are a {type(content).__name__}, not a list of entries"

    def __len__(self) -> int:
        return len(self._entries)

    def result(self) -> TokenLogprobs:
        if self._malformed is not None:
            raise LogprobsFormatError(self._malformed)
        return parse_logprobs(self._entries)


# ---------------------------------------------------------------- token signals
# The paper's token probability and entropy confidence over a token mask (formulas: docs/capture.md, "Signals").


def per_token_entropy_confidence(lp: TokenLogprobs, k: int = DEFAULT_TOP_K) -> FloatArray:
    """1 - H_i / ln k per token over its top-k candidates (renormalised); NaN where it has none."""
    if k < 2:
        raise InputError("entropy confidence needs k >= 2 candidates")
    return _entropy_confidence(lp.top_logprobs[:, :k], k)


# numpy sums fewer than 8 values left to right, as adding columns does: up to this width rows with no
# padding are processed as contiguous columns, the same bits in ~1/3 of the time (test_extraction_equivalence.py).
_COLUMNS_MAX_WIDTH = 7


def _entropy_confidence(top: FloatArray, k: int) -> FloatArray:
    if top.shape[1] == 0:
        return np.full(top.shape[0], np.nan)
    if top.size and top.shape[1] <= _COLUMNS_MAX_WIDTH and top[:, -1].min() > -np.inf:
        # No padding: the row max is the first column, every total >= 1, an underflowed q adds 0.
        cols = np.ascontiguousarray(top.T)
        p = np.exp(cols - cols[0])
        q = p / p.sum(axis=0)
        log_q = np.log(q) if q.size and q.min() > 0 else np.log(q, out=np.zeros_like(q), where=q > 0)
        return np.minimum(np.maximum(1.0 + (q * log_q).sum(axis=0) / math.log(k), 0.0), 1.0)
    has = np.isfinite(top[:, 0])
    # Shift by each row's max before exponentiating (stable for very negative logprobs).
    shifted = top - np.where(has, top[:, 0], 0.0)[:, None]
    p = np.exp(shifted)  # -inf padding -> 0
    total = p.sum(axis=1)
    q = p / np.where(total > 0, total, 1.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(q), 0.0)
    conf = 1.0 + terms.sum(axis=1) / math.log(k)
    return np.where(has, np.clip(conf, 0.0, 1.0), np.nan)


def batched_per_token(
    parsed: Sequence[TokenLogprobs | None], k: int = DEFAULT_TOP_K
) -> dict[int, tuple[FloatArray, FloatArray]]:
    """{index: (per-token probability, entropy confidence)} of the steps with full candidate rows of
    the most common width, in one pass over their concatenation: the operations are elementwise or
    row-wise, so each element gets the bits its step alone gives. Other steps are left out."""
    if k < 2:
        raise InputError("entropy confidence needs k >= 2 candidates")
    full: dict[int, list[int]] = {}
    for i, lp in enumerate(parsed):
        if lp is None or lp.n == 0:
            continue
        top = lp.top_logprobs
        width = min(top.shape[1], k)
        if width and top[:, width - 1].min() > -np.inf:
            full.setdefault(width, []).append(i)
    if not full:
        return {}
    width, group = max(full.items(), key=lambda item: len(item[1]))
    if len(group) < 2:
        return {}
    steps = [parsed[i] for i in group]
    prob = np.exp(np.concatenate([lp.logprob for lp in steps]))  # type: ignore[union-attr]
    ent = _entropy_confidence(np.concatenate([lp.top_logprobs[:, :width] for lp in steps]), k)  # type: ignore[union-attr]
    cuts = np.cumsum([lp.n for lp in steps[:-1]])  # type: ignore[union-attr]
    return dict(zip(group, zip(np.split(prob, cuts), np.split(ent, cuts), strict=True), strict=True))


def masked_mean(values: FloatArray, mask: BoolArray | None = None) -> float | None:
    """Mean over the masked tokens that have a value; None if there are none."""
    sel = values if mask is None else values[mask]
    if sel.size:  # a finite sum means no NaN: the mean is that sum over the count, as np.mean computes it
        total = float(sel.sum())
        if math.isfinite(total):
            return min(1.0, max(0.0, total / sel.size))
    sel = sel[~np.isnan(sel)]
    return float(min(1.0, max(0.0, sel.mean()))) if sel.size else None


def token_mask(lp: TokenLogprobs, span: tuple[int, int]) -> BoolArray:
    """Tokens overlapping the character span [start, end): an action split across tokens is covered whole."""
    start, end = span
    return (lp.offsets[:-1] < end) & (lp.offsets[1:] > start)


def token_forecasts(
    lp: TokenLogprobs, k: int, arrays: tuple[FloatArray, FloatArray] | None, span: tuple[int, int] | None
) -> tuple[float | None, float | None, float | None, float | None]:
    """Token probability and entropy confidence over all tokens, then over the action span's tokens
    (None without a span); `arrays`: the per-token values already computed for a batch."""
    prob, ent = arrays or (np.exp(lp.logprob), per_token_entropy_confidence(lp, k))
    if span is None:
        return masked_mean(prob), masked_mean(ent), None, None
    mask = token_mask(lp, span)
    return masked_mean(prob), masked_mean(ent), masked_mean(prob, mask), masked_mean(ent, mask)
