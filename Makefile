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
# Python's compiled modules (and pytest's rewritten tests) are kept between runs even where the environment
# says not to write them: each test process would otherwise compile the project again (seconds of make check).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup demo test check lint typecheck fast-test engine-test portable-test sanitize bench clean

help:
	@echo "make demo   set up, start the daemon with a demo workload, print the dashboard URL"
	@echo "make test   set up and run the whole test suite"
	@echo "make check  ruff, mypy --strict and the unit tests (run before every commit; under a minute)"
	@echo "make portable-test  the C extension's tests on its portable C (no assembly)"
	@echo "make sanitize       the C extension's tests and fuzz under ASan + UBSan"
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

# The whole suite in two processes, a test file to each at a time (a file's daemons and fixtures stay in one).
test: setup portable-test sanitize
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15

lint: $(PYSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(PYSTAMP)
	$(VENV)/bin/mypy

# The lanes expect the AVX-512 IFMA kernels where Linux says the CPU has AVX-512 IFMA: their pair tests fail
# there instead of skipping (docs/groth16.md, "The kernel set"). The portable lane has no assembly: it expects none.
PROOFLANE_EXPECT_IFMA ?= $(shell grep -qw avx512ifma /proc/cpuinfo 2>/dev/null && echo 1 || echo 0)
export PROOFLANE_EXPECT_IFMA

# Lanes: the unit lane (make check); the engine lane (the in-process engine, the CUDA simulator, the tracker's
# state machine); the slow lane (real daemons, browsers, snarkjs, sshd). `make test` runs all three.
fast-test: $(PYSTAMP) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not slow and not engine"

engine-test: $(PYSTAMP) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "engine and not slow"

# mypy runs beside the tests (the tests leave part of two cores idle while they wait on their daemons); each
# part's output is printed whole when it ends.
check: $(PYSTAMP) $(NODESTAMP)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck fast-test

# The C extension's lanes (docs/groth16.md, "The C extension"): its tests against builds of its own, each in
# a folder under build/ (never over the installed one), loaded through PROOFLANE_CURVEMATH_SO. `make test`
# runs both (about a minute here: two compiles and three test files). The portable C: PROOFLANE_NO_ASM, the
# test asserting that the build loaded has no assembly; CI=1: a build that does not load fails the tests
# instead of skipping them. ASan + UBSan: libasan preloaded (it must come before
# everything in the process), leaks not reported (CPython keeps its objects to the end), Python's allocator
# off so that ASan sees the bytes objects the extension writes, UB fatal.
CSRC := src/prooflane/groth16/csrc
CURVEMATH_DEPS := setup.py scripts/build_curvemath.py $(wildcard $(CSRC)/*)
CURVEMATH_TESTS := tests/groth16/test_curvemath.py tests/groth16/test_curvemath_build.py tests/groth16/test_curvemath_fuzz.py \
  tests/groth16/test_kernels.py
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

build/portable/.built: $(PYSTAMP) $(CURVEMATH_DEPS)
	mkdir -p $(@D)
	set -o pipefail; PROOFLANE_NO_ASM=1 $(PY) scripts/build_curvemath.py $(@D) | tail -n 1 > $@.tmp
	mv $@.tmp $@

build/sanitize/.built: $(PYSTAMP) $(CURVEMATH_DEPS)
	mkdir -p $(@D)
	set -o pipefail; CFLAGS="$(SANITIZE_FLAGS)" LDFLAGS="-fsanitize=address,undefined" $(PY) scripts/build_curvemath.py $(@D) | tail -n 1 > $@.tmp
	mv $@.tmp $@

portable-test: build/portable/.built
	CI=1 PROOFLANE_CURVEMATH_SO="$$(cat $<)" PROOFLANE_EXPECT_ASM=0 PROOFLANE_EXPECT_IFMA=0 $(PY) -m pytest -q -p no:cacheprovider $(CURVEMATH_TESTS)

sanitize: build/sanitize/.built
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 PYTHONMALLOC=malloc CI=1 PROOFLANE_FUZZ_EXAMPLES=100 PROOFLANE_CURVEMATH_SO="$$(cat $<)" \
	  $(PY) -m pytest -q -p no:cacheprovider --capture=sys $(CURVEMATH_TESTS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache test-output benchmarks/results build
