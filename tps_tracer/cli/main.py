"""The `tps-tracer` command line: its parsers, its one error boundary and the text helpers every
command prints with; a command's module is imported only when that command runs.

Exit codes: 0 done (the gate: PASS); 1 the gate's FAIL, nothing else; 2 an expected failure (an
`InputError`, an OSError, undecodable input, a missing extra), one line on stderr; 3 an internal error
(any other exception: a bug); 130 interrupted; 143 SIGTERM. `--debug` or TPS_TRACER_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import signal
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from tps_tracer import constants as C
from tps_tracer.errors import InputError, missing_extra
from tps_tracer.records.errors import TrajectoryFileError
from tps_tracer.records.stop_reasons import StopReason

if TYPE_CHECKING:
    from tps_tracer.records.reading import Chunk

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM
DEBUG_ENV = "TPS_TRACER_DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(args.func, args, f"tps-tracer {args.command}")


# -- The error boundary ------------------------------------------------------------------------


class CliError(InputError):
    """An expected failure whose message already names what failed and where."""


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line (exit 2), not the usage block plus a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@contextlib.contextmanager
def _file_errors(verb: str, what: str, path: Any) -> Iterator[None]:
    """OSError (and, reading, undecodable bytes) on `path` become a CliError naming `what` (e.g. '--calibrator')."""
    try:
        yield
    except OSError as exc:
        raise CliError(f"cannot {verb} {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        if verb != "read":
            raise
        raise CliError(f"cannot read {what} {path}: not UTF-8 text ({exc.reason})") from exc


reading = functools.partial(_file_errors, "read")
writing = functools.partial(_file_errors, "write")


@contextlib.contextmanager
def flag(name: str) -> Iterator[None]:
    """An InputError while interpreting option `name` becomes a CliError naming it; only an
    InputError: a plain ValueError raised there is a bug of ours and must exit 3, not 2."""
    try:
        yield
    except CliError:
        raise
    except InputError as exc:
        raise CliError(f"{name}: {exc}") from exc


def names(text: str | None) -> list[str]:
    """The comma-separated names of an option's value, blanks dropped."""
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def censored_reasons(text: str | None, option: str = "--treat-as-censored") -> list[str]:
    """The stop reasons of --treat-as-censored (report, gate) or --informative: an unknown one is a user error."""
    reasons = names(text)
    valid = [r.value for r in StopReason]  # a list: the message names them in one order, run after run
    bad = [r for r in reasons if r not in valid]
    if bad:
        raise CliError(f"{option}: unknown stop reason(s) {', '.join(bad)} (known: {', '.join(valid)})")
    return reasons


def check_replicates(value: int, minimum: int, why: str) -> None:
    if not minimum <= value <= C.MAX_REPLICATES:
        raise CliError(
            f"--bootstrap: must be an integer in [{minimum}, {C.MAX_REPLICATES}] ({why}; memory grows as "
            f"replicates x score columns), got {value}"
        )


