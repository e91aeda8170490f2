"""The README is a tested contract: every code block of README.md, docs/*.md and integrations/*/README.md
runs here.

Blocks run as written, never edited; fences start at column 0 (not inside a list item). A block
whose code needs names or files a user supplies (their agent, their records) says so in an HTML
comment on the line above it:

    <!-- readme-test: given agent, question (your agent and a task for it) -->

and the `GIVEN` table below supplies each name (a simulated agent, records from the demo, a
real Phoenix or MLflow server started on 127.0.0.1). Other markers:

    <!-- readme-test: external: WHY -->      a shell block not run here (installs, CI itself)
    <!-- readme-test: run in this folder --> a shell block run in a copy of the README's folder
    <!-- readme-test: ...; each line exits 0 (pass) or 1 (fail) -->   allowed exit codes

Python blocks run in-process with exec, in a fresh temp directory holding the supplied files
(the README's folder on sys.path, so a recipe next to the README imports as it would next
to the user's code); shell blocks run line by line in bash with this venv's `tps-tracer`
first on PATH; JSON blocks are read by the reader they document; a `text` block must say
why it is not data. Some blocks are followed by checks of what they produced (`CHECKS`).
"""

from __future__ import annotations

import http.server
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
READMES = [
    ROOT / "README.md",
    *sorted(DOCS.glob("*.md")),
    *sorted((ROOT / "integrations").glob("*/README.md")),
]
BIN = Path(sys.executable).parent
MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}:{self.lang}"

    @property
    def clauses(self) -> list[str]:
        return [c.strip() for c in (self.marker or "").split(";") if c.strip()]

    @property
    def external(self) -> str | None:
        for c in self.clauses:
            if c.startswith("external:"):
                return c.removeprefix("external:").strip()
        return None

    @property
    def given(self) -> list[str]:
        for c in self.clauses:
            if c.startswith("given "):
                names = re.sub(r"\([^)]*\)", "", c.removeprefix("given "))
                return [n.strip() for n in names.split(",") if n.strip()]
        return []

    @property
    def exit_codes(self) -> set[int]:
        for c in self.clauses:
            if c.startswith("each line exits"):
                return {int(d) for d in re.findall(r"\b(\d+)\b", c)}
        return {0}


def parse_blocks(path: Path) -> list[Block]:
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m is None:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while not lines[j].startswith("```"):
            j += 1
        above = lines[start - 1].strip() if start > 0 else ""
        marker = MARKER.match(above)
        blocks.append(Block(path, start + 1, lang, "\n".join(lines[start + 1 : j]) + "\n", marker and marker.group(1)))
        i = j + 1
    return blocks


BLOCKS = [b for readme in READMES for b in parse_blocks(readme)]


# ---------------------------------------------------------------- what users supply


@dataclass
class Supplies:
    """Files a user would have (records of their agent's runs and what the CLI makes of them)."""

    folder: Path
    world: Any = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(BIN / "tps-tracer"), *args], capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"tps-tracer {' '.join(args)}: {out.stderr[-2000:]}"
    return out


