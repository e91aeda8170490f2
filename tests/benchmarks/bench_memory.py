"""Memory per run on the capture path: abandoned LangChain runs, never-ending traces, finished runs.

    .venv/bin/python tests/benchmarks/bench_memory.py [N]

Each scenario runs in a fresh subprocess and reports the growth of resident memory (RSS,
from /proc/self/statm after a gc) divided by the number of runs, next to the baseline of
the same process doing the same loop with no tps-tracer attached:

- handler, abandoned: N LangChain root runs that make one model call and never end (the
  agent crashed, the process keeps serving); the handler evicts the oldest beyond
  `max_open` (default 10,000), each becomes a finished "other" row in the accumulator.
- span processor, never-ending traces: N traces whose root never ends, one LLM span each,
  in background mode; `max_open_traces` (10,000) and the worker's bounded queue cap them.
- accumulator, finished: N clean runs of 10 steps each: the fixed per-run row.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from uuid import uuid4

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def handler_abandoned(n: int, attach: bool) -> int:
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    from tps_tracer import Accumulator
    from tps_tracer.langchain import TPSCallbackHandler

    acc = Accumulator(bootstrap=0)
    handler = TPSCallbackHandler(acc)
    result = LLMResult(generations=[[ChatGeneration(message=AIMessage("<confidence>0.4</confidence> x"))]])
    before = rss()
    for i in range(n):
        root, llm = uuid4(), uuid4()
        if attach:
            handler.on_chain_start({}, {}, run_id=root, metadata={"tps_trajectory_id": f"r{i}"})
            handler.on_chat_model_start({}, [[]], run_id=llm, parent_run_id=root)
            handler.on_llm_end(result, run_id=llm)
    handler.flush()
    acc.flush()
    return rss() - before


def processor_never_ending(n: int, attach: bool) -> int:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from tps_tracer import Accumulator
    from tps_tracer.otel import TPSSpanProcessor

    provider = TracerProvider()
    processor = TPSSpanProcessor(Accumulator(bootstrap=0), background=True)
    if attach:
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    forecasts = json.dumps({"verbal": 0.5})
    roots = []
    before = rss()
    for i in range(n):
        root = tracer.start_span("agent", attributes={"tps.trajectory_id": f"t{i}"})
        tracer.start_span("llm", context=trace.set_span_in_context(root), attributes={"tps.forecasts": forecasts}).end()
        roots.append(root)  # the application holds its open roots either way
    processor.force_flush()
    return rss() - before


def accumulator_finished(n: int, attach: bool) -> int:
    from tps_tracer import Accumulator

    acc = Accumulator(bootstrap=0)
    step = {"verbal": 0.6, "token_prob": 0.7}
    before = rss()
    for i in range(n):
        if attach:
            tid = f"f{i}"
            for _ in range(10):
                acc.observe(tid, step)
            acc.stop(tid, "clean")
    acc.flush()
    return rss() - before


SCENARIOS = {
    "handler, abandoned runs": handler_abandoned,
    "span processor, never-ending traces": processor_never_ending,
    "accumulator, finished runs (2 predictors)": accumulator_finished,
}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        name, n, attach = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
        print(SCENARIOS[name](n, attach))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(f"{n} runs per scenario; RSS growth per run (bytes), tps-tracer attached vs not, same loop")
    for name in SCENARIOS:
        grew = {}
        for attach in (False, True):
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, str(n), "1" if attach else "0"],
                capture_output=True,
                text=True,
                check=True,
            )
            grew[attach] = int(out.stdout.strip().splitlines()[-1])
        own = (grew[True] - grew[False]) / n
        print(f"  {name:45s} baseline {grew[False] / n:8.0f}  attached {grew[True] / n:8.0f}  own {own:8.0f}")


if __name__ == "__main__":
    main()
