# mongomem — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs on every core (pytest-xdist), at most 4 workers: each starts its own
# Kafka and MongoDB-compatible server. A test file stays on one worker (its
# module-scoped servers start once). PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= auto
XDIST = -n $(PYTEST_WORKERS) --maxprocesses=4 --dist loadfile

.DEFAULT_GOAL := help

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11+"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	@touch $(STAMP)

setup: $(STAMP) chromium ## Create .venv and install mongomem with its dev tools (and Chromium)

# The inspector's browser tests drive the system's Chromium (Playwright downloads no
# browser). As root, install Debian's package when it is missing; otherwise say how.
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
		|| [ -n "$$MONGOMEM_CHROMIUM" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium (for the inspector's browser tests) ..."; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "warning: could not install chromium: the inspector's browser tests will be skipped"; \
	else \
		echo "note: no chromium and not root: run 'sudo apt-get install chromium' (or set" \
			"MONGOMEM_CHROMIUM to a Chromium binary), else the inspector's browser tests are skipped"; \
	fi

test: setup ## Run every test tier on every core (each worker starts its own servers)
	$(PY) -m pytest tests $(XDIST) $(PYTEST_ARGS)

test-unit: setup ## Unit tests only (no servers)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-property: setup ## Hypothesis property tests only (no servers)
	$(PY) -m pytest tests/property $(PYTEST_ARGS)

test-integration: setup ## Integration tests against real servers
	$(PY) -m pytest tests/integration $(XDIST) $(PYTEST_ARGS)

test-e2e: setup ## End-to-end tests: stages as processes, faults injected
	$(PY) -m pytest tests/e2e $(XDIST) $(PYTEST_ARGS)

# Each framework integration alone (SPEC N3): its extra in a fresh virtualenv, its tests
# there against one pair of servers (tests/integration/test_integration_extras.py).
# Minutes per extra, so `make test` skips these; CI (.ci/run) runs this after it.
test-extras: setup ## Each integration's extra alone in a fresh venv, with its tests (CI)
	MONGOMEM_TEST_EXTRAS=all $(PY) -m pytest tests/integration/test_integration_extras.py -rP $(PYTEST_ARGS)

TEST_MYPY = --allow-untyped-defs --allow-untyped-calls --allow-incomplete-defs

# mypy, import-linter and mkdocstrings read the package as installed: mongomem =
# pipeline/, mongomem.stages = stages/ (.typecheck/mongomem holds links to both)
layout:
	@rm -rf .typecheck && mkdir -p .typecheck/mongomem
	@for f in pipeline/*; do ln -s ../../$$f .typecheck/mongomem/; done
	@ln -s ../../stages .typecheck/mongomem/stages

lint: setup layout ## ruff (lint + format check), the layer contracts (.importlinter) and mypy --strict
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# the layers (.importlinter): import-linter finds the package on the path
	PYTHONPATH=.typecheck $(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy
	@# tests/: the same checks, relaxed (untyped test functions are fine), one folder at a
	@# time with that folder on the path, as pytest's rootdir imports see it
	@for d in . unit property integration e2e; do \
		MYPYPATH=.typecheck:tests:tests/$$d $(VENV)/bin/mypy $(TEST_MYPY) \
			$$(ls tests/$$d/*.py) || exit 1; done

docs: setup layout ## Build the documentation site into site/ (offline; broken links fail)
	$(VENV)/bin/mkdocs build --strict --quiet

docs-serve: setup layout ## Serve the documentation site on 127.0.0.1:8000, rebuilt on change
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

format: setup ## Apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

infra-up: setup ## Start the local Kafka and MongoDB-compatible servers (kept running)
	$(VENV)/bin/mongomem infra up

infra-down: setup ## Stop the local servers
	$(VENV)/bin/mongomem infra down

infra-status: setup ## Show whether the local servers run
	$(VENV)/bin/mongomem infra status

run: setup ## Start servers and every stage, run the demo conversation, keep running
	$(VENV)/bin/mongomem up

stop: setup ## Stop every stage and the local servers
	$(VENV)/bin/mongomem down

bench: setup ## Run the benchmarks; results go to bench/RESULTS.md
	$(PY) -m bench

clean: ## Remove the virtualenv, caches and local server state
	rm -rf $(VENV) .mongomem .pytest_cache .mypy_cache .ruff_cache .typecheck site

.PHONY: help setup chromium layout test test-unit test-property test-integration test-e2e test-extras lint \
	docs docs-serve format \
	infra-up infra-down infra-status run stop bench clean
