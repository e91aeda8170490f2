# Each entry point creates .venv and installs what it needs, so a fresh clone works.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint typecheck check bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,langchain,plot,otel,phoenix,otel-test]'
	rm -f $(VENV)/.installed-*
	touch $@

# The main job: an end-to-end evaluation on embedded defaults (no network, no API keys).
demo: $(STAMP)
	$(BIN)/tps-tracer demo

# The whole test suite (benchmarks excluded: see `make bench`).
test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check tps_tracer tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_scoring.py
	$(BIN)/python tests/benchmarks/bench_online.py
	$(BIN)/python tests/benchmarks/bench_handler.py
	$(BIN)/python tests/benchmarks/bench_span_processor.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
