#!/usr/bin/env bash
# Installs the Debian 12 packages the build, the tests and the tools need.
#   scripts/install_deps.sh          build + run the demo
#   scripts/install_deps.sh --tests  also what the reference tests need (torch checks numpy)
#   scripts/install_deps.sh --train  also what retraining the demo model needs
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
PKGS=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libboost-dev nlohmann-json3-dev
  python3 python3-numpy python3-sentencepiece python3-regex python3-matplotlib
)
case "${1:-}" in
  --tests) PKGS+=(python3-torch python3-grpcio python3-protobuf python3-jsonschema prometheus
                  chromium chromium-driver python3-selenium) ;;
  --train) PKGS+=(python3-torch bible-kjv) ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
