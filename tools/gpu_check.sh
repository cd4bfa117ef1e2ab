#!/usr/bin/env bash
# GPU checks of the CUDA backend (issue 13): builds the CUDA targets, runs every `gpu`-labelled
# test (each CUDA component against its CPU twin), then the CUDA benchmarks, and prints their
# figures. Designed to finish well within 8 minutes on one H100/H200.
#
#   tools/gpu_check.sh                 on a GPU machine that has the build dependencies
#                                      (tools/setup.sh build): configures build-gpu/, builds the
#                                      gpu targets, runs `ctest -L gpu` and the benchmarks.
#   tools/gpu_check.sh --pack DIR      on a machine without a GPU (CUDA toolkit + dependencies):
#                                      builds the same binaries and copies them, with every shared
#                                      library they load except the C library and the driver,
#                                      into DIR, for a GPU machine that cannot install packages.
#   tools/gpu_check.sh --bundle DIR    on that GPU machine: runs the packed binaries.
#
# With the session's device tool (no packages can be installed there): here
#   GPU_CHECK_BUILD_DIR=$PWD/build GPU_CHECK_JOBS=1 tools/gpu_check.sh --pack .gpu_bundle
#   (.gpu_bundle/ is git-ignored; ~33 MiB: stripped binaries, the CUDA backend module, and
#   their non-CUDA libraries, all in libs.tar.gz: OpenBLAS and ICU data alone are 67 MiB
#   unpacked, past what the device tool carries; bundle mode unpacks them to a temporary
#   directory)
# then run `bash .gpu_bundle/gpu_check.sh --bundle .gpu_bundle` with carry [".gpu_bundle"] and a
# timeout of ~480 s. The gpu tests read models/kvs-tiny from the carried working tree.
#
# Exit status: non-zero when a gpu test fails or a benchmark cannot run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="build"
dir=""
case "${1:-}" in
  --pack) mode="pack"; dir="${2:?--pack needs a directory}" ;;
  --bundle) mode="bundle"; dir="${2:?--bundle needs a directory}" ;;
  "") ;;
  *) echo "usage: $0 [--pack DIR | --bundle DIR]" >&2; exit 2 ;;
esac

# The gpu test binaries and the CUDA benchmarks (keep in step with tests/unit/cuda, bench/).
# cuda_backend_test holds every gpu test: KV storage, sampler draws, paged attention (split-KV
# and tiled prefill), Llama kernels (incl. grammar-masked greedy), device compression
# (TriAttention/SnapKV scores, compaction), the CUDA model and the CUDA engine (greedy, n > 1,
# compression policies, preemption by recompute and swap, structured outputs, n-gram speculative
# decoding: CudaEngine.*Ngram*: greedy alone/batched/windowed, with compression and preemption,
# sampled).
# cuda_kv_bench also prints prefill attention and a device TriAttention round.
# cuda_module_test loads the CUDA backend from libkvserve_cuda_backend.so, as `kvserve serve`
# does (the module is shipped beside the binaries: `modules`). cuda_backend_loader_test is a
# unit binary whose CreateEngineCudaLoading case needs a device (it skips itself on CPU CI):
# here it runs.
# cuda_quant_test: the quantized-weight kernels (W4A16/W8A16 GEMV and dequantize-then-cuBLAS,
# FP8 W8A8 through cuBLASLt, FP8 activation quantization, FP8 dequantization by block or channel)
# against float64 references; cuda_quant_bench prints their GB/s and TFLOP/s on Llama-3-8B's
# linear shapes next to the bf16 GEMV and cuBLAS.
gpu_tests=(cuda_backend_test cuda_module_test cuda_backend_loader_test cuda_quant_test)
modules=(libkvserve_cuda_backend.so)
benches=(cuda_kv_bench cuda_e2e_bench cuda_quant_bench)
# Per-benchmark arguments: cuda_e2e_bench also prints the n-gram speculation table (batches 1, 8).
bench_args() {
  case "$1" in
    cuda_e2e_bench) echo "--speculative 4" ;;
  esac
}

# GPU_CHECK_BUILD_DIR (default build-gpu) and GPU_CHECK_JOBS (default nproc) let a shared
# build machine pack with its existing build tree and one job.
build_gpu_targets() {
  local bdir="${GPU_CHECK_BUILD_DIR:-$root/build-gpu}"
  command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
  echo "[gpu_check] configuring $bdir (CUDA on, sm_90a + compute_90 PTX)"
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_CUDA=ON >/dev/null
  echo "[gpu_check] building ${gpu_tests[*]} ${benches[*]}"
  cmake --build "$bdir" -j "${GPU_CHECK_JOBS:-$(nproc)}" --target "${gpu_tests[@]}" "${benches[@]}"
  bin="$bdir/bin"
}

