"""The pieces in integrations/, exercised with the real tools that run here.

- GitHub Actions: actionlint on both workflows, then their own `run:` steps executed in bash in a
  folder laid out as a user's repository (the evaluation jobs and the gate, `GITHUB_STEP_SUMMARY`
  pointing to a file).
- Prometheus: `promtool check rules`, the hand-written `promtool test rules` file, and a
  rule test built from a real scrape of TPSMetrics (names, labels and values as exported).
- OpenTelemetry Collector: no collector binary installs here, so the configuration's
  structure is checked and the agent side is run for real: the SDK's OTLP/HTTP exporters
  send the TPS metrics to a receiver on 127.0.0.1, decoded with the OTLP protobuf classes.
"""

from __future__ import annotations

import http.server
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import yaml
from opentelemetry.sdk.metrics import MeterProvider

from tps_tracer import Accumulator
from tps_tracer.otel import TPSMetrics

ROOT = Path(__file__).resolve().parents[1]
INTEGRATIONS = ROOT / "integrations"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(BIN))
    if found is None:  # make test installs both (Makefile: tools target, integrations-test extra)
        pytest.fail(f"{name} not found: run `make test`, which installs it")
    return found


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


# ---------------------------------------------------------------- GitHub Actions


ACTIONS = INTEGRATIONS / "github-actions"
WORKFLOWS = ["tps-gate.yml", "tps-gate-baseline.yml"]


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflow_passes_actionlint(name):
    out = _run([_tool("actionlint"), "-no-color", str(ACTIONS / name)])
    assert out.returncode == 0, out.stdout + out.stderr


def _user_repository(tmp_path: Path, workflow: str) -> Path:
    """A repository set up as the README says: the workflow and tps-gate.toml in .github/workflows/,
    nothing else of this checkout (issue 34: the workflow named integrations/github-actions/tps-gate.toml,
    which a user's repository does not have, and the gate exited 2)."""
    repo = tmp_path / "user-repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    for name in (workflow, "tps-gate.toml"):
        shutil.copy(ACTIONS / name, repo / ".github" / "workflows" / name)
    return repo


def _job(workflow: str) -> tuple[dict, dict]:
    parsed = yaml.safe_load((ACTIONS / workflow).read_text())
    [job] = parsed["jobs"].values()
    assert "pull_request" in parsed[True]  # YAML 1.1 reads the key `on` as True
    # tps-tracer is not on an index: pip installs it from a git URL pinned to a commit.
    assert re.fullmatch(r"[0-9a-f]{40}", job["env"]["TPS_TRACER_REF"])
    assert "git+https://" in {s.get("name"): s for s in job["steps"]}["Install tps-tracer"]["run"]
    return parsed, job


# A pull request relaxing its own gate: with these settings the overconfident agent passes (exit 0).
LAX_SETTINGS = '[gate]\npredictor = "verbal"\nvs-base-rate = true\ntest = "non-inferiority"\nmargin = 10.0\n'


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflow_installs_from_a_pinned_url(tmp_path, name):
    """The install step, run with a `python` that prints its arguments: a URL pinned to the commit, the
    extras as set (the gate alone needs the core), a token in the URL only when the secret is set."""
    _, job = _job(name)
    [install] = [s for s in job["steps"] if s.get("name") == "Install tps-tracer"]
    assert install["env"] == {"TPS_TRACER_TOKEN": "${{ secrets.TPS_TRACER_TOKEN }}"}
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (shim / "python").chmod(0o755)
    env = {**os.environ, **job["env"], "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    env.pop("TPS_TRACER_TOKEN", None)

    def args(**extra: str) -> list[str]:
        out = _run(["bash", "-e", "-c", install["run"]], env={**env, **extra})
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    ref = job["env"]["TPS_TRACER_REF"]
    url = f"git+https://github.com/your-org/tps-tracer@{ref}"
    assert args() == ["-m", "pip", "install", f"tps-tracer[demo] @ {url}"]
    assert args(TPS_TRACER_EXTRAS="")[-1] == f"tps-tracer @ {url}"
    assert (
        args(TPS_TRACER_TOKEN="t0k")[-1]
        == f"tps-tracer[demo] @ {url.replace('https://', 'https://x-access-token:t0k@')}"
    )


def _env(job: dict, summary: Path) -> dict[str, str]:
    env = {**os.environ, **job["env"], "GITHUB_STEP_SUMMARY": str(summary)}
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ['PATH']}"  # `pip install tps-tracer` is this venv
    return env


