"""What a file that is not UTF-8 text probably is, from its first bytes: the hint after "not UTF-8 text".

A user who points `report` at `runs.jsonl.gz` (or a zip, or a Parquet file without its suffix)
should learn what to do, not only that a byte is invalid. The magic numbers are the formats'
own (gzip RFC 1952, zstd RFC 8878, bzip2, xz, zip, Parquet); a UTF-16 byte-order mark is named
too, since editors on Windows save text that way.
"""

from __future__ import annotations

import os

_KINDS = (
    (b"\x1f\x8b", "gzip-compressed data", "decompress it first (e.g. `gunzip -k FILE`)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data", "decompress it first (e.g. `zstd -d FILE`)"),
    (b"BZh", "bzip2-compressed data", "decompress it first (e.g. `bunzip2 -k FILE`)"),
    (b"\xfd7zXZ\x00", "xz-compressed data", "decompress it first (e.g. `unxz -k FILE`)"),
    (b"PK\x03\x04", "a zip archive", "extract the .jsonl file(s) from it first"),
    (b"PAR1", "a Parquet file", "give it a .parquet (or .pq) suffix so it is read as Parquet"),
    (b"\xff\xfe", "UTF-16 text", "save it as UTF-8"),
    (b"\xfe\xff", "UTF-16 text", "save it as UTF-8"),
)


def not_text_message(path: str | os.PathLike[str], reason: str) -> str:
    """ "not UTF-8 text (REASON)", with what the file looks like and what to do when its first
    bytes say it (a file that cannot be opened again just gets the plain message)."""
    message = f"not UTF-8 text ({reason})"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return message
    for magic, kind, todo in _KINDS:
        if head.startswith(magic):
            return f"{message}; it looks like {kind} (it starts with the bytes {magic.hex(' ')}): {todo}"
    return message
