"""The health ledger as a user sees it: `print(handler.health)` shows the counts."""

from __future__ import annotations

import threading

from tps_tracer.health import HealthLedger


def test_repr_shows_the_non_zero_counts_not_an_address():
    ledger = HealthLedger()
    assert repr(ledger) == "HealthLedger({})"
    ledger.count("ignored", "open_at_fork", n=3)
    ledger.count("rejected", "step_after_stop")
    ledger.count("rejected", "step_after_stop")
    assert repr(ledger) == "HealthLedger({'rejected': {'step_after_stop': 2}, 'ignored': {'open_at_fork': 3}})"


def test_counts_from_many_threads_add_up():
    ledger = HealthLedger()

    def bump() -> None:
        for _ in range(1000):
            ledger.count("dropped", "queue_full")

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.get("dropped", "queue_full") == 8000 == ledger.get("dropped")
