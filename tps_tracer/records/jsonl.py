"""The exact JSON Lines reader (per record, pydantic: errors name the line and field) and the writer."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from tps_tracer.output import atomic_write
from tps_tracer.records.errors import RecordError, TrajectoryFileError
from tps_tracer.records.limits import (
    PREDICTORS_MESSAGE,
    JsonRuleError,
    PredictorNames,
    ReadRecords,
    SetAside,
    bounded_lines,
    duplicate_message,
    field_path,
    load_json,
)
from tps_tracer.records.schema import ResolutionRecord, TrajectoryRecord
from tps_tracer.validity import forecast_problem

MAX_REPORTED_ERRORS = 20
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]+")


@dataclass
class ShardLinks:
    """What one shard's read leaves to the whole input (`reading.read_shards`)."""

    foreign: list[tuple[int, ResolutionRecord]] = field(default_factory=list)  # (line, resolution)
    repeated: set[str] = field(default_factory=set)  # ids with a set-aside repeat in this shard


def apply_resolution_records(
    records: list[TrajectoryRecord], resolutions: list[tuple[int, ResolutionRecord]], errors: list[RecordError]
) -> list[TrajectoryRecord]:
    """Fill late outcomes / q_z into their records (a resolution may precede or follow its record)."""
    position = {rec.trajectory_id: i for i, rec in enumerate(records)}
    out = list(records)
    for line_no, res in resolutions:
        i = position.get(res.resolves)
        if i is None:
            errors.append(RecordError(line_no, "resolves", f"no trajectory {res.resolves!r} in the file"))
            continue
        rec = out[i]
        update: dict[str, Any] = {}
        for name in ("outcome", "q_z"):
            new, old = getattr(res, name), getattr(rec, name)
            if new is not None and old is not None and old != new:
                errors.append(RecordError(line_no, name, f"{res.resolves!r} already has {name} {old!r}, not {new!r}"))
            elif new is not None:
                update[name] = new
        if "outcome" in update:
            update["outcome_pending"] = False
        out[i] = rec.model_copy(update=update)
    return out


def invalid_json(exc: json.JSONDecodeError) -> str:
    """The message for a line json.loads refused; some of its messages end in "at" already."""
    at = "" if exc.msg.endswith(" at") else " at"
    return f"invalid JSON ({exc.msg}{at} column {exc.colno})"


def runs_into_end(exc: json.JSONDecodeError, text: str) -> bool:
    """True if the JSON text is invalid only because it stops early (a cut record)."""
    if exc.msg.startswith("Unterminated string"):  # the scanner met the end before the closing quote
        return True
    tail = text[exc.pos :].rstrip()
    if not tail or any(word.startswith(tail) for word in ("true", "false", "null")):  # cut in a literal
        return True
    return _NUMBER_TAIL.fullmatch(tail) is not None  # cut in a number ("0." or "1e")


