"""tps-tracer's cost as a percentage of a real model call (SmolLM2-135M behind llama-cpp-python).

Each trajectory is a root runnable making CALLS chat-model calls to the local server
(`ChatOpenAI`, logprobs with top 5, temperature 0, the tagged format held by a grammar, so
every call yields all five signals). Configurations, interleaved round by round so drift of
this shared machine hits them alike:

- bare: no callbacks, no instrumentation (the baseline model call);
- TPS handler: `TPSCallbackHandler` (extraction on its background worker);
- TPS handler, inline: `background=False`, so all of its work (parsing the logprobs, the five
  signals, the accumulator update) runs in the callbacks;
- OpenInference: the LangChain instrumentor with an SDK TracerProvider (no exporter);
- OpenInference + TPS processor: the same plus `TPSSpanProcessor` (and its inline variant).

A few hundred microseconds vanish in the jitter of a 1 s call, so besides the wall-clock
medians (whose differences are mostly noise, shown for honesty) the cost is timed directly:
every callback of the handler, of OpenInference's tracer, and the processor's on_start /
on_end are wrapped with a perf_counter and summed per trajectory. Cost % = median (over the
trajectories) of the own time per call / median bare call (over all its calls).

    .venv/bin/python tests/benchmarks/bench_real_model.py [--rounds 5] [--calls 3] [--stream]

Needs `make real-model`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the server fixture and the prompt

from backends.llama_server import MODEL_ALIAS, LlamaServer
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor

SYSTEM = """You are a question-answering agent. You may use one tool:
search[query]: looks up a short fact.
When you know the answer, end with finish[answer].

At every step, use this exact format:
<action>search[query] or finish[answer]</action>
<confidence>0.XX</confidence>"""
GRAMMAR = r"""root ::= "<action>" tool "[" [a-z ]+ "]</action>\n<confidence>0." [0-9] [0-9] "</confidence>"
tool ::= "search" | "finish"
"""


class Stopwatch:
    """Wraps the named methods of an object (instance attributes shadow the class's) and sums their time."""

    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0  # nested calls (a callback calling another wrapped one) count once

    def wrap(self, obj: Any, names: list[str]) -> None:
        for name in names:
            original = getattr(obj, name)
            setattr(obj, name, self._timed(original))

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.total += time.perf_counter() - t0

        return timed

    def take(self) -> float:
        total, self.total = self.total, 0.0
        return total


def callback_names(obj: Any) -> list[str]:
    return [n for n in dir(obj) if n.startswith("on_") and callable(getattr(obj, n))]


class Config:
    def __init__(self, name: str, callbacks: list[Any], watch: Stopwatch | None, oi: bool, processor: Any = None):
        self.name, self.callbacks, self.watch, self.oi, self.processor = name, callbacks, watch, oi, processor
        self.wall: list[float] = []  # seconds per model call
        self.own: list[float] = []  # seconds of tps-tracer's (or OpenInference's) own work per model call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3, help="model calls per trajectory (per config and round)")
    ap.add_argument("--stream", action="store_true", help="stream the model's tokens (a callback per token)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-real-"))
    server = LlamaServer(work)
    server.start()
    try:
        run(server, args)
    finally:
        server.stop()


