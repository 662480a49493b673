#!/usr/bin/env bash
# llama.cpp's own server tests (examples/server/tests) run against pi-launch, which
# scripts/llama_server_tests/llama-server starts in llama-server's place (its flags mapped,
# every model the suite names replaced by the demo model). The suite's "slow" tests
# (models from Hugging Face) are left out, as llama.cpp's tests.sh does by default.
#
#   scripts/llama_server_tests.sh LLAMA_CPP_DIR [PYTEST_ARGS...]
#
# LLAMA_CPP_DIR: a llama.cpp checkout holding examples/server/tests (docs/llama-server-tests.md
# names the commit measured). Needs python3-pytest, python3-wget, python3-requests and
# python3-pytest-timeout (Debian); without the openai package (on PYTHONPATH, e.g.
# PYTHONPATH=SDK_DIR/python as scripts/sdk_checks.sh makes it), a stub lets the modules
# import and the tests that use the SDK fail. The suite listens on 127.0.0.1:8080.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="${1:?usage: llama_server_tests.sh LLAMA_CPP_DIR [PYTEST_ARGS...]}"
shift
[ -d "$src/examples/server/tests/unit" ] || { echo "no examples/server/tests in $src" >&2; exit 1; }
[ -x "$here/../build/bin/pi-launch" ] || [ -n "${PI_LAUNCH:-}" ] || {
  echo "build pi-launch first (cmake --build build)" >&2; exit 1; }
for m in pytest wget requests pytest_timeout; do
  /usr/bin/python3 -c "import $m" 2>/dev/null || {
    echo "python3 module $m missing: apt-get install python3-pytest python3-wget python3-requests python3-pytest-timeout" >&2
    exit 1
  }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src/examples/server/tests" "$work/"
mkdir -p "$work/tests/tmp"  # (where the suite's fixtures download to)
# The caller's PYTHONPATH may hold the OpenAI Python SDK (scripts/sdk_checks.sh's header
# says how to get it from its sources); without it, the stub.
pythonpath="${PYTHONPATH:-}"
/usr/bin/python3 -c "import openai" 2>/dev/null ||
  pythonpath="$here/llama_server_tests/stubs${pythonpath:+:$pythonpath}"
cd "$work/tests"
LLAMA_SERVER_BIN_PATH="$here/llama_server_tests/llama-server" \
  PYTHONPATH="$pythonpath" \
  /usr/bin/python3 -m pytest unit -m "not slow" --timeout 180 -rfE -q "$@"
