#!/usr/bin/env bash
# Command 2 of the README: installs what is missing, builds, and runs the whole CPU
# test suite (every ctest label but `gpu` and `slow`; the slow ones run on request:
# ctest --preset default -L slow -LE gpu). Exits non-zero on any failure.
# Extra arguments go to ctest, e.g. tools/test.sh -L unit  or  -R Config
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${KVSERVE_PRESET:-default}"
"$root/tools/build.sh"
cd "$root"
echo "[test] running ctest (preset $preset, all labels but gpu and slow)"
ctest --preset "$preset" --timeout 900 "$@"
