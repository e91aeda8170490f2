"""A horizon beyond the capture path's bound (MAX_HORIZON = 10^7) is refused by every reader with one
line naming the field (exit 2); a horizon >= 2^63 used to end every command in an internal error
(exit 3), and 10^9 was accepted although the capture path refuses it."""

from __future__ import annotations

import json

import pytest
from cli_support import call, ok_records

from tps_tracer.constants import MAX_HORIZON


@pytest.mark.parametrize("horizon", [2**63, 10**9, MAX_HORIZON + 1])
@pytest.mark.parametrize("command", [["report"], ["gate", "--min", "-5"], ["calibrate"], ["plot"]])
def test_a_horizon_beyond_the_bound_is_one_clear_line(tmp_path, capsys, horizon, command):
    records = ok_records(40)
    records[7] = {**records[7], "stop_reason": "max_steps", "horizon": horizon}
    del records[7]["outcome"]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = [command[0], str(path), *command[1:]]
    if command[0] in ("plot", "calibrate"):
        argv += ["-o", str(tmp_path / ("p.png" if command[0] == "plot" else "cal.json"))]
    code, _, err = call(argv, capsys)
    assert code == 2, err
    assert "horizon" in err and "line 8" in err and "internal error" not in err


def test_the_bound_itself_is_accepted(tmp_path, capsys):
    records = ok_records(40)
    records[7] = {**records[7], "stop_reason": "max_steps", "horizon": MAX_HORIZON}
    del records[7]["outcome"]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, err = call(["report", str(path), "--json", "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert json.loads(out)["audit"]["stop_reasons"]["max_steps"] == 1
