"""The JSON Lines chunk readers (records/jsonl_fast.py: orjson; pyarrow, at the end) against the exact path.

The contract: on any chunk the fast reader either returns exactly the arrays of the exact path
(`parse_lines` -> `to_arrays`) or refuses with NotFast; the chunk reader then gives the exact
path's arrays, or a whole-file NotFast where the exact path has an error to report. Never a different
result, never another exception. Each case below also pins whether the fast reader takes it (a
plain file must not silently drop to the slow path).

`TPS_FUZZ_SCALE=20 .venv/bin/python -m pytest -q tests/test_jsonl_fast.py` for a longer campaign.
"""

from __future__ import annotations

import gc
import io
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scale_support import assert_reports_equal, trajectory_dicts

import tps_tracer.records.jsonl_fast as jsonl_fast
from tps_tracer.evaluation.chunked import read_arrays, report_from_path
from tps_tracer.evaluation.report_options import ReportOptions
from tps_tracer.records import TrajectoryArrays, TrajectoryFileError, parse_lines, read_trajectories, to_arrays
from tps_tracer.records.arrays import validated_arrays
from tps_tracer.records.errors import NotFast
from tps_tracer.records.jsonl_fast import BATCH_LINES, MIN_BYTES, arrays_from_jsonl, raw_from_jsonl_arrow
from tps_tracer.records.reading import iter_chunks, read_jsonl_chunk
from tps_tracer.scoring import parse_rules, parse_schedules

SCALE = float(os.environ.get("TPS_FUZZ_SCALE", "1"))