def parse_lines(
    lines: Iterable[str],
    source: str = "<input>",
    strict: bool = False,
    names: PredictorNames | None = None,
    links: ShardLinks | None = None,
) -> ReadRecords:
    """Validated records of JSON Lines text, resolution lines applied; TrajectoryFileError lists every problem.

    A repeated id and a resolution of no record are set aside and counted (`strict=True`: errors). Each
    line is read under `limits.load_json`; predictor names are counted in `names`, the first beyond the
    bound ends the read. `links`: the lines are one shard (`reading.read_shards`): resolutions of ids
    it lacks go to `links.foreign`, its repeats to `links.repeated`, and holding no trajectory is no error."""
    names = PredictorNames() if names is None else names
    records: list[TrajectoryRecord] = []
    resolutions: list[tuple[int, ResolutionRecord]] = []
    errors: list[RecordError] = []
    set_aside = SetAside()
    first_line_of: dict[str, int] = {}
    repeats: dict[str, list[int]] = {}  # id -> lines of its later, set-aside records
    invalid_ids: set[str] = set()
    last_line_no, last_raw = 0, ""
    cut_at_end = False  # the last JSON error ran into the end of its line (a cut record)
    for line_no, raw in enumerate(lines, start=1):
        last_line_no, last_raw = line_no, raw
        text = (raw.removeprefix("\ufeff") if line_no == 1 else raw).strip()  # a BOM on a stream's first line
        if not text:
            continue
        if len(errors) >= MAX_REPORTED_ERRORS:
            raise TrajectoryFileError(source, errors, truncated=True)
        try:
            obj = load_json(text)
        except json.JSONDecodeError as exc:
            errors.append(RecordError(line_no, "", invalid_json(exc)))
            cut_at_end = runs_into_end(exc, text)
            continue
        except JsonRuleError as exc:  # duplicate key, nesting, huge integer
            errors.append(RecordError(line_no, exc.field, exc.message))
            continue
        if not isinstance(obj, dict):
            errors.append(RecordError(line_no, "", "each line must be a JSON object (one trajectory)"))
            continue
        model = ResolutionRecord if "resolves" in obj else TrajectoryRecord
        try:
            rec = model.model_validate(obj)
        except ValidationError as exc:
            errors.extend(
                RecordError(line_no, field_path(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
                for e in exc.errors()
            )
            if model is TrajectoryRecord and isinstance(obj.get("trajectory_id"), str):
                invalid_ids.add(obj["trajectory_id"])  # its resolutions are not reported again
            continue
        if isinstance(rec, ResolutionRecord):
            resolutions.append((line_no, rec))
            continue
        for i, step in enumerate(rec.steps):
            for name, value in step.forecasts.items():
                if problem := forecast_problem(value):
                    errors.append(RecordError(line_no, f"steps[{i}].forecasts.{name}", problem))
        beyond = names.first_beyond(step.forecasts for step in rec.steps)
        if beyond is not None:
            raise TrajectoryFileError(source, [*errors, RecordError(line_no, beyond, PREDICTORS_MESSAGE)])
        if rec.trajectory_id in first_line_of:
            message = duplicate_message(rec.trajectory_id, f"first seen on line {first_line_of[rec.trajectory_id]}")
            if strict:
                errors.append(RecordError(line_no, "trajectory_id", message))
            else:
                repeats.setdefault(rec.trajectory_id, []).append(line_no)
                set_aside.add("duplicate_id", f"line {line_no}: {message}")
            continue
        first_line_of[rec.trajectory_id] = line_no
        records.append(rec)
    if links is not None:
        links.repeated.update(repeats)
    if resolutions:
        resolutions = [(n, r) for n, r in resolutions if r.resolves not in invalid_ids]
        if links is not None:
            links.foreign.extend((n, r) for n, r in resolutions if r.resolves not in first_line_of)
            resolutions = [(n, r) for n, r in resolutions if r.resolves in first_line_of]
        if not strict:  # a resolution of no record, or whose nearest record above is a repeat, is set aside
            kept = []
            for line_no, res in resolutions:
                later = [n for n in repeats.get(res.resolves, ()) if n < line_no]
                if res.resolves not in first_line_of:
                    set_aside.add("orphan_resolution", f"line {line_no}: no trajectory {res.resolves!r} in the file")
                elif later:
                    message = f"line {line_no}: resolves the repeated {res.resolves!r} of line {later[-1]}"
                    set_aside.add("duplicate_resolution", message)
                else:
                    kept.append((line_no, res))
            resolutions = kept
        records = apply_resolution_records(records, resolutions, errors)
    if errors:
        # A last line without a newline whose JSON stops mid-value is the sign of a writer killed
        # mid-record; a syntax error elsewhere in a long last line is not a truncation.
        last = errors[-1]
        if last.line == last_line_no and not last_raw.endswith("\n") and cut_at_end and "invalid JSON" in last.message:
            errors[-1] = RecordError(
                last.line, "", last.message + "; the file looks truncated (last line is incomplete)"
            )
        raise TrajectoryFileError(source, errors[:MAX_REPORTED_ERRORS], truncated=len(errors) > MAX_REPORTED_ERRORS)
    if not records and links is None:
        raise TrajectoryFileError(source, [RecordError(0, "", "the file holds no trajectories")])
    set_aside.log_once(source)
    return ReadRecords(records, set_aside)


def read_trajectories(
    source: str | os.PathLike[str] | IO[str], strict: bool = False, links: ShardLinks | None = None
) -> ReadRecords:
    """Read a trajectory JSON Lines file (path or open text stream); see `parse_lines`."""
    if not isinstance(source, str | os.PathLike):  # an open text stream
        name = getattr(source, "name", "<stream>")
        return parse_lines(bounded_lines(source, name), name, strict, links=links)
    path = Path(source)
    try:
        # utf-8-sig: a byte-order mark (editors on Windows write one) is skipped
        with path.open(encoding="utf-8-sig") as fh:
            return parse_lines(bounded_lines(fh, str(path)), str(path), strict, links=links)
    except FileNotFoundError:
        raise TrajectoryFileError(str(path), [RecordError(0, "", "file not found")]) from None
    except OSError as exc:  # a directory, no permission, ...
        raise TrajectoryFileError(str(path), [RecordError(0, "", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise TrajectoryFileError(str(path), [RecordError(0, "", not_text_message(path, exc.reason))]) from None


# A file that is not UTF-8 text, by its first bytes (the formats' own magic numbers), and what to do.

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
    """ "not UTF-8 text (REASON)", with what the file looks like and what to do when its first bytes say it."""
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


def record_json(rec: TrajectoryRecord) -> str:
    """One record as a JSON Lines line; `outcome_pending` only when true."""
    obj = rec.model_dump(mode="json", exclude_none=False)
    if not obj.get("outcome_pending"):
        obj.pop("outcome_pending", None)
    return json.dumps(obj, allow_nan=False) + "\n"


def write_trajectories(records: Iterable[TrajectoryRecord], path: str | os.PathLike[str]) -> int:
    """Write records as JSON Lines atomically; the number written."""
    n = 0
    with atomic_write(path) as fh:
        for rec in records:
            fh.write(record_json(rec))
            n += 1
    return n
