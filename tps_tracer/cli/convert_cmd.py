"""`tps-tracer convert IN OUT`: trajectory JSON Lines <-> Parquet (schema in records/parquet.py)."""

from __future__ import annotations

import argparse
import sys

from tps_tracer.errors import InputError
from tps_tracer.records.convert import jsonl_to_parquet, parquet_to_jsonl
from tps_tracer.records.reading import is_parquet


def cmd_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    src, dst = args.input, args.output
    from_parquet = Path(src).is_dir() or is_parquet(src)
    if from_parquet == is_parquet(dst):
        raise InputError("convert JSON Lines to a .parquet file, or Parquet (a file or a directory) to a .jsonl file")
    summary = parquet_to_jsonl(src, dst) if from_parquet else jsonl_to_parquet(src, dst)
    print(f"tps-tracer: {summary.describe(dst)}", file=sys.stderr)
    return 0
