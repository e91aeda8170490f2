# Each entry point creates .venv and installs what it needs, so a fresh clone works.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test tools lint typecheck check bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,langchain,plot,otel,phoenix,otel-test,integrations-test,mlflow]'
	rm -f $(VENV)/.installed-*
	touch $@

# The main job: an end-to-end evaluation on embedded defaults (no network, no API keys).
demo: $(STAMP)
	$(BIN)/tps-tracer demo

# Servers and tools the integration tests run: promtool (Debian's prometheus package), and an
# MLflow tracking server in its own virtualenv (it cannot share one with Arize Phoenix).
MLFLOW_SERVER_VENV := .venv-mlflow
tools: $(MLFLOW_SERVER_VENV)/bin/mlflow
	command -v promtool >/dev/null || { SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

$(MLFLOW_SERVER_VENV)/bin/mlflow:
	test -x $(MLFLOW_SERVER_VENV)/bin/python || $(PYTHON) -m venv $(MLFLOW_SERVER_VENV)
	$(MLFLOW_SERVER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MLFLOW_SERVER_VENV)/bin/python -m pip install --quiet 'mlflow>=3.4,<4'

# The whole test suite (benchmarks excluded: see `make bench`).
test: $(STAMP) tools
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check tps_tracer tests examples integrations

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_scoring.py
	$(BIN)/python tests/benchmarks/bench_online.py
	$(BIN)/python tests/benchmarks/bench_handler.py
	$(BIN)/python tests/benchmarks/bench_span_processor.py

clean:
	rm -rf $(VENV) $(MLFLOW_SERVER_VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
