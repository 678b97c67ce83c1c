# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean postgres-tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/research_team.py

postgres-tools:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)

lint: $(STAMP)
	$(VENV)/bin/ruff check agentgate tests benchmarks examples
	$(VENV)/bin/ruff format --check agentgate tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy agentgate benchmarks

# The suite runs on every core, up to four (pytest-xdist): each worker starts its own PostgreSQL
# server. On two cores it takes a little over half the time of one process.
pytest: $(STAMP) postgres-tools
	$(VENV)/bin/pytest -q -n auto --maxprocesses=4

test: lint typecheck pytest

# Every benchmark, each ending with its JSON line. calibrate_gpu.py measures a CUDA GPU with PyTorch
# (neither is a dependency): here it fits the calibration saved in benchmarks/calibration/ again.
bench: $(STAMP)
	for b in benchmarks/*.py; do case $$b in */_*) continue;; \
	  */calibrate_gpu.py) set -- --fit benchmarks/calibration/llama-3.1-8b-h200.json;; *) set --;; esac; \
	  $(PY) $$b "$$@" --json || exit 1; done

clean:
	rm -rf $(VENV) .agentgate .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
