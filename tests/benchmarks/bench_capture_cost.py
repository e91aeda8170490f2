"""What capture costs per model call, in PROCESS CPU (every thread: the agent's and the capture
worker's), beside a no-op handler / processor in the same run (issue 28 targets: <= 150 us with
300-token top-5 logprobs, <= 30 us without), and what importing the adapters costs.

1. LangChain: a real `create_agent` loop (LangGraph) whose scripted chat model answers STEPS
   model calls per run (a `search` tool call each, then the answer), each with a 300-token
   completion and OpenAI top-5 logprobs in `generation_info` (where ChatOpenAI puts them), or
   none. Variants: no callbacks, a no-op BaseCallbackHandler, TPSCallbackHandler (its flush
   inside the timed region: the worker's extraction and scoring are counted).
2. OpenTelemetry: the real SDK TracerProvider, spans in the OpenInference conventions the
   processor reads (an agent root with `metadata`, per step an LLM span whose `output.value`
   is the LangChain LLMResult JSON with the logprobs, and a TOOL span), through a no-op
   SpanProcessor or TPSSpanProcessor (force_flush inside the timed region), or the same
   processor with background=False (all its work on the emitting thread: the difference is
   what the hand-over to the worker costs); and how many cyclic GC collections each variant
   started inside its timed rounds.
3. Imports: `import tps_tracer.langchain` on top of langgraph + langchain, and
   `import tps_tracer.otel` on top of the OTel SDK, in fresh interpreters: wall time and peak
   RSS deltas against the baseline imports alone.
4. Summary mode: p99.9 / max latency of Accumulator.observe / stop / resolve, RUNS_SUMMARY runs
   (default 1M; --summary-runs to change).

Variants are interleaved round by round; figures are medians of ROUNDS rounds (>= 5).

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_capture_cost.py [--rounds 7] [--summary-runs 1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import tps_tracer
from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor
from tps_tracer.sim.agents import tool_calling_agent

TOKENS = 300
TOP = 5
STEPS = 6  # model calls per run
RUNS = 8  # runs per round and variant


def chat_logprobs(rng: np.random.Generator, step: int) -> dict[str, Any]:
    """A 300-token OpenAI chat logprobs object with top-5 candidates (a stated confidence inside)."""
    content = []
    for i in range(TOKENS):
        top = np.sort(rng.dirichlet(np.ones(TOP)))[::-1]
        tok = f"tok{i} " if i != 150 else f"<confidence>0.{step % 9 + 1}</confidence>"
        content.append(
            {
                "token": tok,
                "logprob": math.log(top[0]),
                "bytes": list(tok.encode()),
                "top_logprobs": [
                    {"token": f"t{j}", "logprob": math.log(p), "bytes": [116, 48 + j]} for j, p in enumerate(top)
                ],
            }
        )
    return {"content": content}


class ScriptedToolModel(BaseChatModel):
    """Calls `search` STEPS - 1 times, then answers; every output carries the step's logprobs (or none)."""

    outputs: list[tuple[str, Any]]  # (text, logprobs or None) per step

    @property
    def _llm_type(self) -> str:
        return "bench-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedToolModel:
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        step = sum(isinstance(m, ToolMessage) for m in messages)
        text, lp = self.outputs[min(step, len(self.outputs) - 1)]
        last = step >= len(self.outputs) - 1
        calls = [] if last else [{"name": "search", "args": {"query": f"q{step}"}, "id": f"call{step}"}]
        info: dict[str, Any] = {"finish_reason": "stop" if last else "tool_calls"}
        if lp is not None:
            info["logprobs"] = lp
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text, tool_calls=calls), generation_info=info)])


@tool
def search(query: str) -> str:
    """Look something up."""
    return f"clue for {query}"


class NoOpHandler(BaseCallbackHandler):
    pass


class NoOpProcessor(SpanProcessor):
    pass


# Issue 28's targets: total process CPU added per model call over the no-op handler / processor.
TARGETS = {"logprobs": 150e-6, "no logprobs": 30e-6}


