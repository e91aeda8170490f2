"""The interchange schema (docs/records.md): one trajectory per JSON Lines record; unknown fields are kept, a
forecast as given. A clean record may carry `"outcome_pending": true` until a resolution line
`{"resolves": id, "outcome": 1}` (or `"q_z"`) fills it in, wherever it lies in the file."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tps_tracer.errors import InputError
from tps_tracer.records.record_shape import as_outcome
from tps_tracer.records.stop_reasons import StopReason
from tps_tracer.validity import horizon_range_problem

# The one outcome rule (record_shape.py), without strings.
_BINARY_OUTCOME = field_validator("outcome", mode="before")(lambda v: as_outcome(v, allow_strings=False))


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    t: int | None = Field(default=None, ge=1)
    forecasts: dict[str, Any] = Field(default_factory=dict)


class TrajectoryRecord(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    trajectory_id: str = Field(min_length=1)
    stop_reason: StopReason
    outcome: int | None = None
    horizon: int | None = None  # in [1, MAX_HORIZON] (tps_tracer/validity.py)
    q_z: float | None = Field(default=None, ge=0.0, le=1.0)
    outcome_pending: bool = False
    steps: list[StepRecord] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _binary_outcome = _BINARY_OUTCOME

    @field_validator("horizon")
    @classmethod
    def _horizon_in_range(cls, v: int | None) -> int | None:
        if v is not None and (problem := horizon_range_problem(v)):
            raise InputError(problem)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrajectoryRecord:
        if self.outcome_pending and self.outcome is not None:
            raise InputError("outcome_pending is true but an outcome is given")
        if self.stop_reason is StopReason.CLEAN and self.outcome is None and not self.outcome_pending:
            raise InputError("a 'clean' stop needs an outcome (0 or 1), or outcome_pending: true")
        if self.horizon is not None and self.horizon < len(self.steps):
            raise InputError(f"horizon ({self.horizon}) is smaller than the number of steps ({len(self.steps)})")
        for i, step in enumerate(self.steps):
            if step.t is not None and step.t != i + 1:
                raise InputError(f"steps[{i}].t is {step.t}, expected {i + 1} (steps must be in order)")
        return self

    @property
    def is_pending(self) -> bool:
        """A clean stop whose outcome has not arrived yet."""
        return self.stop_reason is StopReason.CLEAN and self.outcome is None

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def effective_horizon(self) -> int:
        """T: the given horizon, or the number of observed steps."""
        return self.horizon if self.horizon is not None else len(self.steps)


class ResolutionRecord(BaseModel):
    """A late outcome and/or q_Z for a trajectory written earlier."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    resolves: str = Field(min_length=1)
    outcome: int | None = None
    q_z: float | None = Field(default=None, ge=0.0, le=1.0)

    _binary_outcome = _BINARY_OUTCOME

    @model_validator(mode="after")
    def _something(self) -> ResolutionRecord:
        if self.outcome is None and self.q_z is None:
            raise InputError("a resolution needs an outcome or a q_z")
        return self