def assert_same_arrays(a: TrajectoryArrays, b: TrajectoryArrays) -> None:
    """Equal to the bit (NaN = NaN, -0.0 != 0.0), predictors in the same order, same skip counts."""
    assert a.ids == b.ids
    for name in ("offsets", "horizon", "stop_code", "outcome", "q_z"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes() or (np.array_equal(x, y, equal_nan=True) and _same_signs(x, y)), name
    assert list(a.predictors) == list(b.predictors)
    for name, col in a.predictors.items():
        other = b.predictors[name]
        assert np.array_equal(col.values, other.values, equal_nan=True) and _same_signs(col.values, other.values)
        np.testing.assert_array_equal(col.usable, other.usable, err_msg=name)
        assert col.skipped == other.skipped, name
    assert a.outcome_on_unscored == b.outcome_on_unscored


def _same_signs(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.array_equal(np.signbit(x), np.signbit(y)))


def exact(chunk: bytes) -> TrajectoryArrays | None:
    """The exact path's arrays for a chunk, or None when it reports an error."""
    try:
        # strict, as the chunk reader's exact path: a repeated id needs the whole-file read
        return to_arrays(parse_lines(io.TextIOWrapper(io.BytesIO(chunk), encoding="utf-8"), "<chunk>", strict=True))
    except (TrajectoryFileError, UnicodeDecodeError):
        return None


def fast(chunk: bytes) -> TrajectoryArrays | None:
    try:
        return arrays_from_jsonl(chunk)
    except NotFast:
        return None


def check_chunk(chunk: bytes) -> bool:
    """The contract above for one chunk; returns whether the fast reader took it."""
    expected = exact(chunk)
    got = fast(chunk)
    if got is not None and len(set(got.ids)) < got.n:
        # Duplicate ids are checked over the whole input by the caller (evaluation/chunked.py), which
        # then reads the file the exact way for the message: tested in test_partial_state.py.
        assert expected is None
        return True
    if got is not None:
        assert expected is not None, "the fast reader accepted what the exact path rejects"
        assert_same_arrays(got, expected)
    try:
        arrays, was_fast = read_jsonl_chunk(chunk, "<chunk>")
    except NotFast as exc:
        assert exc.whole_file
        assert expected is None or b'"resolves"' in chunk  # an error to report, or resolution lines
        return False
    assert expected is not None and was_fast == (got is not None)
    assert_same_arrays(arrays, expected)
    return got is not None


def rec(tid: str = "a", **fields: object) -> dict[str, object]:
    out: dict[str, object] = {"trajectory_id": tid, "stop_reason": "clean", "outcome": 1}
    out.update(fields)
    return out


def raw(fields: bytes) -> bytes:
    """A clean record of id "a" with outcome 1 and these raw JSON fields, as one line."""
    return b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, ' + fields + b"}\n"


def lines(*records: object) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()


STEPS = [{"t": 1, "forecasts": {"p": 0.25, "q": 0.5}}, {"forecasts": {"p": 0.75}}]
OK = rec("ok", steps=STEPS, horizon=4)

# (name, chunk, taken by the fast reader)
CASES = [
    ("plain", lines(OK, rec("b", steps=STEPS)), True),
    ("crlf", lines(OK, rec("b")).replace(b"\n", b"\r\n"), True),
    ("blank lines", b"\n  \t\n" + lines(OK) + b"\r\n\n" + lines(rec("b")) + b"   ", True),
    ("last line without newline", lines(OK) + json.dumps(rec("b")).encode(), True),
    ("truncated last line", lines(OK) + json.dumps(rec("b", steps=STEPS)).encode()[:-9], False),
    ("true/false outcomes", lines(rec("a", outcome=True), rec("b", outcome=False)), True),
    ("outcomes 1.0, 0.0 and -0.0", lines(rec("a", outcome=1.0), rec("b", outcome=0.0), rec("c", outcome=-0.0)), True),
    (
        "mixed int, float forecasts",
        lines(rec(steps=[{"forecasts": {"p": 0}}, {"forecasts": {"p": 1}}, {"forecasts": {"p": 0.5}}])),
        True,
    ),
    (
        "null and absent forecasts",
        lines(rec(steps=[{"forecasts": {"p": None, "q": 0.1}}, {"forecasts": {"q": 0.2}}, {}])),
        True,
    ),
    (
        "nulls where the schema takes one",
        lines(rec(stop_reason="max_steps", outcome=None, q_z=None, horizon=None, steps=[{"t": None}])),
        True,
    ),
    ("pending outcome", lines(rec(outcome=None, outcome_pending=True), rec("b", outcome_pending=False)), True),
    ("outcome on a censored run (ignored, counted)", lines(rec(stop_reason="max_steps", outcome=1)), True),
    ("-0.0 forecast and q_z", lines(rec(stop_reason="timeout", q_z=-0.0, steps=[{"forecasts": {"p": -0.0}}])), True),
    # Duplicate keys are refused by the one JSON rule (records/limits.py), never read as the last one.
    (
        "duplicate keys: refused",
        b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 0, "outcome": 1}\n',
        False,
    ),
    (
        "duplicate forecast keys: refused",
        raw(b'"steps": [{"forecasts": {"b": 0.1, "a": 0.2, "b": 0.3}}]'),
        False,
    ),
    ("an escaped duplicate key: refused", raw(b'"metadata": {"a": 1, "\\u0061": 2}'), False),
    ("a key text inside a string is not a key", raw(b'"metadata": {"a": "x\\": y", "b": 1}'), True),
    ("spaces before a colon", raw(b'"metadata": {"a" : 1, "b":2}'), True),
    ("a duplicate key with spaces before its colon: refused", raw(b'"metadata": {"a" : 1, "a":2}'), False),
    ("an escaped colon: the exact path decides", raw(b'"metadata": {"a": "\\u0022\\u003a"}'), False),
    ("control characters escaped as json.dumps writes them", lines(rec("\x07\x1f")), True),
    (
        "unicode ids",
        lines(rec("r\u00e9sum\u00e9"), rec("\U0001f600"), rec("\u4e2d"))
        + b'{"trajectory_id": "\\ud83d\\ude00x", "stop_reason": "clean", "outcome": 1}\n',
        True,
    ),
    ("raw UTF-8 ids", json.dumps(rec("caf\u00e9 \U0001f600"), ensure_ascii=False).encode() + b"\n", True),
    (
        "predictor order across records",
        lines(rec("a", steps=[{"forecasts": {"z": 0.1}}]), rec("b", steps=[{"forecasts": {"a": 0.1, "z": 0.2}}])),
        True,
    ),
    (
        "unknown fields kept aside",
        lines(rec(extra={"x": [1, {"y": None}]}, steps=[{"text": "hi", "forecasts": {}}])),
        True,
    ),
    # Beyond MAX_HORIZON (10^7): refused by the fast reader, rejected by the exact path (one line, exit 2).
    ("a 64-bit horizon", lines(rec(horizon=2**63)), False),
    ("a huge integer in metadata (orjson: float)", raw(b'"metadata": {"n": 123456789012345678901234567890}'), True),
    # Refused by the fast reader; the exact path decides (same arrays, or the error).
    (
        "lone surrogate id (pydantic refuses it too)",
        b'{"trajectory_id": "\\ud800", "stop_reason": "clean", "outcome": 1}\n',
        False,
    ),
    ("lone low surrogate in metadata", raw(b'"metadata": {"k": "\\udc00"}'), False),
    ("NaN in metadata (json.loads reads it)", raw(b'"metadata": {"x": NaN}'), False),
    ("NaN forecast", raw(b'"steps": [{"forecasts": {"p": NaN}}]'), False),
    ("Infinity q_z", b'{"trajectory_id": "a", "stop_reason": "max_steps", "q_z": Infinity}\n', False),
    ("-Infinity forecast", raw(b'"steps": [{"forecasts": {"p": -Infinity}}]'), False),
    ("1e400 forecast", raw(b'"steps": [{"forecasts": {"p": 1e400}}]'), False),
    ("horizon beyond 64 bits", raw(b'"horizon": 18446744073709551616'), False),
    (
        "outcome beyond 64 bits",
        b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 18446744073709551617}\n',
        False,
    ),
    ("float horizon (pydantic's lax int)", lines(rec(horizon=3.0)), False),
    ("float step number", lines(rec(steps=[{"t": 1.0}])), False),
    (
        "bool horizon / t / q_z (lax)",
        lines(rec(stop_reason="max_steps", horizon=True, q_z=False, steps=[{"t": True}])),
        False,
    ),
    (
        "bool forecast: non_numeric skip",
        lines(rec(steps=[{"forecasts": {"p": True}}]), rec("b", steps=[{"forecasts": {"p": 0.5}}])),
        False,
    ),
    ("string forecast: non_numeric skip", lines(rec(steps=[{"forecasts": {"p": "high"}}])), False),
    ("list forecast: non_numeric skip", lines(rec(steps=[{"forecasts": {"p": [0.5]}}])), False),
    ("non-object line", lines(OK, [1, 2]), False),
    ("a string line", lines(OK, '"text"'), False),
    ("steps not a list", lines(rec(steps={"t": 1})), False),
    ("a step not an object", lines(rec(steps=[0.5])), False),
    ("steps null", lines(rec(steps=None)), False),
    ("forecasts not an object", lines(rec(steps=[{"forecasts": [0.5]}])), False),
    ("forecasts null", lines(rec(steps=[{"forecasts": None}])), False),
    ("metadata null", lines(rec(metadata=None)), False),
    ("metadata a string", lines(rec(metadata="x")), False),
    ("outcome_pending null", lines(rec(outcome_pending=None)), False),
    ("outcome_pending 1 (lax bool)", lines(rec(outcome=None, outcome_pending=1)), False),
    ("outcome a string", lines(rec(outcome="1")), False),
    ("outcome 2", lines(rec(outcome=2)), False),
    ("outcome 0.5", lines(rec(outcome=0.5)), False),
    ("clean without outcome", lines(rec(outcome=None)), False),
    ("pending with an outcome", lines(rec(outcome=1, outcome_pending=True)), False),
    ("empty id", lines(rec("")), False),
    ("id a number", lines(rec(7)), False),  # type: ignore[arg-type]
    ("missing id", b'{"stop_reason": "clean", "outcome": 1}\n', False),
    ("unknown stop reason", lines(rec(stop_reason="Clean")), False),
    ("horizon below the steps", lines(rec(horizon=1, steps=STEPS)), False),
    ("horizon 0", lines(rec(horizon=0)), False),
    ("steps out of order", lines(rec(steps=[{"t": 2}])), False),
    ("forecast outside [0, 1]", lines(rec(steps=[{"forecasts": {"p": 1.5}}])), False),
    ("q_z outside [0, 1]", lines(rec(stop_reason="max_steps", q_z=-0.1)), False),
    ("duplicate ids (checked over the whole input)", lines(OK, OK), True),
    (
        "a lone carriage return splits the line (text mode)",
        b'{"trajectory_id": "a",\r "stop_reason": "clean", "outcome": 1}\n',
        False,
    ),
    ("a lone carriage return between records", lines(rec("a")).rstrip(b"\n") + b"\r" + lines(rec("b")), True),
    ("form feed around a record (str.strip takes it)", b"\x0c" + lines(OK), False),
    ("a no-break-space line (str.strip: blank)", lines(OK) + "\u00a0\n".encode() + lines(rec("b")), False),
    ("a BOM inside the chunk", lines(OK) + b"\xef\xbb\xbf" + lines(rec("b")), False),
    ("control character in a string", b'{"trajectory_id": "a\x01", "stop_reason": "clean", "outcome": 1}\n', False),
    ("invalid UTF-8 in an id", b'{"trajectory_id": "a\xff", "stop_reason": "clean", "outcome": 1}\n', False),
    ("UTF-8-encoded surrogate", b'{"trajectory_id": "a\xed\xa0\x80", "stop_reason": "clean", "outcome": 1}\n', False),
    (
        "escaped resolves key",
        b'{"resol\\u0076es": "a", "outcome": 1}\n' + lines(rec("a", outcome=None, outcome_pending=True)),
        False,
    ),
    ("trailing comma", b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1,}\n', False),
    ("two records on a line", lines(OK).rstrip(b"\n") + lines(rec("b")), False),
    (
        "deep nesting in metadata",
        b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "metadata": {"x": '
        + b"[" * 1100
        + b"]" * 1100
        + b"}}\n",
        False,
    ),
]


