#!/usr/bin/env bash
# Fresh Debian 12 machine -> built engine -> the demo model's output.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
./build/bin/pi-run -p "In the beginning God" -n 48 --temp 0