def _print_table(title: str, rows: dict[str, list[float]], noop: str) -> dict[str, float]:
    """Medians per variant; `added` is the median over rounds of (variant - no-op) in the same
    round, which cancels the load other processes put on the machine from round to round.
    `added[noop]` is 0; the no-op's own median is returned as added["_no-op us/call"]."""
    print(title)
    print(f"  {'variant':<34} {'us/call':>9} {'added vs no-op':>15} {'x no-op':>8}")
    base = statistics.median(rows[noop])
    added = {}
    for name, xs in rows.items():
        added[name] = statistics.median(x - b for x, b in zip(xs, rows[noop], strict=True))
        m = statistics.median(xs)
        print(f"  {name:<34} {m * 1e6:9.1f} {added[name] * 1e6:15.1f} {m / base:8.2f}")
    added["_no-op us/call"] = base
    return added


# ------------------------------------------------------------------ 1. LangChain / LangGraph


def langchain_costs(rounds: int, outputs_lp: list[tuple[str, Any]]) -> dict[str, tuple[float, float]]:
    outputs_plain = [(text, None) for text, _ in outputs_lp]
    agents = {
        "logprobs": tool_calling_agent(ScriptedToolModel(outputs=outputs_lp), [search]),
        "no logprobs": tool_calling_agent(ScriptedToolModel(outputs=outputs_plain), [search]),
    }
    handlers = {kind: TPSCallbackHandler(Accumulator(bootstrap=0)) for kind in agents}
    noop = NoOpHandler()

    def one_round(kind: str, variant: str, tag: str) -> float:
        agent = agents[kind]
        handler = handlers[kind] if variant == "TPS handler" else None
        by_variant: dict[str, list[Any]] = {"no callbacks": [], "no-op handler": [noop], "TPS handler": [handler]}
        callbacks = by_variant[variant]
        gc.collect()  # every variant starts without the others' garbage (LangGraph runs leave cycles)
        t0 = time.process_time()
        for i in range(RUNS):
            metadata = {"tps_trajectory_id": f"{tag}-{i}"}
            agent.invoke({"messages": [HumanMessage("task")]}, config={"callbacks": callbacks, "metadata": metadata})
        if handler is not None:
            handler.flush()
        return (time.process_time() - t0) / (RUNS * STEPS)

    variants = ["no callbacks", "no-op handler", "TPS handler"]
    rows: dict[str, list[float]] = {f"{k}: {v}": [] for k in agents for v in variants}
    for kind in agents:  # warm-up (imports, first-call caches), not timed
        for v in variants:
            one_round(kind, v, f"warm-{kind}-{v}")
    for r in range(rounds):
        for kind in agents:
            for v in variants[r % 3 :] + variants[: r % 3]:  # rotated: no variant always follows another
                rows[f"{kind}: {v}"].append(one_round(kind, v, f"r{r}-{kind}-{v}"))
    for kind, h in handlers.items():
        n = h.accumulator.n_finished
        h.close()
        expected = RUNS * (rounds + 1)  # the warm-up round too
        assert n == expected, f"{kind}: {n} runs recorded, {expected} expected"
    added = {}
    for kind in agents:
        table = _print_table(
            f"LangChain create_agent, {STEPS} model calls per run, {kind} ({TOKENS} tokens, top-{TOP}), "
            f"process CPU per model call, median of {rounds} rounds",
            {v: rows[f"{kind}: {v}"] for v in variants},
            "no-op handler",
        )
        added[kind] = (table["TPS handler"], table["_no-op us/call"])
    return added


# ------------------------------------------------------------------ 1b. extraction alone


