# `make lab` and `make test` each do all set-up on a fresh machine; every step is skipped once done.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .make
TORCH := torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup lab test lint prepare chromium bench clean

setup: $(STAMPS)/venv prepare

# A virtual environment with CPU torch installed first (an unpinned torch pulls a multi-GB CUDA build).
$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $@

# The embedded model (converted once to ~/.cache/interplab or $$INTERPLAB_CACHE) and the default corpus.
prepare: $(STAMPS)/venv
	$(PY) -m interplab prepare

# Debian's Chromium for the browser tests, when missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

lint: $(STAMPS)/venv
	$(PY) -m ruff check .

test: setup chromium lint
	$(PY) -m pytest $(PYTEST_ARGS)

lab: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 nbs/00_tour.ipynb

# Every notebook in nbs/ executed and written to docs/NAME.html, rendering its widgets offline
# (scripts in docs/interplab-static/; `make prepare` fetched them from npm).
.PHONY: docs
docs: setup
	$(PY) -m interplab export nbs/*.ipynb --out docs/ --execute

bench: setup
	$(PY) bench/bench_tracing.py

clean:
	rm -rf $(VENV) $(STAMPS)