def _continuations(records_path: Path, out: Path, seed: int) -> None:
    """Continuation branches of every censored run: 8 per prefix, outcome ~ Bernoulli(the truthful agent's
    last stated confidence, its estimate of q_Z)."""
    rng = np.random.default_rng(seed)
    lines = []
    for raw in records_path.read_text().splitlines():
        rec = json.loads(raw)
        if rec.get("stop_reason") != "max_steps":  # resolution lines carry no stop reason
            continue
        for b in range(8):
            if b == 7 and rng.random() < 0.3:  # a branch that broke its output format: excluded, counted
                lines.append({"source_trajectory_id": rec["trajectory_id"], "branch": b, "stop_reason": "parse_error"})
            else:
                y = int(rng.random() < rec["steps"][-1]["forecasts"]["verbal"])
                lines.append(
                    {"source_trajectory_id": rec["trajectory_id"], "branch": b, "stop_reason": "clean", "outcome": y}
                )
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture(scope="session")
def supplies(tmp_path_factory) -> Supplies:
    folder = tmp_path_factory.mktemp("readme-supplies")
    demo = folder / "demo"
    # The demo's simulated agents through the real handler: records with every stop reason and a true q_z.
    _cli("demo", "--tasks", "150", "--bootstrap", "0", "--out", str(demo))
    shutil.copy(demo / "truthful.jsonl", folder / "runs.jsonl")
    shutil.copy(demo / "truthful.jsonl", folder / "cand.jsonl")
    shutil.copy(demo / "overconfident.jsonl", folder / "new_runs.jsonl")
    shutil.copy(demo / "overconfident.jsonl", folder / "main.jsonl")
    shutil.rmtree(demo)
    _continuations(folder / "runs.jsonl", folder / "branches.jsonl", seed=1)
    _continuations(folder / "runs.jsonl", folder / "audit.jsonl", seed=2)
    (folder / "snapshot.json").write_text(
        _cli("report", "runs.jsonl", "--json", "--bootstrap", "200", cwd=folder).stdout
    )
    _cli("calibrate", "runs.jsonl", "-o", "calibrator.json", cwd=folder)
    shutil.copy(ROOT / "integrations" / "github-actions" / "tps-gate.toml", folder / "gate.toml")
    return Supplies(folder)


def _world():
    from tps_tracer.sim.world import AgentWorld

    return AgentWorld(12, seed=3)


def _clean_task(world, horizon: int = 8) -> str:
    from tps_tracer.records.stop_reasons import StopReason

    return next(t.task_id for t in world if t.expected(horizon, repairs=False).stop_reason is StopReason.CLEAN)


def _agent(ctx: dict[str, Any]) -> Any:
    from tps_tracer.sim.agents import prebuilt_react_agent
    from tps_tracer.sim.scripted_model import ScriptedReActModel, search_tool

    world = ctx.setdefault("world", _world())
    return prebuilt_react_agent(ScriptedReActModel(world=world), [search_tool(world)])


def _question(ctx: dict[str, Any]) -> str:
    from tps_tracer.sim.scripted_model import task_prompt

    world = ctx.setdefault("world", _world())
    return task_prompt(_clean_task(world))


def _task_id(ctx: dict[str, Any]) -> str:
    return _clean_task(ctx.setdefault("world", _world()))