def expected_message(exc: BaseException) -> str | None:
    """The message of an expected failure (exit 2), or None for a bug (exit 3)."""
    if isinstance(exc, TrajectoryFileError):
        return "bad input: " + exc.summary()
    if isinstance(exc, OSError):
        return f"{exc.filename if exc.filename is not None else 'file'}: {exc.strerror or exc}"
    if isinstance(exc, InputError):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError) and (missing := missing_extra(exc, "this command")) is not None:
        return str(missing)
    if isinstance(exc, UnicodeDecodeError):  # bytes of a user's file that are not UTF-8 text
        return f"cannot read input: not UTF-8 text ({exc.reason})"
    return None


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(EXIT_TERMINATED)  # a BaseException: cleanup handlers run, no boundary turns it into exit 2


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while the command runs, so `atomic_write` removes its temp file."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    """Run one command inside the boundary; returns its exit code (see the module docstring)."""
    debug = bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        with _sigterm_as_exit():
            return int(func(args))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tps-tracer report ... | head`: the reader left; not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if debug:
            traceback.print_exc()
        message = expected_message(exc)
        if message is None:
            hint = "" if debug else "; rerun with --debug for the traceback"
            print(f"{prog}: internal error ({type(exc).__name__}: {exc}), please report it{hint}", file=sys.stderr)
            return EXIT_INTERNAL
        print(f"{prog}: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT


# -- The parsers (names and defaults shared with the library come from constants.py) --------------

RECORDS_HELP = "trajectory records: JSON Lines, Parquet, or a directory of .parquet/.jsonl shards"


def _run_command(name: str, args: argparse.Namespace) -> int:
    """Runs `tps_tracer.cli.NAME_cmd.cmd_NAME` (`import`: in convert_cmd), imported only when the command runs."""
    module = importlib.import_module(f"tps_tracer.cli.{'convert' if name == 'import' else name}_cmd")
    return int(getattr(module, f"cmd_{name}")(args))


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to an option's help, but not for options without a real default
    (None, False) nor when the help already names its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        no_default = action.default is None or action.default is False or action.default in ("", argparse.SUPPRESS)
        if no_default or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"  # every option has help (tests/test_cli_help.py)


REPLICATES_HELP = f"bootstrap replicates (0: no CIs; at most {C.MAX_REPLICATES})"
MISSING_HELP = (
    "steps without a forecast: carry-forward (default, proper: the last stated forecast, 0.5 before the first), "
    "or an estimate that can be gamed: fill-backwards, skip-renormalise; drop-run (the former rule, not proper: "
    "a run with a gap is not scored)"
)


def add_engine(p: argparse.ArgumentParser, engine_help: str, address_help: str) -> None:
    p.add_argument("--engine", choices=["local", "ray"], default="local", help=engine_help)
    p.add_argument("--address", help=address_help)


def build_parser() -> argparse.ArgumentParser:
    from tps_tracer import __version__

    parser = OneLineParser(prog="tps-tracer", description="Trajectory Proper Scores for agent uncertainty.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help=f"show tracebacks (also: {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report", help="score a trajectory file (JSON Lines, Parquet, or a directory of shards)")
    p.add_argument("file", help=RECORDS_HELP)
    p.add_argument("--predictors", help="comma-separated predictor names (default: all in the file)")
    p.add_argument("--rules", default="log,brier,beta(2,4)", help="score rules, e.g. 'log,brier,beta(2,4)'")
    p.add_argument(
        "--weights",
        default="linear-front",
        help="weight schedules: linear-front, uniform, exponential-front, linear-back, or 'all'",
    )
    p.add_argument("--bootstrap", type=int, default=C.DEFAULT_REPLICATES, help=REPLICATES_HELP)
    p.add_argument("--seed", type=int, default=C.DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--ece-bins", type=int, default=10, help="quantile bins for T-ECE")
    p.add_argument("--missing", choices=list(C.MISSING_POLICIES), default=C.DEFAULT_MISSING, help=MISSING_HELP)
    p.add_argument("--no-base-rate", action="store_true", help="omit the constant base-rate reference predictor")
    p.add_argument(
        "--treat-as-censored",
        default="",
        help="sensitivity analysis: informative stop reasons to treat as censored, e.g. 'parse_error'",
    )
    p.add_argument(
        "--calibrate",
        choices=["platt"],
        help="add cross-fitted recalibrated '<predictor>+platt' rows and paired raw-vs-recalibrated deltas",
    )
    p.add_argument("--calibrator", help="apply a saved calibrator (from `tps-tracer calibrate`) instead of refitting")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--wide",
        action="store_true",
        help="side-by-side score tables, one column per evaluator (wider than 100 columns)",
    )
    p.add_argument(
        "--by",
        metavar="KEY",
        help="one report per value of this record metadata key (e.g. agent, model; records without it: '(missing)')",
    )
    add_engine(
        p,
        "local (this process, chunked) or ray (Ray Data reads the shards; needs the 'ray' extra)",
        "with --engine ray: the Ray cluster to join (default: a local one, 127.0.0.1)",
    )

    d = sub.add_parser("demo", help="end-to-end demo: simulated tasks through a real LangGraph agent (no network)")
    d.add_argument("--out", help="directory for the generated record files (default: a temp dir)")
    d.add_argument("--tasks", type=int, default=C.DEMO_TASKS, help="tasks per agent")
    d.add_argument("--seed", type=int, default=C.DEMO_SEED, help="world and bootstrap seed")
    d.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    d.add_argument("--json", action="store_true", help="print the findings as JSON instead of the report")
    d.add_argument(
        "--q-z",
        choices=("oracle", "resume"),
        default="oracle",
        help="q_Z of censored runs: the world's exact value, or estimated by resuming checkpoints",
    )
    d.add_argument("--branches", type=int, default=10, help="continuation branches per censored run (--q-z resume)")
    d.add_argument("--concurrency", type=int, default=4, help="branches in flight at once (--q-z resume)")

    g = sub.add_parser("gate", help="pass/fail a candidate agent on censored TPS with confidence intervals")
    g.add_argument("files", nargs="*", help="candidate trajectory file(s): JSON Lines or Parquet, read as one run")
    g.add_argument("--snapshot", help="gate a saved `report --json` / Accumulator.snapshot() instead of records")
    g.add_argument("--config", help="TOML file with a [gate] table of these settings")
    g.add_argument(
        "--predictor", help="predictor to gate on (default: the baseline's first with data, else the file's first)"
    )
    g.add_argument("--rule", help="score rule (default log)")
    g.add_argument("--weights", help="weight schedule (default linear-front)")
    g.add_argument("--censoring", help="complete-only, simple (default) or exact")
    g.add_argument("--min", type=float, help="pass only if the score's CI lower bound is >= this")
    g.add_argument("--vs-base-rate", action="store_true", default=None, help="non-inferiority to the base rate")
    g.add_argument("--baseline", help="baseline run's trajectory file: non-inferiority to it")
    g.add_argument("--margin", type=float, help="tolerated shortfall for --vs-base-rate / --baseline (default 0)")
    g.add_argument(
        "--test",
        choices=["regression", "non-inferiority"],
        help="hypothesis test of --vs-base-rate / --baseline: regression (default; FAIL only on a significant "
        "drop beyond the margin) or non-inferiority (PASS only if such a drop is ruled out; cannot decide, "
        "exit 2, where an identical candidate would fail more than 5%% of the time)",
    )
    g.add_argument("--min-n", type=int, help="minimum scored trajectories (default 30; fewer: exit 2)")
    g.add_argument("--max-excluded-share", type=float, help="maximum share of informative exclusions")
    g.add_argument(
        "--allow-capture-loss",
        action="store_true",
        default=None,
        help="gate even if some runs are capture_lost (tps-tracer lost their end); default: exit 2",
    )
    g.add_argument(
        "--max-skipped-share",
        type=float,
        help="largest share of the working sample without a forecast of the gated predictor (default 0.2; "
        "above it: exit 2, the rest is not gated alone; 1 accepts any)",
    )
    g.add_argument("--missing", choices=list(C.MISSING_POLICIES), help=MISSING_HELP)
    g.add_argument(
        "--max-flip", type=float, help="cannot decide (exit 2) if a verdict flips under resampling more often than this"
    )
    g.add_argument("--treat-as-censored", help="informative stop reasons to treat as censored (sensitivity)")
    g.add_argument("--bootstrap", type=int, help=f"bootstrap replicates (default 2000; 100 to {C.MAX_REPLICATES})")
    g.add_argument("--seed", type=int, help="bootstrap seed (default 0)")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("--markdown", help="also write a Markdown summary to this file (e.g. $GITHUB_STEP_SUMMARY)")
    add_engine(
        g,
        "ray: score one file or directory on Ray and gate on its report (--min and assumption checks only)",
        "with --engine ray: the Ray cluster to join (default: a local one)",
    )

    p = sub.add_parser("calibrate", help="fit a Platt calibrator artifact (JSON) from trajectory records")
    p.add_argument("file", help=RECORDS_HELP)
    p.add_argument("-o", "--output", required=True, help="where to write the calibrator JSON")
    p.add_argument("--predictors", help="comma-separated predictors to calibrate (default: all)")
    p.add_argument("--weights", default="linear-front", help="TPS schedule whose step weights the fit uses")
    p.add_argument("--penalty", type=float, default=C.DEFAULT_PENALTY, help="L2 penalty on the slope (paper: 1.0)")
    p.add_argument("--bootstrap", type=int, default=C.DEFAULT_REPLICATES, help="replicates for the paired deltas")
    p.add_argument("--seed", type=int, default=C.DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--fixed-rank", metavar="PREDICTOR", help="also print the fixed-rank sensitivity table")
    p.add_argument(
        "--refit-maps",
        action="store_true",
        help="also give the TPS deltas' CI with the maps refitted in every replicate (the population "
        "effect of Platt scaling; one cross-fit per replicate)",
    )
    p.add_argument("--json", action="store_true", help="print the artifact as JSON instead of tables")

    p = sub.add_parser("censoring", help="q_Z estimation, exact-vs-simple, artificial and informative censoring checks")
    p.add_argument("file", help=RECORDS_HELP)
    p.add_argument("--continuations", help="Monte Carlo continuation branches (JSON Lines) of censored prefixes")
    p.add_argument("--min-valid", type=int, default=C.DEFAULT_MIN_VALID, help="valid branches needed per prefix")
    p.add_argument(
        "--unresolved", choices=C.UNRESOLVED_POLICIES, default="exclude", help="unresolved branches count as"
    )
    p.add_argument(
        "--q-z-model",
        metavar="FEATURES",
        help="plug-in q_Z model features, e.g. 'step_share,logit:token_prob' (keep the predictor under test out)",
    )
    p.add_argument("--hybrid", action="store_true", help="train the q_Z model on the MC-audited prefixes")
    p.add_argument("--write-records", metavar="OUT", help="write the records with the estimated q_z")
    p.add_argument("--predictors", help="comma-separated predictors (default: all)")
    p.add_argument("--rules", default="log", help="score rules (default: log)")
    p.add_argument("--weights", default="linear-front", help="weight schedules, or 'all'")
    p.add_argument("--artificial", default="0.25,0.5,0.75", help="artificial censoring rates, or 'none'")
    p.add_argument("--informative", default="parse_error", help="informative stop reasons to re-score as censored")
    p.add_argument("--bootstrap", type=int, default=C.DEFAULT_REPLICATES, help=REPLICATES_HELP)
    p.add_argument("--seed", type=int, default=C.DEFAULT_SEED, help="bootstrap and artificial-censoring seed")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")

    p = sub.add_parser("plot", help="draw reliability, forecast traces and per-step scores (PNG/SVG)")
    p.add_argument("file", help=RECORDS_HELP)
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--predictors", help="comma-separated predictors (default: all); traces use the first")
    p.add_argument("--calibrate", choices=["platt"], help="also draw raw vs cross-fitted Platt per predictor")
    p.add_argument("--format", choices=["png", "svg"], default="png", help="image format of the plots")
    p.add_argument("--bins", type=int, default=C.DEFAULT_ECE_BINS, help="quantile bins of the reliability diagram")
    p.add_argument("--rule", default="log", help="score rule of the per-step score plot: log, brier or beta(a,b)")
    p.add_argument(
        "--weights",
        default="linear-front",
        help="weight schedule of the per-step scores: linear-front, uniform, exponential-front, linear-back",
    )
    p.add_argument(
        "--censoring", choices=C.CENSORING_MODES, default=C.SIMPLE, help="how budget-stopped runs enter the step scores"
    )
    p.add_argument("--traces", type=int, default=80, help="how many trajectories to draw in the traces plot")

    c = sub.add_parser(
        "convert", help="convert trajectories between JSON Lines and Parquet (one row per trajectory, steps nested)"
    )
    c.add_argument("input", help="a .jsonl file, or a .parquet file / directory of Parquet shards")
    c.add_argument("output", help="the file to write: .parquet from JSON Lines, .jsonl from Parquet")

    e = sub.add_parser(
        "export",
        help="push a records file's scores (late outcomes and q_z applied) to their traces: phoenix, mlflow, otlp, "
        "langsmith, langfuse",
    )
    e.add_argument(
        "records",
        help="trajectory JSON Lines (with resolution lines) whose metadata names otel_trace_id "
        "(langsmith, langfuse: langchain_run_id)",
    )
    e.add_argument(
        "--to",
        choices=["phoenix", "mlflow", "otlp", "langsmith", "langfuse"],
        required=True,
        help="where the traces are",
    )
    e.add_argument(
        "--endpoint",
        help="Phoenix base URL (default http://127.0.0.1:6006), MLflow tracking URI (default: MLFLOW_TRACKING_URI), "
        "OTLP/HTTP endpoint (default http://127.0.0.1:4318), LangSmith API URL or Langfuse base URL (default: "
        "their SDKs' settings, LANGSMITH_ENDPOINT / LANGFUSE_BASE_URL, with their API keys and LANGSMITH_PROJECT)",
    )
    e.add_argument("--predictor", default=C.HEADLINE_PREDICTOR, help="the headline predictor: scores named tps.<rule>")
    e.add_argument("--rules", default="log,brier,beta(2,4)", help="score rules")
    e.add_argument("--weights", default="linear-front", help="the weight schedule of every exported score")
    e.add_argument("--censoring", choices=C.CENSORING_MODES, default=C.SIMPLE, help="censoring mode of every score")
    e.add_argument(
        "--resource",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--to otlp: resource attribute of the evaluation spans (repeatable), e.g. "
        "openinference.project.name=my-project for Phoenix",
    )
    e.add_argument(
        "--allow-unlinked",
        action="store_true",
        help="export the runs that name a trace even when others do not (counted, listed); "
        "without it such a file exits 2 with nothing sent",
    )
    e.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for delivery (and for MLflow traces)")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")

    i = sub.add_parser("import", help="turn stored traces (OTLP JSON, or Phoenix's span export) into records")
    i.add_argument("traces", nargs="+", help="OTLP JSON or Phoenix span files")
    i.add_argument(
        "--format",
        choices=("auto", "otlp", "phoenix"),
        default="auto",
        help="otlp: the Collector file exporter's; phoenix: spans saved from Phoenix's client (get_spans) or REST API;"
        " auto (default): told apart by the first span",
    )
    i.add_argument("-o", "--output", required=True, help="the records file to write (JSON Lines)")
    i.add_argument("--horizon", type=int, help="step budget of every run (a run's tps_horizon metadata overrides it)")
    i.add_argument("--json", action="store_true", help="print the summary as JSON")

    for name, command in sub.choices.items():
        command.set_defaults(func=functools.partial(_run_command, name))
        # `--debug` also after the command name
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.formatter_class = DefaultsHelpFormatter
    return parser


# -- What every command prints: numbers, tables, wrapped prose, a progress line ---------------------

WIDTH = 100  # terminal output stays within this many columns unless the user asks for --wide
SHOW_AFTER_SECONDS = 2.0  # the progress line appears only on reads longer than this


def fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def fmt_ci(mean: float | None, lo: float | None, hi: float | None) -> str:
    return f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def delta_cells(d: dict[str, Any]) -> list[str]:
    """A paired delta's two cells: 'delta [CI]' and delta/SE."""
    return [fmt_ci(d["delta"], d["ci_low"], d["ci_high"]), fmt(d["z"], 3)]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Right-align columns whose cells are all numbers (or intervals), left-align text columns."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [
        i > 0 and all(c and (c[0].isdigit() or c[0] in "-+.") for c in (r[i] for r in cells[1:]))
        for i in range(len(headers))
    ]
    lines = [
        indent + "  ".join(c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right, strict=True)).rstrip()
        for r in cells
    ]
    lines.insert(1, indent + "  ".join("-" * w for w in widths))  # under the headers
    return "\n".join(lines)


