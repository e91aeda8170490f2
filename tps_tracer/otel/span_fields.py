"""Read-only views of an ended span's attributes and events without the SDK's per-access copies.

The SDK's public properties copy or wrap on every access: `span.attributes` is a mapping
proxy over BoundedAttributes, whose inherited `get` raises and catches a KeyError per absent
key (~1 us a key; the readers ask for many keys a span almost never has) and whose
iteration takes a lock and copies the keys; `span.events` builds a new tuple of the
BoundedList each time (~1.5 us, also for a span with no events). The capture worker asks
every span several such questions, so these helpers reach the plain containers the SDK
keeps inside (a dict, a deque) when the span is the SDK's, and fall back to the public
properties for any other span implementation. What they return must never be modified:
it is the span's own storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def attributes(span: Any) -> Mapping[str, Any]:
    """The span's attributes as the plain dict the SDK keeps (read only), else `span.attributes or {}`."""
    inner = getattr(span, "_attributes", None)
    if type(inner) is dict:
        return inner
    inner = getattr(inner, "_dict", None)
    if type(inner) is dict:
        return inner
    return span.attributes or _EMPTY


def events(span: Any) -> Sequence[Any]:
    """The span's events (read only): the SDK's BoundedList's deque, a tuple as given, else `span.events`.

    Only for ended spans: the SDK adds no event to a span after its end, so nothing appends
    to the deque while it is read."""
    inner = getattr(span, "_events", None)
    if type(inner) is tuple or type(inner) is list:
        return inner
    dq = getattr(inner, "_dq", None)
    if dq is not None and hasattr(dq, "maxlen"):
        return dq
    return span.events or ()
