#!/usr/bin/env bash
# GPU checks, run on a machine with an NVIDIA GPU over binaries built with
#   cmake -S . -B build-cuda -G Ninja -DPI_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-cuda --target cuda_matvec_test bench-cuda-matvec pi-bench pi-synth
# Usage: scripts/device_checks.sh [BIN_DIR] [OUT_DIR]
# Runs the gpu-labelled tests, the CUDA matvec bandwidth benchmark, and CPU
# decode scaling over the host's cores (1..16 threads) on a 7B-shaped model.
set -uo pipefail
BIN="${1:-build-cuda/bin}"
OUT="${2:-/tmp/device-out}"
mkdir -p "$OUT"
nvidia-smi -L 2>&1 | tee "$OUT/gpu.txt"
nproc | tee -a "$OUT/gpu.txt"
"$BIN/cuda_matvec_test" 2>&1 | tee "$OUT/cuda_matvec_test.txt" | tail -15
"$BIN/bench-cuda-matvec" 2>&1 | tee "$OUT/bench_cuda_matvec.md"
"$BIN/pi-synth" -o /tmp/big-q4_0.gguf --n-vocab 32000 --n-embd 4096 --n-ff 11008 --n-layer 2 \
  --n-head 32 --type q4_0 --activation relu 2>&1 | tail -1
"$BIN/pi-bench" -m /tmp/big-q4_0.gguf -p 64 -n 16 -t 1,2,4,8,16 -r 3 2>/dev/null | tee "$OUT/cpu_scaling_q4_0.md"
"$BIN/pi-bench" -m models/demo-kjv-f16.gguf -p 64 -n 64 -t 1,2,4 -r 3 --no-bw 2>/dev/null | tee "$OUT/cpu_demo.md"