run_figures() {
  local bin_dir="$1" failed=0
  echo "[gpu_check] device:"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  for t in "${gpu_tests[@]}"; do
    echo "[gpu_check] $t"
    SECONDS=0
    # A hang must not eat the device lease: each binary gets GPU_CHECK_TIMEOUT seconds.
    timeout "${GPU_CHECK_TIMEOUT:-240}" "$bin_dir/$t" --gtest_brief=1 || failed=1
    echo "[gpu_check] $t took ${SECONDS}s"
  done
  for b in "${benches[@]}"; do
    echo "[gpu_check] $b"
    SECONDS=0
    # shellcheck disable=SC2046  # the arguments split on purpose
    timeout "${GPU_CHECK_TIMEOUT:-240}" "$bin_dir/$b" $(bench_args "$b") || failed=1
    echo "[gpu_check] $b took ${SECONDS}s"
  done
  return "$failed"
}

case "$mode" in
  build)
    build_gpu_targets
    cd "${GPU_CHECK_BUILD_DIR:-$root/build-gpu}"
    echo "[gpu_check] ctest -L gpu"
    ctest -L gpu --output-on-failure
    # shellcheck disable=SC2046
    for b in "${benches[@]}"; do "$bin/$b" $(bench_args "$b"); done
    ;;
  pack)
    build_gpu_targets
    rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/bin"
    # Stripped binaries: the device tool carries at most 64 MiB.
    for f in "${gpu_tests[@]}" "${benches[@]}" "${modules[@]}"; do cp "$bin/$f" "$dir/bin/" && strip --strip-debug "$dir/bin/$f"; done
    # Every resolved shared library but the C library family, the driver and cuBLAS (cuBLASLt
    # alone is ~500 MiB; the GPU machine's CUDA 13 image has its own, found in bundle mode).
    for f in "${gpu_tests[@]}" "${benches[@]}" "${modules[@]}"; do ldd "$bin/$f"; done |
      awk '/=> \// {print $3}' | sort -u |
      grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcublas|libcublasLt)\.so' |
      while read -r lib; do cp -L "$lib" "$dir/lib/"; done
    # The C++ runtime apart: this machine's libstdc++ may need a newer glibc than the GPU
    # machine's; bundle mode then falls back to that machine's own.
    mkdir -p "$dir/lib-cxx"
    for lib in libstdc++.so.6 libgcc_s.so.1; do [ -f "$dir/lib/$lib" ] && mv "$dir/lib/$lib" "$dir/lib-cxx/"; done
    # Compressed: the device tool carries at most 64 MiB (OpenBLAS + ICU data are 67 MiB).
    # The binaries go in too (their CUDA fat binaries compress well).
    tar -C "$dir" -czf "$dir/libs.tar.gz" bin lib lib-cxx && rm -rf "$dir/bin" "$dir/lib" "$dir/lib-cxx"
    cp "$0" "$dir/gpu_check.sh"
    du -sh "$dir"
    echo "[gpu_check] packed into $dir; on the GPU machine: $dir/gpu_check.sh --bundle $dir"
    ;;
  bundle)
    dir="$(cd "$dir" && pwd)"
    # The gpu tests read models/kvs-tiny from the source tree: the tree this script sits in
    # (DIR is expected inside the repository root, e.g. .gpu_bundle/).
    export KVSERVE_SOURCE_DIR="${KVSERVE_SOURCE_DIR:-$(cd "$dir/.." && pwd)}"
    echo "[gpu_check] KVSERVE_SOURCE_DIR=$KVSERVE_SOURCE_DIR"
    # cuBLAS (and anything else CUDA) from the machine: the toolkit's lib dirs, then the
    # NVIDIA pip wheels' (the device image carries nvidia-cublas and nvidia-cuda-runtime).
    cuda_libs=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
             $(python3 -c 'import glob, site; [print(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib")]' 2>/dev/null); do
      [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
    done
    base_path="${LD_LIBRARY_PATH:-}"
    # The packed binaries and libraries, unpacked where this machine lets us write.
    libs="$(mktemp -d "${TMPDIR:-/tmp}/kvserve_gpu_libs.XXXXXX")"
    trap 'rm -rf "$libs"' EXIT
    tar -C "$libs" -xzf "$dir/libs.tar.gz"
    unresolved() {
      local f
      for f in "${gpu_tests[@]}" "${benches[@]}" "${modules[@]}"; do ldd "$libs/bin/$f" 2>&1 | grep "not found" && return 0; done
      return 1
    }
    export LD_LIBRARY_PATH="$libs/lib-cxx:$libs/lib$cuda_libs${base_path:+:$base_path}"
    if unresolved >/dev/null; then
      echo "[gpu_check] the packed C++ runtime does not load here; using this machine's"
      export LD_LIBRARY_PATH="$libs/lib$cuda_libs${base_path:+:$base_path}"
    fi
    if unresolved; then echo "[gpu_check] unresolved libraries (above)"; exit 1; fi
    echo "[gpu_check] LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    run_figures "$libs/bin"
    ;;
esac
