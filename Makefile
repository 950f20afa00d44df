# durable-agents-lab: set-up and entry points (see README.md).
#
#   make lab    set up if needed, make or refresh the working copy lab/, then open JupyterLab on it
#   make fresh NB=notebooks/X.ipynb   replace your working copy of one notebook with the course's
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
# `make test` runs independent tests on every logical core (pytest-xdist); tests that share a
# module-scoped fixture (an etcd cluster, a recorded example) stay on one worker (tests/conftest.py);
# each worker starts one JupyterLab for all its browser tests, chromium once per module (tests/browser_support.py).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= logical

# Jupyter refuses to start as root unless told to (containers, CI machines).
ALLOW_ROOT  := $(if $(filter 0,$(shell id -u)),--allow-root)
# The lab opens the working copy (lab/course, gitignored; kernel_lib/course/lab.py), never the
# tracked notebooks, so working through the course leaves `git status` clean.
LAB_COURSE  := $(CURDIR)/lab/course
LAB_ROOT    := --ServerApp.root_dir="$(LAB_COURSE)"
# Open on the index; the URL JupyterLab prints (with its token) then leads there too.
LAB_INDEX   := --LabApp.default_url=/lab/tree/notebooks/index.ipynb
# On Linux with no display (a server, a container) there is no browser to open: print the URL instead.
NO_DISPLAY  := $(if $(and $(filter Linux,$(shell uname -s)),$(if $(DISPLAY)$(WAYLAND_DISPLAY),,none)),--no-browser)

# rfc3987-syntax comes in through jupyter-events (jsonschema[format-nongpl]). jsonschema imports it,
# when present, only to check the "iri" string format, which nothing here validates; but importing
# it builds a Lark grammar: about 2.8 s of CPU in every Python process that imports jsonschema
# (each notebook kernel, through altair; each CLI call and pytest process, through nbformat; each
# Jupyter server). Without it jsonschema simply has no "iri" checker (jsonschema issue #1428).
# tests/test_environment_drift.py checks that the environment `make` builds does not have it.
DROP_SLOW_IMPORTS := $(PIP) uninstall -y -q rfc3987-syntax

.PHONY: help lab lab-copy fresh test peers setup browser quorum

help:
	@echo "make lab    set up if needed, refresh the working copy lab/, open JupyterLab on it (LAB_ARGS=...)"
	@echo "make fresh NB=notebooks/X.ipynb   a fresh working copy of one notebook (yours goes to lab/course/backups/)"
	@echo "make test   set up if needed, then run the test suite on every core (PYTEST_ARGS=..., TEST_WORKERS=0 for one process)"
	@echo "make peers  install the peer runtimes (DBOS, LangGraph) used by 'bench append'"

lab: $(STAMP) quorum lab-copy
	$(VENV)/bin/jupyter lab $(LAB_ROOT) $(LAB_INDEX) $(ALLOW_ROOT) $(NO_DISPLAY) $(LAB_ARGS)

# Copies notebooks/, exercises/ and solutions/ into lab/course once (a copy you changed is never
# overwritten) and renders the chapters from ../shared/chapters into lab/course/chapters.
lab-copy: $(STAMP)
	$(PY) -m kernel_lib course prepare

fresh: $(STAMP)
	@if [ -z "$(NB)" ]; then echo "usage: make fresh NB=notebooks/11_4_checkpoints.ipynb" >&2; exit 2; fi
	$(PY) -m kernel_lib course fresh $(NB)

test: $(STAMP) browser quorum
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

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
	$(DROP_SLOW_IMPORTS)
	@touch $@

$(PEERS_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -e '.[test,peers]'
	$(DROP_SLOW_IMPORTS)
	@touch $@
