"""Verbal confidence as models write it: >= 200 forms, each with its reading or refusal reason.

Shared by tests/test_verbal_grammar.py. Every form of issue 32 is here (the 1-10 / 1-5
scales read as percent, non-ASCII digits, compound labels, the forms that were lost),
with what the grammar of tps_tracer/capture/verbal_confidence.py gives it:

- OK(v): read as v (status ok); CLIPPED(v): outside [0, 1], clipped to v;
- REFUSED(status, reason): None, counted under (status, reason);
- MISSING: no statement.

`scale` is the declared verbal_scale (None: undeclared). The expected values are written
by hand from the rule (8/10 is 0.8, `80-90%` is the midpoint 0.85), never by running the
parser.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Form:
    text: str
    status: str
    value: float | None = None
    reason: str = ""
    scale: str | None = None
    why: str = ""


def OK(text: str, value: float, scale: str | None = None, why: str = "") -> Form:
    return Form(text, "ok", value, "", scale, why)


def CLIPPED(text: str, value: float, scale: str | None = None) -> Form:
    return Form(text, "clipped", value, "", scale)


def REFUSED(text: str, status: str, reason: str, scale: str | None = None) -> Form:
    return Form(text, status, None, reason, scale)


def MISSING(text: str) -> Form:
    return Form(text, "missing", None, "")


ISSUE_32 = [
    # 1-10 and 1-5 scales were read as percent: now refused unless a scale is declared.
    REFUSED("Confidence: 5", "ambiguous", "undeclared_scale"),
    OK("Confidence: 5", 0.5, "1-10"),
    OK("Confidence: 5", 1.0, "1-5"),
    OK("Confidence: 5", 0.05, "percent"),
    CLIPPED("Confidence: 5", 1.0, "0-1"),
    REFUSED("Confidence: 10", "ambiguous", "undeclared_scale"),
    OK("Confidence: 10", 1.0, "1-10"),
    REFUSED("Confidence: 1", "ambiguous", "undeclared_scale"),
    OK("Confidence: 1", 1.0, "0-1"),
    OK("Confidence: 1", 0.1, "1-10"),
    OK("Confidence: 1", 0.2, "1-5"),
    OK("Confidence: 8 out of 10", 0.8),
    REFUSED("<confidence>3</confidence>", "ambiguous", "undeclared_scale"),
    OK("<confidence>3</confidence>", 0.6, "1-5"),
    OK("<confidence>3</confidence>", 0.3, "1-10"),
    REFUSED('{"answer": "Paris", "confidence": 8}', "ambiguous", "undeclared_scale"),
    OK('{"answer": "Paris", "confidence": 8}', 0.8, "1-10"),
    # Non-ASCII digits (NFKC, any Unicode decimal digit).
    OK("Confidence: 0.\uff18", 0.8),  # full-width 8
    OK("Confidence: 0.\u0668", 0.8),  # Arabic-Indic 8
    OK("Confidence: 0.\u096e", 0.8),  # Devanagari 8
    OK("Confidence: 9\uff10", 0.9),  # 9 then full-width 0: 90, percent only
    OK("Confidence: \uff18\uff15%", 0.85),
    OK("Confidence: \uff10.\uff17", 0.7),
    OK("<confidence>\u0660.\u0667\u0665</confidence>", 0.75),
    OK("Confidence: 85\uff05", 0.85),  # full-width percent sign
    # A compound label is not a statement.
    OK("Confidence: 0.9. Self-confidence: 0.2", 0.9),
    OK("Confidence: 0.9\nLow-confidence: 0.2", 0.9),
    OK("Confidence: 0.9\nOver-confidence: 0.1", 0.9),
    OK("Confidence: 0.7 (no overconfidence: 0.1)", 0.7),
    OK("Confidence: 0.6; self_confidence: 0.1", 0.6),
    MISSING("Self-confidence: 0.2"),
    # Lost although unambiguous.
    OK("Confidence: 8/10", 0.8),
    OK("Confidence: 4/5", 0.8),
    OK("Confidence: ~80%", 0.8),
    OK("Confidence: \u22480.8", 0.8),
    OK("Confidence: about 80%", 0.8),
    OK("Confidence: 80-90%", 0.85),
    OK("Confidence: High (0.85)", 0.85),
    OK("I'm 90% sure", 0.9),
    OK("My confidence is 0.9", 0.9),
    OK("| Confidence | 0.85 |", 0.85),
    OK("Confidence: 0,8", 0.8),
    OK("Confidence:\u00a00.8", 0.8),
    OK('{"confidence_score": 0.8}', 0.8),
    OK("Confidence: 0.9\n\nNote on confidence: rough", 0.9),
]

LABELS = [
    OK("Confidence: 0.85", 0.85),
    OK("Confidence: .85", 0.85),
    OK("Confidence: 0", 0.0),
    OK("Confidence: 1.0", 1.0),
    OK("Confidence: 8.5e-1", 0.85),
    OK("Confidence: 85%", 0.85),
    OK("Confidence: 85.5 %", 0.855),
    OK("Confidence: 100%", 1.0),
    OK("Confidence: 85 percent", 0.85),
    OK("Confidence: 85", 0.85, why="only percent fits 85"),
    OK("Confidence: 100", 1.0),
    OK("Confidence: 11", 0.11),
    OK("confidence level = 0.6", 0.6),
    OK("Confidence level: 65%", 0.65),
    OK("Confidence score = 0.4", 0.4),
    OK("confidence_score: 0.4", 0.4),
    OK("Confidence-Score: 0.4", 0.4),
    OK("Confidence rating: 0.55", 0.55),
    OK("Confidence estimate: 0.55", 0.55),
    OK("CONFIDENCE: 0.5", 0.5),
    OK("confidence=0.8,foo=1", 0.8),
    OK("confidence = 0.8", 0.8),
    OK("Confidence: `0.55`", 0.55),
    OK('Confidence: "0.55"', 0.55),
    OK("Confidence: '0.55'", 0.55),
    OK("(confidence: 0.8)", 0.8),
    OK("[confidence: 0.8]", 0.8),
    OK("Confidence: (0.8)", 0.8),
    OK("Confidence:\r\n 0.55\r\n", 0.55),
    OK("Confidence:\n0.55", 0.55),
    OK("Confidence:\t0.55", 0.55),
    OK("Confidence: 0.8.", 0.8),
    OK("Confidence: 0.8!", 0.8),
    OK("Confidence: 0.8 because two sources agree", 0.8),
    OK("Confidence: 0.8, based on the search results", 0.8),
    OK("Confidence: 0.8 (high)", 0.8),
    OK("Answer: Paris. Confidence: 0.9", 0.9),
    OK("Final Answer: Paris\nConfidence: 0.9", 0.9),
    OK("- Confidence: 0.7", 0.7),
    OK("* Confidence: 0.7", 0.7),
    OK("> Confidence: 0.7", 0.7),
    OK("### Confidence: 0.7", 0.7),
    OK("Confidence :0.7", 0.7),
    OK("Confidence:0.7", 0.7),
    OK("Confidence: +0.7", 0.7),
    OK("Confidence: 0.70000", 0.7),
    OK("Confidence: 1", 1.0, "0-1"),
    OK("Confidence: 7.5", 0.75, "1-10"),
    OK("Confidence: 85.5", 0.855, "percent"),
    OK("Confidence: 85.5", 0.855, why="above 10, at most 100: percent only"),
    OK("Confidence: 0.85", 0.85, "1-10", why="a decimal at most 1 is a probability on every scale"),
    OK("Confidence: 0.85", 0.85, "percent"),
]

MARKDOWN = [
    OK("**Confidence:** 0.7", 0.7),
    OK("*Confidence*: 70%", 0.7),
    OK("__Confidence__: 0.7", 0.7),
    OK("_Confidence_: 0.7", 0.7),
    OK("**Confidence**: **0.7**.", 0.7),
    OK("**Confidence level:** 65%", 0.65),
    OK("| Confidence | 0.85 |", 0.85),
    OK("| **Confidence** | 85% |", 0.85),
    OK("|confidence|0.85|", 0.85),
    OK("| Answer | Paris |\n| Confidence | 0.6 |", 0.6),
    OK("`Confidence: 0.6`", 0.6),
]

TAGS = [
    OK("<confidence>0.85</confidence>", 0.85),
    OK("<confidence> 0.85 </confidence>", 0.85),
    OK("<CONFIDENCE>0.5</Confidence>", 0.5),
    OK("<confidence>85%</confidence>", 0.85),
    OK("<confidence>8/10</confidence>", 0.8),
    OK("<confidence>about 0.7</confidence>", 0.7),
    OK("<confidence>\n0.7\n</confidence>", 0.7),
    OK("<confidence>0.6</confidence> ... Confidence: 80%", 0.8),
    OK("Confidence: 80% ... <confidence>0.6</confidence>", 0.6),
    OK("<confidence><b>0.9</b></confidence> Confidence: 0.4", 0.4),
    OK("Confidence: 0.3 and an unclosed <confidence>0.9", 0.3),
    MISSING("<confidence>0.9"),
    REFUSED("<confidence></confidence>", "malformed", "not_a_number"),
    REFUSED("<confidence>unsure</confidence>", "malformed", "not_a_number"),
    REFUSED("<confidence>high</confidence>", "ambiguous", "qualitative"),
    REFUSED("<confidence>" + "0." + "1" * 70 + "</confidence>", "malformed", "too_long"),
    REFUSED("<confidence>" + "x" * 300 + "</confidence>", "malformed", "too_long"),
]

KEYS = [
    OK('{"answer": "Paris", "confidence": 0.85}', 0.85),
    OK("{'answer': 'Paris', 'confidence': 0.85}", 0.85),
    OK('{"confidence": "72%"}', 0.72),
    OK('{"confidence": "8 out of 10"}', 0.8),
    OK('{"confidence": 85}', 0.85),
    OK('{"confidence":0.3}', 0.3),
    OK('{"confidence_score": 0.8}', 0.8),
    OK('{"confidence_level": 0.8}', 0.8),
    OK('{"confidenceScore": 0.8}', 0.8),
    OK('{"confidence-score": 0.8}', 0.8),
    OK('{"Confidence": 0.8}', 0.8),
    OK('{"confidence": 0.2} then **Confidence:** 0.7', 0.7),
    OK("<confidence>0.9</confidence>\n{'confidence': 0.35}", 0.35),
    OK('```json\n{"answer": "x", "confidence": 0.4}\n```', 0.4),
    REFUSED('{"confidence": "high"}', "ambiguous", "qualitative"),
    REFUSED('{"confidence": "n/a"}', "malformed", "not_a_number"),
    REFUSED('{"confidence": null}', "malformed", "not_a_number"),
    REFUSED('{"confidence": 0.' + "0" * 100 + "}", "malformed", "too_long"),
    MISSING('{"self_confidence": 0.8}'),
]

FRACTIONS_RANGES_APPROX = [
    OK("Confidence: 8/10", 0.8),
    OK("Confidence: 8 / 10", 0.8),
    OK("Confidence: 4/5", 0.8),
    OK("Confidence: 3 out of 4", 0.75),
    OK("Confidence: 0/10", 0.0),
    OK("Confidence: 10/10", 1.0),
    OK("Confidence: 7/10.", 0.7),
    OK("Confidence: 8/10", 0.8, "percent", why="a fraction carries its own scale"),
    CLIPPED("Confidence: 12/10", 1.0),
    REFUSED("Confidence: 8/0", "malformed", "zero_denominator"),
    REFUSED("Confidence: 8/10ths", "malformed", "not_a_number"),
    OK("Confidence: 80-90%", 0.85),
    OK("Confidence: 80%-90%", 0.85),
    OK("Confidence: 80 - 90 %", 0.85),
    OK("Confidence: 80\u201390%", 0.85),  # en dash
    OK("Confidence: 80 to 90%", 0.85),
    OK("Confidence: 0.7-0.8", 0.75),
    OK("Confidence: between 0.7 and 0.8", 0.75),
    OK("Confidence: between 70% and 80%", 0.75),
    OK("Confidence: 80-90", 0.85, why="both ends fit only percent"),
    OK("Confidence: 7-8", 0.75, "1-10"),
    REFUSED("Confidence: 7-8", "ambiguous", "undeclared_scale"),
    REFUSED("Confidence: 50-90%", "ambiguous", "wide_range"),
    REFUSED("Confidence: 0.2-0.9", "ambiguous", "wide_range"),
    REFUSED("Confidence: 90-80%", "malformed", "range_order"),
    OK("Confidence: 60-80%", 0.7, why="a width of 0.2 is the widest read"),
    OK("Confidence: ~80%", 0.8),
    OK("Confidence: ~ 0.8", 0.8),
    OK("Confidence: \u22480.8", 0.8),
    OK("Confidence: \u223c0.8", 0.8),
    OK("Confidence: about 80%", 0.8),
    OK("Confidence: around 0.8", 0.8),
    OK("Confidence: approximately 0.8", 0.8),
    OK("Confidence: approx. 0.8", 0.8),
    OK("Confidence: roughly 80%", 0.8),
    OK("Confidence: nearly 0.9", 0.9),
    OK("Confidence: maybe 0.6", 0.6),
    REFUSED("Confidence: ~8", "ambiguous", "undeclared_scale"),
    OK("Confidence: ~8", 0.8, "1-10"),
    REFUSED("Confidence: >0.8", "ambiguous", "bound"),
    REFUSED("Confidence: at least 80%", "ambiguous", "bound"),
    REFUSED("Confidence: less than 0.5", "ambiguous", "bound"),
    REFUSED("Confidence: over 90%", "ambiguous", "bound"),
]

LEVELS = [
    OK("Confidence: High (0.85)", 0.85),
    OK("Confidence: high (85%)", 0.85),
    OK("Confidence: Medium [0.6]", 0.6),
    OK("Confidence: low - 0.2", 0.2),
    OK("Confidence: high, 0.9", 0.9),
    OK("Confidence: very high (0.95)", 0.95),
    OK("Confidence: Moderate (about 60%)", 0.6),
    OK("Confidence: High (8/10)", 0.8),
    REFUSED("Confidence: high", "ambiguous", "qualitative"),
    REFUSED("Confidence: High.", "ambiguous", "qualitative"),
    REFUSED("Confidence level: high", "ambiguous", "qualitative"),
    REFUSED("**Confidence:** Medium", "ambiguous", "qualitative"),
    REFUSED("Confidence: very low", "ambiguous", "qualitative"),
    REFUSED("Confidence: high (8)", "ambiguous", "undeclared_scale"),
    REFUSED("<confidence>0.9</confidence> Confidence: high", "ambiguous", "qualitative"),
]

COMMAS = [
    OK("Confidence: 0,8", 0.8),
    OK("Confidence: 0,85", 0.85),
    OK("Confidence: 0,850", 0.85, why="a zero before the comma: never a thousands separator"),
    OK("Confidence: 85,5%", 0.855),
    OK("Confidence: 85,5 %", 0.855),
    OK("<confidence>0,7</confidence>", 0.7),
    OK("Confidence: 0.9, 0.8", 0.9),
    REFUSED("Confidence: 1,000", "ambiguous", "comma"),
    REFUSED("Confidence: 1,500%", "ambiguous", "comma"),
    REFUSED("Confidence: 7,5", "ambiguous", "undeclared_scale"),
    OK("Confidence: 7,5", 0.75, "1-10"),
]

PROSE = [
    OK("I'm 90% sure", 0.9),
    OK("I am 80% confident.", 0.8),
    OK("I am about 75% certain that it is Paris", 0.75),
    OK("I'm 90 % sure", 0.9),
    OK("Im 100% sure", 1.0),
    OK("My confidence is 0.9", 0.9),
    OK("My confidence is 90%", 0.9),
    OK("My confidence level is about 80%", 0.8),
    OK("Confidence is 0.7", 0.7),
    OK("I answer with a confidence of 0.8", 0.8),
    OK("confidence at 75%", 0.75),
    OK("Confidence: 0.3. Later: I am 80% confident", 0.8),
    OK("I am 80% confident. Confidence: 0.3", 0.3),
    OK("Confidence: 0.6 ... I'm not 100% sure about the date", 0.6),
    MISSING("I am not 90% sure"),
    MISSING("less than 90% sure"),
    MISSING("at least 90% sure"),
    MISSING("I am fairly confident."),
    MISSING("confidence is high"),
    MISSING("My confidence is unclear"),
    MISSING("Note on confidence: rough"),
    MISSING("Confidence: unknown"),
    MISSING("Confidence: n/a"),
    MISSING("overconfidence: 3"),
    MISSING("The confidence interval is wide"),
    MISSING("1234% sure"),
    MISSING("80-90% sure"),
    MISSING(""),
    MISSING("no statement at all"),
    OK("Confidence: 0.8\nconfidence: not sure", 0.8),
]

VALUES = [
    CLIPPED("Confidence: 150%", 1.0),
    CLIPPED("Confidence: -5%", 0.0),
    CLIPPED("Confidence: 150", 1.0),
    CLIPPED("Confidence: 101", 1.0),
    CLIPPED("Confidence: -0.2", 0.0),
    CLIPPED("Confidence: -3", 0.0),
    CLIPPED("Confidence: 1e999", 1.0),
    CLIPPED("Confidence: -1e999", 0.0),
    CLIPPED("Confidence: 12", 1.0, "1-10"),
    CLIPPED("Confidence: 1.5", 1.0, "0-1"),
    CLIPPED("Confidence: 6", 1.0, "1-5"),
    REFUSED("Confidence: 1.2", "ambiguous", "undeclared_scale"),
    REFUSED("Confidence: 2", "ambiguous", "undeclared_scale"),
    REFUSED("Confidence: +8", "ambiguous", "undeclared_scale"),
    REFUSED("Confidence: 0.8abc", "malformed", "not_a_number"),
    REFUSED("Confidence: 0.5x", "malformed", "not_a_number"),
    REFUSED("Confidence: ?", "malformed", "not_a_number"),
    REFUSED("Confidence: \u00e9lev\u00e9e", "malformed", "not_a_number"),
    REFUSED("Confidence: " + "9" * 70, "malformed", "too_long"),
    REFUSED("Confidence: 0." + "1" * 70, "malformed", "too_long"),
    OK("Confidence: 2", 0.4, "1-5"),
    OK("Confidence: 3", 0.3, "1-10"),
    OK("Confidence: 0", 0.0, "1-10"),
    OK("Confidence: 100", 1.0, "percent"),
    OK("Confidence: 50", 0.5, "percent"),
    OK("Confidence: 5", 0.05, "percent"),
]

# Forms that a plain reading would get wrong: odds, revisions, ranges leaving [0, 1], dates.
EDGES = [
    REFUSED("Confidence: 50/50", "ambiguous", "odds"),
    REFUSED("Confidence: 3:1", "ambiguous", "odds"),
    REFUSED("Confidence: 10:30", "ambiguous", "odds"),
    REFUSED("Confidence: 0.9 -> 0.7", "ambiguous", "revised"),
    REFUSED("Confidence: 90% => 70%", "ambiguous", "revised"),
    REFUSED("Confidence: 0.9 \u2192 0.7", "ambiguous", "revised"),
    REFUSED("Confidence: 95-105%", "malformed", "range_outside"),
    REFUSED("Confidence: 2023-05-01", "malformed", "not_a_number"),
    OK("Confidence: 1 in 3", 1 / 3),
    OK("Confidence: 9 of 10", 0.9),
    OK("Confidence: 4 (out of 5)", 0.8),
    OK("Confidence: 8 (/10)", 0.8),
    REFUSED("Confidence: 4 (out of 5", "ambiguous", "undeclared_scale"),
    OK("Confidence: 0.9 in 2 sources", 0.9),
    OK("Confidence: 0.8 of the time", 0.8),
    OK("Confidence: 8.5 out of 10", 0.85),
    OK("Confidence: 2/3", 2 / 3),
    OK("Confidence: 100/100", 1.0),
    OK("Confidence: 0.8\u200b", 0.8),  # a zero-width space after the number
    OK("Confidence: \u200e0.8", 0.8),  # a left-to-right mark before it
    OK("Confidence: \u0668\u0660\u066a", 0.8),  # Arabic-Indic 80 and the Arabic percent sign
    OK("Confidence: 0.8 - fairly sure", 0.8),
    OK("Confidence: 0.85 \u00b1 0.05", 0.85),
    OK("Confidence: 80% (0.8)", 0.8),
    REFUSED("Confidence: 85%+", "malformed", "not_a_number"),
    REFUSED("Confidence: 0.7-0.8-0.9", "malformed", "not_a_number"),
]

# A scale written in the label declares the statement's own scale.
ANNOTATED = [
    OK("Confidence (1-10): 8", 0.8),
    OK("Confidence [0-100]: 85", 0.85),
    OK("Confidence (0\u20131): 1", 1.0),
    OK("Confidence (out of 5): 4", 0.8),
    OK("Confidence (%): 8", 0.08),
    OK("**Confidence (1-5):** 4", 0.8),
    OK("Confidence (1-10): 8", 0.8, "percent", why="the statement's own scale wins over the declared one"),
    OK("Confidence (1-10): 0.8", 0.8),
    OK("Confidence (0 to 10): 7", 0.7),
    CLIPPED("Confidence (1-10): 12", 1.0),
    OK("confidence (0-1) = 1", 1.0),
    MISSING("Confidence (see above): 8"),
]

# Defect D4: a label without `:` (a space, a dash, or the label alone on its line, value on
# the next non-empty line) is a statement when its VALUE is unambiguous by its own form: a
# percent, a fraction, or a decimal in [0, 1]. A bare integer there stays prose.
SPACED = [
    OK("Confidence 70%", 0.7),
    OK("Confidence 0.7", 0.7),
    OK("confidence 7/10", 0.7),
    OK("Confidence \u2014 70%", 0.7),  # em dash
    OK("Confidence \u2013 70%", 0.7),  # en dash
    OK("Confidence\u201470%", 0.7),  # em dash, no spaces
    OK("Confidence - 70%", 0.7),
    OK("Confidence -- 0.7", 0.7),
    OK("## Confidence\n70%", 0.7),
    OK("**Confidence**\n\n0.7", 0.7),
    OK("### Confidence level\r\n\r\n  - 3 out of 4", 0.75),
    OK("- **Confidence**\n  **85%**", 0.85),
    OK("Confidence 70 percent", 0.7),
    OK("Confidence 3 out of 4", 0.75),
    OK("confidence .7", 0.7),
    OK("Confidence 0,85", 0.85),
    OK("Confidence 1.0", 1.0),
    OK("Confidence 80-90%", 0.85),
    OK("Confidence ~70%", 0.7),
    OK("Confidence \u2248 0.7", 0.7),  # `≈` is an approximation, read as part of VALUE
    OK("**Confidence** 70%", 0.7),
    OK("Confidence level 0.6", 0.6),
    OK("Confidence score \u2014 0.6", 0.6),
    OK("Confidence (1-10) 7/10", 0.7),
    OK("Confidence\u00a070%", 0.7),  # a no-break space
    OK("Final answer: Paris. Confidence 70%", 0.7),
    OK("Confidence: 0.3 ... Confidence 70%", 0.7, why="the last statement wins"),
    OK("Confidence 70% ... Confidence: 0.3", 0.3, why="the last statement wins"),
    OK("Confidence 70%. I am 90% sure", 0.9, why="a prose percent after it starts last"),
    OK("I have confidence 90% of the time", 0.9, why="prose of the statement's shape reads as one"),
    CLIPPED("Confidence -0.2", 0.0),  # a hyphen before a number without a space is its sign
    CLIPPED("Confidence 150%", 1.0),
    REFUSED("Confidence 0.7abc", "malformed", "not_a_number"),
    REFUSED("Confidence > 80%", "ambiguous", "bound"),
    REFUSED("Confidence 50/50", "ambiguous", "odds"),
    REFUSED("Confidence 0.9 -> 0.7", "ambiguous", "revised"),
    REFUSED("Confidence 50-90%", "ambiguous", "wide_range"),
    REFUSED("Confidence 8/0", "malformed", "zero_denominator"),
    REFUSED("Confidence ? 70%", "malformed", "not_a_number"),
    REFUSED("Confidence \u2192 70%", "malformed", "not_a_number"),  # `→` is not a separator
    REFUSED("## Confidence\n0.7abc", "malformed", "not_a_number"),
    REFUSED("<confidence>0.9</confidence> Confidence 0.7x", "malformed", "not_a_number"),  # the last wins, refused
    MISSING("confidence 2 tools"),
    MISSING("Confidence 8"),
    MISSING("Confidence 7.5"),
    MISSING("Confidence 1,000 times"),
    MISSING("Confidence - high"),
    MISSING("I have confidence in it"),
    MISSING("Confidence-70%"),  # glued hyphen: a compound, not a separator
    MISSING("We gained confidence\n70% of users agreed"),  # not alone on its line
    MISSING("## Confidence\n8"),
    MISSING("## Confidence\n\n\n\n\n\n\n\n\n\n70%"),  # more than 8 blank lines
    OK("<confidence>0.4</confidence> Confidence 8", 0.4, why="a bare integer after a space is no statement"),
]

CORPUS: list[Form] = [
    *ISSUE_32,
    *LABELS,
    *MARKDOWN,
    *TAGS,
    *KEYS,
    *FRACTIONS_RANGES_APPROX,
    *LEVELS,
    *COMMAS,
    *PROSE,
    *VALUES,
    *EDGES,
    *ANNOTATED,
    *SPACED,
]
