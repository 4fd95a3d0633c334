# Every target sets up what it needs: a fresh clone needs only `make demo` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYSTAMP := $(VENV)/.installed
NODESTAMP := node_modules/.installed
BROWSERSTAMP := $(VENV)/.browser
SSHSTAMP := $(VENV)/.sshd
AARCH64STAMP := $(VENV)/.aarch64
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
# Python's compiled modules (and pytest's rewritten tests) are kept between runs even where the environment
# says not to write them: each test process would otherwise compile the project again (seconds of make check).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup demo test check lint format typecheck fast-test engine-test portable-test sanitize c-test c-test-native \
  c-test-aarch64 bench clean

help:
	@echo "make demo   set up, start the daemon with a demo workload, print the dashboard URL"
	@echo "make test   set up and run the whole test suite"
	@echo "make check  ruff, clang-format, mypy --strict and the unit tests (run before every commit; under a minute)"
	@echo "make format the C core formatted as make check wants it (.clang-format)"
	@echo "make portable-test  the C extension's tests on its portable C (no assembly)"
	@echo "make sanitize       the C extension's tests and fuzz under ASan + UBSan"
	@echo "make c-test         the C core's own tests (tests/c/test_core.c), native and on aarch64 under qemu-user"
	@echo "make bench  run the benchmarks under benchmarks/ (tables on stdout, JSON in benchmarks/results/)"

# The demo installs prooflane alone (what it needs); the checks and tests add their tools and Ray on top.
DEMOSTAMP := $(VENV)/.demo

