"""A real Arize Phoenix server for the tests, on 127.0.0.1 only, offline, data in a temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.server_process import free_port, listening_addresses, wait_until_healthy

LAUNCHER = Path(__file__).with_name("phoenix_launcher.py")


class PhoenixServer:
    def __init__(self, working_dir: Path):
        self.working_dir = working_dir
        self.port = free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = working_dir / "phoenix.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 300.0) -> None:  # its migrations took over 120 s on a loaded machine
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_WORKING_DIR": str(self.working_dir),
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, str(LAUNCHER)], env=env, stdout=log, stderr=log)
        wait_until_healthy("Phoenix", self.process, f"{self.url}/healthz", self.log, timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def listening_addresses(self) -> list[str]:
        return listening_addresses([self.port, self.grpc_port])


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """A Phoenix server per pytest process (tests/conftest.py provides it; tests use their own projects)."""
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
