#!/usr/bin/env bash
# Fuzz smoke: builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan) and runs each
# for KVSERVE_FUZZ_SECONDS (default 20) from its seed corpus; any finding fails.
# Usage: tools/fuzz.sh [ctest args]   e.g.  tools/fuzz.sh -R openai
# A long run of one target: build-fuzz/bin/<target> -runs=1000000 build-fuzz/tests/fuzz/corpus/<target> tests/fuzz/corpus/<target>
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/tools/setup.sh" test
seconds="${KVSERVE_FUZZ_SECONDS:-20}"
echo "[fuzz] configuring (preset fuzz)"
cmake --preset fuzz -DKVSERVE_FUZZ_SECONDS="$seconds" >/dev/null
echo "[fuzz] building the fuzz targets"
cmake --build --preset fuzz -j "$(nproc)"
echo "[fuzz] running each target for ${seconds}s"
ctest --preset fuzz "$@"