def extraction_costs(rounds: int, outputs_lp: list[tuple[str, Any]]) -> dict[str, float]:
    """Process CPU per step of the extraction's parts, in this thread, over the STEPS payloads in
    turn; `reading floor` only looks up every token, logprob and candidate logprob in the dicts
    (no conversion, no validation): what any reader of these Python objects pays."""
    from itertools import chain
    from operator import itemgetter

    from tps_tracer.capture.step_signals import SignalExtractor
    from tps_tracer.capture.token_logprobs import parse_logprobs

    token, logprob, top = itemgetter("token"), itemgetter("logprob"), itemgetter("top_logprobs")
    payloads = [lp for _, lp in outputs_lp]
    parsed = [parse_logprobs(lp) for lp in payloads]
    ex = SignalExtractor()

    def floor() -> None:
        for lp in payloads:
            c = lp["content"]
            list(map(token, c)), list(map(logprob, c)), list(map(logprob, chain.from_iterable(map(top, c))))

    parts: dict[str, Callable[[], Any]] = {
        "reading floor (dict lookups only)": floor,
        "parse_logprobs": lambda: [parse_logprobs(lp) for lp in payloads],
        "signals of parsed logprobs": lambda: [ex.forecasts(p.text, p) for p in parsed],
        "SignalExtractor.forecasts (all)": lambda: [ex.forecasts(t, lp) for t, lp in outputs_lp],
    }
    rows: dict[str, list[float]] = {name: [] for name in parts}
    for r in range(rounds):
        names = list(parts)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            t0 = time.process_time()
            for _ in range(10):
                parts[name]()
            rows[name].append((time.process_time() - t0) / (10 * len(payloads)))
    print(f"Extraction alone, {TOKENS} tokens x top-{TOP}, process CPU per step, median of {rounds} rounds")
    med = {name: statistics.median(xs) for name, xs in rows.items()}
    for name, v in med.items():
        print(f"  {name:<36} {v * 1e6:9.1f} us")
    return med


# ------------------------------------------------------------------ 2. OpenTelemetry


def _llm_attributes(text: str, lp: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"finish_reason": "stop"}
    if lp is not None:
        info["logprobs"] = lp
    result = {"generations": [[{"text": text, "generation_info": info, "type": "ChatGeneration"}]]}
    return {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": text,
        "output.value": json.dumps(result),
        "output.mime_type": "application/json",
    }


