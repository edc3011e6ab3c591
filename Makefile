# Two commands on a fresh machine: `make quickstart` and `make test`. Both create .venv, install
# torch first (TORCH: the CPU build this project is tested with; any torch >= 2.4 works), then aiayn.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install quickstart test test-slow lint format docs docs-serve docs-tables clean gpu-bundle

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

quickstart: install            ## generate a corpus, train, average, translate, evaluate (about 3 minutes)
	$(BIN)/aiayn quickstart --overwrite

test: install lint             ## lint, then the default test tier (about 3 minutes on 2 cores, one worker a core)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest

test-slow: install             ## the slow tier: training in subprocesses, two processes, learning targets
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -m slow

gpu-bundle: install            ## for a GPU machine without network: .gpu-bundle/ (wheels it lacks, Multi30k; <= 64 MiB)
	$(BIN)/python benchmarks/gpu_bundle.py --output .gpu-bundle

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

$(VENV)/.docs-installed: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed   ## the documentation site into site/ (strict: a broken link or image fails)
	$(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.docs-installed  ## the site at http://127.0.0.1:8000, rebuilt as pages change
	$(BIN)/mkdocs serve

docs-tables: install           ## rewrite the docs' tables of numbers from benchmarks/results/*.json
	$(BIN)/python docs/tables.py

clean:
	rm -rf $(VENV) aiayn-quickstart site