@pytest.fixture(params=["whole lines", "steps in pieces"])
def split(request, monkeypatch):
    """Every case twice: lines parsed whole, and every line's steps parsed one element at a time
    (the long-line reader, `_long_line`, made to take every line it can)."""
    if request.param == "steps in pieces":
        monkeypatch.setattr(jsonl_fast, "LONG_LINE", 0)
        monkeypatch.setattr(jsonl_fast, "PIECE_BYTES", 0)
    return request.param


@pytest.mark.parametrize("chunk, taken", [(c, t) for _, c, t in CASES], ids=[name for name, _, _ in CASES])
def test_fast_reader_equals_the_exact_path_or_refuses(chunk, taken, split):
    assert check_chunk(chunk) == taken


A = '{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, '
S = '{"t": 1, "forecasts": {"p": 0.5}}'
LONG_LINE_CASES = [
    (
        "plain",
        A + '"steps": [' + ", ".join([S, S.replace("1", "2", 1), S.replace("1", "3", 1)]) + '], "horizon": 5}',
    ),
    ("compact", json.dumps(rec(steps=[{"forecasts": {"p": 0.1}}] * 4), separators=(",", ":"))),
    (
        "steps first",
        '{"steps": [{"forecasts": {"q": 0.1}}, {"forecasts": {"p": 0.2, "q": 0.3}}], '
        '"trajectory_id": "a", "stop_reason": "clean", "outcome": 0}',
    ),
    (
        "a cut inside a string",
        A + '"steps": [{"text": "}, {", "forecasts": {"p": 0.5}}, {"text": "x},{y"}]}',
    ),
    (
        "a cut inside a nested array",
        A + '"steps": [{"calls": [{"a": 1}, {"b": 2}], "forecasts": {"p": 0.5}}, {"calls": [{},{}]}]}',
    ),
    (
        "steps in metadata first",
        '{"metadata": {"steps": [{"a": 1}, {"b": 2}]}, '
        '"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps": [{}, {}]}',
    ),
    (
        "steps in metadata only",
        A + '"metadata": {"steps": [{"a": 1}, {"b": 2}]}}',
    ),
    (
        "a later escaped duplicate key wins",
        A + '"steps": [{}, {}], "st\\u0065ps": [{}]}',
    ),
    (
        "an earlier escaped duplicate key loses",
        A + '"st\\u0065ps": [{}], "steps": [{}, {}, {}]}',
    ),
    (
        "a key ending in steps",
        A + '"x\\"steps": [{}, {}], "steps": [{}]}',
    ),
    (
        "steps as a string value",
        A + '"note": "steps", "steps": [{}, {}]}',
    ),
    ("trailing comma after a cut", A + '"steps": [{}, {},]}'),
    ("steps not a list", A + '"steps": {"a": {}, "b": {}}}'),
    ("a step not an object", A + '"steps": [{}, {}, 3]}'),
    (
        "steps out of order across pieces",
        A + '"steps": [{"t": 1}, {"t": 3}, {"t": 3}]}',
    ),
    ("a resolution line", '{"resolves": "a", "outcome": 1, "steps": [{}, {}]}'),
    ("a cut record", A + '"steps": [{}, {}, {'),
]