$(DEMOSTAMP): pyproject.toml setup.py Makefile $(wildcard src/prooflane/groth16/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# The tools and Ray, on the demo's install (which rebuilds the C extension when its sources change); every
# target below that needs them asks for $(DEV).
$(PYSTAMP): pyproject.toml | $(DEMOSTAMP)
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $@

DEV := $(DEMOSTAMP) $(PYSTAMP)

$(NODESTAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The browser tests drive Debian's chromium through Playwright (Playwright's own browser download is not used).
$(BROWSERSTAMP): $(DEV)
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; \
	fi
	touch $@

# The fleet's SSH test starts Debian's sshd on a loopback port (with throwaway keys); the fleet itself needs only
# the ssh client.
$(SSHSTAMP): $(DEV)
	@if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client openssh-server >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client openssh-server >/dev/null; fi; \
	fi
	touch $@

# The C core's tests on aarch64: Debian's cross compiler (and its C library) and qemu-user, which runs them here.
# Where they cannot be installed the lane says so (c-test-aarch64: a skip, a failure under CI).
$(AARCH64STAMP): $(DEV)
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then \
	  packages="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$packages >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$packages >/dev/null; fi \
	  || echo "could not install $$packages"; \
	fi
	touch $@

setup: $(DEV) $(NODESTAMP) $(BROWSERSTAMP) $(SSHSTAMP) $(AARCH64STAMP)

demo: $(DEMOSTAMP)
	$(VENV)/bin/prooflane demo

# The whole suite in two processes, a test file to each at a time (a file's daemons and fixtures stay in one).
test: setup portable-test sanitize c-test
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15

lint: $(DEV)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/clang-format --dry-run --Werror $(C_SOURCES)

# The C core's format (.clang-format, clang-format pinned in pyproject.toml): `make lint` checks it.
format: $(DEV)
	$(VENV)/bin/clang-format -i $(C_SOURCES)

typecheck: $(DEV)
	$(VENV)/bin/mypy

# The lanes expect the AVX-512 IFMA kernels where Linux says the CPU has AVX-512 IFMA: their pair tests fail
# there instead of skipping (docs/groth16.md, "The kernel set"). The portable lane has no assembly: it expects none.
PROOFLANE_EXPECT_IFMA ?= $(shell grep -qw avx512ifma /proc/cpuinfo 2>/dev/null && echo 1 || echo 0)
export PROOFLANE_EXPECT_IFMA

# Lanes: the unit lane (make check); the engine lane (the in-process engine, the CUDA simulator, the tracker's
# state machine); the slow lane (real daemons, browsers, snarkjs, sshd). `make test` runs all three.
fast-test: $(DEV) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not slow and not engine"

engine-test: $(DEV) $(NODESTAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "engine and not slow"

# mypy runs beside the tests (the tests leave part of two cores idle while they wait on their daemons); each
# part's output is printed whole when it ends.
check: $(DEV) $(NODESTAMP)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck fast-test

# The C extension's lanes (docs/groth16.md, "The C extension"): its tests against builds of its own, each in
# a folder under build/ (never over the installed one), loaded through PROOFLANE_CURVEMATH_SO. `make test`
# runs both (a few minutes here: two compiles and four test files). Both build with warnings as errors
# (PROOFLANE_WERROR=1: the test lanes' switch; the install, a user's as the Makefile's, builds without it). The
# portable C: PROOFLANE_NO_ASM, the test asserting that the build loaded has no assembly; CI=1: a build that does
# not load fails the tests instead of skipping them. ASan + UBSan: libasan preloaded (it must come before
# everything in the process), leaks not reported (CPython keeps its objects to the end), Python's allocator
# off so that ASan sees the bytes objects the extension writes, UB fatal.
CSRC := src/prooflane/groth16/csrc
C_SOURCES := $(wildcard $(CSRC)/*.[ch] tests/c/*.c)
CURVEMATH_DEPS := setup.py scripts/build_curvemath.py $(wildcard $(CSRC)/*)
CURVEMATH_TESTS := tests/groth16/test_curvemath.py tests/groth16/test_curvemath_build.py tests/groth16/test_curvemath_fuzz.py \
  tests/groth16/test_kernels.py
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

build/portable/.built: $(DEV) $(CURVEMATH_DEPS)
	mkdir -p $(@D)
	set -o pipefail; PROOFLANE_WERROR=1 PROOFLANE_NO_ASM=1 $(PY) scripts/build_curvemath.py $(@D) | tail -n 1 > $@.tmp
	mv $@.tmp $@

build/sanitize/.built: $(DEV) $(CURVEMATH_DEPS)
	mkdir -p $(@D)
	set -o pipefail; PROOFLANE_WERROR=1 CFLAGS="$(SANITIZE_FLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  $(PY) scripts/build_curvemath.py $(@D) | tail -n 1 > $@.tmp
	mv $@.tmp $@

portable-test: build/portable/.built
	CI=1 PROOFLANE_CURVEMATH_SO="$$(cat $<)" PROOFLANE_EXPECT_ASM=0 PROOFLANE_EXPECT_IFMA=0 $(PY) -m pytest -q -p no:cacheprovider $(CURVEMATH_TESTS)

sanitize: build/sanitize/.built build/c/test_core-sanitize build/c/vectors.bin
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 PYTHONMALLOC=malloc CI=1 PROOFLANE_FUZZ_EXAMPLES=100 PROOFLANE_CURVEMATH_SO="$$(cat $<)" \
	  $(PY) -m pytest -q -p no:cacheprovider --capture=sys $(CURVEMATH_TESTS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build/c/test_core-sanitize build/c/vectors.bin

# The C core's own tests, free of Python (docs/groth16.md, "The C extension"): tests/c/test_core.c replays the
# known answers tests/c/vectors.py computes with the Python reference under every kernel set the CPU allows
# (each kernel against its twin), warnings as errors; natively, and built for aarch64 by Debian's cross
# compiler (static) and run under qemu-user, where the portable C is all there is (no IFMA expected). A
# missing cross compiler or qemu skips that half, saying so, and fails it under CI.
C_TEST_FLAGS := -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -I$(CSRC)
C_TEST_DEPS := tests/c/test_core.c $(wildcard $(CSRC)/*.h)

build/c/vectors.bin: $(DEV) tests/c/vectors.py tests/support/msm.py
	$(PY) -m tests.c.vectors $@

build/c/test_core: $(C_TEST_DEPS)
	mkdir -p $(@D)
	gcc $(C_TEST_FLAGS) $< -o $@

# and under ASan + UBSan (make sanitize), leaks reported: no Python here to keep objects (-O1: ASan's -O2
# compile of the unity build takes minutes)
build/c/test_core-sanitize: $(C_TEST_DEPS)
	mkdir -p $(@D)
	gcc $(C_TEST_FLAGS) -O1 $(SANITIZE_FLAGS) $< -o $@

build/c/test_core-aarch64: $(C_TEST_DEPS) | $(AARCH64STAMP)
	mkdir -p $(@D)
	aarch64-linux-gnu-gcc $(C_TEST_FLAGS) -static $< -o $@

c-test-native: build/c/test_core build/c/vectors.bin
	build/c/test_core build/c/vectors.bin

c-test-aarch64: build/c/vectors.bin | $(AARCH64STAMP)
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then \
	  echo "the aarch64 lane needs aarch64-linux-gnu-gcc and qemu-aarch64 (make setup installs them)"; \
	  if [ -n "$$CI" ]; then exit 1; fi; echo "SKIPPED the C core's tests on aarch64"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory build/c/test_core-aarch64 && \
	PROOFLANE_EXPECT_IFMA=0 qemu-aarch64 build/c/test_core-aarch64 build/c/vectors.bin

c-test: c-test-native c-test-aarch64

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache test-output benchmarks/results build
