"""Online scoring: the accumulator the LangChain handler and the OpenTelemetry processor feed."""

from tps_tracer.online.accumulator import Accumulator, AccumulatorError
from tps_tracer.online.jsonl_sink import JsonlSink

__all__ = ["Accumulator", "AccumulatorError", "JsonlSink"]