@pytest.mark.parametrize("line", [c for _, c in LONG_LINE_CASES], ids=[n for n, _ in LONG_LINE_CASES])
def test_long_lines_in_pieces_equal_the_exact_path_or_refuse(line, split):
    check_chunk((line + "\n").encode())
    check_chunk(lines(OK) + (line + "\n").encode() + lines(rec("z")))


def test_a_long_trajectory_is_read_in_pieces(monkeypatch):
    """Not a silent fallback: the long-line reader takes a plain long line, in several pieces."""
    steps = [
        {"t": i + 1, "forecasts": {"p": round(i / 5000, 6), **({"q": 0.5} if i > 3000 else {})}} for i in range(5000)
    ]
    line = json.dumps(rec("long", steps=steps, horizon=6000)).encode()
    monkeypatch.setattr(jsonl_fast, "LONG_LINE", 1000)
    monkeypatch.setattr(jsonl_fast, "PIECE_BYTES", 20_000)
    calls = []
    flatten = jsonl_fast.flatten
    monkeypatch.setattr(jsonl_fast, "flatten", lambda recs: calls.append(len(recs)) or flatten(recs))
    assert check_chunk(lines(OK) + line + b"\n" + lines(rec("z")))
    assert len(calls) > 10  # the pieces, the record around the last one, and the short lines' batches
    arrays = arrays_from_jsonl(line + b"\n")
    assert list(arrays.predictors) == ["p", "q"] and arrays.offsets.tolist() == [0, 5000]


def test_the_refused_cases_really_differ_or_fail():
    """Each refused case is one the exact path rejects, reads differently, or reads through lax types: the
    list is not padded with cases the fast reader could take."""
    accepted_by_exact = [name for name, chunk, taken in CASES if not taken and exact(chunk) is not None]
    assert accepted_by_exact == [
        "an escaped colon: the exact path decides",  # duplicate keys cannot be ruled out by counting
        "lone low surrogate in metadata",
        "NaN in metadata (json.loads reads it)",
        "float horizon (pydantic's lax int)",
        "float step number",
        "bool horizon / t / q_z (lax)",
        "bool forecast: non_numeric skip",
        "string forecast: non_numeric skip",
        "list forecast: non_numeric skip",
        "outcome_pending 1 (lax bool)",
        "form feed around a record (str.strip takes it)",
        "a no-break-space line (str.strip: blank)",
        "escaped resolves key",
    ]


