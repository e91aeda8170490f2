"""The verbal grammar's one-pass regex, rewritten for its worst case, reads as before.

Three readers of the same texts must agree on every statement: the extractor (the new
one-pass regex), the same extractor with the regex of commit a833c45 (frozen in
tests/verbal_old_regex.py, before the rewrite), and the statement patterns run one by one
(`patterns=DEFAULT_PATTERNS`, the slow path, on ASCII texts: it runs on the text as given,
not on the folded copy, so it reads no non-ASCII dash or digit). The texts are drawn from a seeded generator of
labels, separators, values and prose: every form of the grammar (tag, key, label, spaced label,
label alone on its line, `is`, prose percent), the near misses around each (glued keywords,
bare integers, words, negations, too many blank lines or spaces, a scale in brackets before
`is`), joined in random order, so the last statement and the forms before it vary.
No documented defect of the old regex is excepted: none showed up.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from verbal_old_regex import OLD_KEYWORD_REGEX

from tps_tracer.capture import VerbalConfidenceExtractor
from tps_tracer.capture.verbal_confidence import DEFAULT_PATTERNS

KEYWORDS = (
    "confidence",
    "Confidence",
    "CONFIDENCE",
    "overconfidence",
    "self-confidence",
    "low_confidence",
    "confidence level",
    "Confidence_score",
    "confidence-value",
    "confidence  estimate",
    "Confidence Rating",
    "confidence (1-10)",
    "Confidence [0-100]",
    "confidence (out of 5)",
    "Confidence (%)",
    "confidence ( 0 – 1 )",
    "**Confidence**",
    "__confidence__",
    "*Confidence level*",
    "Confidence level (1-10)",
)
SEPARATORS = (
    ":",
    ": ",
    " : ",
    "=",
    " = ",
    "|",
    " | ",
    "**:**",
    ":**",
    " ",
    "  ",
    "\t",
    "         ",
    " - ",
    " -- ",
    " -",
    "-",
    " — ",
    " – ",
    " \u00a0",
    " ≈ ",
    " → ",
    "\n",
    "  \n",
    "\n\n",
    "\n \n\n- ",
    "\r\n",
    "\n" * 10,
    " is ",
    " was ",
    " of ",
    " at ",
    "  is  ",
    " is    ",
    " is",
    "",
)
VALUES = (
    "70%",
    "70 %",
    "70 percent",
    "0.7",
    ".7",
    "0,7",
    "1.0",
    "1",
    "8",
    "85",
    "7.5",
    "150",
    "7/10",
    "3 out of 4",
    "1 in 3",
    "50/50",
    "high",
    "very low",
    "medium",
    "about 80%",
    "roughly 0.6",
    "~0.5",
    "≈0.7",
    ">0.8",
    "<= 0.4",
    "at least 80%",
    "between 70% and 80%",
    "70-80%",
    "0.7-0.8",
    "50-90%",
    "-0.2",
    "+0.3",
    "0.9 -> 0.7",
    "０.８",
    "٠٫٨",
    "*0.9*",
    "**85%**",
    "`0.6`",
    "(0.85)",
    '"0.7"',
    "'80%'",
    "0.8abc",
    "?",
    "unknown",
    "1,000",
    "8/0",
    "12/10",
    "1e-1",
    "9" * 70,
    "",
)
PROSE = (
    "I'm 90% sure",
    "I am 15 % certain",
    "not 90% sure",
    "less than 80% confident",
    "at least 70% sure",
    "90% of the time",
    "The answer is Paris.",
    "Action: search\nAction Input: q",
    "## Result",
    "- item",
    "> quote",
    "my confidence is high",
    "confidence 2 tools",
    "Note on confidence: rough",
    "\n",
    "\n\n",
    "<confidence>0.6</confidence>",
    "<confidence >0.4</confidence>",
    "<confidence>",
    '{"confidence": 0.33}',
    "{'confidence_score': '80%'}",
    '"confidence" : "high"',
    '"Confidence level": 7',
    "",
)
MARKUP = ("", "", "", "## ", "**", "- ", "> ", "  ", "### **", "1. ", "text ")


def _statement(rng: random.Random) -> str:
    return rng.choice(MARKUP) + rng.choice(KEYWORDS) + rng.choice(SEPARATORS) + rng.choice(VALUES)


def _text(rng: random.Random) -> str:
    parts = [_statement(rng) if rng.random() < 0.6 else rng.choice(PROSE) for _ in range(rng.randint(1, 5))]
    return "".join(p + rng.choice(("\n", " ", "", "\n\n", ". ")) for p in parts)


def _old_reader(**kw: object) -> VerbalConfidenceExtractor:
    old = VerbalConfidenceExtractor(**kw)  # type: ignore[arg-type]
    old._fast = re.compile(OLD_KEYWORD_REGEX)  # the frozen regex in the same reading code
    return old


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [None, "1-10"])
def test_old_new_and_slow_readers_agree(seed: int, scale: str | None) -> None:
    rng = random.Random(seed)
    new = VerbalConfidenceExtractor(verbal_scale=scale)
    old = _old_reader(verbal_scale=scale)
    slow = VerbalConfidenceExtractor(verbal_scale=scale, patterns=list(DEFAULT_PATTERNS))
    statuses: Counter[str] = Counter()
    for _ in range(2500):
        text = _text(rng)
        got = new.from_text(text)
        assert got == old.from_text(text), text
        if text.isascii():  # the patterns run as given, not on the folded text: no `—`, `≈`, `０`
            assert got == slow.from_text(text), text
        statuses[got.status] += 1
    # The texts exercise readings and refusals alike (a generator of misses only could not fail).
    assert statuses["ok"] > 500 and statuses["missing"] > 100 and statuses["malformed"] + statuses["ambiguous"] > 300


def test_each_form_is_generated_and_read() -> None:
    # One text per form, as the generator writes them: each is read the same by the three readers.
    new, old = VerbalConfidenceExtractor(), _old_reader()
    for text, value in [
        ("<confidence>0.6</confidence>", 0.6),
        ('{"confidence": 0.33}', 0.33),
        ("Confidence: 70%", 0.7),
        ("Confidence — 0.7", 0.7),
        ("## Confidence\n\n- 70%", 0.7),
        ("my confidence is 0.9", 0.9),
        ("I'm 90% sure", 0.9),
        ("confidence level is 0.4", 0.4),
    ]:
        assert new.from_text(text).value == old.from_text(text).value == value, text
    # Near misses: a scale in brackets or emphasis before `is`, more than 3 spaces, a bare integer.
    for text in ["confidence (1-10) is 0.8", "**confidence** is 0.8", "confidence    is 0.8", "Confidence 8"]:
        assert new.from_text(text).status == old.from_text(text).status == "missing", text


def test_longest_label_alone_on_its_line_is_read() -> None:
    # The own-line form is tried only when a line end is within 42 characters of the keyword:
    # the longest label it allows (suffix, scale in brackets, emphasis, whitespace, `\r`) is read.
    # suffix (3 + 8), scale (3 + 1 + 2 + 6 + 2 + 3 + 2 + 1), emphasis (2), spaces (8), `\r` (1): 42.
    label = "Confidence" + " - estimate" + "   (  out of  100  )" + "**" + " " * 8 + "\r\n"
    assert len(label) - len("Confidence") == 42 + 1
    text = label + "0.7"
    assert VerbalConfidenceExtractor().from_text(text).value == 0.7
    assert _old_reader().from_text(text).value == 0.7
    assert VerbalConfidenceExtractor(patterns=list(DEFAULT_PATTERNS)).from_text(text).value == 0.7
