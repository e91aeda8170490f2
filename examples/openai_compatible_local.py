"""TPS capture on an agent whose model runs on a local OpenAI-compatible server, logprobs on.

Needs `pip install '.[demo]' langchain-openai` (LangGraph, and LangChain's OpenAI client). Start a
server that returns chat logprobs, then point this script at it:

    # llama.cpp through llama-cpp-python (what the tests use; --logits_all is needed for logprobs)
    python -m llama_cpp.server --model model.gguf --host 127.0.0.1 --port 8000 --logits_all true
    # vLLM:   vllm serve <model> --port 8000
    # Ollama: ollama serve   (base URL http://127.0.0.1:11434/v1, if your version returns logprobs)

    python examples/openai_compatible_local.py --base-url http://127.0.0.1:8000/v1 --model <name> \
        [--grammar] [--out runs.jsonl]

The agent is a LangGraph loop in the paper's tagged format (the model writes
`<action>search[query]</action>` or `<action>finish[answer]</action>` and
`<confidence>0.XX</confidence>`). `TPSCallbackHandler` records each step's five forecasts
(the stated confidence; token probability and entropy confidence over the completion and
over the action's tokens), why each run stopped, and the outcome the grader gives; the JSON
Lines file it writes is what `tps-tracer report` scores. A server without logprobs still
gives the verbal confidence: the token signals are then missing (counted, never imputed).

`--grammar` sends llama.cpp's `grammar` field (GBNF) holding a small model to the format;
other servers name constrained decoding differently (vLLM: `guided_grammar`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.sim.agents import text_react_graph, text_react_inputs

INSTRUCTIONS = """You are a question-answering agent. You may use one tool:
search[query]: looks up a short fact.
When you know the answer, end with finish[answer].

At every step, use this exact format:
<action>search[query] or finish[answer]</action>
<confidence>0.XX</confidence>

confidence is a number between 0.0 and 1.0: the probability that the task will be solved correctly.

Question: """

GRAMMAR = r"""root ::= "<action>" tool "[" [a-z ]+ "]</action>\n<confidence>0." [0-9] [0-9] "</confidence>"
tool ::= "search" | "finish"
"""

FACTS = {"capital": "Paris is the capital of France.", "spider": "Spiders have eight legs."}
TASKS = {  # task id -> (question, a word the right answer contains)
    "capital-france": ("What is the capital of France?", "paris"),
    "spider-legs": ("How many legs does a spider have?", "eight"),
}


@tool
def search(query: str) -> str:
    """Look up a short fact."""
    hits = [fact for key, fact in FACTS.items() if key in query.lower()]
    return hits[0] if hits else "No result."


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="local", help="the model name the server expects")
    ap.add_argument("--api-key", default="not-needed")
    ap.add_argument("--grammar", action="store_true", help="send llama.cpp's `grammar` field")
    ap.add_argument("--max-steps", type=int, default=3, help="model calls per task")
    ap.add_argument("--out", default="runs.jsonl", help="JSON Lines of the captured runs")
    args = ap.parse_args(argv)

    model = ChatOpenAI(
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        temperature=0,
        seed=7,
        max_tokens=64,
        logprobs=True,  # the token signals need these two
        top_logprobs=5,
        extra_body={"grammar": GRAMMAR} if args.grammar else None,
    )
    agent = text_react_graph(model, [search])

    acc = Accumulator(sink=args.out, bootstrap=200)
    handler = TPSCallbackHandler(acc)
    for task_id, (question, expected) in TASKS.items():
        config = {
            "callbacks": [handler],
            "recursion_limit": 2 * args.max_steps,  # a model call and an action per step
            "metadata": {"tps_trajectory_id": task_id, "tps_horizon": args.max_steps},
        }
        try:
            state = agent.invoke(text_react_inputs(INSTRUCTIONS + question), config=config)
            answer = state.get("answer") or ""
            handler.record_outcome(task_id, success=expected in answer.lower())
        except Exception as exc:  # the step budget or exhausted repairs: the handler tagged the stop
            print(f"{task_id}: stopped by {type(exc).__name__}")
    handler.flush()
    report = acc.snapshot()
    handler.close()
    acc.close()
    # What was missing or malformed (no logprobs, no stated confidence...) is counted, never imputed.
    print(json.dumps({"trajectories": report["online"], "health": handler.health.snapshot()}))
    print(f"runs written to {args.out}; score them with: tps-tracer report {args.out}")
    return report


if __name__ == "__main__":
    main()