def test_values_match_an_independent_reading():
    """The fast reader's columns against a hand-written reading of the records (not via to_arrays)."""
    recs = [
        rec("a", outcome=True, horizon=5, steps=[{"t": 1, "forecasts": {"p": 0.2, "q": 1}}, {"forecasts": {"p": 0}}]),
        rec("b", stop_reason="max_steps", outcome=None, q_z=0.375, steps=[{"forecasts": {"q": 0.5}}]),
        rec("c", stop_reason="parse_error", outcome=0),
        rec("d", outcome=None, outcome_pending=True, steps=[{"forecasts": {"p": None}}]),
    ]
    got = arrays_from_jsonl(lines(*recs))
    assert got.ids == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(got.offsets, [0, 2, 3, 3, 4])
    np.testing.assert_array_equal(got.horizon, [5.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(got.outcome, [1.0, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(got.q_z, [np.nan, 0.375, np.nan, np.nan])
    assert got.outcome_on_unscored == 1  # c's outcome on a parse_error stop
    assert list(got.predictors) == ["p", "q"]
    p, q = got.predictors["p"], got.predictors["q"]
    np.testing.assert_array_equal(p.values, [0.2, 0.0, np.nan, np.nan])
    np.testing.assert_array_equal(q.values, [1.0, np.nan, 0.5, np.nan])
    np.testing.assert_array_equal(p.usable, [True, False, False, False])
    np.testing.assert_array_equal(q.usable, [False, True, False, False])
    assert p.skipped == {"missing": 2, "no_steps": 1} and q.skipped == {"missing": 2, "no_steps": 1}


def test_many_batches_give_one_chunk_with_first_seen_predictors():
    """A chunk longer than one parse batch: predictors first seen in a later batch, t only in some."""
    recs = trajectory_dicts(2 * BATCH_LINES + 300, seed=21, predictors=("verbal",))
    for r in recs[BATCH_LINES + 10 :]:
        for s in r["steps"]:
            s["forecasts"]["late"] = 0.5
    for r in recs[: BATCH_LINES + 5]:
        for s in r["steps"]:
            s.pop("t", None)
    assert check_chunk(lines(*recs))
    assert list(arrays_from_jsonl(lines(*recs)).predictors) == ["verbal", "late"]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_restored_after_each_batch(enabled):
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        arrays_from_jsonl(lines(OK))
        assert gc.isenabled() == enabled
        with pytest.raises(NotFast):
            arrays_from_jsonl(lines(OK, [1]))
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()


def test_a_file_with_bom_crlf_and_a_last_line_without_newline(tmp_path):
    path = tmp_path / "runs.jsonl"
    text = "\r\n".join(json.dumps(r) for r in trajectory_dicts(400, seed=22))
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    chunks = list(iter_chunks(path, chunk_bytes=7_000))
    assert len(chunks) > 3 and all(c.fast for c in chunks)
    assert_same_arrays(read_arrays(path, chunk_bytes=7_000), to_arrays(read_trajectories(path)))


def test_deep_nesting_is_a_line_error_not_a_crash(tmp_path):
    """json.loads raises RecursionError on ~1000 nested arrays; the exact path must report the line."""
    path = tmp_path / "deep.jsonl"
    path.write_bytes(lines(OK) + b'{"trajectory_id": "b", "metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}\n")
    with pytest.raises(TrajectoryFileError) as exc:
        read_trajectories(path)
    assert exc.value.errors[0].line == 2 and "nested more than 253" in exc.value.errors[0].message


# -- fuzz ----------------------------------------------------------------------------------------

_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_NUMBERISH = st.one_of(
    st.floats(0, 1),
    st.sampled_from(
        [0, 1, 0.0, 1.0, -0.0, True, False, None, 2, -1, 1.5, 2**64, 2**63, "0.5", float("nan"), float("inf")]
    ),
    st.integers(-(2**70), 2**70),
    st.floats(),
)
_FORECASTS = st.dictionaries(st.sampled_from(["p", "q", "r\u00e9", "p"]), _NUMBERISH, max_size=3)
_STEP = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"t": st.one_of(st.none(), st.integers(0, 4), st.just(1.0)), "forecasts": _FORECASTS}
    ),
    st.fixed_dictionaries({"forecasts": st.one_of(st.none(), st.lists(st.floats(0, 1), max_size=1))}),
    _ANY_JSON,
)
_ID = st.one_of(
    st.text(min_size=0, max_size=6),
    st.sampled_from(["a", "b", "a"]),
    st.integers(),
    st.just("\ud800x"),
    st.just("\udfff"),
)
_RECORD = st.fixed_dictionaries(
    {"trajectory_id": _ID},
    optional={
        "stop_reason": st.sampled_from(["clean", "max_steps", "parse_error", "timeout", "other", "CLEAN", 3]),
        "outcome": _NUMBERISH,
        "outcome_pending": st.sampled_from([True, False, None, 1, "true"]),
        "horizon": st.one_of(st.none(), st.integers(-1, 12), st.sampled_from([3.0, True, 2**64, 2**63])),
        "q_z": _NUMBERISH,
        "steps": st.one_of(st.lists(_STEP, max_size=4), st.none(), _ANY_JSON),
        "metadata": st.one_of(st.dictionaries(st.text(max_size=3), _ANY_JSON, max_size=2), st.none(), _ANY_JSON),
        "extra": _ANY_JSON,
        "model_config": _ANY_JSON,
    },
)


def _line(record: dict[str, object], how: int) -> str:
    text = json.dumps(record, ensure_ascii=bool(how & 1))  # NaN / Infinity literals as json.dumps writes them
    if how & 2:
        text = text.replace(", ", ",\t ").replace(": ", " :")
    return text


_MUTATIONS = st.sampled_from(["", "crlf", "blank", "cut", "cr", "ff", "dupkey", "nonobject", "bigint", "bom", "ws"])


def _mutate(text: str, how: str, draw_pos: int) -> str:
    if how == "crlf":
        return text.replace("\n", "\r\n")
    if how == "blank":
        return text[:draw_pos] + "\n \t\n" + text[draw_pos:] if text[draw_pos - 1 : draw_pos] == "\n" else text + "\n\n"
    if how == "cut":
        return text[: max(1, draw_pos)]
    if how == "cr":
        return text[:draw_pos] + "\r" + text[draw_pos:]
    if how == "ff":
        return "\x0c" + text
    if how == "dupkey":
        return text.replace('"outcome": ', '"outcome": 0, "outcome": ', 1)
    if how == "nonobject":
        return text + "[1]\n"
    if how == "bigint":
        return text.replace('"horizon": ', '"horizon": 1' + "0" * 25 + ', "was": ', 1)
    if how == "bom":
        return text[:draw_pos] + "\ufeff" + text[draw_pos:]
    if how == "ws":
        return text.replace("\n", " \u00a0\n", 1)
    return text


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_RECORD, min_size=1, max_size=6),
    how=st.integers(0, 3),
    mutation=_MUTATIONS,
    pos=st.integers(0, 2000),
    last_newline=st.booleans(),
    views=st.booleans(),
    pieces=st.booleans(),
)
def test_fuzz_fast_reader_equals_exact_or_falls_back(records, how, mutation, pos, last_newline, views, pieces):
    text = "\n".join(_line(r, how) for r in records) + ("\n" if last_newline else "")
    text = _mutate(text, mutation, min(pos, len(text)))
    saved = jsonl_fast._FEW_LINES, jsonl_fast.LONG_LINE, jsonl_fast.PIECE_BYTES
    jsonl_fast._FEW_LINES = saved[0] if views else 0  # lines as views into the chunk, or as copies
    if pieces:  # every line's steps one element at a time (the long-line reader)
        jsonl_fast.LONG_LINE = jsonl_fast.PIECE_BYTES = 0
    try:
        check_chunk(text.encode("utf-8", "surrogatepass"))
    finally:
        jsonl_fast._FEW_LINES, jsonl_fast.LONG_LINE, jsonl_fast.PIECE_BYTES = saved


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.fixed_dictionaries(
            {
                "trajectory_id": st.text(min_size=1, max_size=4),
                "stop_reason": st.sampled_from(["clean", "max_steps", "timeout"]),
                "outcome": st.sampled_from([0, 1, True, False, 1.0]),
                "steps": st.lists(
                    st.fixed_dictionaries(
                        {
                            "forecasts": st.dictionaries(
                                st.sampled_from("pqr"),
                                st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0, 1])),
                                max_size=3,
                            )
                        }
                    ),
                    max_size=4,
                ),
            },
            optional={"q_z": st.one_of(st.none(), st.floats(0, 1)), "horizon": st.integers(4, 9)},
        ),
        min_size=1,
        max_size=8,
        unique_by=lambda r: r["trajectory_id"],
    )
)
def test_fuzz_valid_records_take_the_fast_path(records):
    """Valid plain records (any float, repr round trip): the fast reader must take them, with the exact arrays."""
    assert check_chunk("".join(json.dumps(r) + "\n" for r in records).encode("utf-8", "surrogatepass"))


