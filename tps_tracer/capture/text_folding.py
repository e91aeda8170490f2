"""The case-insensitive view of a model output that the capture patterns search.

`folded(text)` is `text.encode("ascii", "replace").lower()`: one byte per character (every
non-ASCII character, lone surrogates included, becomes `?`), so an offset in it is an
offset in `text`, and case-sensitive byte patterns on it are case-insensitive on the text.
It costs ~1 ms per MB whatever the script, where `str.lower()` costs up to 40 ms per MB on
some (U+0130) and can turn one character into two (shifting offsets), and re.IGNORECASE
makes the engine's literal search ~30x slower.

The folded text only LOCATES statements: keywords, tags and labels are ASCII, and a `?`
stands for any non-ASCII character (the patterns accept it where a digit, `≈` or a no-break
space may stand). A stated VALUE is then read from the original text at the same offsets,
NFKC-normalised with every Unicode digit made ASCII (`confidence_value.normalise`), never
from the folded copy: `0.８` is 0.8 and `9０` is 90, not `0.?` or `9?` stripped to 0 and 9.
"""

from __future__ import annotations


def folded(text: str) -> bytes:
    """ASCII-folded lower case of `text`, one byte per character (see the module docstring)."""
    return text.encode("ascii", "replace").lower()
