#!/usr/bin/env bash
# The two-host rig: a cpu_worker on a second "host" — a network namespace
# joined to this one by a veth pair — reached over gRPC through our TCP fault
# proxy (pi-fault-proxy; this kernel has no netem), which adds a one-way delay
# to every byte in each direction. Decode tokens/s per delay go into a CSV
# and a plot, beside the in-process speed. Where namespaces are not allowed it
# says so and runs the worker on loopback instead. Traffic stays on loopback
# or inside the namespace it made; everything it started is stopped and the
# namespace removed on exit.
#
#   deploy/two-host-rig.sh [BUILD_DIR] [MODEL] [OUT_DIR]
#     BUILD_DIR  default <repo>/build (needs pi-run, pi-cpu-worker, pi-fault-proxy, pi-quantize)
#     MODEL      a sparse-capable GGUF (ffn_down_t); default: the demo model with
#                ffn_down_t added by pi-quantize
#     OUT_DIR    default rig-out: rig.csv, rig.png, and the processes' logs
# Environment: DELAYS (default "0 0.1 0.5 2", ms one way), N (tokens, default 64),
#              REPS (default 3), THREADS (default 2).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)  # paths given are relative to where it is run from
OUT=${3:-rig-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MODEL=${2:-$OUT/demo-down-t.gguf}
DELAYS=${DELAYS:-0 0.1 0.5 2}
N=${N:-64}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
# Debian's python3 has matplotlib (scripts/install_deps.sh); another first on PATH may not.
PY=python3
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; fi
BIN=$BUILD/bin
if [ -z "${2:-}" ]; then
  "$BIN/pi-quantize" "$ROOT/models/demo-kjv-f16.gguf" "$MODEL" f16 --down-t >/dev/null 2>&1
fi

NS=pi-rig-$$
HOST_IF=pirig$$a
PEER_IF=pirig$$b
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip link del "$HOST_IF" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -f "$OUT/token" "$OUT/proxy.ctl"
}
trap cleanup EXIT

# The shared token, in a file only we can read.
umask 077
head -c 24 /dev/urandom | base64 >"$OUT/token"

# Waits for "... on ADDR" in a log; prints ADDR.
address_in() {
  local log=$1 pattern=$2
  for _ in $(seq 600); do
    if grep -qo "$pattern" "$log"; then grep -o "$pattern" "$log" | head -1 | sed 's/^on //'; return; fi
    sleep 0.1
  done
  echo "rig: no address in $log:" >&2
  cat "$log" >&2
  exit 1
}

if ip netns add "$NS" 2>/dev/null; then
  ip link add "$HOST_IF" type veth peer name "$PEER_IF"
  ip link set "$PEER_IF" netns "$NS"
  ip addr add 10.231.0.1/24 dev "$HOST_IF"
  ip link set "$HOST_IF" up
  ip netns exec "$NS" ip addr add 10.231.0.2/24 dev "$PEER_IF"
  ip netns exec "$NS" ip link set "$PEER_IF" up
  ip netns exec "$NS" ip link set lo up
  WHERE="network namespace $NS (veth 10.231.0.1 <-> 10.231.0.2)"
  LABEL="worker in a network namespace, over a veth pair"
  ip netns exec "$NS" "$BIN/pi-cpu-worker" -m "$MODEL" --listen 10.231.0.2:50061 \
    --auth-token-file "$OUT/token" -t "$THREADS" 2>"$OUT/worker.log" &
  PIDS+=($!)
  WORKER=$(address_in "$OUT/worker.log" "on 10\.231\.0\.2:[0-9]*")
else
  WHERE="loopback (this machine does not allow network namespaces)"
  LABEL="worker on loopback (no network namespaces here)"
  "$BIN/pi-cpu-worker" -m "$MODEL" --listen 127.0.0.1:0 --auth-token-file "$OUT/token" \
    -t "$THREADS" 2>"$OUT/worker.log" &
  PIDS+=($!)
  WORKER=$(address_in "$OUT/worker.log" "on 127\.0\.0\.1:[0-9]*")
fi
echo "rig: worker on $WORKER, in $WHERE"

mkfifo "$OUT/proxy.ctl"
"$BIN/pi-fault-proxy" --listen 127.0.0.1:0 --to "$WORKER" <"$OUT/proxy.ctl" 2>"$OUT/proxy.log" &
PIDS+=($!)
exec 7>"$OUT/proxy.ctl"
PROXY=$(address_in "$OUT/proxy.log" "on 127\.0\.0\.1:[0-9]*")
echo "rig: fault proxy on $PROXY (delays from it: no netem in this kernel)"

# tokens/s of one greedy run (pi-run --json's predicted_per_second).
speed() {
  "$BIN/pi-run" -m "$MODEL" -p "In the beginning God created" -n "$N" --ignore-eos --temp 0 \
    --sparse oracle -t "$THREADS" --json "$@" 2>>"$OUT/run.log" |
    "$PY" -c 'import json,sys; j=json.load(sys.stdin); print(j["timings"]["predicted_per_second"], " ".join(map(str, j["generated_tokens"])))'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "delay_ms,transport,tokens_per_s,of_inproc,same_tokens" >"$OUT/rig.csv"
base_tokens=""
inproc=$(for _ in $(seq "$REPS"); do speed | cut -d' ' -f1; done | median)
base_tokens=$(speed | cut -d' ' -f2-)
echo "0,inproc,$inproc,1.000,yes" >>"$OUT/rig.csv"
echo "rig: in-process: $inproc tokens/s"
for d in $DELAYS; do
  echo "delay $d" >&7
  results=$(for _ in $(seq "$REPS"); do speed --cpu-worker "$PROXY" --auth-token-file "$OUT/token"; done)
  tps=$(echo "$results" | cut -d' ' -f1 | median)
  same=yes
  while read -r line; do
    [ "$(echo "$line" | cut -d' ' -f2-)" = "$base_tokens" ] || same=no
  done <<<"$results"
  ratio=$("$PY" -c "print(f'{$tps / $inproc:.3f}')")
  echo "$d,grpc,$tps,$ratio,$same" >>"$OUT/rig.csv"
  echo "rig: one-way delay $d ms: $tps tokens/s (${ratio}x in-process), same tokens: $same"
done
echo "quit" >&7

"$PY" - "$OUT/rig.csv" "$OUT/rig.png" "$LABEL" <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
inproc = float(next(r for r in rows if r["transport"] == "inproc")["tokens_per_s"])
grpc = [r for r in rows if r["transport"] == "grpc"]
x = [float(r["delay_ms"]) for r in grpc]
y = [float(r["tokens_per_s"]) for r in grpc]
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(x, y, "o-", label="cold neurons on the remote worker (gRPC)")
ax.axhline(inproc, color="gray", linestyle="--", label="in-process")
ax.set_xlabel("one-way delay (ms), each direction")
ax.set_ylabel("decode tokens/s")
ax.set_title("two-host rig: " + sys.argv[3], fontsize=9)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
PY
echo "rig: wrote $OUT/rig.csv and $OUT/rig.png"
# Every delay must have given the in-process tokens.
if grep -q ",no$" "$OUT/rig.csv"; then
  echo "rig: FAIL: some run through the worker gave other tokens" >&2
  exit 1
fi