def otel_costs(rounds: int, outputs_lp: list[tuple[str, Any]]) -> dict[str, tuple[float, float]]:
    llm_spans = {
        "logprobs": [_llm_attributes(text, lp) for text, lp in outputs_lp],
        "no logprobs": [_llm_attributes(text, None) for text, _ in outputs_lp],
    }
    tool_attrs = {"openinference.span.kind": "TOOL", "tool.name": "search", "output.value": "clue"}
    providers: dict[str, tuple[TracerProvider, TPSSpanProcessor | None]] = {}
    accumulators: dict[str, Accumulator] = {}
    inline_accumulators: dict[str, Accumulator] = {}
    for kind in llm_spans:
        noop_provider = TracerProvider()
        noop_provider.add_span_processor(NoOpProcessor())
        acc = accumulators[kind] = Accumulator(bootstrap=0)
        tps = TPSSpanProcessor(acc)
        tps_provider = TracerProvider()
        tps_provider.add_span_processor(tps)
        # The same work on the emitting thread (background=False): what the hand-over to the worker adds.
        inline_acc = inline_accumulators[kind] = Accumulator(bootstrap=0)
        inline = TPSSpanProcessor(inline_acc, background=False)
        inline_provider = TracerProvider()
        inline_provider.add_span_processor(inline)
        providers[f"{kind}: no-op processor"] = (noop_provider, None)
        providers[f"{kind}: TPS processor"] = (tps_provider, tps)
        providers[f"{kind}: TPS processor, inline"] = (inline_provider, inline)

    collections: dict[str, int] = dict.fromkeys(providers, 0)  # cyclic GC runs inside the timed regions
    timing: list[str] = []

    def count_collections(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and timing:
            collections[timing[0]] += 1

    gc.callbacks.append(count_collections)

    def one_round(name: str, tag: str) -> float:
        provider, processor = providers[name]
        kind = name.split(":")[0]
        tracer = provider.get_tracer("bench")
        gc.collect()
        timing.append(name)
        t0 = time.process_time()
        for i in range(RUNS):
            meta = json.dumps({"tps_trajectory_id": f"{tag}-{i}"})
            root = tracer.start_span("agent", attributes={"openinference.span.kind": "CHAIN", "metadata": meta})
            ctx = trace.set_span_in_context(root)
            for s, attrs in enumerate(llm_spans[kind]):
                tracer.start_span("ChatModel", context=ctx, attributes=attrs).end()
                if s < STEPS - 1:
                    tracer.start_span("search", context=ctx, attributes=tool_attrs).end()
            root.end()
        if processor is not None:
            processor.force_flush()
        spent = time.process_time() - t0
        timing.clear()
        return spent / (RUNS * STEPS)

    rows: dict[str, list[float]] = {name: [] for name in providers}
    for name in providers:
        one_round(name, f"warm-{name}")
    names = list(providers)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rows[name].append(one_round(name, f"r{r}-{name}"))
    gc.callbacks.remove(count_collections)
    for name, (_, processor) in providers.items():
        if processor is not None:
            kind = name.split(":")[0]
            n = (inline_accumulators if name.endswith("inline") else accumulators)[kind].n_finished
            processor.shutdown()
            assert n == RUNS * (rounds + 1), f"{name}: {n} runs recorded, {RUNS * (rounds + 1)} expected"
    print("Cyclic GC collections started inside the timed rounds, per 100 model calls (the worker's queue keeps")
    print("spans alive longer than inline work does, so more of them are young when a collection starts)")
    for name, n in collections.items():
        print(f"  {name:<40} {100 * n / (RUNS * STEPS * (rounds + 1)):6.1f}")
    added = {}
    for kind in llm_spans:
        table = _print_table(
            f"OpenTelemetry SDK, OpenInference spans ({STEPS} LLM spans per trace), {kind}, "
            f"process CPU per model call, median of {rounds} rounds",
            {v.split(": ")[1]: rows[v] for v in providers if v.startswith(kind + ":")},
            "no-op processor",
        )
        added[kind] = (table["TPS processor"], table["_no-op us/call"])
    return added


def print_targets(rounds: int, results: dict[str, dict[str, tuple[float, float]]]) -> None:
    """One line per adapter and payload: added process CPU per model call against issue 28's target."""
    print(f"Targets (issue 28): process CPU added per model call, median of {rounds} interleaved rounds")
    print(f"  {'adapter, payload':<34} {'added us':>9} {'no-op us':>9} {'x no-op':>8} {'target':>7}")
    for adapter, by_kind in results.items():
        for kind, (added, base) in by_kind.items():
            target = TARGETS[kind]
            verdict = "met" if added <= target else "not met"
            ratio = (base + added) / base
            print(
                f"  {adapter + ', ' + kind:<34} {added * 1e6:9.1f} {base * 1e6:9.1f} {ratio:8.2f}"
                f" {target * 1e6:5.0f}us {verdict}"
            )


# ------------------------------------------------------------------ 3. imports

# Peak RSS from /proc (VmHWM): getrusage's ru_maxrss survives exec, so a child would report
# its parent's peak.
_PROBE = """
import time
t0 = time.process_time()
{imports}
t = time.process_time() - t0
with open("/proc/self/status") as f:
    kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
print(t, kb)
"""
# The tps_tracer this script imported (a checkout given by PYTHONPATH, or the installed one): the
# probes import the same one, from a neutral directory (`-c` would put the cwd first on sys.path).
_ROOT = str(Path(tps_tracer.__file__).resolve().parents[1])


def _import_cost(imports: str) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MB) of `imports` in a fresh interpreter (CPU time: the wall time
    of an import on a shared machine is mostly other people's load)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(imports=imports)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
        env=env,
    )
    secs, kb = out.stdout.split()
    return float(secs), float(kb) / 1024


