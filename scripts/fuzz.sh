#!/usr/bin/env bash
# Fuzzes the file readers with libFuzzer (clang, ASan + UBSan) for a bounded time:
#   gguf_fuzz   the GGUF container (reader and writer against each other);
#   model_fuzz  what is read out of it: the model loader (then one engine step),
#               the tokenizer, activation statistics, placement plans, gpu index,
#               slot files;
#   step_fuzz   a worker's step handler and hello parser (common/transport/);
#   device_fuzz a gpu_worker's device sessions (any sequence of device messages);
#   request_fuzz  what a client sends the coordinator (GenerateRequest and
#               TokenizeRequest bytes: protobuf, the validator, the tokenizer);
#   http_body_fuzz  the HTTP API's completion, chat, native, infill, embeddings and
#               responses bodies (JSON);
#   http_framing_fuzz  what a client sends on an HTTP connection (request lines,
#               headers, chunked bodies and trailers) through the server's own
#               connection code;
#   hf_fuzz     what pi-convert reads: safetensors, config.json, tokenizer.model,
#               tokenizer.json;
#   grammar_fuzz  a client's GBNF grammar or JSON schema, and the token masks of
#               the grammar matcher.
#
#   scripts/fuzz.sh                  # 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#
# Builds build-fuzz/ (clang, PI_FUZZ=ON), writes seed files, then runs each
# fuzzer; exits non-zero on a crash, leak or sanitizer report (the input that
# triggered it is saved under build-fuzz/fuzz/<target>/artifacts/). Corpora in
# build-fuzz/fuzz/<target>/corpus/ are kept between runs; tests/fuzz/regressions/
# (every input a fuzzer once flagged) is replayed by both. Copy a new
# reproducer there.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_BUILD_JOBS:-2}

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPI_FUZZ=ON \
  -DPI_CUDA=OFF -DPI_GRPC=ON -DPI_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target gguf_fuzz gguf_fuzz_seeds model_fuzz model_fuzz_seeds \
  step_fuzz step_fuzz_seeds device_fuzz device_fuzz_seeds request_fuzz request_fuzz_seeds http_body_fuzz \
  http_framing_fuzz http_framing_fuzz_seeds \
  hf_fuzz hf_fuzz_seeds grammar_fuzz grammar_fuzz_seeds

# run_fuzzer TARGET MAX_LEN [libFuzzer flags...]
run_fuzzer() {
  local target="$1" max_len="$2" work="$build/fuzz/$1"
  shift 2
  mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
  "$build/bin/${target}_seeds" "$work/seeds"
  echo "fuzzing $target for ${seconds}s"
  if ! "$build/bin/$target" \
      -max_total_time="$seconds" \
      -max_len="$max_len" \
      -rss_limit_mb=2048 \
      -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" \
      "$@" \
      "$work/corpus" "$work/seeds" "$root/tests/fuzz/regressions"; then
    echo "fuzz.sh: $target found a failure; reproducer(s) in $work/artifacts/" >&2
    exit 1
  fi
}

# http_body_fuzz's seeds are JSON bodies written here (a few valid and invalid ones).
run_http_fuzzer() {
  local work="$build/fuzz/http_body_fuzz"
  mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
  printf '%s' '{"prompt":"In the beginning","max_tokens":16,"temperature":0}' >"$work/seeds/basic"
  printf '%s' '{"prompt":[1,1039,261],"stream":true,"stop":["\n","LORD"],"seed":42}' >"$work/seeds/ids"
  printf '%s' '{"prompt":["x"],"n":1,"model":"demo","top_k":5,"min_p":0.1}' >"$work/seeds/array"
  printf '%s' '{"prompt":"x","max_tokens":"ten"}' >"$work/seeds/bad_type"
  printf '%s' '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"stream":true}' >"$work/seeds/chat"
  printf '%s' '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"2"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"required","parallel_tool_calls":false}' >"$work/seeds/tools"
  printf '%s' '{"prompt":"x","json_schema":{"type":"object","properties":{"n":{"enum":[1,"a"]}}},"grammar":null}' >"$work/seeds/schema"
  printf '%s' '{"input_prefix":"def f(","input_suffix":"):","prompt":"x","input_extra":[{"filename":"a.py","text":"y"}],"n_predict":8}' >"$work/seeds/infill"
  printf '%s' '{"prompt":"a","suffix":"b","max_tokens":4}' >"$work/seeds/suffix"
  printf '%s' '{"prompt":"a","speculative.n_max":4,"speculative.n_min":1,"speculative.p_min":0.5}' >"$work/seeds/speculative"
  printf '%s' '{"input":["In the beginning",[1,2,3]],"encoding_format":"base64","model":"demo"}' >"$work/seeds/embeddings"
  printf '%s' '{"instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"2"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"text":{"format":{"type":"json_object"}}}' >"$work/seeds/responses"
  echo "fuzzing http_body_fuzz for ${seconds}s"
  if ! "$build/bin/http_body_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
      "$work/corpus" "$work/seeds" "$root/tests/fuzz/regressions"; then
    echo "fuzz.sh: http_body_fuzz found a failure; reproducer(s) in $work/artifacts/" >&2
    exit 1
  fi
}

run_fuzzer gguf_fuzz 16384 -dict="$root/tests/fuzz/gguf.dict"
run_fuzzer model_fuzz 65536 -dict="$root/tests/fuzz/gguf.dict"
run_fuzzer step_fuzz 4096
run_fuzzer device_fuzz 8192
run_fuzzer request_fuzz 4096
run_http_fuzzer
run_fuzzer http_framing_fuzz 131072
run_fuzzer hf_fuzz 65536
run_fuzzer grammar_fuzz 4096
echo "fuzz.sh: no failures in ${seconds}s per target"
