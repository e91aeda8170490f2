"""Adversarial model outputs of about 1 MB, with the values the written grammar gives them.

Shared by tests/test_verbal_grammar.py (correct value and a generous time bound per text)
and tests/benchmarks/bench_extraction.py (worst / median time per text). Each case names
the regex blow-up it targets on the old extractor: repeated unclosed tags (quadratic),
`Action:` + spaces (cubic), `Final Answer:` + spaces (quadratic), plus long digit runs,
repeated keywords, unicode, NUL bytes, lone surrogates and CRLF line ends, and the forms of
issue 32 (prose percents, `is` forms, prose after labels, table cells, full-width digits).

`verbal` is the value the grammar of tps_tracer/capture/verbal_confidence.py gives (None:
no statement, or the last one is malformed); `action` is the text of the action span
(tps_tracer/capture/step_signals.py, DEFAULT_ACTION_SPAN), or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

SIZE = 1_000_000


def fill(unit: str, size: int) -> str:
    """`unit` repeated to about `size` characters."""
    return unit * max(1, size // len(unit))


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[int], str]  # size -> text
    verbal: float | None
    action: str | None
    targets: str  # what it attacks


CASES: tuple[Case, ...] = (
    Case(
        "unclosed_tags",
        lambda n: "<confidence>0.3</confidence>" + fill("<confidence>", n),
        0.3,
        None,
        "quadratic <confidence>(.*?)</confidence> on repeated unclosed tags",
    ),
    Case(
        "unclosed_tags_with_values",
        lambda n: "Confidence: 40%\n" + fill("<confidence>0.9 ", n),
        0.4,
        None,
        "unclosed tags that hold a value are not statements",
    ),
    Case(
        "action_then_spaces",
        lambda n: "Confidence: 70%\nAction:" + " " * n,
        0.7,
        None,
        "cubic Action\\s*:\\s*(.*?)\\s*\\n on one label and a space run",
    ),
    Case(
        "action_tool_then_spaces",
        lambda n: "Confidence: 70%\nAction: search" + " " * (n // 2) + "x" + " " * (n // 2),
        0.7,
        None,
        "a tool name followed by space runs and no Action Input",
    ),
    Case(
        "action_space_lines",
        lambda n: fill("Action:" + " " * 2000 + "\n", n) + "Confidence: 0.2",
        0.2,
        None,
        "the cubic pattern on every line",
    ),
    Case(
        "final_answer_then_spaces",
        lambda n: "<confidence>0.65</confidence>\nFinal Answer:" + " " * n + "Paris",
        0.65,
        "Paris",
        "quadratic Final\\s*Answer\\s*:\\s*(.*\\S) on a space run",
    ),
    Case(
        "final_answer_only_spaces",
        lambda n: "<confidence>0.65</confidence>\nFinal Answer:" + " " * n,
        0.65,
        None,
        "the same with no answer at all",
    ),
    Case(
        "spaced_tool_and_input",
        lambda n: "Action:" + " " * n + "search" + " " * 1000 + "\nAction Input: x",
        None,
        "search" + " " * 1000 + "\nAction Input: x",
        "long whitespace runs around a valid ReAct pair",
    ),
    Case(
        "many_react_pairs",
        lambda n: (
            "Confidence: 55%\n"
            + fill("Action: search\nAction Input: x\nObservation: y\n", n)
            + "Action: lookup\nAction Input: Paris\n"
        ),
        0.55,
        "lookup\nAction Input: Paris",
        "the last of ~20,000 ReAct pairs",
    ),
    Case(
        "action_labels_repeated",
        lambda n: "Confidence: 0.15 " + fill("Action:", n),
        0.15,
        None,
        "an Action: label every 7 characters, no input",
    ),
    Case(
        "action_input_labels_repeated",
        lambda n: fill("Action Input:", n),
        None,
        None,
        "an Action Input: label every 13 characters, no action",
    ),
    Case(
        "label_digit_run",
        lambda n: "Confidence: " + "9" * n,
        None,
        None,
        "a 1 MB number after a label (malformed: longer than 64 characters)",
    ),
    Case(
        "tag_digit_run",
        lambda n: "<confidence>" + "1" * n + "</confidence>",
        None,
        None,
        "a 1 MB number inside a tag (malformed)",
    ),
    Case(
        "json_digit_run",
        lambda n: '{"confidence": 0.' + "0" * n + "}",
        None,
        None,
        "a 1 MB JSON number (malformed)",
    ),
    Case(
        "digits_then_statement",
        lambda n: "1" * n + " Confidence: 0.25",
        0.25,
        None,
        "a digit run before the statement",
    ),
    Case(
        "keyword_repeated",
        lambda n: fill("confidence ", n) + "Confidence: 0.6",
        0.6,
        None,
        "90,000 keywords that are not statements",
    ),
    Case(
        "statements_repeated",
        lambda n: fill("confidence: 0.5 ", n) + "<confidence>0.35</confidence>",
        0.35,
        None,
        "62,000 statements; the last (a tag) wins",
    ),
    Case(
        "markdown_labels_repeated",
        lambda n: fill("**Confidence:** ", n) + "0.7",
        0.7,
        None,
        "markdown labels back to back",
    ),
    Case(
        "json_keys_repeated",
        lambda n: '{"confidence": 0.33}' + fill('"confidence"', n),
        0.33,
        None,
        "JSON keys without a colon",
    ),
    Case(
        "tag_then_label",
        lambda n: "<confidence>0.6</confidence>" + fill("lorem ipsum ", n) + "Confidence: 80%",
        0.8,
        None,
        "the last statement wins across formats",
    ),
    Case(
        "emoji",
        lambda n: fill("🙂", n) + "<confidence>0.8</confidence>",
        0.8,
        None,
        "astral characters (4 UTF-8 bytes each)",
    ),
    Case(
        "rtl",
        lambda n: fill("\u202eשלום עולם ", n) + "Confidence: 0.45",
        0.45,
        None,
        "right-to-left text and override marks",
    ),
    Case(
        "dotted_capital_i",
        lambda n: fill("İ", n) + "\nAction: search\nAction Input: q\nConfidence: 0.7",
        0.7,
        "search\nAction Input: q",
        "a character whose lower case is two characters (offsets must not shift)",
    ),
    Case(
        "nul_bytes",
        lambda n: "\x00" * n + "Confidence: 0.1",
        0.1,
        None,
        "NUL characters",
    ),
    Case(
        "lone_surrogates",
        lambda n: "\ud800" * n + "<confidence>0.9</confidence>",
        0.9,
        None,
        "lone surrogates (not encodable as UTF-8)",
    ),
    Case(
        "crlf",
        lambda n: fill("Thought: x\r\nAction: search\r\nAction Input: q\r\n", n) + "Confidence:\r\n 0.55\r\n",
        0.55,
        "search\r\nAction Input: q",
        "CRLF line ends",
    ),
    Case(
        "newlines",
        lambda n: "\n" * n + "Confidence: 0.5",
        0.5,
        None,
        "one million empty lines",
    ),
    # Issue 32's grammar: prose percents, `is` forms, prose labels, table rows, non-ASCII digits.
    Case(
        "percent_signs",
        lambda n: "Confidence: 0.4\n" + fill("90% ", n),
        0.4,
        None,
        "a percent every 4 characters, none before `sure`",
    ),
    Case(
        "negated_prose_percents",
        lambda n: "Confidence: 0.35\n" + fill("not 90% sure ", n),
        0.35,
        None,
        "77,000 negated prose percents (not statements)",
    ),
    Case(
        "prose_percents_repeated",
        lambda n: fill("I'm 90% sure ", n) + "I am 15 % certain",
        0.15,
        None,
        "77,000 prose statements; the last wins",
    ),
    Case(
        "is_forms_repeated",
        lambda n: "Confidence: 0.45 " + fill("my confidence is ", n),
        0.45,
        None,
        "`confidence is` without a number, 60,000 times",
    ),
    Case(
        "prose_labels_repeated",
        lambda n: "<confidence>0.25</confidence>" + fill("Note on confidence: rough ", n),
        0.25,
        None,
        "labels followed by prose (not statements)",
    ),
    Case(
        "table_cells_repeated",
        lambda n: fill("| Confidence | ", n) + "0.6 |",
        0.6,
        None,
        "markdown table cells back to back",
    ),
    Case(
        "fullwidth_digit_run",
        lambda n: "Confidence: " + fill("\uff19", n),
        None,
        None,
        "a 1 MB full-width number (malformed: too long)",
    ),
    Case(
        "approximations_repeated",
        lambda n: "Confidence: " + fill("about ", n),
        None,
        None,
        "an approximation word with no number, 160,000 times",
    ),
    Case(
        "open_angles",
        lambda n: "<" * n,
        None,
        None,
        "a million tag openings",
    ),
    # Defect D4: labels without a colon (a space, a dash, alone on their line) and no value.
    Case(
        "own_line_labels_repeated",
        lambda n: "Confidence: 0.45\n" + fill("## **Confidence level**  \n\n  \n- ", n),
        0.45,
        None,
        "labels alone on their line (line-start lookbehinds, blank lines) with no value after",
    ),
    Case(
        "spaced_labels_repeated",
        lambda n: "<confidence>0.25</confidence>" + fill("confidence 8 confidence \u2014 -- ", n),
        0.25,
        None,
        "labels followed by a space or a dash and a bare integer or nothing",
    ),
    Case(
        "spaced_label_digit_run",
        lambda n: "Confidence 70%\nConfidence " + "9" * n,
        0.7,
        None,
        "a spaced label before a million digits (bounded lookahead, then no statement)",
    ),
)


LOGPROB = math.log(0.5)  # every token's chosen logprob in `chat_logprobs`
TOKEN_CHARS = 16


def chat_logprobs(text: str, token_chars: int = TOKEN_CHARS) -> dict[str, object]:
    """OpenAI chat logprobs spelling `text` in tokens of `token_chars` characters, p = 0.5 each,
    two candidates of 0.5 (so entropy confidence is 1 - ln 2 / ln 5 everywhere)."""
    cands = [{"token": "a", "logprob": LOGPROB}, {"token": "b", "logprob": LOGPROB}]
    return {
        "content": [
            {"token": text[i : i + token_chars], "logprob": LOGPROB, "top_logprobs": cands}
            for i in range(0, len(text), token_chars)
        ]
    }
