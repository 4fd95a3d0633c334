#!/usr/bin/env bash
# The cuda kernels and the cuda device on a machine with an NVIDIA GPU, in one go: PTX for sm_90 of every
# kernel (both curves); the cuda tests (the simulator's checks now on the GPU, and the GPU-only ones: MSM
# and H against the cpu primitives at 2^4 to 2^20, proofs whose device section ran on the GPU); the engine
# on cuda devices (tests/engine/test_cuda_device.py in-process, tests/e2e/test_cuda.py with real worker
# processes, snarkjs verifying: on the GPU now, not the simulator); benchmarks/bench_cuda.py; and
# benchmarks/bench_pipeline.py with every GPU as a cuda device (devices busy fraction, partitions an hour).
# Logs, bench_cuda.json and bench_pipeline_cuda-PROFILE.json go to OUT (first argument; default benchmarks/results).
# The engine tests need node and snarkjs (npm ci); without them those tests fail and the rest still runs.
#
#   scripts/gpu-check.sh [OUT]        pip installs '.[dev,cuda]' (needs a package index), then checks
#   WHEELS=.whl scripts/gpu-check.sh  no index: uses the machine's own numba-cuda, numpy, pytest and adds
#                                     the wheels in .whl (python 3.12), made beforehand elsewhere with
#   scripts/gpu-check.sh --fetch-wheels
# SIZES (default 16,18,20,22) and REPEAT (default 3) size bench_cuda; PROFILE (default tiny) bench_pipeline.
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
$py tests/support/cuda_ptx.py --all 2>&1 | tee "$out/cuda_ptx.log" || status=1
$py -m pytest -q -p no:cacheprovider -o addopts="" --timeout 1800 -ra tests/groth16/cuda \
  2>&1 | tee "$out/cuda_tests.log" || status=1
# The engine on cuda devices, through the same pipeline as on cpu (the slow e2e one included).
$py -m pytest -q -p no:cacheprovider -o addopts="" --timeout 1800 -ra tests/devices/test_cuda.py \
  tests/engine/test_cuda_device.py tests/e2e/test_cuda.py 2>&1 | tee "$out/cuda_engine_tests.log" || status=1
$py benchmarks/bench_cuda.py --require-gpu --sizes "${SIZES:-16,18,20,22}" --repeat "${REPEAT:-3}" 2>&1 \
  | tee "$out/bench_cuda.log" || status=1
[ "$out" = benchmarks/results ] || cp benchmarks/results/bench_cuda.json "$out/" 2>/dev/null || true
# bench_pipeline with the engine on every GPU (devices left to the machine pick them: cuda:0, cuda:1, ...).
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
devices=$(seq -s, -f '"cuda:%g"' 0 $((gpus - 1)))
printf 'devices = [%s]\nworkers_per_device = 2\n' "$devices" > "$out/cuda.toml"
profile=${PROFILE:-tiny}
$py benchmarks/bench_pipeline.py --config "$out/cuda.toml" --profile "$profile" 2>&1 \
  | tee "$out/bench_pipeline_cuda.log" || status=1
cp "benchmarks/results/bench_pipeline-$profile.json" "$out/bench_pipeline_cuda-$profile.json" 2>/dev/null || true
exit $status
