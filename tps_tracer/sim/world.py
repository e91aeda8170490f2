"""A ground-truth world for ReAct agents: theta ~ Beta(a, b), Y ~ Bernoulli(theta), the `search` tool reveals
s_t ~ Bernoulli(theta), so q_t = (a + s_1 + ... + s_{t-1}) / (a + b + t - 1) exactly. Draws are fixed by (seed, task
index); a continuation branch draws from the law given its prefix (seed, thread id, step): it succeeds w.p. q_Z."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from tps_tracer.errors import InputError
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.scoring import FloatArray
from tps_tracer.synthetic import FORECASTERS, TaskPrior, logit, sigmoid
from tps_tracer.tracking.keys import DEFAULT_REPAIR_BUDGET  # the paper's harness: two repairs per step

# The top-k alternatives share the chosen token's missing mass in these fixed proportions,
# so the k candidates sum to exactly 1 and the entropy has a closed form.
ALTERNATIVE_SHARES = (0.5, 0.25, 0.15, 0.1)

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split text into tokens that concatenate back to it (whitespace runs, words, symbols)."""
    return _TOKEN.findall(text)  # the pattern covers every character, so nothing is lost


@dataclass(frozen=True)
class WorldConfig(TaskPrior):
    max_length: int = 12
    malformed_rate: float = 0.04  # per step: chance the model first emits 1-3 malformed outputs
    tool_failure_rate: float = 0.01  # per tool call: chance the tool raises (a fatal tool error)
    forecaster: str = "truthful"


@dataclass(frozen=True)
class StepScript:
    """One well-formed LLM call of a task: its latent state and what the model states."""

    t: int
    q: float  # true P(Y=1 | H_t)
    verbal: float  # the stated confidence, as written (two decimals)
    evidence: int  # s_t, revealed by this step's tool call
    malformed_before: int  # malformed outputs the model emits before this one
    tool_fails: bool  # this step's tool call raises
    final: bool  # the step that answers (t == L)
    token_seed: int  # fixes the token probabilities of the rendered text


@dataclass(frozen=True)
class Expected:
    stop_reason: StopReason
    n_steps: int  # well-formed LLM calls (the trajectory's steps)
    n_calls: int  # all LLM calls, malformed ones included
    outcome: int | None  # Y when the task finished cleanly


@dataclass(frozen=True)
class TaskScript:
    task_id: str
    theta: float
    outcome: int  # Y, ground truth even when the run is censored
    length: int  # natural length L: the L-th step answers
    steps: list[StepScript] = field(repr=False)

    def expected(self, budget: int | None, repairs: bool = True) -> Expected:
        """How a run of this task ends under an LLM-call budget (None: unlimited; malformed calls count).
        repairs: the runtime retries malformed output (text loops, DEFAULT_REPAIR_BUDGET times) instead of
        ending the run on it."""
        calls = 0
        for step in self.steps[: self.length]:
            for k in range(step.malformed_before + 1):  # the malformed attempts, then the good call (k == m)
                if budget is not None and calls == budget:
                    return Expected(StopReason.MAX_STEPS, step.t - 1, calls, None)
                calls += 1
                if k < step.malformed_before and (not repairs or k + 1 > DEFAULT_REPAIR_BUDGET):
                    return Expected(StopReason.PARSE_ERROR, step.t - 1, calls, None)
            if step.final:
                return Expected(StopReason.CLEAN, step.t, calls, self.outcome)
            if step.tool_fails:
                return Expected(StopReason.TOOL_ERROR, step.t, calls, None)
        raise AssertionError("unreachable: the last step answers")  # pragma: no cover


