"""Shared by the backend servers the tests start: ports, readiness, what a server listens on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_healthy(name: str, process: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    """Poll `url` until it answers 200; raise with the log's tail if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    # Not left running: the fixture never yields, so its stop() would not run.
    if os.getpgid(process.pid) == process.pid:
        stop_process_group(process)
    else:
        process.kill()
        process.wait(10)
    raise RuntimeError(f"{name} not ready after {timeout} s: {log.read_text()[-3000:]}")


def listening_addresses(ports: list[int]) -> list[str]:
    """Local addresses listening on `ports` (from /proc/net, hex as the kernel writes them), to check loopback only."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if state == "0A" and int(port, 16) in ports:
                out.append(addr)
    return out


def stop_process_group(process: subprocess.Popen[bytes] | None) -> None:
    """Stop a server started with start_new_session=True (its workers too): TERM, then KILL after 30 s."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
