"""A real MLflow tracking server for the tests, on 127.0.0.1 only, SQLite store in a temp dir.

MLflow's server cannot share a virtualenv with Arize Phoenix (graphene pins graphql-core
below 3.3, Phoenix needs 3.3), so it runs from its own: `.venv-mlflow`, made by
`make tools` (or point TPS_MLFLOW_SERVER at an `mlflow` executable). The tests talk to it
with the `mlflow-tracing` client from the main virtualenv, as a user would.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.server_process import free_port, listening_addresses, stop_process_group, wait_until_healthy

REPO = Path(__file__).resolve().parents[2]


def mlflow_executable() -> Path:
    path = Path(os.environ.get("TPS_MLFLOW_SERVER", REPO / ".venv-mlflow" / "bin" / "mlflow"))
    if not path.exists():
        raise RuntimeError(f"no MLflow server at {path}: run `make tools` (or set TPS_MLFLOW_SERVER)")
    return path


class MlflowServer:
    def __init__(self, working_dir: Path):
        self.working_dir = working_dir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = working_dir / "mlflow.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no background job workers: not used here
        }
        command = [
            str(mlflow_executable()),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend-store-uri",
            f"sqlite:///{self.working_dir / 'mlflow.db'}",
            "--default-artifact-root",
            str(self.working_dir / "artifacts"),
            "--workers",
            "1",
        ]
        with self.log.open("ab") as log:
            # Own process group: the server forks uvicorn, which stop() must take down too.
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        wait_until_healthy("MLflow", self.process, f"{self.url}/health", self.log, timeout)

    def stop(self) -> None:
        stop_process_group(self.process)
        self.process = None

    def listening_addresses(self) -> list[str]:
        return listening_addresses([self.port])


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """An MLflow server per pytest process (tests/conftest.py provides it; tests use their own experiments)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
