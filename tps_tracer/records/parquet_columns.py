"""Read a Parquet file's record batches with only the columns the scores need.

A trajectory file written by `tps-tracer convert` also holds `metadata` and `extra` as JSON text
per trajectory and per step; the columnar reader (`arrow_columns.raw_from_arrow`, Parquet mode)
never looks at them, yet reading them was most of the bytes decoded and held per batch. So the
batches are read with a projection: the top-level scalar columns, and under `steps` only each
step's `t` and `forecasts`. A batch the fast path refuses is read again whole (all columns, the
same rows) for the exact per-record path, whose checks and messages need every field.

Files whose `steps` is not a list of objects (or that lack it) are read whole, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

TOP_LEVEL = ("trajectory_id", "stop_reason", "outcome", "outcome_pending", "q_z", "horizon")
STEP_FIELDS = ("t", "forecasts")


def projection(pf: Any) -> list[str] | None:
    """The column paths to read (top-level names, and `steps.<list>.<element>.<field>` leaves), or
    None to read every column (a shape this module does not project)."""
    names = pf.schema_arrow.names
    columns = [c for c in TOP_LEVEL if c in names]
    if "steps" not in names:
        return columns
    leaves = []
    for i in range(len(pf.schema)):
        parts = pf.schema.column(i).path.split(".")
        if parts[0] != "steps":
            continue
        if len(parts) < 4:  # steps: list<scalar> or another shape: the converter decides, on everything
            return None
        if parts[3] in STEP_FIELDS:
            leaves.append(".".join(parts[:4]))
    if not leaves:
        return None
    return columns + list(dict.fromkeys(leaves))


def projected_batches(pf: Any, batch_rows: int) -> Iterator[tuple[int, Any, Callable[[], Any]]]:
    """(first row in the file, projected batch, a function reading the same rows with every column)."""
    columns = projection(pf)
    row = 0
    for group in range(pf.metadata.num_row_groups):
        start = row
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns):
            offset = row - start

            def whole(group: int = group, offset: int = offset, n: int = batch.num_rows) -> Any:
                return pf.read_row_group(group).slice(offset, n).combine_chunks().to_batches()[0]

            yield row, batch, whole
            row += batch.num_rows
