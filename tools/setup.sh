#!/usr/bin/env bash
# Installs the Debian 12 packages kvserve needs, only those that are missing.
# Safe to run again. Usage: tools/setup.sh [build|test|all]   (default: all)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
what="${1:-all}"

# Build: compilers and libraries (toolchain notes: ../shared/reference/toolchain.md).
build_pkgs=(
  g++ cmake ninja-build pkg-config ccache git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  nlohmann-json3-dev prometheus-cpp-dev libcpp-httplib-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libpcre2-dev libhiredis-dev libicu-dev zlib1g-dev
  libopenmpi-dev openmpi-bin  # ranks over MPI (parallel/; mpirun runs the 2-rank tests)
)
# Test: what the test suite drives or checks against besides our binaries.
test_pkgs=(
  curl wamerican python3
  python3-numpy  # tools/export_gguf and its test (tests/unit/tools)
  prometheus   # the real Prometheus server and promtool (tests/integration/observability)
  yamllint     # deploy/ YAML (tests/integration/deploy)
  redis-server # the real Redis for the remote KV tier (tests/integration/cache)
  clang libclang-rt-14-dev  # libFuzzer + ASan/UBSan for the fuzz smoke (tools/fuzz.sh)
)
# `kubectl kustomize` renders deploy/k8s (tests/integration/deploy). Machines that already have
# a kubectl (e.g. from another repository's package) keep it; otherwise Debian's.
if ! command -v kubectl >/dev/null 2>&1; then
  test_pkgs+=(kubernetes-client)
fi
# Node.js and npm drive the independent-client tests (OpenAI SDK, @grpc/grpc-js). Machines that
# already have them (e.g. from another repository, which bundles npm inside its nodejs
# package and conflicts with Debian's npm) keep theirs.
node_pkgs=()
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  node_pkgs=(nodejs npm)
fi

pkgs=()
case "$what" in
  build) pkgs=("${build_pkgs[@]}") ;;
  test|all) pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}" "${node_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all ${#pkgs[@]} packages present"
  exit 0
fi
echo "[setup] installing ${#missing[@]} missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "[setup] need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "[setup] done"
