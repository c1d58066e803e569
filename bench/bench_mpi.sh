#!/usr/bin/env bash
# Data-parallel training throughput: the nanoGPT-size hybrid of
# configs/shakespeare_hybrid.yaml (d_model 128, 4 layers gdn,gdn,attn,gdn, 4 heads, block 64,
# batch 12) trained for STEPS steps as
#   1 rank  x 2 threads   (plain launch, OpenMP inside the ops)
#   2 ranks x 1 thread    (mpirun -n 2, one core each, gradients all-reduced every step)
# Prints training tokens/s (all ranks together; the first log window, warm-up, left out) and
# the time per step spent in the gradient all-reduce (the trainer's "data-parallel:" line;
# it includes waiting for the slower rank).
#
#   bench/bench_mpi.sh [LAT] [CONFIG]       defaults: build/lat, configs/shakespeare_hybrid.yaml
#   env: STEPS (default 100), MPIEXEC (default mpirun; the flags are Open MPI's)
set -euo pipefail

lat=${1:-build/lat}
config=${2:-configs/shakespeare_hybrid.yaml}
steps=${STEPS:-100}
mpiexec=${MPIEXEC:-mpirun}
work=$(mktemp -d /tmp/lat_bench_mpi.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Open MPI in a container: root allowed, shared memory between the ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_pml=ob1

# run NAME THREADS LAUNCHER...: trains; sets tps (tokens/s) and all_reduce (ms/step, - for one rank).
run() {
  local name=$1 threads=$2
  shift 2
  "$@" "$lat" train "$config" --set data.block_size=64 --set train.batch_size=12 --set train.grad_accum=1 \
    --set train.out_dir="$work/$name" --set train.stop_at="$steps" \
    --set train.eval_every=0 --set train.ckpt_every=0 --set train.log_every=10 \
    --set train.threads="$threads" 2> "$work/$name.log" ||
    { cat "$work/$name.log" >&2; exit 1; }
  tps=$(grep -o '"step":[0-9]*\|"tokens_per_s":[0-9.e+-]*' "$work/$name/metrics.jsonl" |
    paste - - | awk -F'[:\t]' '$2 > 10 { sum += $4; n++ } END { if (n) printf "%.0f", sum / n; else print "nan" }')
  all_reduce=$(grep -o 'all-reduce [0-9.]* ms/step' "$work/$name.log" | awk '{print $2}' || true)
  all_reduce=${all_reduce:--}
}

echo "== bench_mpi: $config at nanoGPT size (block 64, batch 12), $steps steps, $(nproc) cores"
run one 2
one_tps=$tps one_ar=$all_reduce
run two 1 "$mpiexec" -n 2 --bind-to core
two_tps=$tps two_ar=$all_reduce
tokens_per_step=$((12 * 64))  # the nanoGPT-size batch x block set in run()
printf "%-22s %12s %14s %20s\n" "layout" "tokens/s" "ms/step" "all-reduce ms/step"
printf "%-22s %12s %14.1f %20s\n" "1 rank x 2 threads" "$one_tps" "$(awk -v n="$tokens_per_step" -v r="$one_tps" 'BEGIN{print 1e3*n/r}')" "$one_ar"
printf "%-22s %12s %14.1f %20s\n" "2 ranks x 1 thread" "$two_tps" "$(awk -v n="$tokens_per_step" -v r="$two_tps" 'BEGIN{print 1e3*n/r}')" "$two_ar"
awk -v a="$one_tps" -v b="$two_tps" 'BEGIN { printf "2 ranks / 1 rank: %.2fx\n", b / a }'