def _inputs(ctx: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from tps_tracer.sim.scripted_model import task_prompt

    return {"messages": [HumanMessage(task_prompt(_task_id(ctx)))]}


STEP_LOGPROBS = [-0.05, -0.3, -1.2, -0.01]


def _response_metadata(ctx: dict[str, Any]) -> dict[str, Any]:
    """OpenAI chat logprobs of a 4-token completion (top-2 alternatives each)."""
    content = [
        {
            "token": f"t{i}",
            "logprob": lp,
            "top_logprobs": [{"token": f"t{i}", "logprob": lp}, {"token": "x", "logprob": -4.0}],
        }
        for i, lp in enumerate(STEP_LOGPROBS)
    ]
    return {"logprobs": {"content": content}}


def _phoenix_url(ctx: dict[str, Any]) -> str:
    return ctx["request"].getfixturevalue("phoenix").url


def _tracking_uri(ctx: dict[str, Any]) -> str:
    ctx["monkeypatch"].setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # report outages promptly (README advice)
    return ctx["request"].getfixturevalue("mlflow_server").url


def _platform_settings(ctx: dict[str, Any]) -> str:
    """LangSmith's and Langfuse's settings in the environment: a server on 127.0.0.1 (backends/score_platforms.py)."""
    from backends.score_platforms import LANGSMITH_API_KEY, SECRET_KEY

    server = ctx["request"].getfixturevalue("score_platform")
    ctx["score_platform"] = server
    settings = {
        "LANGSMITH_ENDPOINT": server.url,
        "LANGSMITH_API_KEY": LANGSMITH_API_KEY,
        "LANGFUSE_BASE_URL": server.url,
        "LANGFUSE_PUBLIC_KEY": server.public_key,
        "LANGFUSE_SECRET_KEY": SECRET_KEY,
    }
    for key, value in settings.items():
        ctx["monkeypatch"].setenv(key, value)
    return server.url


def _provider(ctx: dict[str, Any]) -> Any:
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


def _acc(ctx: dict[str, Any]) -> Any:
    from tps_tracer import Accumulator

    return Accumulator(predictors=["verbal"], rules=["log"], bootstrap=0)


# name -> how the test supplies it (files come from the `supplies` fixture, copied into the block's folder)
GIVEN: dict[str, Callable[[dict[str, Any]], Any]] = {
    "agent": _agent,
    "question": _question,
    "task_id": _task_id,
    "inputs": _inputs,
    "step_text": lambda ctx: "<think>the second search confirms it</think><confidence>0.85</confidence>",
    "response_metadata": _response_metadata,
    "phoenix_url": _phoenix_url,
    "tracking_uri": _tracking_uri,
    "LANGSMITH_ENDPOINT": _platform_settings,  # and the other LANGSMITH_* / LANGFUSE_* settings
    "provider": _provider,
    "acc": _acc,
}
GIVEN_FILES = {
    "runs.jsonl",
    "new_runs.jsonl",
    "cand.jsonl",
    "main.jsonl",
    "branches.jsonl",
    "audit.jsonl",
    "snapshot.json",
    "gate.toml",
    "calibrator.json",
}
GIVEN_ENV = {"GITHUB_STEP_SUMMARY"}


# The servers (started only when a block asks for them, via getfixturevalue): tests/backends/.
# ---------------------------------------------------------------- checks after a block


def _check_signals(ns: dict[str, Any]) -> None:
    # Independent: verbal is the stated 0.85; token_prob is the mean chosen-token probability.
    assert ns["f"]["verbal"] == pytest.approx(0.85)
    assert ns["f"]["token_prob"] == pytest.approx(np.mean(np.exp(STEP_LOGPROBS)), abs=1e-12)
    online = ns["acc"].snapshot()["online"]
    assert online["finished"] == 1 and online["rejected"] == {}
    # One step, T = 1, y = 1: TPS_log = log F.
    row = next(
        r
        for r in ns["acc"].snapshot()["scores"]
        if (r["predictor"], r["rule"], r["censoring"]) == ("verbal", "log", "complete-only")
    )
    assert row["mean"] == pytest.approx(math.log(0.85), abs=1e-12)


def _check_calibrator(ns: dict[str, Any]) -> None:
    mapped = ns["cal"].apply("verbal", [0.9, 0.95, 1.0])
    assert np.all((np.asarray(mapped) > 0) & (np.asarray(mapped) < 1)) and np.all(np.diff(mapped) >= 0)
    assert "verbal" in ns["cal"].hooks()


def _check_handler(ns: dict[str, Any]) -> None:
    snap = ns["acc"].snapshot()
    assert snap["online"]["finished"] == 1 and snap["audit"]["stop_reasons"]["clean"] == 1
    lines = [json.loads(x) for x in Path("runs.jsonl").read_text().splitlines()]
    assert [x["trajectory_id"] for x in lines if "trajectory_id" in x] == ["task-17"]


def _check_otel(ns: dict[str, Any]) -> None:
    ns["processor"].force_flush()
    snap = ns["acc"].snapshot()
    assert snap["online"]["finished"] == 1 and snap["audit"]["stop_reasons"]["clean"] == 1
    assert not ns["processor"].errors


def _check_span_processor_attached(ns: dict[str, Any]) -> None:
    """The two lines attach the processor: a root span with one LLM child becomes one finished run."""
    tracer = ns["provider"].get_tracer("readme")
    with tracer.start_as_current_span("agent", attributes={"tps.trajectory_id": "run-1", "tps.stop_reason": "clean"}):
        with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}) as span:
            span.set_attribute("llm.output_messages.0.message.content", "Confidence: 0.7")
    assert ns["provider"].force_flush()  # reaches the processor through the provider, as an exporter's would
    ns["acc"].resolve("run-1", outcome=1)
    snap = ns["acc"].snapshot()
    ns["provider"].shutdown()
    assert snap["online"]["finished"] == 1 and snap["audit"]["stop_reasons"]["clean"] == 1
    # One step read from the span text, T = 1, y = 1: TPS_log = log 0.7.
    key = ("verbal", "log", "complete-only")
    [row] = [r for r in snap["scores"] if (r["predictor"], r["rule"], r["censoring"]) == key]
    assert row["n"] == 1 and row["mean"] == pytest.approx(math.log(0.7), abs=1e-12)


