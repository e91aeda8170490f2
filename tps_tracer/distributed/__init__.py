"""Distributed evaluation: partial states computed where the data is, merged on the driver.

    from tps_tracer.distributed import evaluate
    report = evaluate(ray_dataset_or_partial_states, options)

Only `ray_engine` imports Ray, and only when called (the `ray` extra).
"""

from tps_tracer.distributed.ray_engine import evaluate, report_from_path_ray

__all__ = ["evaluate", "report_from_path_ray"]
