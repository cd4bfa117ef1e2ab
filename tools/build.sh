#!/usr/bin/env bash
# Configures and builds kvserve (preset `default` unless KVSERVE_PRESET is set).
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${KVSERVE_PRESET:-default}"
cd "$root"
"$root/tools/setup.sh" "${KVSERVE_SETUP:-all}"
echo "[build] configuring (preset $preset)"
cmake --preset "$preset" >/dev/null
echo "[build] building with $(nproc) jobs"
cmake --build --preset "$preset" -j "$(nproc)"
