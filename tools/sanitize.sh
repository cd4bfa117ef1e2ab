#!/usr/bin/env bash
# Sanitizer runs of CI (docs/reliability.md), each choosing its tests by ctest label:
#   asan  preset `asan` (ASan + UBSan, Debug, halt on the first report): every test labelled
#         unit or integration, except slow and gpu ones. Builds the whole tree.
#   tsan  preset `tsan` (ThreadSanitizer): the tests labelled concurrency (engine, scheduler,
#         server_test's pools: threaded code whose synchronisation is all ours; the HTTP and
#         gRPC front ends run on uninstrumented Debian libraries, tests/unit/server/CMakeLists.txt).
#         Builds only their binaries (target tests_concurrency).
# Usage: tools/sanitize.sh [asan|tsan|all] [extra ctest args]    (default: all)
# Any sanitizer report fails the test that produced it, and so the script.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
what="${1:-all}"
[[ $# -gt 0 ]] && shift
"$root/tools/setup.sh" test
jobs="$(nproc)"

# halt_on_error: the first report ends the process (exit code != 0), so ctest sees it.
# detect_leaks: LeakSanitizer runs at exit of every test binary and daemon.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/tools/sanitizers/lsan.supp:print_suppressions=0"
# second_deadlock_stack: both stacks in lock-order reports. The suppressions file names
# each third-party false positive it hides and why (tools/sanitizers/tsan.supp).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tools/sanitizers/tsan.supp"

run_asan() {
  echo "[sanitize] asan: configuring and building (preset asan)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  echo "[sanitize] asan: ctest -L 'unit|integration' -LE 'slow|gpu'"
  ctest --preset asan -L 'unit|integration' -LE 'slow|gpu' --timeout 1800 "$@"
}

run_tsan() {
  echo "[sanitize] tsan: configuring and building tests_concurrency (preset tsan)"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$jobs" --target tests_concurrency
  # Every thread under test is ours (engine loop, compute pool of kernels/cpu/compute_pool.h,
  # HTTP/gRPC handlers), so TSan sees all of their synchronisation. OpenBLAS (not built for
  # TSan) is asked for one thread by compute_pool.cc; OPENBLAS_NUM_THREADS=1 also stops it
  # starting its own uninstrumented pthread pool at load, before main.
  echo "[sanitize] tsan: ctest -L concurrency"
  OPENBLAS_NUM_THREADS=1 ctest --preset tsan -L concurrency -LE 'slow|gpu' --timeout 1800 "$@"
}

case "$what" in
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  all) run_asan "$@"; run_tsan "$@" ;;
  *) echo "usage: $0 [asan|tsan|all] [ctest args]" >&2; exit 2 ;;
esac