# -- pyarrow's JSON reader (chunks of MIN_BYTES and more) ---------------------------------------
# The contract is the orjson reader's: on any chunk it returns exactly the arrays of the exact path
# (`parse_lines` -> `to_arrays`) or refuses with NotFast; the cases and fuzz strategies are the ones
# above, so both fast readers answer to the same list.


def arrow(chunk: bytes) -> TrajectoryArrays | None:
    try:
        return validated_arrays(raw_from_jsonl_arrow(chunk))
    except NotFast:
        return None


def check(chunk: bytes) -> bool:
    """Equal to the exact path or refused; returns whether the arrow reader took the chunk."""
    got = arrow(chunk)
    if got is None:
        return False
    expected = exact(chunk)
    if len(set(got.ids)) < got.n:  # duplicate ids: the caller checks them over the whole input
        assert expected is None
        return True
    assert expected is not None, "the arrow reader accepted what the exact path rejects"
    assert_same_arrays(got, expected)
    return True


# Cases of CASES the orjson reader takes but this one refuses, each for a reason the
# module names (a plain file must not silently lose the fast path: every other taken case is taken).
REFUSED_HERE = {
    "crlf": "a carriage return",
    "blank lines": "a blank line",
    "duplicate keys: the last wins": "pyarrow refuses duplicate keys",
    "duplicate forecast keys keep the first position": "pyarrow refuses duplicate keys",
    "true/false outcomes": "",  # taken: both booleans
    "nulls where the schema takes one": "",
    "a lone carriage return between records": "a carriage return",
    "a huge integer in metadata (orjson: float)": "",
    "unknown fields kept aside": "a list mixing numbers and objects (Arrow: one type per column)",
    # Added to CASES by the hostile-files work (issue 35), merged with this reader.
    "control characters escaped as json.dumps writes them": "an escaped ASCII character",
}


@pytest.mark.parametrize("chunk, taken", [(c, t) for _, c, t in CASES], ids=[name for name, _, _ in CASES])
def test_arrow_reader_equals_the_exact_path_or_refuses(request, chunk, taken):
    name = request.node.callspec.id
    took = check(chunk)
    if not taken:
        assert not took or exact(chunk) is not None  # (check() compared the arrays when it took it)
    elif REFUSED_HERE.get(name):
        assert not took, name
    else:
        assert took, f"{name}: a plain chunk the arrow reader should take"


