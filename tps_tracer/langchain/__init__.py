"""LangChain / LangGraph adapter (the `langchain` extra: langchain-core)."""

try:
    from tps_tracer.langchain.handler import TPSCallbackHandler
    from tps_tracer.langchain.run_reading import classify_error, classify_output
except ModuleNotFoundError as _exc:
    from tps_tracer.errors import missing_extra

    _missing = missing_extra(_exc, "tps_tracer.langchain")
    if _missing is None:
        raise
    raise _missing from _exc

__all__ = ["TPSCallbackHandler", "classify_error", "classify_output"]
