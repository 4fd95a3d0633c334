# Every target sets up what it needs: a fresh clone needs only `make demo` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYSTAMP := $(VENV)/.installed
NODESTAMP := node_modules/.installed
BROWSERSTAMP := $(VENV)/.browser
SSHSTAMP := $(VENV)/.sshd
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

.PHONY: help setup demo test check lint typecheck fast-test engine-test bench clean

help:
	@echo "make demo   set up, start the daemon with a demo workload, print the dashboard URL"
	@echo "make test   set up and run the whole test suite"
	@echo "make check  ruff, mypy --strict and the unit tests (run before every commit; under a minute)"
	@echo "make bench  run the benchmarks under benchmarks/ (tables on stdout, JSON in benchmarks/results/)"

$(PYSTAMP): pyproject.toml setup.py Makefile $(wildcard src/prooflane/groth16/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $@

$(NODESTAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The browser tests drive Debian's chromium through Playwright (Playwright's own browser download is not used).
$(BROWSERSTAMP): $(PYSTAMP)
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; \
	fi
	touch $@

# The fleet's SSH test starts Debian's sshd on a loopback port (with throwaway keys); the fleet itself needs only
# the ssh client.
$(SSHSTAMP): $(PYSTAMP)
	@if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client openssh-server >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client openssh-server >/dev/null; fi; \
	fi
	touch $@

setup: $(PYSTAMP) $(NODESTAMP) $(BROWSERSTAMP) $(SSHSTAMP)

demo: $(PYSTAMP)
	$(VENV)/bin/prooflane demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=15

lint: $(PYSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(PYSTAMP)
	$(VENV)/bin/mypy

# Lanes: the unit lane (make check); the engine lane (the in-process engine, the CUDA simulator, the tracker's
# state machine); the slow lane (real daemons, browsers, snarkjs, sshd). `make test` runs all three.
fast-test: $(PYSTAMP) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not engine"

engine-test: $(PYSTAMP) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "engine and not slow"

check: lint typecheck fast-test

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache test-output benchmarks/results