@pytest.mark.parametrize(
    "chunk, why",
    [
        (lines(rec("a")) + lines(rec("b")).replace(b"\n", b"\r\n"), "carriage return"),
        (lines(rec("a")) + b"   \n" + lines(rec("b")), "blank line"),
        (b"\t\n" + lines(rec("a")), "blank line"),
        (lines(rec("a")).rstrip(b"\n") + lines(rec("b")), "one object per line"),
        (lines(rec("a")).rstrip(b"\n") + b" " + lines(rec("b")), "one object per line"),
        (lines(rec("a", steps=None)), "steps"),
        (b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "steps"  :\tnull}\n', "steps"),
        (lines(rec("a", steps=[{"forecasts": None}, {"forecasts": {"p": 0.5}}])), "forecasts"),
        (lines(rec("a", metadata=None), rec("b", metadata={"k": 1})), "metadata"),
        (lines(rec("a", outcome=None, outcome_pending=None)), "outcome_pending"),
        (lines(rec("a", metadata={"note": "0.5", "steps": 3})), "steps"),  # a mention Arrow does not hold
        (b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "\\u0073teps": null}\n', "escaped"),
        (b'{"trajectory_id": "a", "stop_reason": "max_steps", "q_z": NaN}\n', "NaN"),
        (b'{"trajectory_id": "a", "stop_reason": "max_steps", "q_z": Infinity}\n', "Infinity"),
        (b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "metadata": {"x": NaN}}\n', "NaN"),
        (raw(b'"steps": [{"forecasts": {"p": 0.5}}, {"forecasts": {"p": -0}}]'), "-0"),
        (b'{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "metadata": {"k": "\xff"}}\n', "UTF-8"),
        (raw(b'"metadata": {"x": ' + b"[" * 40 + b"]" * 40 + b"}"), "deep"),
        # pyarrow 26 builds an invalid list<null> array from this (found by the fuzz below): an
        # ArrowIndexError, once, where the reader must refuse.
        (b'{"trajectory_id": "", "steps": [null, null]}', "null steps"),
    ],
)
def test_what_arrow_cannot_tell_apart_is_refused_before_it_matters(chunk, why):
    """pyarrow reads each of these (or would read it) without error, differently from the exact path
    or in a way the row count and key counts must catch; the reader names why it refuses."""
    with pytest.raises(NotFast, match="arrow"):
        raw_from_jsonl_arrow(chunk)
    assert check(chunk) is False


def test_arrow_values_match_an_independent_reading():
    recs = [
        rec("a", outcome=1, horizon=5, steps=[{"t": 1, "forecasts": {"p": 0.2, "q": 1}}, {"forecasts": {"p": 0}}]),
        rec("b", stop_reason="max_steps", outcome=None, q_z=0.375, steps=[{"forecasts": {"q": 0.5}}]),
        rec("c", stop_reason="parse_error", outcome=0),
        rec("d", outcome=None, outcome_pending=True, steps=[{"forecasts": {"p": None}}]),
    ]
    got = arrow(lines(*recs))
    assert got is not None
    assert got.ids == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(got.offsets, [0, 2, 3, 3, 4])
    np.testing.assert_array_equal(got.horizon, [5.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(got.outcome, [1.0, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(got.q_z, [np.nan, 0.375, np.nan, np.nan])
    assert got.outcome_on_unscored == 1
    assert list(got.predictors) == ["p", "q"]
    np.testing.assert_array_equal(got.predictors["p"].values, [0.2, 0.0, np.nan, np.nan])
    np.testing.assert_array_equal(got.predictors["q"].values, [1.0, np.nan, 0.5, np.nan])
    assert got.predictors["p"].skipped == {"missing": 2, "no_steps": 1}


def test_predictors_in_first_seen_order_across_a_large_chunk():
    """A name first met past the first lines (PROBE_BYTES) makes the chunk the orjson reader's; the
    chunk reader's arrays are still the exact ones, names in first-seen order."""
    recs = trajectory_dicts(3000, seed=5, predictors=("verbal",))
    for r in recs[1700:]:
        for s in r["steps"]:
            s["forecasts"] = {"late": 0.25, **s["forecasts"]}
    chunk = lines(*recs)
    assert len(chunk) > jsonl_fast.PROBE_BYTES and not check(chunk)
    arrays, fast = read_jsonl_chunk(chunk, "<chunk>")
    assert fast and list(arrays.predictors) == ["verbal", "late"]
    assert_same_arrays(arrays, exact(chunk))  # type: ignore[arg-type]
    # Both names in the first lines: taken, in first-seen order.
    early = lines(*recs[1700:], *recs[:1700])
    assert check(early)
    got = arrow(early)
    assert got is not None and list(got.predictors) == ["late", "verbal"]


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_RECORD, min_size=1, max_size=6),
    how=st.integers(0, 3),
    mutation=_MUTATIONS,
    pos=st.integers(0, 2000),
    last_newline=st.booleans(),
    probe_first_line=st.booleans(),
)
def test_fuzz_arrow_reader_equals_exact_or_refuses(records, how, mutation, pos, last_newline, probe_first_line):
    """probe_first_line: the fields (and their types) are fixed by the first line alone, so the
    explicit-schema parse of the later lines is exercised too."""
    text = "\n".join(_line(r, how) for r in records) + ("\n" if last_newline else "")
    saved = jsonl_fast.PROBE_BYTES
    jsonl_fast.PROBE_BYTES = 0 if probe_first_line else saved
    try:
        check(_mutate(text, mutation, min(pos, len(text))).encode("utf-8", "surrogatepass"))
    finally:
        jsonl_fast.PROBE_BYTES = saved


@pytest.mark.parametrize("chunk", [c for _, c, _ in CASES], ids=[name for name, _, _ in CASES])
def test_fields_fixed_by_the_first_line_still_equal_the_exact_path_or_refuse(chunk, monkeypatch):
    monkeypatch.setattr(jsonl_fast, "PROBE_BYTES", 0)
    check(chunk)


def test_a_new_name_on_every_line_is_refused_before_arrow_builds_it():
    """Arrow gives every field a slot in every object of its type: 20,000 predictor names, one per
    line, would be 20,000 x 20,000 slots. Refused from the first lines' fields and the object count."""
    chunk = lines(*(rec(f"r{i}", steps=[{"forecasts": {f"p{i}": 0.5}}]) for i in range(20_000)))
    with pytest.raises(NotFast, match="too many fields"):
        raw_from_jsonl_arrow(chunk)
    # Past the probe, a new name is a parse error (the orjson reader, which bounds names, decides).
    few = lines(*(rec(f"r{i}", steps=[{"forecasts": {"p": 0.5}}]) for i in range(3000)))
    with pytest.raises(NotFast, match="unexpected field"):
        raw_from_jsonl_arrow(few + lines(rec("new", steps=[{"forecasts": {"q": 0.5}}])))


_NUMBER_TEXT = st.one_of(
    st.from_regex(r"\A0\.[0-9]{1,30}\Z"),
    st.from_regex(r"\A[1-9][0-9]{0,3}(\.[0-9]{0,25}[1-9])?[eE]-[0-9]{1,3}\Z"),
    st.from_regex(r"\A0\.[0-9]{1,20}[eE][+-]?0{0,2}[0-9]\Z"),
    st.sampled_from(["0", "1", "-0", "-0.0", "1.0", "1E0", "0e5", "5e-324", "2.2250738585072014e-308"]),
)


@settings(max_examples=int(300 * SCALE), deadline=None)
@given(numbers=st.lists(_NUMBER_TEXT, min_size=1, max_size=8))
def test_number_spellings_read_to_the_bit(numbers):
    """Forecasts and q_z as JSON number text: the values Python's float() gives, bit for bit (or refused)."""
    steps = ", ".join(f'{{"forecasts": {{"p": {n}}}}}' for n in numbers)
    chunk = (
        f'{{"trajectory_id": "a", "stop_reason": "max_steps", "q_z": {numbers[0]}, "steps": [{steps}]}}\n'
    ).encode()
    want = np.array([float(json.loads(n)) for n in numbers])  # JSON's -0 is the integer 0
    got = arrow(chunk)
    if np.all((want >= 0) & (want <= 1)) and "-0" not in numbers:  # an integer -0 is refused (module)
        assert got is not None
        assert got.predictors["p"].values.tobytes() == want.tobytes()
        assert got.q_z.tobytes() == want[:1].tobytes()
        assert_same_arrays(got, exact(chunk))  # type: ignore[arg-type]
    else:
        assert got is None


# (no "-": an id like "-0 " reads, to the byte scan, like the integer -0, and is refused: see the module)
_PLAIN_ID = st.text(alphabet="abcxyz_.:/ 0123456789\u00e9\u4e2d\U0001f600", min_size=1, max_size=6)


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.fixed_dictionaries(
            {
                "trajectory_id": _PLAIN_ID,
                "stop_reason": st.sampled_from(["clean", "max_steps", "timeout"]),
                "outcome": st.sampled_from([0, 1, 1.0, 0.0]),
                "steps": st.lists(
                    st.fixed_dictionaries(
                        {
                            "forecasts": st.dictionaries(
                                st.sampled_from("pqr"),
                                st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0, 1])),
                                max_size=3,
                            )
                        },
                        optional={"t": st.none()},
                    ),
                    max_size=4,
                ),
            },
            optional={
                "q_z": st.one_of(st.none(), st.floats(0, 1)),
                "horizon": st.integers(4, 9),
                "metadata": st.fixed_dictionaries({"agent": st.sampled_from(["x", "y"])}),
            },
        ),
        min_size=1,
        max_size=8,
        unique_by=lambda r: r["trajectory_id"],
    ),
    ascii_only=st.booleans(),
)
def test_fuzz_plain_records_take_the_arrow_path(records, ascii_only):
    """Plain records, any float (repr round trip), UTF-8 raw or escaped: taken, with the exact arrays."""
    text = "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in records)
    assert check(text.encode())