class AgentWorld:
    """Tasks of one world, scripted deterministically from a seed."""

    def __init__(self, n_tasks: int, seed: int = 0, config: WorldConfig = WorldConfig()):
        if config.forecaster not in FORECASTERS:
            raise InputError(f"unknown forecaster {config.forecaster!r}; choose from {sorted(FORECASTERS)}")
        self.config = config
        self.seed = seed
        ids = (f"task-{i:05d}" for i in range(n_tasks))
        self.tasks = {task_id: self._script(task_id, np.random.default_rng([seed, i])) for i, task_id in enumerate(ids)}

    def __getitem__(self, task_id: str) -> TaskScript:
        return self.tasks[task_id]

    def __iter__(self) -> Iterator[TaskScript]:
        return iter(self.tasks.values())

    def _script(self, task_id: str, rng: np.random.Generator) -> TaskScript:
        c = self.config
        theta = float(rng.beta(c.prior_a, c.prior_b))
        outcome = int(rng.random() < theta)
        length = int(rng.integers(c.min_length, c.max_length + 1))
        n = c.max_length
        evidence = (rng.random(n) < theta).astype(int)
        noise = rng.normal(size=n)
        malformed = np.where(rng.random(n) < c.malformed_rate, rng.integers(1, 4, n), 0)
        fails = rng.random(n) < c.tool_failure_rate
        seeds = rng.integers(0, 2**31, n)
        t = np.arange(1, n + 1)
        q = (c.prior_a + np.concatenate(([0], np.cumsum(evidence)[:-1]))) / (c.prior_a + c.prior_b + t - 1)
        verbal = np.clip(FORECASTERS[c.forecaster](q, noise), 0.0, 1.0)
        columns = (t, q, verbal, evidence, malformed, fails, t == length, seeds)
        rows = zip(*(col.tolist() for col in columns), strict=True)
        steps = [StepScript(i, q_i, round(stated, 2), *rest) for i, q_i, stated, *rest in rows]
        return TaskScript(task_id, theta, outcome, length, steps)


# ---------------------------------------------------------------- continuations (the law given a prefix)


def branch_stream(thread_id: str) -> int:
    """A 64-bit seed component from a branch's thread id (stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).digest()[:8], "big")


def q_given(config: WorldConfig, evidence: Sequence[int]) -> float:
    """P(Y = 1 | s_1..s_n) = (a + sum s) / (a + b + n): the exact q_t of step t = n + 1."""
    return (config.prior_a + sum(evidence)) / (config.prior_a + config.prior_b + len(evidence))


def continuation_step(
    config: WorldConfig, seed: int, thread_id: str, evidence: Sequence[int]
) -> tuple[StepScript, int | None]:
    """The model's call t = len(evidence) + 1 in a branch, drawn from the world's law given the prefix (its
    evidence -1: the tool draws the clue), and Y if it answers (1: the claim is confirmed)."""
    t = len(evidence) + 1
    rng = np.random.default_rng([seed, branch_stream(thread_id), t, 0])
    u_malformed, u_final, u_outcome = rng.random(3)
    q = q_given(config, evidence)
    verbal = round(min(1.0, max(0.0, float(FORECASTERS[config.forecaster](q, float(rng.normal()))))), 2)
    malformed = bool(u_malformed < config.malformed_rate)
    lo, hi = config.min_length, config.max_length  # P(L = t | L >= t) for the natural length L ~ Uniform{lo..hi}
    final = bool(u_final < (0.0 if t < lo else 1.0 if t >= hi else 1.0 / (hi - t + 1)))
    step = StepScript(t, q, verbal, -1, int(malformed), False, final, int(rng.integers(0, 2**31)))
    return step, int(u_outcome < q) if final and not malformed else None


def continuation_clue(config: WorldConfig, seed: int, thread_id: str, evidence: Sequence[int]) -> tuple[bool, int]:
    """The tool's clue t = len(evidence) + 1 in a branch: (the call fails, s_t ~ Bernoulli(q_t))."""
    rng = np.random.default_rng([seed, branch_stream(thread_id), len(evidence) + 1, 1])
    u_fail, u_evidence = rng.random(2)
    return bool(u_fail < config.tool_failure_rate), int(u_evidence < q_given(config, evidence))


# ---------------------------------------------------------------- what the model writes

ANSWER = "yes"  # the answer that confirms the claim (Y = 1)
WRONG_ANSWER = "no"  # a continuation branch's answer when it fails (Y = 0)
TextStyle = Literal["tagged", "react"]  # the paper's tagged format, LangChain's text ReAct format


