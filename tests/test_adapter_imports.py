"""Importing the adapters stays light (issue 28: +0.75 s and +35 MB on top of LangGraph, scipy.sparse
and scipy.special reaching the capture path through the accumulator). Checked on sys.modules in
fresh interpreters, not by timing (tests/benchmarks/bench_capture_cost.py prints time and RSS):
no scipy, no evaluation layer, no accumulator, and no numpy until a step carries logprobs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tps_tracer.capture
import tps_tracer.otel

OFF_THE_CAPTURE_PATH = ("scipy", "tps_tracer.evaluation", "tps_tracer.online", "numpy")


def _modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _heavy(mods: list[str], prefixes: tuple[str, ...] = OFF_THE_CAPTURE_PATH) -> list[str]:
    return sorted({m.split(".")[0] if m.startswith(("scipy", "numpy")) else m for m in mods if m.startswith(prefixes)})


@pytest.mark.parametrize(
    "code",
    [
        "import tps_tracer.langchain",
        "from tps_tracer.langchain import TPSCallbackHandler",
        "import tps_tracer.otel",
        "from tps_tracer.otel import TPSSpanProcessor",
    ],
)
def test_importing_an_adapter_loads_no_scipy_evaluation_or_numpy(code: str) -> None:
    mods = _modules_after(code)
    if code != "import tps_tracer.otel":  # the package alone imports nothing until a name is used
        assert "tps_tracer.tracking.tracker" in mods  # the capture path itself was imported
    assert _heavy(mods) == []


def test_a_capture_without_logprobs_never_loads_numpy_parsing() -> None:
    """Verbal confidence only: the handler's extractor reads the text, no logprob code is imported."""
    code = (
        "from tps_tracer.capture.step_signals import SignalExtractor\n"
        "out = SignalExtractor().forecasts('Answer. <confidence>0.7</confidence>')\n"
        "assert out['verbal'] == 0.7 and out['token_prob'] is None, out"
    )
    assert _heavy(_modules_after(code)) == []


def test_a_scored_run_loads_no_scipy() -> None:
    """The accumulator scores log / Brier runs with numpy alone; scipy waits for the beta family."""
    code = (
        "from tps_tracer import Accumulator\n"
        "acc = Accumulator(bootstrap=0)\n"
        "acc.observe('r1', {'verbal': 0.8}); acc.stop('r1', 'clean'); acc.resolve('r1', outcome=1)\n"
        "assert acc.n_finished == 1"
    )
    assert _heavy(_modules_after(code), ("scipy",)) == []


def test_the_beta_family_still_scores_with_scipy() -> None:
    import numpy as np
    from scipy import special

    from tps_tracer.scoring import get_rule

    rule = get_rule("beta(2,3)")
    p = np.array([0.2, 0.7])
    s1, s0 = rule.branches(p)
    # the beta(a, b) rule's branches: -B(a, b+1) I_{1-p}(b+1, a) and -B(a+1, b) I_p(a+1, b)
    np.testing.assert_allclose(s1, -special.beta(2, 4) * special.betainc(4, 2, 1 - p), rtol=1e-12)
    np.testing.assert_allclose(s0, -special.beta(3, 3) * special.betainc(3, 3, p), rtol=1e-12)


@pytest.mark.parametrize("package", [tps_tracer.capture, tps_tracer.otel])
def test_every_lazily_exported_name_resolves(package) -> None:
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018