def _options(bootstrap: int) -> ReportOptions:
    return ReportOptions(rules=parse_rules("log,brier"), schedules=parse_schedules("all"), bootstrap=bootstrap)


def test_a_large_file_is_read_by_arrow_with_the_exact_arrays_and_report(tmp_path, monkeypatch):
    """Chunks of a megabyte and more go through pyarrow (the orjson reader may only see the short last
    chunk, so a silent fallback would show); the arrays are the exact whole-file reader's, and the
    chunked report is the one the orjson reader gives with the same chunks, to the bit."""
    recs = trajectory_dicts(12_000, seed=11, predictors=("verbal", "token_prob"))
    path = tmp_path / "runs.jsonl"
    path.write_bytes(lines(*recs))
    assert path.stat().st_size > 4 * MIN_BYTES
    orjson_read = jsonl_fast.arrays_from_jsonl
    sizes: list[int] = []

    def orjson_small_only(chunk: bytes) -> TrajectoryArrays:
        sizes.append(len(chunk))
        assert len(chunk) < MIN_BYTES, "the orjson reader was called on a large plain chunk"
        return orjson_read(chunk)

    monkeypatch.setattr(jsonl_fast, "arrays_from_jsonl", orjson_small_only)  # (read_jsonl_chunk looks it up per call)
    assert_same_arrays(read_arrays(path, chunk_bytes=2 * MIN_BYTES), to_arrays(read_trajectories(path)))
    got = report_from_path(path, _options(200), chunk_bytes=2 * MIN_BYTES)
    assert len(sizes) <= 2  # the last, short chunk at most (read twice)
    monkeypatch.undo()
    monkeypatch.setattr(jsonl_fast, "MIN_BYTES", 1 << 60)  # the orjson reader only
    assert_reports_equal(got, report_from_path(path, _options(200), chunk_bytes=2 * MIN_BYTES), tol=0.0)
