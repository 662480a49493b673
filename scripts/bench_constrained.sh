#!/usr/bin/env bash
# Constrained against free decode on one model: pi-run -n N tokens (end of
# text ignored), ROUNDS interleaved rounds each of free decode, a JSON schema
# (an array of strings: never whole, so every run makes N tokens) and a GBNF
# grammar, at -t 1 and -t 2; prints each run's decode rate (sampling and the
# grammar's masks included), the medians' ratios, and the median time per
# token spent sampling (the grammar's share is in it) (docs/grammars.md).
#
#   scripts/bench_constrained.sh [MODEL.gguf] [N] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$root/models/demo-kjv-f16.gguf}
n=${2:-256}
rounds=${3:-5}
run="$root/build/bin/pi-run"
schema='{"type":"array","items":{"type":"string"}}'
grammar='root ::= ( [A-Za-z ,.;:]+ "\n" )+'
rate() {  # "decode tokens/s,sampling us per token" of one run
  "$run" -m "$model" -p "In the beginning" -n "$n" --ignore-eos --json -s 7 "$@" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; t=json.load(sys.stdin)["timings"]; n=t["predicted_n"]; print("%.1f,%.2f" % (1e3 * n / t["predicted_ms"], 1e3 * t["sampling_ms"] / n))'
}
for t in 1 2; do
  free=() json=() gbnf=()
  for _ in $(seq "$rounds"); do
    free+=("$(rate -t "$t")")
    json+=("$(rate -t "$t" -j "$schema")")
    gbnf+=("$(rate -t "$t" --grammar "$grammar")")
  done
  /usr/bin/python3 - "$t" "${free[*]}" "${json[*]}" "${gbnf[*]}" <<'PY'
import statistics, sys
t = sys.argv[1]
runs = [[tuple(map(float, r.split(","))) for r in a.split()] for a in sys.argv[2:]]
(mf, mj, mg) = (statistics.median(r[0] for r in x) for x in runs)
(sf, sj, sg) = (statistics.median(r[1] for r in x) for x in runs)
for name, x in zip(("free", "json schema", "gbnf"), runs):
    print(f"-t {t}: {name} {[r[0] for r in x]} tok/s")
print(f"-t {t}: medians free {mf:.0f}, json {mj:.0f} ({mj / mf:.3f}x), gbnf {mg:.0f} ({mg / mf:.3f}x)")
print(f"-t {t}: sampling per token free {sf:.2f} us, json {sj:.2f} us, gbnf {sg:.2f} us")
PY
done
