# durable-agents-lab: set-up and entry points (see README.md).
#
#   make lab    set up if needed, then open JupyterLab on notebooks/index.ipynb
#   make test   set up if needed, then run the whole test suite
#   make peers  also install the peer runtimes (DBOS, LangGraph) for `bench append`
#
# Set-up creates .venv with Python 3.11 and installs the project from its own pyproject.toml;
# `make test` also installs Debian's chromium (for the real-browser tests) when it is missing.
# It re-installs only when pyproject.toml is newer than the stamp file inside .venv; delete
# .venv to start from scratch.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip --disable-pip-version-check --no-input
STAMP       := $(VENV)/.installed-test
PEERS_STAMP := $(VENV)/.installed-peers

LAB_ARGS    ?=
PYTEST_ARGS ?=

# Jupyter refuses to start as root unless told to (containers, CI machines).
ALLOW_ROOT  := $(if $(filter 0,$(shell id -u)),--allow-root)
# Given a file, Jupyter would serve only that file's folder; keep the whole project in view.
LAB_ROOT    := --ServerApp.root_dir="$(CURDIR)"

.PHONY: help lab test peers setup browser quorum

help:
	@echo "make lab    set up if needed, then open JupyterLab on notebooks/index.ipynb (LAB_ARGS=...)"
	@echo "make test   set up if needed, then run the test suite (PYTEST_ARGS=...)"
	@echo "make peers  install the peer runtimes (DBOS, LangGraph) used by 'bench append'"

lab: $(STAMP) quorum
	$(VENV)/bin/jupyter lab notebooks/index.ipynb $(LAB_ROOT) $(ALLOW_ROOT) $(LAB_ARGS)

test: $(STAMP) browser quorum
	$(PY) -m pytest $(PYTEST_ARGS)

peers: $(PEERS_STAMP)

setup: $(STAMP)

# The browser tests (tests/test_browser.py) drive Debian's chromium with Playwright; Playwright's
# own browser download is not used. Installed with apt-get when missing (as root, or with sudo).
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  echo "installing Debian's chromium for the real-browser tests (apt-get install chromium)"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  if ! command -v apt-get >/dev/null 2>&1 || \
	     ! { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; }; then \
	    echo "error: could not install chromium with apt-get. Install a Chromium at /usr/bin/chromium yourself," >&2; \
	    echo "       or run the suite without the browser tests: make test PYTEST_ARGS=\"-m 'not browser'\"" >&2; \
	    exit 1; \
	  fi; \
	fi

# The quorum tier (kernel_lib.quorum) runs real etcd members on loopback: Debian's etcd-server and
# etcd-client (3.4), installed with apt-get when etcd is missing (as root, or with sudo).
quorum:
	@if ! command -v etcd >/dev/null 2>&1; then \
	  echo "installing Debian's etcd-server and etcd-client for the quorum tier (apt-get install)"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  if ! command -v apt-get >/dev/null 2>&1 || \
	     ! { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq etcd-server etcd-client >/dev/null; }; then \
	    echo "error: could not install etcd with apt-get. Install etcd 3.4+ (etcd on PATH) yourself," >&2; \
	    echo "       or run the suite without the quorum tests: make test PYTEST_ARGS=\"-m 'not quorum'\"" >&2; \
	    exit 1; \
	  fi; \
	fi

# Create the venv with python3.11, or with python3 when that is 3.11 or newer.
$(PY):
	@py=""; \
	for cand in python3.11 python3; do \
	  if command -v "$$cand" >/dev/null 2>&1 && \
	     "$$cand" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' >/dev/null 2>&1; then \
	    py="$$cand"; break; \
	  fi; \
	done; \
	if [ -z "$$py" ]; then \
	  found=$$(command -v python3 >/dev/null 2>&1 && python3 --version 2>&1 || echo "not found"); \
	  echo "error: durable-agents-lab needs Python 3.11 or newer to create $(VENV)." >&2; \
	  echo "       Neither python3.11 nor a python3 >= 3.11 is on PATH (python3: $$found)." >&2; \
	  echo "       Install Python 3.11 (e.g. 'apt-get install python3.11 python3.11-venv') and re-run." >&2; \
	  exit 1; \
	fi; \
	echo "creating $(VENV) with $$(command -v $$py) ($$($$py --version 2>&1))"; \
	if ! "$$py" -m venv $(VENV); then \
	  rm -rf $(VENV); \
	  echo "error: '$$py -m venv' failed; on Debian/Ubuntu install the matching python3.X-venv package." >&2; \
	  exit 1; \
	fi

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -e '.[test]'
	@touch $@

$(PEERS_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -e '.[test,peers]'
	@touch $@
