#!/usr/bin/env bash
# The performance tables of docs/performance.md: pi-bench on the demo model and on a
# synthetic big-layer model (n_embd 4096, n_ff 11008, 2 layers, 32000 vocab)
# in F16, Q8_0 and Q4_0 (the demo quantized with pi-quantize), at -t 1 and -t 2.
# Usage: scripts/bench.sh [BUILD_DIR] [MODEL_DIR]   (models are made once, ~2.4 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
DIR="${2:-/tmp/pi-bench-models}"
mkdir -p "$DIR"
for t in f16 q8_0 q4_0; do
  [ -f "$DIR/big-$t.gguf" ] || "$BIN/pi-synth" -o "$DIR/big-$t.gguf" --n-vocab 32000 \
    --n-embd 4096 --n-ff 11008 --n-layer 2 --n-head 32 --type "$t" --activation relu
done
for t in q8_0 q4_0; do
  [ -f "$DIR/demo-$t.gguf" ] || "$BIN/pi-quantize" models/demo-kjv-f16.gguf "$DIR/demo-$t.gguf" "$t" 2>/dev/null
done
echo "### demo model"
"$BIN/pi-bench" -m "models/demo-kjv-f16.gguf,$DIR/demo-q8_0.gguf,$DIR/demo-q4_0.gguf" -p 64 -n 64 -t 1,2 -r 5
echo "### big-layer model"
"$BIN/pi-bench" -m "$DIR/big-f16.gguf,$DIR/big-q8_0.gguf,$DIR/big-q4_0.gguf" -p 32 -n 16 -t 1,2 -r 3
