"""The names users put on their runs (the table: docs/capture.md, "Metadata keys") and the capture defaults."""

from __future__ import annotations

TRAJECTORY_ID_KEY = "tps_trajectory_id"
TASK_ID_KEY = "tps_task_id"
# User metadata copied into the record: at most this many keys, of these lengths (characters).
MAX_USER_KEYS = 32
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 256
# Metadata keys the frameworks add to a run (LangGraph's step bookkeeping, LangSmith's model
# labels, checkpoint ids): not the user's, never copied.
FRAMEWORK_PREFIXES = ("tps_", "langgraph_", "checkpoint_", "ls_", "__")
HORIZON_KEY = "tps_horizon"
OUTCOME_KEY = "tps_outcome"
VERBAL_SCALE_KEY = "tps_verbal_scale"
# Written by the LangChain handler into the record: the root run id LangChain gave every handler,
# which is LangSmith's run and trace id and seeds the Langfuse trace id (otel/backends.py).
RUN_ID_KEY = "langchain_run_id"

# The paper's harness: up to two repair attempts per step, one more malformed output stops the run.
DEFAULT_REPAIR_BUDGET = 2
# langchain-classic AgentExecutor retries malformed output through a tool run of this name.
PARSE_RETRY_TOOL = "_Exception"
# LangChain 1.x marks the model calls a middleware makes for itself (SummarizationMiddleware's summary,
# the tool emulator, the tool selector) with this metadata key: not the agent's steps, counted only.
INTERNAL_CALL_KEY = "lc_internal_call"
# Record metadata key naming why a run was finished early (its stop reason is then "other").
ABANDONED_KEY = "tps_abandoned"
