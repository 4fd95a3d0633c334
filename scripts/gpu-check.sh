#!/usr/bin/env bash
# The cuda kernels on a machine with an NVIDIA GPU, in one go: PTX for sm_90 of every kernel (both curves),
# the cuda tests (the simulator's checks now on the GPU, and the GPU-only ones: MSM and H against the cpu
# primitives at 2^4 to 2^20, proofs whose device section ran on the GPU), then benchmarks/bench_cuda.py.
# Logs and bench_cuda.json go to OUT (first argument; default benchmarks/results).
#
#   scripts/gpu-check.sh [OUT]        pip installs '.[dev,cuda]' (needs a package index), then checks
#   WHEELS=.whl scripts/gpu-check.sh  no index: uses the machine's own numba-cuda, numpy, pytest and adds
#                                     the wheels in .whl (python 3.12), made beforehand elsewhere with
#   scripts/gpu-check.sh --fetch-wheels
# SIZES (default 16,18,20,22) and REPEAT (default 3) size the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}

if [ "${1:-}" = "--fetch-wheels" ]; then  # what a GPU image with numba-cuda and pytest lacks of ours
  $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl zksnake==0.1.0 py-arkworks-bls12381==0.5.0 pydantic==2.14.4 pydantic-core==2.50.5 \
    annotated-types==0.8.0 typing-inspection==0.4.5
  ls -l .whl
  exit 0
fi

out=${1:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
if [ -n "${WHEELS:-}" ]; then
  $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/prooflane-site "$WHEELS"/*.whl
  export PYTHONPATH="$PWD/src:/tmp/prooflane-site${PYTHONPATH:+:$PYTHONPATH}"
else
  $py -m pip install -q -e '.[dev,cuda]'
fi
export NUMBA_ENABLE_CUDASIM=0  # the real GPU, whatever the device nodes look like
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
status=0
$py tests/cuda_ptx.py --all 2>&1 | tee "$out/cuda_ptx.log" || status=1
$py -m pytest -q -p no:cacheprovider -o addopts="" --timeout 1800 -ra tests/test_cuda_field.py \
  tests/test_cuda_msm.py tests/test_cuda_ntt.py tests/test_cuda_prover.py 2>&1 | tee "$out/cuda_tests.log" || status=1
$py benchmarks/bench_cuda.py --require-gpu --sizes "${SIZES:-16,18,20,22}" --repeat "${REPEAT:-3}" 2>&1 \
  | tee "$out/bench_cuda.log" || status=1
[ "$out" = benchmarks/results ] || cp benchmarks/results/bench_cuda.json "$out/" 2>/dev/null || true
exit $status
