"""The simulated agent world: ground-truth tasks, a scripted chat model and real tools.

`world` has no framework imports; `scripted_model`, `tools` and `agents` need LangGraph
(the `demo` extra).
"""

from tps_tracer.sim.world import FORECASTERS, AgentWorld, Expected, TaskScript, WorldConfig

__all__ = ["FORECASTERS", "AgentWorld", "Expected", "TaskScript", "WorldConfig"]
