"""Running the `tps-tracer` command in-process, as the tests of its errors and options do."""

from __future__ import annotations

from typing import Any

from tps_tracer.cli.main import main


def call(argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `tps-tracer ARGV`; argparse's own exits included."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def ok_records(n: int = 40) -> list[dict[str, Any]]:
    """The newcomer trial's hand-written file: verbal 0.6 then 0.7, outcomes alternating."""
    return [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"t": 1, "forecasts": {"verbal": 0.6}}, {"t": 2, "forecasts": {"verbal": 0.7}}],
        }
        for i in range(n)
    ]
