#!/usr/bin/env bash
# Lays out what a kvserve runtime image needs under OUT (a root to copy to /):
#   OUT/opt/kvserve/bin/kvserve, beside it the CUDA backend module libkvserve_cuda_backend.so
#   when the build made one (CUDA builds; kvserve loads it from its own directory only when
#   engine.backend resolves to cuda), OUT/opt/kvserve/models/, and
#   OUT/opt/kvserve/runtime-packages.txt: the Debian/Ubuntu packages that own the shared
#   libraries BINARY and the module link (ldd + dpkg -S), so the runtime stage installs
#   exactly those.
# Usage (in a build stage, from the repository root): stage_runtime.sh BINARY OUT
set -euo pipefail
bin="$1"; out="$2"
mkdir -p "$out/opt/kvserve/bin"
cp "$bin" "$out/opt/kvserve/bin/kvserve"
module="$(dirname "$bin")/libkvserve_cuda_backend.so"
linked=("$bin")
if [ -f "$module" ]; then
  cp "$module" "$out/opt/kvserve/bin/"
  linked+=("$module")
  echo "stage_runtime: CUDA backend module $module"
fi
cp -r models "$out/opt/kvserve/models"
libs=$(for f in "${linked[@]}"; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u)
: > "$out/opt/kvserve/runtime-packages.txt"
for lib in $libs; do
  real=$(readlink -f "$lib")
  # The CUDA runtime image brings the CUDA libraries itself.
  case "$real" in /usr/local/cuda*) echo "stage_runtime: $lib comes with the CUDA runtime image"; continue ;; esac
  # usrmerge: a library may be registered under /lib or /usr/lib.
  owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || true)
  [ -n "$owner" ] || { echo "stage_runtime: no package owns $lib" >&2; exit 1; }
  echo "${owner%%:*}" >> "$out/opt/kvserve/runtime-packages.txt"
done
sort -u -o "$out/opt/kvserve/runtime-packages.txt" "$out/opt/kvserve/runtime-packages.txt"
echo "stage_runtime: $(wc -l < "$out/opt/kvserve/runtime-packages.txt") runtime packages"
