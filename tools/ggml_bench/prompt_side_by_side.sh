#!/usr/bin/env bash
# Prompt processing side by side: pi-bench's pp beside ggml's matrix products
# alone (model_matmuls, built as its header says, with -DGGML_LLAMAFILE=ON as
# llama.cpp builds ggml), interleaved per type and thread count so that drift
# on a shared machine hits both alike. A measurement tool, not part of CI.
#   tools/ggml_bench/prompt_side_by_side.sh [--batched] MODEL_MATMULS FILE.gguf... [-- BUILD_DIR]
# Prints "pi TYPE t=T ppN t/s" and "ggml TYPE t=T ppN t/s" lines; with
# --batched, decode steps of B = 1, 8, 16 sequences instead ("tgN @ B"
# aggregate t/s beside model_matmuls' B-token decode step, head included).
set -euo pipefail
batched=0
if [ "${1:-}" = "--batched" ]; then batched=1; shift; fi
mm="$1"
shift
build=build
files=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then build="$2"; break; fi
  files+=("$1")
  shift
done
if [ "$batched" = 1 ]; then
  pi_args=(-p 0 -n 32 -np 1,8,16)
  sizes=(1 8 16)
  mm_mode=decode
  label=B
else
  pi_args=(-p 128,512 -n 0)
  sizes=(128 512)
  mm_mode=prompt
  label=pp
fi
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  for t in 1 2; do
    "$build/bin/pi-bench" -m "$f" "${pi_args[@]}" -t "$t" -r 3 2>/dev/null |
      awk -F'|' -v n="$name" -v t="$t" '/^\| .*(pp|tg)[0-9]/ {print "pi", n, "t=" t, $9, $10}'
    for size in "${sizes[@]}"; do
      "$mm" "$f" "$t" 6 "$size" "$mm_mode" 2>/dev/null |
        awk -v n="$name" -v t="$t" -v L="$label" -v S="$size" \
          '{for (i = 1; i <= NF; i++) if ($i == "tokens/s") print "ggml", n, "t=" t, L S, $(i - 1)}'
    done
  done
done
