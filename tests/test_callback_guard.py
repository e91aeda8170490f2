"""One guard for every callback an agent framework calls on an adapter (tracking/tracker.py
`never_raises`): a failure inside is counted in the adapter's health ledger and never reaches
the agent."""

from __future__ import annotations

import uuid

import pytest

from tps_tracer import Accumulator
from tps_tracer.langchain import TPSCallbackHandler
from tps_tracer.otel import TPSSpanProcessor


def _callbacks(cls):
    return sorted(name for name, fn in vars(cls).items() if name.startswith("on_") and callable(fn))


@pytest.mark.parametrize("cls", [TPSCallbackHandler, TPSSpanProcessor])
def test_every_callback_the_framework_calls_is_guarded(cls):
    names = _callbacks(cls)
    assert len(names) >= (12 if cls is TPSCallbackHandler else 2)
    unguarded = [n for n in names if not hasattr(getattr(cls, n), "__wrapped__")]
    assert unguarded == []


class Exploding:
    """An object every attribute access of which fails, as a broken framework payload would."""

    def __getattr__(self, name):
        raise RuntimeError(f"boom on {name}")


def test_a_failure_inside_a_handler_callback_is_counted_not_raised():
    acc = Accumulator(bootstrap=0)
    handler = TPSCallbackHandler(acc, background=False)
    root, llm = uuid.uuid4(), uuid.uuid4()
    handler.on_chain_start({}, {}, run_id=root, metadata={"tps_trajectory_id": "t1"})
    handler.on_chat_model_start({}, [[]], run_id=llm, parent_run_id=root)
    assert handler.on_llm_end(Exploding(), run_id=llm) is None  # would raise RuntimeError unguarded
    assert handler.errors.get("on_llm_end") == 1
    handler.close()


def test_a_failure_inside_the_span_processor_is_counted_not_raised():
    acc = Accumulator(bootstrap=0)
    processor = TPSSpanProcessor(acc, background=False)
    assert processor.on_end(Exploding()) is None
    assert processor.errors.get("on_end") == 1
    processor.shutdown()
