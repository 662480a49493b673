#!/usr/bin/env bash
# The clients people use against pi-launch: the official OpenAI Node SDK, the Vercel
# AI SDK and LangChain's ChatOpenAI (scripts/sdk_checks/check.mjs: chat, completions,
# n, tools, JSON mode and schemas, embeddings, the Responses API, errors), and the
# official OpenAI Python SDK (scripts/sdk_checks/check.py: the same calls but the
# Responses API, which its 1.39 lacks, and the async client). Starts pi-launch on the
# demo model on a free loopback port with an API key, runs the checks of each SDK that
# SDK_DIR holds, stops it.
#
#   mkdir SDK_DIR && cp scripts/sdk_checks/package.json SDK_DIR/ && npm install --prefix SDK_DIR
#   # the Python SDK from its sources (no PyPI needed), on Debian's httpx, pydantic, anyio:
#   apt-get install python3-httpx python3-pydantic python3-anyio python3-distro python3-sniffio python3-tqdm
#   mkdir SDK_DIR/python
#   git -C OPENAI_PYTHON_CHECKOUT archive v1.39.0 src/openai | tar -x -C SDK_DIR/python --strip-components=1
#   git -C TYPING_EXTENSIONS_CHECKOUT show 4.12.2:src/typing_extensions.py >SDK_DIR/python/typing_extensions.py
#   scripts/sdk_checks.sh SDK_DIR
#
# Nothing here is part of the build or of scripts/test.sh: the SDKs are not Debian
# packages. docs/sdk-checks.md gives the versions measured and the result.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sdk="$(cd "${1:?usage: sdk_checks.sh SDK_DIR (where npm installed scripts/sdk_checks/package.json)}" && pwd)"
bin="${PI_BIN:-$here/../build/bin}"
model="${PI_MODEL_FILE:-$here/../models/demo-kjv-f16.gguf}"
[ -d "$sdk/node_modules/openai" ] || [ -d "$sdk/python/openai" ] || {
  echo "neither node_modules/openai nor python/openai in $sdk (see this script's header)" >&2; exit 1; }
[ -x "$bin/pi-launch" ] || { echo "build pi-launch first (cmake --build build)" >&2; exit 1; }
work="$(mktemp -d)"
key="sk-pi-sdk-checks-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
"$bin/pi-launch" -m "$model" -t 2 -c 2048 -np 2 --chat-template chatml \
  --http 127.0.0.1:0 --listen 127.0.0.1:0 --api-key "$key" 2>"$work/launch.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
url=""
for _ in $(seq 1 120); do
  url="$(grep -o 'HTTP API .* on http://[0-9.]*:[0-9]*' "$work/launch.log" | grep -o 'http://.*' || true)"
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/launch.log" >&2; exit 1; }
  sleep 0.5
done
[ -n "$url" ] || { echo "pi-launch did not start serving within 60 s" >&2; cat "$work/launch.log" >&2; exit 1; }
id="$(basename "$model" .gguf)"
status=0
if [ -d "$sdk/node_modules/openai" ]; then
  # ES modules resolve packages next to the script: run a copy beside the SDKs.
  ln -s "$sdk/node_modules" "$work/node_modules"
  cp "$here/sdk_checks/check.mjs" "$here/sdk_checks/package.json" "$work/"
  PI_URL="$url" PI_KEY="$key" PI_MODEL="$id" node "$work/check.mjs" || status=1
fi
if [ -d "$sdk/python/openai" ]; then
  PYTHONPATH="$sdk/python" PI_URL="$url" PI_KEY="$key" PI_MODEL="$id" \
    /usr/bin/python3 "$here/sdk_checks/check.py" || status=1
fi
exit "$status"