def wrap(text: str, prefix: str = "") -> list[str]:
    """One line of prose wrapped to WIDTH, continuation lines indented two more than `prefix`;
    never split at hyphens (paths, predictor names, 'complete-only')."""
    return textwrap.wrap(
        text, WIDTH, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2), break_on_hyphens=False
    ) or [prefix.rstrip()]


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ", wide: bool = False) -> str:
    """`render_table`, or one block per row ('header: value' lines) when a line would pass WIDTH,
    so no line is cut mid-table; `wide` (`--wide`): always the table."""
    table = render_table(headers, rows, indent)
    if wide or max((len(line) for line in table.splitlines()), default=0) <= WIDTH:
        return table
    lines: list[str] = []
    for r in rows:
        lines += wrap(f"{headers[0]}: {r[0]}", indent)
        for h, c in zip(headers[1:], r[1:], strict=True):
            lines += wrap(f"{h}: {c}", indent + "    ")
    return "\n".join(lines)


def render_skipped(skipped: Sequence[dict[str, str]]) -> str | None:
    """The 'Skipped predictors' note of every command (None when nothing was skipped)."""
    if not skipped:
        return None
    lines = ["Skipped predictors (no usable data for this command; the rest is unaffected)"]
    for s in skipped:
        lines += wrap(f"{s['predictor']}: {s['reason']}", "  ")
    return "\n".join(lines)


def progress_for(path: str | os.PathLike[str], stream: TextIO | None = None) -> Callable[[Chunk], None] | None:
    """A chunk callback that draws `reading FILE  NN%` after a couple of seconds, or None off a TTY."""
    out = stream if stream is not None else sys.stderr
    if not out.isatty():
        return None
    start = time.monotonic()

    def update(chunk: Chunk) -> None:
        if time.monotonic() - start < SHOW_AFTER_SECONDS:
            return
        share = chunk.done / chunk.size if chunk.size else 1.0
        out.write(f"\r reading {chunk.source}  {100 * share:5.1f}%")
        if share >= 1.0:
            out.write("\n")
        out.flush()

    return update


if __name__ == "__main__":
    sys.exit(main())
