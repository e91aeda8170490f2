"""read_task_ids parses lines with orjson where it reads them as json.loads does (records/reading.py)."""

from __future__ import annotations

import json

from tps_tracer.records.reading import read_task_ids

LINES = [
    '{"trajectory_id": "a", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": "t-1"}}',
    '{"trajectory_id": "b", "stop_reason": "clean", "outcome": 1}',
    '{"trajectory_id": "c", "stop_reason": "clean", "metadata": {"task_id": 123456789012345678901234567890}}',
    '{"trajectory_id": "d", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": 7}}',
    '{"trajectory_id": "e", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": {"n": 1.5, "k": [1, null]}}}',
    '{"trajectory_id": "f", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": "x", "score": NaN}}',
    '{"trajectory_id": "g\\ud800", "stop_reason": "clean", "outcome": 1}',
    '{"trajectory_id": "h", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": "old", "task_id": "new"}}',
    '{"trajectory_id": "i", "stop_reason": "clean", "outcome": 1, "metadata": "not an object"}',
    '{"resolves": "a", "outcome": 0}',
    "   ",
    '{"trajectory_id": "j", "stop_reason": "clean", "outcome": 1, "metadata": {"task_id": 1e5}}',
]


def test_task_ids_equal_a_json_loads_reading(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8", errors="surrogatepass")
    ids, tasks = [], []
    for line in LINES:  # the reading by hand, with the standard library only
        if not line.strip():
            continue
        obj = json.loads(line)
        if "resolves" in obj:
            continue
        meta = obj.get("metadata")
        ids.append(obj["trajectory_id"])
        tasks.append(str(meta.get("task_id", obj["trajectory_id"])) if isinstance(meta, dict) else obj["trajectory_id"])
    assert tasks[2] == "123456789012345678901234567890" and tasks[4] == "{'n': 1.5, 'k': [1, None]}"
    assert read_task_ids(path) == (ids, tasks)