def test_workflow_config_default_is_where_the_readme_puts_it():
    """A pull_request run has no inputs: the expression falls back to the default the README names,
    the same as the manual run's input default."""
    parsed, job = _job("tps-gate.yml")
    m = re.fullmatch(r"\$\{\{ inputs\.config \|\| '([^']+)' \}\}", job["env"]["TPS_GATE_CONFIG"])
    assert m is not None, job["env"]["TPS_GATE_CONFIG"]
    default = parsed[True]["workflow_dispatch"]["inputs"]["config"]["default"]
    assert m.group(1) == default == ".github/workflows/tps-gate.toml"
    assert default in (ACTIONS / "README.md").read_text()
    assert (
        yaml.safe_load((ACTIONS / "tps-gate-baseline.yml").read_text())["jobs"]["calibration-gate-baseline"]["env"][
            "TPS_GATE_CONFIG"
        ]
        == default
    )


def test_workflow_steps_run_in_a_user_repository(tmp_path):
    """The workflow's evaluation and gate steps, run as Actions would (bash -e) in a repository set up as
    the README says, pass and write the summary; the overconfident agent fails the same gate."""
    _, job = _job("tps-gate.yml")
    steps = {s.get("name"): s for s in job["steps"]}
    settings = steps["Check out the gate's settings from the base branch"]
    assert settings["with"]["ref"] == "${{ github.event.pull_request.base.sha || github.sha }}"
    assert settings["with"]["path"] == ".gate-settings"
    assert settings["with"]["sparse-checkout"] == "${{ env.TPS_GATE_CONFIG }}"
    repo = _user_repository(tmp_path, "tps-gate.yml")
    # The base branch's settings, as that checkout lays them out; the pull request relaxes its own copy.
    shutil.copytree(repo / ".github", repo / ".gate-settings" / ".github")
    (repo / ".github" / "workflows" / "tps-gate.toml").write_text(LAX_SETTINGS)
    summary = tmp_path / "summary.md"
    env = _env(job, summary)
    env["TPS_GATE_CONFIG"] = ".github/workflows/tps-gate.toml"  # what `inputs.config || '...'` gives a pull_request

    def step(name: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return _run(["bash", "-e", "-c", steps[name]["run"]], cwd=repo, env={**env, **extra})

    evaluation = step("Evaluation job (replace with your agent's)")
    assert evaluation.returncode == 0, evaluation.stderr[-2000:]
    assert (repo / job["env"]["RECORDS"]).stat().st_size > 0

    passed = step("Gate on censored TPS")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    text = summary.read_text()
    assert text.startswith("## ✅ tps-tracer gate: PASS")
    assert "| vs_base_rate | pass |" in text and "| sample_size | pass |" in text

    # The saturated-overconfident agent of the same job fails the base branch's gate (exit 1), though
    # the pull request's own settings would let it through.
    summary.unlink()
    failed = step("Gate on censored TPS", RECORDS="eval/overconfident.jsonl")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAIL" in summary.read_text().splitlines()[0]
    assert "| vs_base_rate | FAIL |" in summary.read_text()


def test_baseline_workflow_steps_run_in_a_user_repository(tmp_path):
    """The baseline variant: the candidate's and the base branch's evaluation jobs (the latter in
    .baseline/, as the workflow checks it out), then the paired gate. An unchanged agent passes; an
    overconfident candidate against the truthful baseline fails the baseline comparison."""
    _, job = _job("tps-gate-baseline.yml")
    steps = {s.get("name"): s for s in job["steps"]}
    base = next(s for s in job["steps"] if s.get("name") == "Check out the base branch")
    assert base["with"] == {"ref": "${{ github.event.pull_request.base.sha }}", "path": ".baseline"}
    repo = _user_repository(tmp_path, "tps-gate-baseline.yml")
    shutil.copytree(repo, repo / ".baseline", ignore=shutil.ignore_patterns(".baseline"))  # the base branch
    (repo / ".github" / "workflows" / "tps-gate.toml").write_text(LAX_SETTINGS)  # ignored: the base's settings rule
    summary = tmp_path / "summary.md"
    env = _env(job, summary)

    def step(name: str, **extra: str) -> subprocess.CompletedProcess[str]:
        cwd = repo / steps[name].get("working-directory", ".")
        return _run(["bash", "-e", "-c", steps[name]["run"]], cwd=cwd, env={**env, **extra})

    for name in (
        "Evaluation job, candidate (replace with your agent's)",
        "Evaluation job, baseline (replace with your agent's)",
    ):
        out = step(name)
        assert out.returncode == 0, out.stderr[-2000:]
    candidate, baseline = repo / job["env"]["CANDIDATE"], repo / job["env"]["BASELINE"]
    assert candidate.stat().st_size > 0 and baseline.read_bytes() == candidate.read_bytes()

    passed = step("Gate candidate vs baseline")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    text = summary.read_text()
    assert text.startswith("## ✅ tps-tracer gate: PASS") and "| vs_baseline | both | pass |" in text

    summary.unlink()
    failed = step("Gate candidate vs baseline", CANDIDATE="eval/overconfident.jsonl")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "| vs_baseline | both | FAIL |" in summary.read_text()


# ---------------------------------------------------------------- Prometheus

RULES = INTEGRATIONS / "prometheus" / "tps_rules.yml"


def test_rules_pass_promtool_check_and_unit_tests():
    promtool = _tool("promtool")
    check = _run([promtool, "check", "rules", str(RULES)])
    assert check.returncode == 0 and "SUCCESS: 11 rules found" in check.stdout, check.stdout + check.stderr
    unit = _run([promtool, "test", "rules", "tps_rules.test.yml"], cwd=RULES.parent)
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _tps_samples(body: str) -> dict[str, float]:
    """'name{labels}' -> value for the tps_* samples of a Prometheus text exposition."""
    out = {}
    for line in body.splitlines():
        m = re.match(r"^(tps_\w+\{.*\}) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _feed(acc: Accumulator, rng: np.random.Generator, prefix: str, stops: list[str]) -> list[tuple[list, int]]:
    """Runs of 3 steps: verbal saturated at 0.95 whatever happens, token_prob 0.8 / 0.2 by the outcome."""
    complete = []
    for i, reason in enumerate(stops):
        tid = f"{prefix}{i}"
        y = int(rng.random() < 0.5)
        steps = [{"verbal": 0.95, "token_prob": 0.8 if y else 0.2} for _ in range(3)]
        for f in steps:
            acc.observe(tid, f)
        acc.stop(tid, reason, horizon=3 if reason == "max_steps" else None)
        if reason == "clean":
            acc.resolve(tid, outcome=y)
            complete.append((steps, y))
    return complete


def test_rules_on_a_real_scrape_of_tps_metrics(tmp_path):
    """Two real scrapes an hour apart become promtool input series; alerts fire exactly where
    the independently computed numbers say they should."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import start_http_server

    promtool = _tool("promtool")
    port = _free_port()
    server, _ = start_http_server(port, addr="127.0.0.1")
    meters = MeterProvider(metric_readers=[PrometheusMetricReader()])
    rng = np.random.default_rng(7)
    try:
        acc = Accumulator(predictors=["verbal", "token_prob"], rules=["log", "brier"], bootstrap=0)
        acc.add_listener(TPSMetrics(meters))
        first = _feed(
            acc, rng, "a", ["clean"] * 30 + ["max_steps"] * 4 + ["parse_error", "tool_error", "timeout", "other"]
        )
        body1 = _scrape(port)
        # The next hour: 20 clean, 2 budget stops, 8 informative stops (tool errors, timeouts, other)
        # -> excluded share 8/30 > 0.2, the report's own excluded_share (a list of only parse and tool
        # errors would say 4/30 and stay quiet).
        second = _feed(
            acc, rng, "b", ["clean"] * 20 + ["max_steps"] * 2 + ["tool_error"] * 4 + ["timeout"] * 2 + ["other"] * 2
        )
        audit = acc.snapshot()["audit"]
        body2 = _scrape(port)
    finally:
        server.shutdown()
        meters.shutdown()
    check = _run([promtool, "check", "metrics"], input=body2)
    assert check.returncode == 0, check.stdout + check.stderr

    # Independent numbers: complete-only TPS_log of the 50 clean runs. A run's three steps carry
    # the same forecast and its weights (linear-front over T=3: 1/2, 1/3, 1/6) sum to 1, so its
    # TPS is that forecast's log score.
    clean = first + second
    verbal_log = sum(math.log(0.95 if y else 0.05) for _, y in clean) / len(clean)
    token_log = math.log(0.8)
    s1, s2 = _tps_samples(body1), _tps_samples(body2)

    def mean(samples: dict[str, float], predictor: str) -> float:
        (value,) = [
            v
            for n, v in samples.items()
            if n.startswith("tps_score_mean{")
            and f'predictor="{predictor}"' in n
            and 'rule="log"' in n
            and 'censoring="complete-only"' in n
        ]
        return value

    assert mean(s2, "verbal") == pytest.approx(verbal_log, abs=1e-12)
    assert mean(s2, "token_prob") == pytest.approx(token_log, abs=1e-12)
    assert set(s1) == set(s2)  # every series exists in both scrapes (no extrapolation artefacts)

    # Gauges and tps_scored_total hold each scrape's value for its hour; tps_trajectories_total and
    # tps_steps_total (read through rate()) grow linearly at each hour's pace, the third hour as the second.
    series = []
    for name in sorted(s2):
        labels = name.replace("{", '{job="agent",', 1)
        v1, v2 = s1[name], s2[name]
        if name.startswith(("tps_trajectories_total", "tps_steps_total")):
            values = f"0+{v1 / 60!r}x60 {v1 + (v2 - v1) / 60!r}+{(v2 - v1) / 60!r}x120"
        else:
            values = f"{v1!r}x59 {v2!r}x120"
        series.append({"series": labels, "values": values})
    expected = []
    for name, value in s1.items():  # the first hour's means, where the alert is evaluated
        labels = dict(re.findall(r'(\w+)="([^"]*)"', name))
        if not name.startswith("tps_score_mean") or labels["censoring"] != "simple":
            continue
        floor = {"log": -0.6931, "brier": -0.25}[labels["rule"]]
        if value < floor:  # tps_scored_total is 34 >= 30 for every simple series in the first hour
            expected.append(
                {
                    "exp_labels": {
                        "severity": "warning",
                        "job": "agent",
                        **{k: labels[k] for k in ("predictor", "rule", "weights", "censoring")},
                        **{k: v for k, v in labels.items() if k.startswith("otel_scope") and v},  # "" = no label
                    },
                    "exp_annotations": {
                        "summary": f"{labels['predictor']} confidence scores worse than a constant 50% forecast",
                        "description": f"Running mean TPS ({labels['rule']}, {labels['weights']}, simple) is "
                        f"{value:.3f}. Gate releases with `tps-tracer gate` on the JSON Lines records.",
                    },
                }
            )
    # verbal (log and Brier) is worse than a coin flip; token_prob is not.
    assert sorted((e["exp_labels"]["predictor"], e["exp_labels"]["rule"]) for e in expected) == [
        ("verbal", "brier"),
        ("verbal", "log"),
    ]
    assert audit["excluded_share"] == pytest.approx(12 / 68)  # both hours: 4 + 8 excluded of 68 runs
    excluded_alert = {
        "exp_labels": {"severity": "warning", "job": "agent"}
        | {k: v for k, v in re.findall(r'(\w+)="([^"]*)"', next(iter(s2))) if k.startswith("otel_scope") and v},
        "exp_annotations": {
            "summary": f"{8 / 30 * 100:.4g}% of agent runs end on an informative stop"
            " (parse or tool error, timeout, ...)",
            "description": "Informative stops are excluded from TPS; above 20% the score describes a biased sample.",
        },
    }
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"alertname": "TPSWorseThanCoinFlip", "eval_time": "45m", "exp_alerts": expected},
                    # first hour: 4 of 38 runs excluded; from the second on, 8 of 30 (> 0.2 for an hour)
                    {"alertname": "TPSExcludedShareHigh", "eval_time": "59m", "exp_alerts": []},
                    {"alertname": "TPSExcludedShareHigh", "eval_time": "178m", "exp_alerts": [excluded_alert]},
                ],
            }
        ],
    }
    path = tmp_path / "real_scrape.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    unit = _run([promtool, "test", "rules", str(path)])
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- OpenTelemetry Collector


def test_collector_config_is_consistent():
    cfg = yaml.safe_load((INTEGRATIONS / "otel-collector" / "collector.yaml").read_text())
    for pipeline in cfg["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in cfg[kind], f"{component} used but not defined under {kind}"
    assert set(cfg["service"]["extensions"]) <= set(cfg["extensions"])
    for proto in cfg["receivers"]["otlp"]["protocols"].values():
        assert proto["endpoint"].startswith("127.0.0.1:")  # loopback unless the user opens it
    prom = cfg["exporters"]["prometheus"]
    assert "namespace" not in prom and prom["endpoint"].startswith("127.0.0.1:")  # names as the rules expect
    assert cfg["service"]["pipelines"]["metrics"]["exporters"] == ["prometheus"]
    assert cfg["exporters"]["otlphttp/phoenix"]["retry_on_failure"]["enabled"] is True


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_sdk_sends_tps_metrics_over_otlp_as_the_collector_readme_says():
    """The README's agent-side snippet, for real: OTLP/HTTP protobuf metrics to a receiver on 127.0.0.1."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    _OtlpReceiver.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(f"http://127.0.0.1:{port}/v1/metrics"), export_interval_millis=3_600_000
    )
    meters = MeterProvider(metric_readers=[reader])
    try:
        acc = Accumulator(predictors=["verbal"], rules=["log"], bootstrap=0)
        acc.add_listener(TPSMetrics(meters))
        for tid, p, y in (("a", 0.9, 1), ("b", 0.3, 0)):
            acc.observe(tid, {"verbal": p})
            acc.stop(tid, "clean")
            acc.resolve(tid, outcome=y)
        acc.observe("c", {"verbal": 0.5})
        acc.stop("c", "parse_error")
        assert meters.force_flush()
    finally:
        meters.shutdown()
        server.shutdown()
    assert _OtlpReceiver.received and _OtlpReceiver.received[0][0] == "/v1/metrics"
    request = ExportMetricsServiceRequest.FromString(_OtlpReceiver.received[0][1])
    metrics = {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert set(metrics) == {"tps.score.mean", "tps.scored", "tps.trajectories", "tps.steps"}

    def attrs(point):
        return {a.key: a.value.string_value for a in point.attributes}

    means = {attrs(p)["censoring"]: p.as_double for p in metrics["tps.score.mean"].gauge.data_points}
    assert means["complete-only"] == pytest.approx((math.log(0.9) + math.log(0.7)) / 2, abs=1e-12)
    counts = {attrs(p)["stop_reason"]: p.as_int for p in metrics["tps.trajectories"].sum.data_points}
    assert counts == {"clean": 2, "parse_error": 1}
    assert metrics["tps.trajectories"].sum.is_monotonic
    steps = {attrs(p)["forecast"]: p.as_int for p in metrics["tps.steps"].sum.data_points}
    assert steps == {"stated": 3, "missing": 0}  # every run's steps, the parse error's included