def run(server: LlamaServer, args: argparse.Namespace) -> None:
    model = ChatOpenAI(
        base_url=server.base_url,
        api_key="not-needed",  # type: ignore[arg-type]
        model=MODEL_ALIAS,
        temperature=0,
        seed=7,
        max_tokens=32,
        logprobs=True,
        top_logprobs=5,
        streaming=args.stream,
        extra_body={"grammar": GRAMMAR},
        max_retries=0,
    )
    messages = [SystemMessage(SYSTEM), HumanMessage("What is the capital of France?")]

    configs: list[Config] = [Config("bare", [], None, oi=False)]
    accumulators: list[Accumulator] = []
    for inline in (False, True):
        acc = Accumulator(bootstrap=0)
        accumulators.append(acc)
        handler = TPSCallbackHandler(acc, background=not inline)
        watch = Stopwatch()
        watch.wrap(handler, callback_names(handler))
        configs.append(Config("TPS handler" + (", inline" if inline else ""), [handler], watch, oi=False))
    # OpenInference rows: the tracer's own time (span creation, attributes, the SDK, and any
    # processor's on_start/on_end inside it); the TPS rows time only the processor's calls.
    configs.append(Config("OpenInference", [], Stopwatch(), oi=True))
    for inline in (False, True):
        acc = Accumulator(bootstrap=0)
        accumulators.append(acc)
        processor = TPSSpanProcessor(acc, background=not inline)
        watch = Stopwatch()
        watch.wrap(processor, ["on_start", "on_end"])
        name = "TPS span processor" + (", inline" if inline else "")
        configs.append(Config(name, [], watch, oi=True, processor=processor))
    oi_watch = Stopwatch()  # the tracer's time in the TPS processor rows (OpenInference + processor)
    oi_with_tps: list[float] = []

    def one_trajectory(cfg: Config, tid: str, timed: list[tuple[Stopwatch, list[float]]]) -> None:
        """One root run of `args.calls` model calls. Each stopwatch's time over the whole run (the root's
        start and end included) is booked per call as the run's mean: the processor does most of its
        work when the root ends, so a per-call median would miss it."""

        def loop(_: Any) -> None:
            for _ in range(args.calls):
                t0 = time.perf_counter()
                model.invoke(messages)
                cfg.wall.append(time.perf_counter() - t0)

        RunnableLambda(loop).invoke(None, config={"callbacks": cfg.callbacks, "metadata": {"tps_trajectory_id": tid}})
        for watch, out in timed:
            out.append(watch.take() / args.calls)

    model.invoke(messages)  # warm the server's prompt cache before timing anything
    for r in range(args.rounds):
        for cfg in configs:
            timed = [] if cfg.watch is None else [(cfg.watch, cfg.own)]
            if not cfg.oi:
                one_trajectory(cfg, f"{cfg.name}-{r}", timed)
                continue
            provider = TracerProvider()
            if cfg.processor is not None:
                provider.add_span_processor(cfg.processor)
                timed.append((oi_watch, oi_with_tps))
            instrumentor = LangChainInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            tracer_watch = cfg.watch if cfg.processor is None else oi_watch
            assert tracer_watch is not None
            tracer_watch.wrap(instrumentor._tracer, callback_names(instrumentor._tracer))
            try:
                one_trajectory(cfg, f"{cfg.name}-{r}", timed)
            finally:
                instrumentor.uninstrument()
        for cfg in configs:
            if cfg.processor is not None:
                cfg.processor.force_flush()

    bare = statistics.median(configs[0].wall)
    tps_handler = [c for c in configs if c.name.startswith("TPS handler")]
    for c in tps_handler:
        c.callbacks[0].flush()
    print(
        f"SmolLM2-135M Q4_1, llama-cpp-python {_version()} on 127.0.0.1, 1 thread; "
        f"{'streamed, ' if args.stream else ''}grammar-held tagged step, top-5 logprobs; "
        f"{args.rounds} rounds x {args.calls} calls per configuration"
    )
    print(f"median bare model call: {bare * 1e3:.0f} ms\n")
    print(f"{'configuration':<40} {'call ms':>8} {'x bare':>7} {'own us/call':>12} {'own % of call':>14}")
    for cfg in configs:
        wall = statistics.median(cfg.wall)
        own = statistics.median(cfg.own) if cfg.own else 0.0
        label = cfg.name if cfg.processor is None else cfg.name + " (behind OI)"
        print(f"{label:<40} {wall * 1e3:8.0f} {wall / bare:7.3f} {own * 1e6:12.0f} {100 * own / bare:13.3f}%")
    if oi_with_tps:
        oi = statistics.median(oi_with_tps)
        print(f"{'OpenInference (in the TPS rows)':<40} {'':>8} {'':>7} {oi * 1e6:12.0f} {100 * oi / bare:13.3f}%")
    print(
        "\nown: time inside the timed callbacks per model call (OpenInference: its tracer, SDK included; "
        "the TPS processor's on_start/on_end run inside it). inline: all extraction and scoring in the callbacks.\n"
        "The background rows include waiting for the GIL while the worker extracts the previous call "
        "(up to the 5 ms switch interval when the worker is busy)."
    )
    for acc in accumulators:
        acc.close()
    trajectories = sum(acc.n_finished for acc in accumulators)
    print(f"trajectories captured by the TPS configurations: {trajectories}")


def _version() -> str:
    import llama_cpp

    return str(llama_cpp.__version__)


if __name__ == "__main__":
    main()
