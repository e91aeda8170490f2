"""The log rule clips forecasts of 0 or 1 to [1e-6, 1 - 1e-6]; the report and the gate say how many.

A "sure" forecast on a run that went the other way scores log(1e-6) = -13.8 times its step
weight. The count is checked against a count made here from the records themselves (the
forecasts np.clip would move, in the working sample's usable runs only), on every path that
builds a report: the file report, the accumulator's snapshot in both modes, a merged state, the
gate (text, Markdown, JSON) and the gate on a snapshot.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from cli_support import call

from tps_tracer import Accumulator

EPS = 1e-6
# Forecast values: exact 0 and 1, just inside and just outside the clip bounds.
VALUES = [0.0, 1.0, 0.3, 1e-7, EPS, 1.0 - EPS, 1.0 - 1e-7, 0.8, np.nextafter(EPS, 0.0), np.nextafter(1.0 - EPS, 1.0)]
REASONS = ["clean", "clean", "max_steps", "parse_error", "clean"]


def _records(n: int = 60) -> list[dict]:
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        reason = REASONS[i % len(REASONS)]
        steps = []
        for t in range(1 + i % 4):
            forecasts = {"verbal": float(rng.choice(VALUES)), "token_prob": float(rng.choice(VALUES[2:]))}
            if i % 13 == 7 and t == 0:
                forecasts["verbal"] = None  # a gap: filled (carry-forward), never counted as a clipped forecast
            steps.append({"t": t + 1, "forecasts": forecasts})
        rec = {"trajectory_id": f"r{i}", "stop_reason": reason, "steps": steps, "horizon": 6}
        if reason == "clean":
            rec["outcome"] = i % 2
            if i % 17 == 4:  # waiting for its grade: not in the working sample
                rec["outcome"], rec["outcome_pending"] = None, True
        out.append(rec)
    return out


def _expected(records: list[dict]) -> dict[str, int]:
    """Independent count: stated forecasts outside [EPS, 1 - EPS], over the runs that are complete or censored
    (every run with steps is scored under carry-forward; a filled gap is no forecast of the agent's)."""
    counts = {"verbal": 0, "token_prob": 0}
    for rec in records:
        in_sample = (rec["stop_reason"] == "clean" and rec.get("outcome") is not None) or rec[
            "stop_reason"
        ] == "max_steps"
        if not in_sample:
            continue
        for name in counts:
            values = [s["forecasts"][name] for s in rec["steps"] if s["forecasts"][name] is not None]
            counts[name] += sum(1 for v in values if v < EPS or v > 1.0 - EPS)
    return counts


@pytest.fixture(scope="module")
def records() -> list[dict]:
    recs = _records()
    want = _expected(recs)
    assert want["verbal"] > 5 and want["token_prob"] > 2  # the file exercises the count
    return recs


def _write(tmp_path, records) -> str:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _fed(records: list[dict], **kw) -> Accumulator:
    acc = Accumulator(bootstrap=100, **kw)
    for rec in records:
        for s in rec["steps"]:
            acc.observe(rec["trajectory_id"], s["forecasts"])
        acc.stop(rec["trajectory_id"], rec["stop_reason"], rec["horizon"], outcome=rec.get("outcome"))
    acc.flush()
    return acc


def test_the_report_counts_clipped_forecasts_as_the_records_say(records, tmp_path, capsys):
    want = _expected(records)
    code, out, err = call(["report", _write(tmp_path, records), "--json", "--bootstrap", "100"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["log_clipped"] == {"eps": EPS, "forecasts": want, "total": sum(want.values())}

    code, text, err = call(["report", str(tmp_path / "runs.jsonl"), "--bootstrap", "100", "--wide"], capsys)
    assert code == 0, err
    line = re.search(r"log rule: forecasts of 0 or 1 clipped to \[1e-06, 1-1e-06\]: (.*?) \(", text)
    assert line is not None and line.group(1) == f"verbal {want['verbal']}, token_prob {want['token_prob']}"
    assert f"log(1e-06) = {math.log(EPS):.1f}" in text

    # Without the log rule there is nothing to clip: no count, no line.
    code, out, err = call(["report", str(tmp_path / "runs.jsonl"), "--json", "--rules", "brier"], capsys)
    assert code == 0 and json.loads(out)["log_clipped"] is None


@pytest.mark.parametrize("mode", ["rows", "summary"])
def test_the_snapshot_and_a_merged_state_count_the_same(records, mode):
    want = _expected(records)
    kw = {"mode": mode, "batch_size": 8} if mode == "summary" else {}
    assert _fed(records, **kw).snapshot()["log_clipped"]["forecasts"] == want
    half = len(records) // 2
    a, b = _fed(records[:half], **kw), _fed(records[half:], **kw)
    a.merge_state(b.state())
    assert a.snapshot()["log_clipped"]["forecasts"] == want


def test_the_gate_says_how_many_forecasts_its_log_rule_clipped(records, tmp_path, capsys):
    path = _write(tmp_path, records)
    md = tmp_path / "gate.md"
    argv = ["gate", path, "--min", "-20", "--predictor", "verbal", "--bootstrap", "100"]
    code, text, err = call([*argv, "--markdown", str(md)], capsys)
    # The gated column is cen-simple: complete and censored runs, as the independent count.
    want = _expected(records)["verbal"]
    expected = f"log rule: {want} forecasts of verbal were 0 or 1, clipped to [1e-06, 1-1e-06]"
    assert expected in " ".join(text.split()) and expected in md.read_text(), (code, err)
    code, out, _ = call([*argv, "--json"], capsys)
    assert any(n.startswith(expected) for n in json.loads(out)["notes"])
    code, out, _ = call([*argv, "--json", "--rule", "brier"], capsys)
    assert not any("clipped" in n for n in json.loads(out)["notes"])

    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(_fed(records).snapshot()))
    code, out, _ = call(
        ["gate", "--snapshot", str(snapshot), "--min", "-20", "--predictor", "verbal", "--json"], capsys
    )
    assert any(n.startswith(expected) for n in json.loads(out)["notes"])
