"""Distributed evaluation (docs/scale.md): `evaluate(ray_dataset_or_partial_states, options)` merges partial states
computed where the data is. Only `ray_engine` imports Ray, and only when called (the `ray` extra)."""

from tps_tracer.distributed.ray_engine import evaluate, report_from_path_ray

__all__ = ["evaluate", "report_from_path_ray"]
