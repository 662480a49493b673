#!/usr/bin/env bash
# Prompt processing side by side: pi-bench's pp beside ggml's matrix products
# alone (model_matmuls, built as its header says, with -DGGML_LLAMAFILE=ON as
# llama.cpp builds ggml), interleaved per type and thread count so that drift
# on a shared machine hits both alike. A measurement tool, not part of CI.
#   tools/ggml_bench/prompt_side_by_side.sh MODEL_MATMULS FILE.gguf... [-- BUILD_DIR]
# Prints "pi TYPE t=T ppN t/s" and "ggml TYPE t=T ppN t/s" lines.
set -euo pipefail
mm="$1"
shift
build=build
files=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then build="$2"; break; fi
  files+=("$1")
  shift
done
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  for t in 1 2; do
    "$build/bin/pi-bench" -m "$f" -p 128,512 -n 0 -t "$t" -r 3 2>/dev/null |
      awk -F'|' -v n="$name" -v t="$t" '/^\| .*pp[0-9]/ {print "pi", n, "t=" t, $9, $10}'
    for tokens in 128 512; do
      "$mm" "$f" "$t" 6 "$tokens" 2>/dev/null |
        awk -v n="$name" -v t="$t" -v T="$tokens" \
          '{for (i = 1; i <= NF; i++) if ($i == "tokens/s") print "ggml", n, "t=" t, "pp" T, $(i - 1)}'
    done
  done
done
