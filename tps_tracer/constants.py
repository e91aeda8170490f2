"""Names and defaults shared by the library and the command line; it imports nothing, so the CLI
builds its parsers (and answers `--help`) without numpy."""

# Bootstrap (evaluation/bootstrap.py).
DEFAULT_REPLICATES = 1000
DEFAULT_SEED = 0
# Replicates x score columns of float64: 0.8 MB per column at this bound; CIs are stable long before.
MAX_REPLICATES = 100_000

# Censoring modes of the TPS (evaluation/pairs.py).
COMPLETE_ONLY = "complete-only"
SIMPLE = "simple"
EXACT = "exact"
CENSORING_MODES = (COMPLETE_ONLY, SIMPLE, EXACT)

# The predictor whose scores exporters publish under the plain names (`tps.log`, ...): one fixed
# choice per exporter, so a name means one predictor on every run (online/trajectory_score.py).
HEADLINE_PREDICTOR = "verbal"

# Quantile bins of T-ECE and the reliability diagram (evaluation/diagnostics.py).
DEFAULT_ECE_BINS = 10

# L2 penalty on the Platt slope (evaluation/calibration.py; the paper uses 1.0).
DEFAULT_PENALTY = 1.0

# Monte Carlo continuations (evaluation/censoring/continuations.py).
DEFAULT_MIN_VALID = 5
UNRESOLVED_POLICIES = ("exclude", "failure", "success")

# The demo (cli/demo_cmd.py).
DEMO_TASKS = 300
DEMO_SEED = 7

# Largest step budget accepted: far above any agent's; weights cost O(T).
MAX_HORIZON = 10_000_000
# Bounds of the record file readers (records/limits.py; docs/records-limits.md says why each is where it is).
# Distinct predictor names in one input: the readers build one float column per name and trajectory step.
MAX_PREDICTORS = 1_000
# Bytes of one JSON Lines record (one line): the 1.5M-step trajectory of the benchmarks is 75 MB.
MAX_RECORD_BYTES = 256 << 20
# Nested arrays/objects in one record, the record itself included (a plain record nests 4 deep).
MAX_DEPTH = 253
# Digits of one integer literal: Python's own bound on int(str) (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4_300
DEFAULT_TOP_K = 5  # candidates per token in the entropy confidence (the paper's 1 - H / ln 5)

# Steps without a forecast (evaluation/rows.py decides what they score).
CARRY_FORWARD = "carry-forward"
FILL_BACKWARDS = "fill-backwards"
SKIP_RENORMALISE = "skip-renormalise"
DROP_RUN = "drop-run"
MISSING_POLICIES: dict[str, str] = {
    CARRY_FORWARD: "proper default: last stated forecast, 0.5 before the first",
    FILL_BACKWARDS: "estimate, can be gamed: next stated forecast",
    SKIP_RENORMALISE: "estimate, can be gamed: stated steps, weights renormalised to the run's mass",
    DROP_RUN: "not proper: a run with a gap is not scored",
}
DEFAULT_MISSING = CARRY_FORWARD
