"""Why a run stopped, and its scoring role (paper, Appendix "Termination Mechanisms"; docs/design.md's table).
A CensoringPolicy may move informative stops to "censored" (the contra-assumption sensitivity run); "clean"
always stays complete and only capture_lost is lost."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from tps_tracer.errors import InputError


class StopReason(str, Enum):
    CLEAN = "clean"
    MAX_STEPS = "max_steps"
    PARSE_ERROR = "parse_error"
    TOOL_ERROR = "tool_error"
    ENV_TERMINATED = "env_terminated"
    TIMEOUT = "timeout"
    OTHER = "other"
    CAPTURE_LOST = "capture_lost"


class Role(str, Enum):
    COMPLETE = "complete"  # outcome Y observed
    CENSORED = "censored"  # administratively stopped: Y unobserved, prefix scored
    EXCLUDED = "excluded"  # informative stop: not scored, counted
    LOST = "lost"  # capture loss: not scored, counted apart from the informative stops


DEFAULT_ROLES: Mapping[StopReason, Role] = {
    StopReason.CLEAN: Role.COMPLETE,
    StopReason.MAX_STEPS: Role.CENSORED,
    StopReason.PARSE_ERROR: Role.EXCLUDED,
    StopReason.TOOL_ERROR: Role.EXCLUDED,
    StopReason.ENV_TERMINATED: Role.EXCLUDED,
    StopReason.TIMEOUT: Role.EXCLUDED,
    StopReason.OTHER: Role.EXCLUDED,
    StopReason.CAPTURE_LOST: Role.LOST,
}


@dataclass(frozen=True)
class CensoringPolicy:
    """Maps stop reasons to scoring roles; the default is the paper's assumption-disciplined table."""

    roles: Mapping[StopReason, Role] = field(default_factory=lambda: dict(DEFAULT_ROLES))

    def __post_init__(self) -> None:
        if self.roles.get(StopReason.CLEAN, Role.COMPLETE) is not Role.COMPLETE:
            raise InputError("'clean' stops carry an observed outcome and must stay 'complete'")
        for reason, role in self.roles.items():
            if (reason is StopReason.CAPTURE_LOST) != (role is Role.LOST):
                raise InputError(
                    "'capture_lost' runs (tps-tracer lost their end) are neither censored nor informative: "
                    "their role is always 'lost', and no other stop reason can have it"
                )
            if reason is not StopReason.CLEAN and role is Role.COMPLETE:
                raise InputError(f"{reason.value!r} has no observed outcome and cannot be 'complete'")

    @classmethod
    def treating_as_censored(cls, reasons: Iterable[str | StopReason]) -> CensoringPolicy:
        return cls({**DEFAULT_ROLES, **{StopReason(r): Role.CENSORED for r in reasons}})

    def role(self, reason: StopReason) -> Role:
        return self.roles.get(reason, DEFAULT_ROLES[reason])

    @property
    def is_default(self) -> bool:
        return all(self.role(r) is DEFAULT_ROLES[r] for r in StopReason)