def _check_backend_delivery(status_of: str) -> Callable[[dict[str, Any]], None]:
    def check(ns: dict[str, Any]) -> None:
        delivery = getattr(ns["tps"], status_of)
        deadline = time.monotonic() + 180
        while (status := delivery.status())["sent"] < 2 and time.monotonic() < deadline:  # tps.<rule>, stop reason
            ns["tps"].flush()
            time.sleep(0.5)
        assert status["sent"] >= 2 and status["gave_up"] == 0 and status["dropped"] == 0, status

    return check


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[str]] = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def _check_collector(ns: dict[str, Any]) -> None:
    """The snippet's exporters point at a collector on 127.0.0.1:4318: stand one in and see both arrive."""
    _OtlpReceiver.received = []
    try:
        server = http.server.HTTPServer(("127.0.0.1", 4318), _OtlpReceiver)
    except OSError as exc:
        pytest.fail(f"127.0.0.1:4318 (the collector's OTLP/HTTP port in the README) is taken: {exc}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with ns["provider"].get_tracer("readme").start_as_current_span("agent"):
            pass
        ns["acc"].observe("r1", {"verbal": 0.7})
        ns["acc"].stop("r1", "clean")
        ns["acc"].resolve("r1", outcome=1)
        assert ns["provider"].force_flush() and ns["meters"].force_flush()
    finally:
        ns["meters"].shutdown()
        ns["provider"].shutdown()
        server.shutdown()
    assert {"/v1/traces", "/v1/metrics"} <= set(_OtlpReceiver.received)


def _check_run_id_backends(ns: dict[str, Any]) -> None:
    for exporter in (ns["feedback"], ns["scores"]):
        status = exporter.status()
        assert status["sent"] >= 2 and status["pending"] == status["gave_up"] == status["without_run_id"] == 0, status
        exporter.close()


CHECKS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    # (page, code only that block has) -> check of what the block made
    (
        "docs/capture.md",
        'acc.observe("task-17", {"verbal": f["verbal"], "token_prob": f["token_prob"]})',
    ): _check_signals,
    ("docs/calibration.md", 'cal = Calibrator.load("calibrator.json")'): _check_calibrator,
    ("README.md", 'handler.record_outcome("task-17", success=True)'): _check_handler,
    ("docs/capture.md", 'handler.record_outcome("task-17", success=True)'): _check_handler,
    ("README.md", "provider.add_span_processor(TPSSpanProcessor(acc))"): _check_span_processor_attached,
    ("docs/otel.md", "LangChainInstrumentor().instrument(tracer_provider=provider)"): _check_otel,
    ("integrations/phoenix/README.md", "from phoenix_recipe import trace_to_phoenix"): _check_backend_delivery(
        "annotations"
    ),
    ("integrations/mlflow/README.md", "from mlflow_recipe import trace_to_mlflow"): _check_backend_delivery(
        "assessments"
    ),
    ("integrations/otel-collector/README.md", "acc.add_listener(TPSMetrics(meters))"): _check_collector,
    ("docs/traces.md", "feedback, scores = LangSmithFeedback(), LangfuseScores()"): _check_run_id_backends,
}


def _blocks_with(readme: str, line: str) -> list[Block]:
    return [b for b in BLOCKS if str(b.path.relative_to(ROOT)) == readme and line in b.code]


CHECKS_BY_ID = {b.id: check for key, check in CHECKS.items() for b in _blocks_with(*key)}


# ---------------------------------------------------------------- the tests


def test_every_block_is_accounted_for():
    """Nothing slips through: blocks are python, sh or json, or say why they are not run; checks match blocks."""
    assert len(READMES) >= 5 and len(BLOCKS) >= 15
    for readme in READMES:  # an indented fence (a block inside a list item) is not parsed: it would never run
        for number, line in enumerate(readme.read_text().splitlines(), 1):
            assert not re.match(r"^\s+```", line), f"{readme.relative_to(ROOT)}:{number}: start the fence at column 0"
    for b in BLOCKS:
        assert b.lang in {"python", "sh", "json", "text"}, f"{b.id}: unknown block language"
        if b.lang == "python":
            assert b.external is None, f"{b.id}: Python blocks must run"
        if b.lang == "text":
            assert b.marker, f"{b.id}: say why this block is not run"
        for name in b.given:
            assert name in GIVEN or name in GIVEN_FILES or name in GIVEN_ENV, f"{b.id}: nothing supplies {name!r}"
    for key in CHECKS:
        assert len(_blocks_with(*key)) == 1, f"{key}: the check must match exactly one block"


