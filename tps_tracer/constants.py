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

# Censoring modes of the TPS (evaluation/tps.py).
COMPLETE_ONLY = "complete-only"
SIMPLE = "simple"
EXACT = "exact"
CENSORING_MODES = (COMPLETE_ONLY, SIMPLE, EXACT)

# The predictor whose scores exporters publish under the plain names (`tps.log`, ...): one fixed
# choice per exporter, so a name means one predictor on every run (online/trajectory_score.py).
HEADLINE_PREDICTOR = "verbal"

# Quantile bins of T-ECE and the reliability diagram (evaluation/diagnostics.py).
DEFAULT_ECE_BINS = 10

# L2 penalty on the Platt slope (evaluation/calibration/cross_fit.py; the paper uses 1.0).
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
DEFAULT_TOP_K = 5  # candidates per token in the entropy confidence (the paper's 1 - H / ln 5)
