"""Score mathematics: proper rules, weight schedules, branch pairs. numpy/scipy only."""

from tps_tracer.scoring.rules import (
    BUILTIN_SCHEDULES,
    BetaRule,
    BrierRule,
    LogRule,
    ScoreRule,
    StepLayout,
    WeightSchedule,
    branch_pairs,
    custom_schedule,
    get_rule,
    get_schedule,
    mix,
    parse_rules,
    parse_schedules,
    score,
    weights,
)

__all__ = [
    "BUILTIN_SCHEDULES",
    "BetaRule",
    "BrierRule",
    "LogRule",
    "ScoreRule",
    "StepLayout",
    "WeightSchedule",
    "branch_pairs",
    "custom_schedule",
    "get_rule",
    "get_schedule",
    "mix",
    "parse_rules",
    "parse_schedules",
    "score",
    "weights",
]
