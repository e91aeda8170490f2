"""The suite's shared fixtures and how pytest-xdist places tests on its workers (`make test`: -n auto).

The backend servers are session fixtures defined here once: a test module that imported one would
get its own copy, started again. Under `--dist loadgroup` every test of a module that uses a server
goes to that server's group, so each server starts once per run (the outage tests stop and restart
it, which only the tests of its group, run one after another, can see); a module with a fixture of
wider scope than a test (a simulated world, a built wheel) is one group, so the fixture is built once.
The other tests are spread one by one.
"""

from __future__ import annotations

import pytest
from backends.llama_server import llama_server
from backends.mlflow_server import mlflow_server
from backends.phoenix_server import phoenix

SERVERS = (llama_server.__name__, phoenix.__name__, mlflow_server.__name__)


def _group(item: pytest.Item) -> str | None:
    names = item.fixturenames  # type: ignore[attr-defined]
    server = next((s for s in SERVERS if s in names), None)
    if server:
        return server
    defs = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    shared = any(d.scope != "function" and d.baseid for ds in defs.values() for d in ds)  # baseid "": a plugin's
    return item.path.name if shared else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {item: _group(item) for item in items}
    by_module: dict[str, str] = {}
    for item, group in groups.items():
        if group in SERVERS:
            by_module.setdefault(item.path.name, group)
    for item, group in groups.items():
        group = by_module.get(item.path.name, group)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
