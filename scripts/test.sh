#!/usr/bin/env bash
# The whole test suite: Release build + every test, then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, then a bounded fuzz run of
# the GGUF reader. Tests labelled "gpu" run only where a GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
JOBS="${JOBS:-$(nproc)}"

gpu_args=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test.sh: no GPU here: tests labelled 'gpu' are skipped"
  gpu_args=(-LE gpu)
fi

echo "== Release build + tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS" "${gpu_args[@]}"

echo "== ASan + UBSan build + tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPI_SANITIZE=ON -DPI_CUDA=OFF \
  -DPI_BUILD_BENCHMARKS=OFF
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE "gpu|slow"

echo "== fuzz the GGUF reader (${FUZZ_SECONDS:-60} s)"
scripts/fuzz.sh