def _workdir(block: Block, supplies: Supplies, tmp_path: Path) -> Path:
    if "run in this folder" in block.clauses:
        work = tmp_path / block.path.parent.name
        shutil.copytree(block.path.parent, work)
        return work
    work = tmp_path / "work"
    work.mkdir()
    for name in block.given:
        if name in GIVEN_FILES:
            shutil.copy(supplies.folder / name, work / name)
    if block.path.parent in (ROOT, DOCS):  # paths the pages name relative to the checkout
        (work / "examples").symlink_to(ROOT / "examples")
    return work


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=lambda b: b.id)
def test_python_block_runs_as_written(block, supplies, tmp_path, monkeypatch, request):
    work = _workdir(block, supplies, tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(block.path.parent))  # a recipe next to the README imports as next to your code
    ctx: dict[str, Any] = {"request": request, "monkeypatch": monkeypatch}
    ns: dict[str, Any] = {"__name__": "__readme__"}
    for name in block.given:
        if name in GIVEN:
            ns[name] = GIVEN[name](ctx)
    try:
        exec(compile(block.code, block.id, "exec"), ns)
        if block.id in CHECKS_BY_ID:
            CHECKS_BY_ID[block.id](ns)
    finally:
        from tps_tracer import Accumulator

        instrumentor = ns.get("LangChainInstrumentor")
        if instrumentor is not None and instrumentor().is_instrumented_by_opentelemetry:
            instrumentor().uninstrument()  # the block instrumented LangChain globally: undo it for the next tests
        for value in ns.values():
            if isinstance(value, Accumulator):
                value.close()


def _command_lines(code: str) -> list[str]:
    """Logical lines (backslash continuations joined), comments and blanks dropped by bash itself."""
    out, current = [], ""
    for line in code.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current)
        current = ""
    return out


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "sh"], ids=lambda b: b.id)
def test_shell_block_runs_or_is_external(block, supplies, tmp_path):
    if block.external is not None:
        assert len(block.external) > 20  # the reason is written down next to the block
        return
    work = _workdir(block, supplies, tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    if "GITHUB_STEP_SUMMARY" in block.given:
        env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    for line in _command_lines(block.code):
        out = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=600
        )
        assert out.returncode in block.exit_codes, (
            f"{block.id}: `{line}` exited {out.returncode}:\n{out.stderr[-3000:]}"
        )
    if "GITHUB_STEP_SUMMARY" in block.given:
        assert "tps-tracer gate" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=lambda b: b.id)
def test_json_block_is_read_by_its_reader(block, tmp_path):
    path = tmp_path / "block.jsonl"
    path.write_text(" ".join(block.code.split("\n")) + "\n")  # the README wraps one JSON line for reading
    first = json.loads(path.read_text())
    if "source_trajectory_id" in first:
        from tps_tracer.evaluation.censoring.continuations import read_continuations

        [branch] = read_continuations(path)
        assert (branch.source_trajectory_id, branch.outcome) == (first["source_trajectory_id"], first["outcome"])
    else:
        import tps_tracer

        [record] = tps_tracer.read_trajectories(path)
        assert record.trajectory_id == first["trajectory_id"] and len(record.steps) == len(first["steps"])


def test_readme_names_no_unpublished_index_install():
    """Until the package is on an index, no README tells users to `pip install tps-tracer` from one."""
    for readme in READMES:
        for m in re.finditer(r"pip install ([^`\n]*)", readme.read_text()):
            args = shlex.split(m.group(1).split("#")[0])
            for arg in args:
                assert not re.match(r"^tps-tracer(\[[^\]]*\])?$", arg), f"{readme}: pip install {m.group(1)}"
