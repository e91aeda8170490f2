"""The one rule for a trajectory id, shared by the reader (the schema) and the online writers.

An id is a non-empty string of valid Unicode text. A lone surrogate ("bad\\ud800") is a Python
str but not text: JSON writes it as the escape `"\\ud800"`, and the reader refuses the record
(pydantic: "unable to parse raw data as a unicode string"). The online side refuses such an id
with this rule, counted, instead of writing a line that makes the whole file unreadable.
"""

from __future__ import annotations

from typing import Any


def id_problem(value: Any) -> str | None:
    """Why `value` cannot be a trajectory id, or None."""
    if not isinstance(value, str) or not value:
        return f"trajectory id must be a non-empty string, got {value!r}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"trajectory id {value!r} is not valid Unicode text (a lone surrogate): it could not be read back"
    return None
