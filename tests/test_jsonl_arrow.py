"""The pyarrow JSON Lines reader (records/jsonl_arrow.py) against the exact path, case by case and fuzzed.

The contract is the orjson reader's (tests/test_jsonl_fast.py): on any chunk it returns exactly the
arrays of the exact path (`parse_lines` -> `to_arrays`) or refuses with NotFast. The cases and
the fuzz strategies are that file's, so both fast readers answer to the same list.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scale_support import assert_reports_equal, trajectory_dicts
from test_jsonl_fast import (
    _MUTATIONS,
    _RECORD,
    CASES,
    SCALE,
    _line,
    _mutate,
    assert_same_arrays,
    exact,
    lines,
    raw,
    rec,
)

import tps_tracer.records.jsonl_fast as jsonl_fast
from tps_tracer.evaluation.chunked import read_arrays, report_from_path
from tps_tracer.evaluation.report import ReportOptions
from tps_tracer.records import TrajectoryArrays, read_trajectories, to_arrays
from tps_tracer.records.columnar import validated_arrays
from tps_tracer.records.jsonl_fast import MIN_BYTES, raw_from_jsonl_arrow
from tps_tracer.records.reading import NotFast
from tps_tracer.scoring import parse_rules, parse_schedules


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


# Cases of test_jsonl_fast.CASES the orjson reader takes but this one refuses, each for a reason the
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
    # Added to test_jsonl_fast.CASES by the hostile-files work (issue 35), merged with this reader.
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
    ],
)
def test_what_arrow_cannot_tell_apart_is_refused_before_it_matters(chunk, why):
    """pyarrow reads each of these (or would read it) without error, differently from the exact path
    or in a way the row count and key counts must catch; the reader names why it refuses."""
    with pytest.raises(NotFast, match="arrow"):
        raw_from_jsonl_arrow(chunk)
    assert check(chunk) is False


def test_values_match_an_independent_reading():
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
    arrays, fast = jsonl_fast.read_jsonl_chunk(chunk, "<chunk>")
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
