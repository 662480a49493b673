#!/usr/bin/env bash
# Bad values and inputs given to the tools: each must exit with the expected
# status and a message naming the problem, within a few seconds (a FIFO must
# not hang a tool), and leave no file behind. The seed of issue 7's
# bad-input matrix; add a row per defect fixed.
#   tests/cli_bad_values.sh BIN_DIR
set -uo pipefail
bin="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
demo="$root/models/demo-kjv-f16.gguf"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"
failures=0

# expect STATUS MESSAGE -- command...
expect() {
  local status="$1" message="$2"
  shift 3
  local out rc
  out="$(cd "$tmp" && timeout 20 "$@" 2>&1 </dev/null)"
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$message" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $status), output: $(head -c 300 <<<"$out")"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $status, '$message'"
  fi
}

expect 2 "-r must be at least 1" -- "$bin/pi-bench" -m "$demo" -r 0
expect 2 "-b must be at least 1" -- "$bin/pi-bench" -m "$demo" -b 0
expect 2 "-o expects md, csv, json or jsonl" -- "$bin/pi-bench" -m "$demo" -o xml
expect 2 "--vram-budget is too large" -- "$bin/pi-run" -m "$demo" --vram-budget 16777216T
expect 2 "--vram-budget expects a size" -- "$bin/pi-run" -m "$demo" --vram-budget inf
expect 1 "it is a directory" -- "$bin/pi-run" -m "$demo" -f "$tmp" -n 1
expect 1 "not a regular file" -- "$bin/pi-run" -m "$demo" -f "$tmp/fifo" -n 1
expect 1 "not a regular file" -- "$bin/pi-run" -m "$tmp/fifo" -p hi -n 1
expect 1 "--tokens entry 2: token id 99999 is out of range" -- \
  "$bin/pi-dump-logits" -m "$demo" --tokens 1,2,99999 --out "$tmp/out.bin"
[ -e "$tmp/out.bin" ] && { echo "FAIL: pi-dump-logits left out.bin"; failures=$((failures + 1)); }
expect 1 "refusing to replace it" -- \
  "$bin/pi-dump-logits" -m "$demo" --tokens 1,2 --out "$tmp/fifo"
left="$(ls -A "$tmp" | grep -v '^fifo$' || true)"
[ -n "$left" ] && { echo "FAIL: files left behind: $left"; failures=$((failures + 1)); }

if [ "$failures" -gt 0 ]; then
  echo "cli_bad_values: $failures failed"
  exit 1
fi
echo "cli_bad_values: all passed"
