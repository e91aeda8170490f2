"""What a user decides from a sample with capture loss: the report says it apart, the gate refuses it.

Runs tps-tracer lost (a burst that outran capture, an idle or closed run) used to be recorded
`other`, listed among the informative stops, and the gate passed on the survivors without a word.
"""

from __future__ import annotations

import json
from uuid import uuid4

from cli_support import call, ok_records
from world_check import new_accumulator, sink_records

from tps_tracer.langchain import TPSCallbackHandler


def _file(tmp_path, n_lost: int):
    records = ok_records(60)
    for i in range(n_lost):
        records.append(
            {
                "trajectory_id": f"lost{i}",
                "stop_reason": "capture_lost",
                "metadata": {"tps_abandoned": "idle"},
                "steps": [{"t": 1, "forecasts": {"verbal": 0.9}}],
            }
        )
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_report_counts_capture_loss_apart_from_informative_stops(tmp_path, capsys):
    path = _file(tmp_path, 7)
    code, out, _ = call(["report", str(path), "--json", "--bootstrap", "0"], capsys)
    assert code == 0
    audit = json.loads(out)["audit"]
    assert audit["stop_reasons"]["capture_lost"] == 7 and audit["roles"]["lost"] == 7
    assert audit["roles"]["excluded"] == 0 and audit["excluded_share"] == 0.0
    assert audit["working_sample"] == 60  # the lost runs are not scored
    code, out, _ = call(["report", str(path), "--bootstrap", "0"], capsys)
    assert code == 0
    assert "CAPTURE LOSS: 7 runs (10.4% of all)" in out
    assert "excluded (informative stops, not scored): 0" in out


def test_the_gate_refuses_a_sample_with_capture_loss_unless_told(tmp_path, capsys):
    path = _file(tmp_path, 3)
    code, out, _ = call(["gate", str(path), "--min", "-5", "--json", "--bootstrap", "200"], capsys)
    result = json.loads(out)
    assert code == 2 and result["verdict"] == "unusable"
    check = next(c for c in result["checks"] if c["name"] == "capture_loss")
    assert not check["passed"] and check["estimate"] == 3 and "--allow-capture-loss" in check["detail"]
    code, out, _ = call(
        ["gate", str(path), "--min", "-5", "--json", "--bootstrap", "200", "--allow-capture-loss"], capsys
    )
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "pass" and result["score"]["n"] == 60
    # The same file without the lost runs passes the same way: nothing else changed.
    clean = _file(tmp_path, 0)
    code, out, _ = call(["gate", str(clean), "--min", "-5", "--json", "--bootstrap", "200"], capsys)
    assert code == 0 and json.loads(out)["score"] == result["score"]


def test_the_baseline_capture_loss_is_refused_too(tmp_path, capsys):
    cand = tmp_path / "cand.jsonl"
    cand.write_text("".join(json.dumps(r) + "\n" for r in ok_records(60)))
    base = _file(tmp_path, 2)
    code, out, _ = call(["gate", str(cand), "--baseline", str(base), "--margin", "0.5", "--json"], capsys)
    result = json.loads(out)
    assert code == 2 and any(c["name"] == "capture_loss" and "baseline" in c["detail"] for c in result["checks"])


def test_capture_lost_cannot_be_treated_as_censored(tmp_path, capsys):
    path = _file(tmp_path, 2)
    code, _, err = call(["report", str(path), "--treat-as-censored", "capture_lost"], capsys)
    assert code == 2 and "capture_lost" in err


def test_a_run_lost_before_its_first_model_call_still_leaves_its_record(tmp_path):
    """A run that idled out (or was closed) before its first model call returned was only counted."""
    acc, sink = new_accumulator(tmp_path)
    handler = TPSCallbackHandler(acc, background=False)
    handler.on_chain_start({}, {}, run_id=uuid4(), metadata={"tps_trajectory_id": "early"})
    handler.close()
    acc.close()
    rec = sink_records(sink)["early"]
    assert (rec.stop_reason, rec.metadata["tps_abandoned"], rec.steps) == ("capture_lost", "closed", [])
