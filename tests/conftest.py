"""The suite's shared fixtures: the backend servers, one of each per pytest process (per xdist worker).

They are session fixtures defined here once: a test module that imported one would get its own
copy, started again for that module. Tests use their own Phoenix projects and MLflow experiments,
so one server serves them all; the outage tests (`load` marker) stop and restart it in place.
"""

from __future__ import annotations

from backends.llama_server import llama_server
from backends.mlflow_server import mlflow_server
from backends.phoenix_server import phoenix
from backends.score_platforms import score_platform

__all__ = ["llama_server", "mlflow_server", "phoenix", "score_platform"]
