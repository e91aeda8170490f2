# Each entry point creates .venv and installs what it needs, so a fresh clone works.
# `make demo` installs the core and the `langchain` extra only; `make test` installs every extra.
# One stamp file per extra set (named after pyproject.toml's checksum): `make demo` after `make test`
# installs nothing, `make test` after `make demo` adds the rest. A new target with its own extras
# gets a stamp the same way: `extras_NAME := ...`, then `$(call stamp,NAME)` as its prerequisite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cksum < pyproject.toml | cut -d' ' -f1)

extras_demo := langchain
extras_test := test,dev,langchain,plot,otel,openinference,phoenix,otel-test,integrations-test,mlflow,frameworks-test

stamp = $(VENV)/.installed-$(1)-$(HASH)

.PHONY: demo test tools lint typecheck check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip only adds to the environment: installing one extra set never removes another's packages.
$(VENV)/.installed-%-$(HASH): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[$(extras_$*)]'
	rm -f $(VENV)/.installed-$*-*
	touch $@

# `make test` installs the demo's set first, so a later `make demo` finds its stamp and installs nothing.
$(call stamp,test): $(call stamp,demo)

# The main job: an end-to-end evaluation on embedded defaults (no network, no API keys).
demo: $(call stamp,demo)
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
test: $(call stamp,test) tools
	$(BIN)/python -m pytest -q

lint: $(call stamp,test)
	$(BIN)/ruff check tps_tracer tests examples integrations

typecheck: $(call stamp,test)
	$(BIN)/mypy

check: lint typecheck test

bench: $(call stamp,test)
	$(BIN)/python tests/benchmarks/bench_scoring.py
	$(BIN)/python tests/benchmarks/bench_online.py
	$(BIN)/python tests/benchmarks/bench_handler.py
	$(BIN)/python tests/benchmarks/bench_span_processor.py

clean:
	rm -rf $(VENV) $(MLFLOW_SERVER_VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
