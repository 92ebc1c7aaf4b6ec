# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.opprof-installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setup.py builds the optional C extensions (opprof/engine/_gil.c, _handoff.c, opprof/profiler/_spanlog.c, _memlog.c, _npmem.c) in place: a changed source reinstalls.
$(STAMP): pyproject.toml setup.py opprof/engine/_gil.c opprof/engine/_handoff.c opprof/profiler/_spanlog.c opprof/profiler/_memlog.c opprof/profiler/_npmem.c opprof/_monotonic.h opprof/_frames.h opprof/_int64.h opprof/profiler/_npmem_hooks.h | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,e2e,dask]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/opprof demo

# ruff; the import contract (layers point down, see pyproject.toml); mypy on the package.
lint: $(STAMP)
	$(BIN)/ruff check opprof tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

# The whole suite, one table (benchmarks/RESULTS.md keeps the latest); BENCH_ARGS="--quick" for a smoke run.
bench: $(STAMP)
	$(BIN)/python -c 'import dask' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

.PHONY: bench-peers
bench-peers: $(STAMP)
	$(BIN)/python -c 'import dask' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m benchmarks --peers $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-3.10 .venv-3.12 .venv-3.13 build dist .pytest_cache .hypothesis .ruff_cache
