"""LangChain / LangGraph adapter (needs `pip install tps-tracer[langchain]`)."""

from tps_tracer.langchain.handler import TPSCallbackHandler
from tps_tracer.langchain.stop_detection import classify_error, classify_output

__all__ = ["TPSCallbackHandler", "classify_error", "classify_output"]