@dataclass(frozen=True)
class Rendered:
    """A step's text in one output style, its tokens, and their chosen-token probabilities."""

    text: str
    tokens: list[str]
    probs: FloatArray
    action_tokens: NDArray[np.bool_]


def query_of(task_id: str, t: int) -> str:
    return f"{task_id} clue {t}"


def render(task_id: str, step: StepScript, style: TextStyle = "tagged", answer: str = ANSWER) -> Rendered:
    """The step's text: the paper's tagged format, or LangChain's text ReAct format."""
    if style == "tagged":
        action = f"finish[{answer}]" if step.final else f"search[{query_of(task_id, step.t)}]"
        text = (
            f"<think>Step {step.t}: {'I have enough evidence' if step.final else 'I need another clue'}.</think>\n"
            f"<action>{action}</action>\n"
            f"<confidence>{step.verbal:.2f}</confidence>\n"
            "<explanation>Based on the evidence so far.</explanation>"
        )
        start = text.index("<action>") + len("<action>")
    else:  # react
        head = f"Thought: step {step.t}, {'I now know the final answer' if step.final else 'I need another clue'}.\n"
        head += f"Confidence: {step.verbal:.2f}\n"
        head += "Final Answer: " if step.final else "Action: "
        action = answer if step.final else f"search\nAction Input: {query_of(task_id, step.t)}"
        text = head + action
        start = len(head)
    tokens = tokenize(text)
    bounds = np.cumsum([0] + [len(tok) for tok in tokens])
    mask = (bounds[:-1] < start + len(action)) & (bounds[1:] > start)
    # Tokens are confident except in the action, whose confidence tracks q_t.
    rng = np.random.default_rng(step.token_seed)
    probs = rng.uniform(0.85, 0.999, len(tokens))
    centre = sigmoid(0.8 * logit(step.q) + 1.0)
    probs[mask] = np.clip(centre + rng.normal(0.0, 0.05, int(mask.sum())), 0.05, 0.995)
    return Rendered(text, tokens, probs, mask)


def render_malformed(task_id: str, step: StepScript, attempt: int, style: TextStyle = "tagged") -> str:
    """An output the runtime's parser rejects: the action is missing."""
    if style == "tagged":
        return (
            f"<think>Step {step.t}, attempt {attempt}: let me think about this.</think>\n<confidence>0.5</confidence>"
        )
    return f"Thought: step {step.t}, attempt {attempt}, let me think about this."


# ---------------------------------------------------------------- ground-truth signals


def openai_logprobs(tokens: list[str], probs: FloatArray) -> dict[str, list[dict[str, object]]]:
    """OpenAI chat `logprobs` for the tokens: chosen probability p, four alternatives sharing 1 - p."""
    content = []
    for tok, p in zip(tokens, probs, strict=True):
        alts = [(1.0 - p) * s for s in ALTERNATIVE_SHARES]
        top = [{"token": tok, "logprob": math.log(p), "bytes": list(tok.encode())}]
        top += [{"token": f"<alt{j}>", "logprob": math.log(a), "bytes": None} for j, a in enumerate(alts)]
        content.append({"token": tok, "logprob": math.log(p), "bytes": list(tok.encode()), "top_logprobs": top})
    return {"content": content}


def expected_forecasts(rendered: Rendered, verbal: float) -> dict[str, float]:
    """The five predictors of a rendered step in closed form (the five candidates sum to 1: no renormalisation)."""
    p = rendered.probs
    shares = np.asarray(ALTERNATIVE_SHARES)
    cand = np.column_stack([p, (1.0 - p)[:, None] * shares[None, :]])
    entropy = -(cand * np.log(cand)).sum(axis=1)
    conf = 1.0 - entropy / math.log(cand.shape[1])  # the paper's 1 - H / ln 5
    m = rendered.action_tokens
    return {
        "verbal": verbal,
        "token_prob": float(p.mean()),
        "entropy_conf": float(conf.mean()),
        "action_token_prob": float(p[m].mean()),
        "action_entropy_conf": float(conf[m].mean()),
    }
