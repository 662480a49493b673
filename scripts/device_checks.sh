#!/usr/bin/env bash
# GPU checks, run on a machine with an NVIDIA GPU over binaries built first with
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_CUDA=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90 -DPI_GRPC=OFF
#   cmake --build build-cuda --target cuda_matvec_test cuda_ffn_backend_test \
#     ffn_backend_factory_test bench-cuda-matvec bench-cuda-ffn pi-bench pi-synth \
#     pi-quantize pi-profile
# It builds nothing. The tests find the repo (models/) and pi-quantize by the
# absolute paths they were built at: run it in the checkout they were built in.
# Usage: [GPU_ONLY=1] scripts/device_checks.sh [BIN_DIR] [OUT_DIR]
# Runs the gpu-labelled tests (and compute-sanitizer memcheck/racecheck over
# a few of them, where it works), the CUDA matvec and FFN-backend benchmarks,
# the demo model's hot/cold split on the cuda vs the host backend (pi-bench),
# and, unless GPU_ONLY is set, CPU decode scaling over the host's cores
# (1..16 threads) on a 7B-shaped model. Each step's output is tee'd into
# OUT_DIR (11 files: tar it if only a few files can come back). The GPU part
# takes ~30 s on an H200 with 16 cores. Exit status 1 when a test, a
# sanitizer or a benchmark's own check failed (listed at the end).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build-cuda/bin}"
OUT="${2:-${OUT:-/tmp/device-out}}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
step() { echo; echo "== $*"; }

step "device"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.memory --format=csv; nproc; } \
  2>&1 | tee "$OUT/gpu.txt"

failed=()
# check NAME: records NAME as failed when the first command of the pipeline
# just run did not exit 0.
check() { [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("$1"); }

step "gpu tests"
"$BIN/cuda_matvec_test" 2>&1 | tee "$OUT/cuda_matvec_test.txt" | tail -4
check cuda_matvec_test
"$BIN/cuda_ffn_backend_test" 2>&1 | tee "$OUT/cuda_ffn_backend_test.txt" |
  grep -E "FAILED|Failure|PASSED|SKIPPED"
check cuda_ffn_backend_test
"$BIN/ffn_backend_factory_test" 2>&1 | tee "$OUT/ffn_backend_factory_test.txt" | tail -3
check ffn_backend_factory_test
if command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck (a few cases)"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$BIN/cuda_ffn_backend_test" \
    --gtest_filter='*llama_q4_0_relu_hot20*:*q8_0_drelu_hot100*:*f16_relu_hot0*:*falcon_q4_0*' \
    2>&1 | tee "$OUT/memcheck.txt" | tail -6
  check memcheck
  step "compute-sanitizer racecheck (shared memory of the down kernel)"
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 "$BIN/cuda_ffn_backend_test" \
    --gtest_filter='*q8_0_relu_hot100*:*f32_drelu_hot20*' 2>&1 | tee "$OUT/racecheck.txt" | tail -3
  check racecheck
fi

step "bench-cuda-matvec"
"$BIN/bench-cuda-matvec" 2>&1 | tee "$OUT/bench_cuda_matvec.md"
check bench-cuda-matvec
step "bench-cuda-ffn (y checked against a double-precision evaluation: rel err)"
"$BIN/bench-cuda-ffn" 2>&1 | tee "$OUT/bench_cuda_ffn.md"
check bench-cuda-ffn

# 6M: the demo's dense blocks take 4.4 MiB, so ~20 % of the FFN neurons are hot.
step "demo model: hot/cold split, --ffn-backend cuda vs host (pi-bench, --vram-budget 6M)"
DEMO="$TMP/demo-down-t.gguf"
"$BIN/pi-quantize" models/demo-kjv-f16.gguf "$DEMO" f16 --down-t 2>&1 | tail -1
"$BIN/pi-profile" -m "$DEMO" -f models/kjv-valid.txt --max-tokens 2048 2>&1 | tail -2
"$BIN/pi-bench" -m "$DEMO" -p 0 -n 64 -t 4 -r 3 --no-bw 2>/dev/null | tee "$OUT/demo_split.md"
check "pi-bench (no split)"
for kind in cuda host; do
  "$BIN/pi-bench" -m "$DEMO" -p 0 -n 64 -t 4 -r 3 --no-bw --vram-budget 6M --ffn-backend "$kind" \
    2>"$TMP/err" | tail -n +3 | tee -a "$OUT/demo_split.md"
  check "pi-bench --ffn-backend $kind"
  grep -E "FFN split|error|pi-bench:" "$TMP/err" | tee -a "$OUT/demo_split.md"
done

# A 7B-layer-shaped ReLU model with planted 90 % sparsity: hot neurons in VRAM
# (cuda), the rest on the CPU, against all-CPU (oracle sparsity both ways).
step "7B-shaped planted q4_0: hybrid (--vram-budget 160M, cuda) vs CPU only"
BIG="$TMP/planted-q4_0.gguf"
"$BIN/pi-synth" -o "$BIG" --n-vocab 32000 --n-embd 4096 --n-ff 11008 --n-layer 2 --n-head 32 \
  --type q4_0 --activation relu --down-t --planted-sparsity 0.9 --tokenizer bytes 2>&1 | tail -1
"$BIN/pi-profile" -m "$BIG" -f models/kjv-valid.txt --max-tokens 512 -t 8 2>&1 | tail -1
"$BIN/pi-bench" -m "$BIG" -p 0 -n 32 -t 8 -r 3 --no-bw --sparse off,oracle 2>/dev/null |
  tee "$OUT/hybrid_planted.md"
check "pi-bench planted (cpu)"
"$BIN/pi-bench" -m "$BIG" -p 0 -n 32 -t 8 -r 3 --no-bw --sparse oracle --vram-budget 160M \
  --ffn-backend cuda 2>"$TMP/err" | tail -n +3 | tee -a "$OUT/hybrid_planted.md"
check "pi-bench planted --ffn-backend cuda"
grep -E "FFN split|error|pi-bench:" "$TMP/err" | tee -a "$OUT/hybrid_planted.md"

if [ -z "${GPU_ONLY:-}" ]; then
step "CPU decode scaling (7B-shaped q4_0, 2 layers)"
"$BIN/pi-synth" -o "$TMP/big-q4_0.gguf" --n-vocab 32000 --n-embd 4096 --n-ff 11008 --n-layer 2 \
  --n-head 32 --type q4_0 --activation relu 2>&1 | tail -1
"$BIN/pi-bench" -m "$TMP/big-q4_0.gguf" -p 64 -n 16 -t 1,2,4,8,16 -r 3 2>/dev/null | tee "$OUT/cpu_scaling_q4_0.md"
"$BIN/pi-bench" -m models/demo-kjv-f16.gguf -p 64 -n 64 -t 1,2,4 -r 3 --no-bw 2>/dev/null | tee "$OUT/cpu_demo.md"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "device_checks: FAILED: ${failed[*]}"
  exit 1
fi
echo "device_checks: all checks passed"
