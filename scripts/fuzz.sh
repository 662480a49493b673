#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (clang, ASan + UBSan) for a bounded time.
#
#   scripts/fuzz.sh                  # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#
# Builds build-fuzz/ (clang, PI_FUZZ=ON), writes seed files, then runs the
# fuzzer; exits non-zero on a crash, leak or sanitizer report (the input that
# triggered it is saved under build-fuzz/fuzz/artifacts/). The corpus in
# build-fuzz/fuzz/corpus/ is kept between runs; tests/fuzz/regressions/ (every
# input a fuzzer once flagged) is replayed too. Copy a new reproducer there.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_BUILD_JOBS:-2}

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPI_FUZZ=ON \
  -DPI_CUDA=OFF -DPI_GRPC=OFF -DPI_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target gguf_fuzz gguf_fuzz_seeds

work=$build/fuzz
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
"$build/bin/gguf_fuzz_seeds" "$work/seeds"

echo "fuzzing the GGUF reader for ${seconds}s"
if ! "$build/bin/gguf_fuzz" \
    -max_total_time="$seconds" \
    -max_len=16384 \
    -rss_limit_mb=2048 \
    -print_final_stats=1 \
    -dict="$root/tests/fuzz/gguf.dict" \
    -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$work/seeds" "$root/tests/fuzz/regressions"; then
  echo "fuzz.sh: the fuzzer found a failure; reproducer(s) in $work/artifacts/" >&2
  exit 1
fi
echo "fuzz.sh: no failures in ${seconds}s"
