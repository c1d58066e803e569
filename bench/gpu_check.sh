#!/usr/bin/env bash
# The GPU check (CUDA tests, kernel benchmark, a training run), in two halves, because the
# GPU host is bare and offline (no Debian packages, no network, at most 64 MiB carried to
# it) and its CPU may lack this build machine's instructions:
#
#   bench/gpu_check.sh bundle   (default; on a build machine with nvcc)
#       builds with LAT_NATIVE=OFF, LAT_MPI=OFF, LAT_CUDA=ON into build-gpu-bundle/, then packs
#       the CUDA tests, bench_gpu and the lat CLI with the non-system shared libraries they
#       need (ldd; not glibc, not the CUDA driver or toolkit libraries, which the GPU host
#       has), the main-job config and its data into gpu_bundle/lat-gpu.tar.xz (ignored).
#   bench/gpu_check.sh run      (on the GPU host, from the repo root with gpu_bundle/)
#       unpacks the bundle, sets LD_LIBRARY_PATH and runs the CUDA tests, the kernel benchmark
#       (chunk_simple_gla and chunk_gated_delta_rule, forward+backward, B=8 H=16 K=V=128,
#       T in {2048, 8192}) and a short `lat train` of the main-job config on the GPU (tokens/s),
#       then prints a short table last. Sized for well under 5 minutes on one H200.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle_dir="$repo/gpu_bundle"
archive="$bundle_dir/lat-gpu.tar.xz"
config=configs/shakespeare_hybrid.yaml
max_bytes=$((64 * 1024 * 1024))

bundle() {
  local build="$repo/build-gpu-bundle" stage="$bundle_dir/stage"
  command -v nvcc >/dev/null || { echo "gpu_check: nvcc not found: the bundle needs the CUDA toolkit" >&2; exit 1; }
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLAT_NATIVE=OFF -DLAT_MPI=OFF -DLAT_CUDA=ON >/dev/null
  cmake --build "$build" -j"$(nproc)" --target test_cuda_ops test_cuda_linear_attention bench_gpu lat_cli
  [[ -f "$repo/data/tinyshakespeare.txt" ]] || "$repo/tools/fetch_data.sh"

  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib" "$stage/configs" "$stage/data"
  cp "$build/tests/test_cuda_ops" "$build/tests/test_cuda_linear_attention" "$build/bench/bench_gpu" \
     "$build/lat" "$stage/bin/"
  cp "$repo/$config" "$stage/configs/"
  cp "$repo/data/tinyshakespeare.txt" "$stage/data/"
  # Shared libraries: everything ldd resolves except glibc's own, the CUDA driver and the
  # CUDA toolkit's (the GPU host has those, matching its driver; cuBLAS alone is ~0.5 GB).
  local lib
  for lib in $(ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libnvidia*|libcudart*|libcublas*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  local glibc
  glibc=$(objdump -T "$stage"/bin/* "$stage"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  tar -C "$stage" -cJf "$archive" .
  rm -rf "$stage"
  local size
  size=$(stat -c %s "$archive")
  echo "gpu_check: wrote $archive ($((size / 1024 / 1024)) MiB; needs $glibc and the CUDA $(nvcc --version |
    sed -n 's/.*release \([0-9.]*\).*/\1/p') runtime and cuBLAS on the GPU host)"
  if ((size > max_bytes)); then
    echo "gpu_check: the bundle exceeds 64 MiB" >&2
    exit 1
  fi
  echo "gpu_check: on the GPU host, from the repo root (carry gpu_bundle): bash bench/gpu_check.sh run"
}

run() {
  [[ -f "$archive" ]] || { echo "gpu_check: $archive missing: run 'bench/gpu_check.sh bundle' first" >&2; exit 1; }
  local dir
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$archive"
  local cuda_lib=""
  for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib" /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && cuda_lib="$cuda_lib:$d"
  done
  export LD_LIBRARY_PATH="$dir/lib$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi -L 2>/dev/null || echo "gpu_check: nvidia-smi not found"
  if ldd "$dir"/bin/* | grep -q "not found"; then
    echo "gpu_check: missing shared libraries:" >&2
    ldd "$dir"/bin/* | grep "not found" | sort -u >&2
    exit 1
  fi
  cd "$dir"
  local summary="$dir/summary.txt" status=0
  : >"$summary"

  # 1. The CUDA tests (fresh seeds; new device buffers poisoned with NaN).
  local t
  for t in test_cuda_ops test_cuda_linear_attention; do
    local log="$dir/$t.log" start=$SECONDS
    if LAT_POISON=1 timeout 150 "bin/$t" >"$log" 2>&1; then :; else status=1; fi
    local passed failed skipped
    passed=$(grep -c '^\[       OK \]' "$log" || true)
    failed=$(grep -c '^\[  FAILED  \].*(' "$log" || true)
    skipped=$(grep -c '^\[  SKIPPED \].*(' "$log" || true)
    grep -E '^\[  FAILED  \]|Failure|relative error|seed|error' "$log" | head -40 || true
    printf '%-28s %4d passed %4d failed %4d skipped (%ds)\n' "$t" "$passed" "$failed" "$skipped" \
      $((SECONDS - start)) >>"$summary"
    ((skipped == 0)) || status=1  # on the GPU host nothing may skip
  done

  # 2. The kernel benchmark.
  if timeout 120 bin/bench_gpu >"$dir/bench.log" 2>&1; then :; else status=1; fi
  cat "$dir/bench.log"

  # 3. Training throughput (tokens/s of the last logged interval) of the main-job config on
  # the GPU, and on this host's CPU for comparison. The CPU run is a reference only: it may
  # be cut short by its time limit (the trainer then stops cleanly) and does not fail the
  # check; the run ends with an evaluation on the whole validation split.
  local device steps rc tps
  for device in cuda cpu; do
    steps=$([[ $device == cuda ]] && echo 150 || echo 20)
    rc=0
    timeout 100 bin/lat train "$config" --set train.device=$device --set train.max_steps=$steps \
      --set train.eval_every=0 --set train.eval_batches=2 --set train.ckpt_every=100000 --set train.log_every=10 \
      --set train.out_dir="$dir/runs/$device" >"$dir/train_$device.log" 2>&1 || rc=$?
    tps=$({ grep -h '"tokens_per_s"' "$dir/runs/$device/metrics.jsonl" 2>/dev/null || true; } | tail -1 |
      sed 's/.*"tokens_per_s":\([0-9.e+-]*\).*/\1/')
    if [[ -n $tps ]]; then
      printf 'lat train %-30s %-5s %4d steps: %10.0f tokens/s\n' "$config" "$device" "$steps" "$tps" >>"$summary"
    else
      tail -5 "$dir/train_$device.log"
      printf 'lat train %-30s %-5s failed (see above)\n' "$config" "$device" >>"$summary"
    fi
    [[ $device == cuda && ($rc -ne 0 || -z $tps) ]] && status=1
  done

  echo
  echo "==== gpu_check summary ===="
  cat "$summary"
  grep -A20 '^sgemm' "$dir/bench.log" || true
  return $status
}

case "${1:-bundle}" in
  bundle) bundle ;;
  run) run ;;
  *) echo "usage: bench/gpu_check.sh [bundle|run]" >&2; exit 2 ;;
esac
