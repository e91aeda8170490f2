"""The command line starts light: `--help`, usage errors and `import tps_tracer` load no numpy,
scipy, pydantic or pyarrow; a small report loads no scipy.stats (issue 17: every call paid
1.5-2 s of imports before doing work). Checked on sys.modules in a fresh interpreter, not by
timing (tests/benchmarks/bench_startup.py prints the times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tps_tracer
import tps_tracer.records
from tps_tracer.evaluation.diagnostics import auroc_failure

HEAVY = ("numpy", "scipy", "pydantic", "pyarrow", "pandas")


def _modules_after(code: str) -> set[str]:
    """The modules loaded by `code` in a fresh interpreter, by full and by top-level name."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    return loaded | {m.split(".")[0] for m in loaded}


def _heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in HEAVY if m in mods)


def test_import_tps_tracer_loads_nothing_heavy() -> None:
    assert _heavy(_modules_after("import tps_tracer, tps_tracer.records, tps_tracer.cli.main")) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["gate", "--help"],
        ["report", "--help"],
        ["convert", "--help"],
        ["demo", "--help"],
        ["export", "--help"],
        ["import", "--help"],
        ["nope"],
    ],
)
def test_help_and_usage_errors_load_nothing_heavy(argv: list[str]) -> None:
    code = (
        "import contextlib, io\nfrom tps_tracer.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass"
    )
    assert _heavy(_modules_after(code)) == []


def test_a_small_report_does_not_import_scipy(tmp_path: Path) -> None:
    """Not scipy.stats, nor scipy.sparse (segment sums are numpy), nor scipy.special (the default
    rules' beta(2,4) has a closed form): scipy pulls numpy.f2py, ~0.5 s of a 40-run report."""
    path = tmp_path / "small.jsonl"
    lines = [
        {
            "trajectory_id": f"r{i}",
            "stop_reason": "clean",
            "outcome": i % 2,
            "steps": [{"forecasts": {"v": 0.1 * (i % 9)}}],
        }
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    code = (
        "import contextlib, io\nfrom tps_tracer.cli.main import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['report', {str(path)!r}, '--json']) == 0"
    )
    mods = _modules_after(code)
    assert "tps_tracer.evaluation.diagnostics" in mods  # the report did run its diagnostics (AUROC ...)
    assert "tps_tracer.scoring" in mods  # it scored, with the default rules log,brier,beta(2,4)
    assert sorted(m for m in mods if m.startswith("scipy")) == []
    # Nor pydantic (issue 33: ~0.3 s of a 40-run report): the record schema serves only the exact
    # per-record path, which a well-formed file never takes; nor the --by split, nor pyarrow.
    assert sorted(m for m in mods if m.split(".")[0] in ("pydantic", "pydantic_core", "pyarrow")) == []
    assert "tps_tracer.records.schema" not in mods
    assert "numpy.ma" not in mods  # np.nanquantile's np.unique imports it: percentile_ci is written out


def test_every_public_name_resolves() -> None:
    for module in (tps_tracer, tps_tracer.records):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
            assert name in dir(module)
    with pytest.raises(AttributeError):
        _ = tps_tracer.no_such_name  # type: ignore[attr-defined]
    assert tps_tracer.read_trajectories is tps_tracer.records.jsonl.read_trajectories


def test_auroc_matches_scikit_learn_with_ties() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    c = rng.integers(0, 5, 400) / 4.0  # heavy ties
    y = (rng.random(400) < c * 0.8 + 0.1).astype(float)
    # AUROC of detecting failures (y == 0) by the risk score -c.
    assert auroc_failure(c, y) == pytest.approx(roc_auc_score(1 - y, -c), rel=1e-12)
