"""The demo's progress bar draws only on a terminal: off a TTY (CI logs, `2> file`) stderr stays clean."""

from __future__ import annotations

import io
import os
import sys

from tps_tracer.cli import demo_cmd


def _drive(stream, monkeypatch, quiet: bool = False) -> bool:
    monkeypatch.setattr(sys, "stderr", stream)
    bar = demo_cmd._progress(5, quiet=quiet)
    disabled = bool(bar.disable)  # (close() sets it)
    for _ in range(5):
        bar.update(1)
    bar.close()
    return disabled


def test_no_bar_off_a_terminal(monkeypatch):
    buf = io.StringIO()
    assert _drive(buf, monkeypatch) is True
    assert buf.getvalue() == ""


def test_the_bar_is_on_on_a_terminal_unless_quiet(monkeypatch):
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        assert tty.isatty()
        assert _drive(tty, monkeypatch) is False
        assert _drive(tty, monkeypatch, quiet=True) is True  # --json: never
    os.close(leader)
