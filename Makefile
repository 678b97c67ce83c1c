# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Another Python: `make test PYTHON=python3.13 VENV=.venv-3.13` (docs/operations.md, Python versions).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# What each command needs installed: the demo, the package and its langgraph extra; the tests
# and benchmarks, everything (the test extra holds the langgraph one, so it stands for both).
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
# The packages are installed by uv (installed into the venv by pip first, from PyPI like every
# dependency): side by side at review R80 it installed the same releases as pip, package by
# package, in 8 s with its cache empty where pip took 34 s. The test and bench extras are
# installed without compiling their bytecode: most of what LiteLLM, the OpenAI SDK... hold nothing
# here imports, and the suite compiles what it imports, once: it writes bytecode (see WORKERS
# below). The demo's install compiles it (--compile-bytecode): where PYTHONDONTWRITEBYTECODE is
# set (this project's machines), a module without bytecode is compiled again by every process
# that imports it (a `grant check` took 1.0 CPU-s, not 0.6).
UV := $(PY) -m uv pip install --quiet --python $(PY)
# uv is put into the venv by each install step, where it is missing: a new venv, or one made
# before review R80 (until review R81 only the venv's creation installed it, and such a venv
# failed `No module named uv` once pyproject.toml changed).
ENSURE_UV := $(PY) -m uv --version >/dev/null 2>&1 || \
	$(PY) -m pip install --quiet --disable-pip-version-check 'uv>=0.13,<0.14'

.PHONY: demo test lint typecheck pytest bench clean postgres-tools

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(ENSURE_UV)
	$(UV) --compile-bytecode -e '.[langgraph]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(PY)
	$(ENSURE_UV)
	$(UV) -e '.[test,bench]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/research_team.py

postgres-tools:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)

lint: $(STAMP)
	$(VENV)/bin/ruff check agentgate tests benchmarks examples
	$(VENV)/bin/ruff format --check agentgate tests benchmarks examples

MYPY := $(VENV)/bin/mypy agentgate benchmarks

typecheck: $(STAMP)
	$(MYPY)

# The suite runs on one worker more than the cores, four at most (pytest-xdist): a worker often
# waits (a subprocess starting, a PostgreSQL round trip, a deadline), and on two cores a third
# worker took a run from 1730 s to 1375 s, and the suite's files in memory (where there is
# room: tests/conftest.py) to 1099 s. Each worker starts its own PostgreSQL server. Bytecode is written
# even where the environment sets PYTHONDONTWRITEBYTECODE (this project's machines do): else
# each worker rewrites and compiles every test module (about 15 s of its collection) and each of
# the suite's `python -m agentgate` processes compiles agentgate again.
WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -ge 4 ]; then echo 4; else echo $$((n + 1)); fi)

# Work is stolen by an idle worker (--dist worksteal) rather than dealt out in advance: with
# --dist load a 20-30 s test dealt late left the other workers idle at the end (review R96: a
# 60-file sample took 769 s of wall against 1,293 s at the same 203 s of CPU, one run each, on a
# loaded machine).
PYTEST := PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n $(WORKERS) --dist worksteal

pytest: $(STAMP) postgres-tools
	$(PYTEST)

# `make test` checks the types while the suite runs, and prints mypy's report after the suite's:
# mypy is one process (40 s of a clean run, on one core), and run first it left the other core
# idle for those 40 s. Either failing fails the command; Ctrl-C stops both (a command started
# with & in a script ignores it).
test: lint postgres-tools
	$(MYPY) > $(VENV)/typecheck.txt 2>&1 & types=$$!; trap 'kill $$types 2>/dev/null; exit 130' INT TERM; \
	$(PYTEST); tests=$$?; \
	wait $$types; typed=$$?; echo "$(MYPY):"; cat $(VENV)/typecheck.txt; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# Every benchmark, each ending with its JSON line. calibrate_gpu.py measures a CUDA GPU with PyTorch
# (neither is a dependency): here it fits the calibration saved in benchmarks/calibration/ again.
# Bytecode is written, as by the suite: the test and bench extras are installed without it.
# dispatch.py replays the public traces of the project's shared folder (../shared/data/traces/,
# beside the checkout, not in the repository: docs/dispatch.md, "Benchmark"). Where one is not
# there, it is skipped with a line saying so, and the command still succeeds: the folder is
# data to fetch, not a fault of the tree (CI has it, and `make test` fails without it). A
# benchmark that fails does not stop the ones after it; the command then fails, naming each
# (until review R95 the first failure, a missing trace included, stopped the rest). Which files
# dispatch.py reads by default is asked of dispatch.py itself (DEFAULT_TRACES), not written twice.
BENCH_TRACES_MISSING := from benchmarks.dispatch import DEFAULT_TRACES as t; \
	print(*(p for p in t if not p.is_file()))

bench: $(STAMP)
	@failed=; skipped=; for b in benchmarks/*.py; do case $$b in */_*) continue;; \
	  */calibrate_gpu.py) set -- --fit benchmarks/calibration/llama-3.1-8b-h200.json;; \
	  */dispatch.py) set --; missing=$$(PYTHONDONTWRITEBYTECODE= $(PY) -c '$(BENCH_TRACES_MISSING)') && \
	    if [ -n "$$missing" ]; then skipped="$$skipped $$b"; echo "make bench: skipped $$b:" \
	      "its traces are missing ($$missing): they come from ../shared/data/traces/" \
	      "beside the checkout (docs/dispatch.md, \"Benchmark\")" >&2; continue; fi;; \
	  *) set --;; esac; \
	  echo "PYTHONDONTWRITEBYTECODE= $(PY) $$b $${*:+$$* }--json"; \
	  PYTHONDONTWRITEBYTECODE= $(PY) $$b "$$@" --json || failed="$$failed $$b"; done; \
	if [ -n "$$skipped" ]; then echo "make bench: skipped (traces missing):$$skipped" >&2; fi; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

clean:
	rm -rf $(VENV) .agentgate .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
