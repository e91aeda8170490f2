"""Trace and span ids of stored spans, in hex or in base64, told apart by their length.

OTLP/JSON says hex (32 characters for a 16-byte trace id, 16 for an 8-byte span id), and
the Collector's file exporter writes hex. Protobuf's own JSON mapping (`MessageToDict`,
`MessageToJson`, any proto3 JSON encoder) writes `bytes` fields in base64 instead: 24
characters for a trace id, 12 for a span id, padded with `=`. Files of both kinds exist, so
both are read. The lengths differ, so an id is never readable both ways: a 32-character id
is hex or invalid, a 24-character one base64 or invalid.

An id that is neither is refused with a reason the reader counts:
`missing` (absent or empty), `invalid` (not text; wrong length; characters outside the
alphabet; base64 that does not decode to exactly the id's bytes; hex and base64 alphabets
mixed), `zero` (all zero bytes: OpenTelemetry's invalid id).
"""

from __future__ import annotations

import base64
import re
from typing import Any

_HEX = {16: re.compile(r"[0-9a-fA-F]{32}"), 8: re.compile(r"[0-9a-fA-F]{16}")}
# Standard alphabet or URL-safe (protobuf's parser accepts both), padded to a multiple of 4.
_B64 = {
    16: re.compile(r"[A-Za-z0-9+/]{22}==|[A-Za-z0-9_-]{22}=="),
    8: re.compile(r"[A-Za-z0-9+/]{11}=|[A-Za-z0-9_-]{11}="),
}
_URLSAFE = str.maketrans("-_", "+/")

MISSING, INVALID, ZERO = "missing", "invalid", "zero"


def parse_id(value: Any, n_bytes: int) -> int | str:
    """The id as an int, or why it cannot be one (MISSING, INVALID, ZERO); n_bytes is 16 or 8."""
    if value is None or value == "":
        return MISSING
    if not isinstance(value, str):
        return INVALID
    if _HEX[n_bytes].fullmatch(value):
        n = int(value, 16)
    elif _B64[n_bytes].fullmatch(value):  # alphabet, length and padding checked: it decodes to n_bytes
        n = int.from_bytes(base64.b64decode(value.translate(_URLSAFE), validate=True), "big")
    else:
        return INVALID
    return n if n else ZERO
