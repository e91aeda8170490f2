"""Names and defaults shared by the library and the command line.

This module imports nothing: the CLI builds every parser (and answers `--help`) from it
without loading numpy or scipy. The library modules that use these names import them from
here, so each is defined once (and stays importable from its old module).
"""

# Bootstrap (evaluation/bootstrap.py).
DEFAULT_REPLICATES = 1000
DEFAULT_SEED = 0
# Upper bound on bootstrap replicates (every command and the Python API): the replicate matrix
# is replicates x score columns of float64, so 100,000 replicates already cost 0.8 MB per
# column (a full report has hundreds of columns); percentile CIs are stable long before that.
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

# The capture path (tracking/keys.py, capture/) reads these without importing numpy.
# Largest step budget accepted by the capture path: far above any agent's; weights cost O(steps) below it.
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

# Steps without a forecast (scoring/missing_forecasts.py decides what they score; docs/report.md).
# Here so the CLI's option parsing names the policies without importing numpy.
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
