"""Per-LLM-call overhead of TPSCallbackHandler on the agent's path (issue target: <= 100 us).

A root chain makes K chat-model calls; each returns a 300-token completion with top-5
OpenAI logprobs. We time the calls with: no callbacks; a no-op BaseCallbackHandler; the
TPS handler (background feeder: extraction runs on its worker thread, timed separately
as `flush`); and OpenInference's LangChain instrumentor with a real OTel SDK tracer
provider. Medians of repeated rounds, and ratios to the no-callback baseline measured in
the same run (the machine is shared and noisy).

    .venv/bin/python tests/benchmarks/bench_handler.py
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler

TOKENS = 300
CALLS = 40
ROUNDS = 15


def _logprobs(rng: np.random.Generator) -> dict[str, Any]:
    content = []
    for i in range(TOKENS):
        top = np.sort(rng.dirichlet(np.ones(5)))[::-1]
        tok = f"tok{i} " if i != 150 else "<confidence>0.8</confidence>"
        content.append(
            {
                "token": tok,
                "logprob": math.log(top[0]),
                "bytes": list(tok.encode()),
                "top_logprobs": [{"token": f"t{j}", "logprob": math.log(p), "bytes": None} for j, p in enumerate(top)],
            }
        )
    return {"content": content}


class FixedModel(BaseChatModel):
    """Returns the same 300-token message with logprobs every call (no I/O, no randomness)."""

    text: str
    logprobs: dict[str, Any]
    latency: float = 0.0  # seconds of simulated network wait (sleep releases the GIL, as socket I/O does)

    @property
    def _llm_type(self) -> str:
        return "fixed"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        if self.latency:
            time.sleep(self.latency)
        info = {"logprobs": self.logprobs, "finish_reason": "stop"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.text), generation_info=info)])


class NoOp(BaseCallbackHandler):
    pass


def _round(model: FixedModel, callbacks: list[Any], trajectory: str) -> float:
    msgs = [HumanMessage("hello")]

    def loop(_: Any) -> None:
        for _ in range(CALLS):
            model.invoke(msgs)

    root = RunnableLambda(loop)
    t0 = time.perf_counter()
    root.invoke(None, config={"callbacks": callbacks, "metadata": {"tps_trajectory_id": trajectory}})
    return (time.perf_counter() - t0) / CALLS


def _inside_callbacks(model: FixedModel, rounds: int) -> float:
    """Agent-thread CPU spent inside the capture-only handler's callbacks, per model call.

    The wall-clock "own cost" is a difference of two ~200 us medians and swings 5-26 us between
    runs of one tree; timing only the handler's own frames (thread CPU) resolves a 5% change.
    """
    held: list[tuple[Any, ...]] = []
    handler = TPSCallbackHandler(Accumulator(bootstrap=0))
    handler.feeder._submit = lambda event, on_loss=None: held.append(event)  # type: ignore[method-assign]
    spent = [0]

    def timed(method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return method(*args, **kwargs)
            finally:
                spent[0] += time.thread_time_ns() - t0

        return wrapper

    for name in dir(handler):
        if name.startswith("on_") and callable(getattr(handler, name)):
            setattr(handler, name, timed(getattr(handler, name)))
    per_call = []
    for r in range(rounds + 1):  # the first round warms up and is dropped
        spent[0] = 0
        _round(model, [handler], f"h{r}")
        held.clear()
        per_call.append(spent[0] / CALLS / 1e9)
    handler.close()
    return statistics.median(per_call[1:])


def main() -> None:
    rng = np.random.default_rng(0)
    lp = _logprobs(rng)
    model = FixedModel(text="".join(e["token"] for e in lp["content"]), logprobs=lp)
    acc = Accumulator(bootstrap=0)
    tps = TPSCallbackHandler(acc)
    # Capture only: the same handler with its feeder's queue held, so the worker cannot run
    # during the calls (isolates the callbacks' own cost from GIL contention with the worker).
    held: list[tuple[Any, ...]] = []
    capture_only = TPSCallbackHandler(Accumulator(bootstrap=0))
    capture_only.feeder._submit = lambda event, on_loss=None: held.append(event)  # type: ignore[method-assign]
    results: dict[str, list[float]] = {
        "no callbacks": [],
        "no-op handler": [],
        "TPS capture only": [],
        "TPS handler": [],
    }
    flush: list[float] = []
    for r in range(ROUNDS):
        results["no callbacks"].append(_round(model, [], f"a{r}"))
        results["no-op handler"].append(_round(model, [NoOp()], f"b{r}"))
        results["TPS capture only"].append(_round(model, [capture_only], f"e{r}"))
        held.clear()
        results["TPS handler"].append(_round(model, [tps], f"c{r}"))
        t0 = time.perf_counter()
        tps.flush()
        flush.append((time.perf_counter() - t0) / CALLS)

    # With 20 ms of network wait per call (real endpoints take 100s of ms), the worker extracts
    # while the agent waits on I/O.
    slow = model.model_copy(update={"latency": 0.02})
    net: dict[str, list[float]] = {"no-op handler": [], "TPS handler": []}
    for r in range(max(3, ROUNDS // 3)):
        net["no-op handler"].append(_round(slow, [NoOp()], f"f{r}"))
        net["TPS handler"].append(_round(slow, [tps], f"g{r}"))
    tps.flush()
    inside = _inside_callbacks(model, 4 * ROUNDS)

    try:
        from openinference.instrumentation.langchain import LangChainInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        inst = LangChainInstrumentor()
        inst.instrument(tracer_provider=provider)
        oi = []
        for r in range(max(3, ROUNDS // 3)):
            oi.append(_round(model, [], f"d{r}"))
            exporter.clear()
        inst.uninstrument()
        results["OpenInference"] = oi
    except ImportError as exc:  # optional in the bench: say so rather than hide it
        print(f"OpenInference instrumentor unavailable ({exc}); its row is omitted")

    base = statistics.median(results["no callbacks"])
    print(
        f"Per chat-model call, {TOKENS}-token completion with top-5 logprobs, {CALLS} calls x {ROUNDS} rounds (median)"
    )
    print(f"{'configuration':<18} {'us/call':>10} {'added us':>10} {'x baseline':>11}")
    for name, xs in results.items():
        m = statistics.median(xs)
        print(f"{name:<18} {m * 1e6:10.1f} {(m - base) * 1e6:10.1f} {m / base:11.2f}")
    noop = statistics.median(results["no-op handler"])
    own = statistics.median(results["TPS capture only"]) - noop
    # The worker takes the GIL from a CPU-bound agent after the 5 ms switch interval, so a 40-call (~7 ms)
    # round sees 0 or 1 extraction batch: this row moves in steps of ~20 us with what the worker does first.
    contended = statistics.median(results["TPS handler"]) - noop
    net_added = statistics.median(net["TPS handler"]) - statistics.median(net["no-op handler"])
    print("\nAdded per call beyond a no-op handler (target <= 100 us on the agent's path):")
    print(f"  callbacks' own cost (capture only)                      {own * 1e6:8.1f} us")
    print(f"  time inside the callbacks (agent thread CPU, guard)     {inside * 1e6:8.1f} us")
    print(f"  CPU-bound loop, worker extracting concurrently (GIL)    {contended * 1e6:8.1f} us")
    print(f"  with 20 ms network wait per call (worker runs in the wait) {net_added * 1e6:5.1f} us")
    print(f"Off the path, feeder worker (extraction + accumulator) per call: {statistics.median(flush) * 1e6:.0f} us")
    tps.close()
    print(f"trajectories captured: {acc.n_finished}, rejected inputs: {dict(acc.rejected) or 'none'}")


if __name__ == "__main__":
    main()
