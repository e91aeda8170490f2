"""The `tps-tracer` command line: report, gate, calibrate, censoring, plot, convert and demo.

The parsers live in `parsers.py` and each command's code in its own module, imported only
when that command runs (so `--help` does not load numpy or scipy).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tps_tracer.cli.errors import run_guarded
from tps_tracer.cli.parsers import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command inside the error boundary (exit codes: tps_tracer.cli.errors)."""
    args = build_parser().parse_args(argv)
    return run_guarded(args.func, args, f"tps-tracer {args.command}")


if __name__ == "__main__":
    sys.exit(main())