def import_costs(repeats: int = 5) -> dict[str, tuple[float, float]]:
    cases = {
        "langgraph + langchain": "import langgraph.graph, langchain.agents, langchain_core.callbacks",
        "  + tps_tracer.langchain": "import langgraph.graph, langchain.agents, langchain_core.callbacks\n"
        "import tps_tracer.langchain",
        "opentelemetry SDK": "import opentelemetry.sdk.trace",
        "  + tps_tracer.otel": "import opentelemetry.sdk.trace\nfrom tps_tracer.otel import TPSSpanProcessor",
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(repeats):  # interleaved
        for name, code in cases.items():
            samples[name].append(_import_cost(code))
    med = {
        name: (statistics.median(s[0] for s in xs), statistics.median(s[1] for s in xs)) for name, xs in samples.items()
    }
    print(f"Import cost, fresh interpreters, median of {repeats} (target: adapters add <= 0.1 s and <= 10 MB)")
    names = list(cases)
    for base, added in ((names[0], names[1]), (names[2], names[3])):
        (t0, m0), (t1, m1) = med[base], med[added]
        print(f"  {base:<26} {t0:7.3f} s CPU {m0:7.1f} MB peak RSS")
        print(f"  {added:<26} {t1:7.3f} s CPU {m1:7.1f} MB   (adds {t1 - t0:+.3f} s, {m1 - m0:+.1f} MB)")
    return med


# ------------------------------------------------------------------ 4. summary-mode latencies


def summary_latencies(n_runs: int, steps: int = 3, pace: float = 0.0) -> dict[str, float]:
    """p99.9 and max of each call on a summary-mode accumulator over n_runs runs (one thread), in
    wall time and in the caller thread's CPU time. pace: seconds of sleep between runs (the model's
    I/O in a real agent; 0: a tight loop, where the background scoring cannot keep up and the
    caller scores one batch in three itself, by design: backpressure)."""
    acc = Accumulator(bootstrap=0, mode="summary")
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    names = ("observe", "stop", "resolve")
    lat: dict[str, list[int]] = {k: [] for k in names}
    own: dict[str, list[int]] = {k: [] for k in names}
    forecasts = {"verbal": 0.7, "token_prob": 0.8}
    for i in range(n_runs):
        tid = f"s{i}"
        if pace:
            time.sleep(pace)
        for _ in range(steps):
            t0, c0 = clock(), cpu()
            acc.observe(tid, forecasts)
            own["observe"].append(cpu() - c0)
            lat["observe"].append(clock() - t0)
        t0, c0 = clock(), cpu()
        acc.stop(tid, "clean")
        own["stop"].append(cpu() - c0)
        lat["stop"].append(clock() - t0)
        t0, c0 = clock(), cpu()
        acc.resolve(tid, outcome=i & 1)
        own["resolve"].append(cpu() - c0)
        lat["resolve"].append(clock() - t0)
    out = {}
    how = f"{pace * 1e3:g} ms of sleep between runs" if pace else "a tight loop"
    print(f"Summary-mode accumulator, {n_runs:,} runs x {steps} steps, {how} (target p99.9 <= 100 us)")
    for name in names:
        a = np.asarray(lat[name], dtype=np.float64) / 1e3
        c = np.asarray(own[name], dtype=np.float64) / 1e3
        p999 = float(np.percentile(a, 99.9))
        out[f"{name} ({how})"] = p999
        print(
            f"  {name:<8} wall: median {np.median(a):7.1f} us  p99.9 {p999:8.1f} us  max {a.max():10.1f} us"
            f" | caller CPU: p99.9 {np.percentile(c, 99.9):8.1f} us  max {c.max():9.1f} us"
        )
    background = getattr(acc, "_background", None)
    if background is not None:
        print(f"  batches the caller scored itself (backpressure): {background.inline_runs}")
    acc.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--summary-runs", type=int, default=1_000_000)
    ap.add_argument("--summary-pace", type=float, default=0.0002, help="seconds between runs, paced variant")
    ap.add_argument(
        "--skip", action="append", default=[], choices=["langchain", "extraction", "otel", "imports", "summary"]
    )
    args = ap.parse_args(argv)
    if args.rounds < 5:
        ap.error("--rounds must be >= 5 (medians of at least 5 interleaved runs)")
    rng = np.random.default_rng(0)
    outputs = [("".join(e["token"] for e in lp["content"]), lp) for lp in (chat_logprobs(rng, s) for s in range(STEPS))]
    steps: list[Callable[[], Any]] = []
    results: dict[str, dict[str, tuple[float, float]]] = {}
    if "langchain" not in args.skip:
        steps.append(lambda: results.setdefault("LangChain handler", langchain_costs(args.rounds, outputs)))
    if "extraction" not in args.skip:
        steps.append(lambda: extraction_costs(args.rounds, outputs))
    if "otel" not in args.skip:
        steps.append(lambda: results.setdefault("span processor", otel_costs(args.rounds, outputs)))
    steps.append(lambda: results and print_targets(args.rounds, results))
    if "imports" not in args.skip:
        steps.append(import_costs)
    if "summary" not in args.skip:
        steps.append(lambda: summary_latencies(args.summary_runs))
        steps.append(lambda: summary_latencies(args.summary_runs, pace=args.summary_pace))
    for run in steps:
        run()
        print()


if __name__ == "__main__":
    main()
