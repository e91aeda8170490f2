"""No `.tmp` file left behind by an interrupted write (issue 35).

SIGTERM during a command's atomic write: the CLI turns the signal into an exception (exit 143),
so the write is abandoned as an error abandons it: the old target kept, the temp file removed
(before: the temp file stayed, 16 MB after 5 kills). SIGKILL cannot be caught: the next atomic
write of the same target removes what a dead writer on this host left, and only that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tps_tracer.output import atomic_write, write_text

ROOT = Path(__file__).resolve().parents[1]
OLD = "old content\n"


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


def _writer(target: Path, through_cli: bool) -> subprocess.Popen[str]:
    """A process half-way through an atomic write of `target` (1 MB written), then sleeping."""
    body = f"""
        with atomic_write({str(target)!r}) as fh:
            fh.write("x" * 1_000_000)
            fh.flush()
            print("half written", flush=True)
            time.sleep(60)
        return 0
    """
    script = textwrap.dedent(
        """
        import argparse, sys, time
        from tps_tracer.output import atomic_write
        from tps_tracer.cli.main import run_guarded

        def command(args):
        """
    ) + textwrap.indent(textwrap.dedent(body), "    ")
    if through_cli:
        script += '\nsys.exit(run_guarded(command, argparse.Namespace(), "tps-tracer test"))\n'
    else:
        script += "\ncommand(None)\n"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "half written"
    return proc


def test_sigterm_during_a_command_write_leaves_no_temp_file(tmp_path):
    target = tmp_path / "calibrator.json"
    target.write_text(OLD)
    for _ in range(3):
        proc = _writer(target, through_cli=True)
        assert len(_leftovers(tmp_path)) == 1  # the write really was under way
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert target.read_text() == OLD
        assert _leftovers(tmp_path) == []


def test_without_the_cli_boundary_sigterm_leaves_the_temp_file(tmp_path):
    """The control: the default SIGTERM action ends the process before any cleanup runs."""
    target = tmp_path / "calibrator.json"
    target.write_text(OLD)
    proc = _writer(target, through_cli=False)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert target.read_text() == OLD and len(_leftovers(tmp_path)) == 1


def test_the_next_write_removes_a_dead_writers_temp_file_and_only_that(tmp_path):
    target = tmp_path / "records.jsonl"
    target.write_text(OLD)
    killed = _writer(target, through_cli=True)
    killed.send_signal(signal.SIGKILL)  # nothing can clean up after SIGKILL
    killed.wait(timeout=30)
    [dead] = _leftovers(tmp_path)
    live = _writer(target, through_cli=True)  # a writer still at work: its temp file must stay
    try:
        [live_tmp] = [n for n in _leftovers(tmp_path) if n != dead]
        assert f"p{live.pid}." in live_tmp and f"p{killed.pid}." in dead
        other_host = f".{target.name}.tps00000000p{killed.pid}.0123456789ab.tmp"  # same pid, other machine
        unrelated = f".{target.name}.0123456789ab.tmp"  # not this naming: not provably ours
        neighbour = f".other.jsonl.{dead.split('.', 3)[-1]}"  # a dead writer's file of another target
        for name in (other_host, unrelated, neighbour):
            (tmp_path / name).write_text("keep me")
        write_text(target, "new content\n")
        assert target.read_text() == "new content\n"
        assert _leftovers(tmp_path) == sorted([live_tmp, other_host, unrelated, neighbour])
    finally:
        live.kill()
        live.wait(timeout=30)


def test_a_failed_write_still_removes_its_own_temp_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text(OLD)
    try:
        with atomic_write(target) as fh:
            fh.write("partial")
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert target.read_text() == OLD and _leftovers(tmp_path) == []
