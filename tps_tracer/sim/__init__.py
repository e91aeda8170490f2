"""The simulated agent world; `world` has no framework imports, the rest needs the `demo` extra."""

from tps_tracer.sim.world import FORECASTERS, AgentWorld, Expected, TaskScript, WorldConfig

__all__ = ["FORECASTERS", "AgentWorld", "Expected", "TaskScript", "WorldConfig"]
