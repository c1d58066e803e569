#!/usr/bin/env bash
# Data-parallel `lat train` under mpirun, on a tiny config and a generated corpus.
#
#   train_ranks.sh MODE LAT COMPARE WORK_DIR
#     equal    1 rank (plain launch) vs 2 ranks, 20 steps (grad_accum 1, then 2): losses within
#              1e-5 relative, the parameters after the last step within 1e-5 absolute
#              (compare_runs prints the max differences)
#     resume   2 ranks stopped at step 10 and resumed (2 ranks) vs 2 ranks uninterrupted:
#              bit-identical losses and parameters; then a resume under 1 rank warns and
#              matches within the tolerances of `equal`
#     failure  rank 1 throws at step 3 (LAT_TEST_FAIL_AT=1:3:throw, the trainer's test hook):
#              mpirun exits non-zero within 30 s, stderr names rank 1, no checkpoint is left;
#              rank 1 killed (SIGKILL) at step 3 (LAT_TEST_FAIL_AT=1:3:kill): the same, but
#              the launcher names the rank; train.batch_size 3 on 2 ranks is a config error
#              (exit 2) naming the key
#
# MPIEXEC (default mpirun) launches; the OMPI_* settings come from the environment (ctest).
set -euo pipefail

mode=$1
lat=$2
compare=$3
work=$4
mpiexec=${MPIEXEC:-mpirun}

rm -rf "$work"
mkdir -p "$work"
cd "$work"

# A corpus with some structure to learn, the same on every run.
for i in $(seq 1 1500); do
  echo "line $i: the $(( i * 7919 % 97 )) quick brown foxes jump over $(( i * 104729 % 13 )) lazy dogs."
done > corpus.txt

cat > tiny.yaml <<'EOF'
model:
  d_model: 32
  n_layers: 2
  n_heads: 2
  layers: "gdn,attn"
data:
  path: corpus.txt
  block_size: 32
train:
  batch_size: 4
  max_steps: 20
  warmup: 5
  log_every: 1
  eval_every: 10
  eval_batches: 3
  ckpt_every: 10
  keep_last: 0
  threads: 1
EOF

run1() { "$lat" train tiny.yaml "$@"; }
run2() { "$mpiexec" -n 2 "$lat" train tiny.yaml "$@"; }

case "$mode" in
  equal)
    run1 --set train.out_dir=one 2> one.log
    run2 --set train.out_dir=two 2> two.log
    "$compare" one two --loss-rtol 1e-5 --param-atol 1e-5 --world-sizes 1 2
    # Two micro-batches per step: token weighting across micro-batches and ranks.
    run1 --set train.out_dir=one_accum --set train.grad_accum=2 2> one_accum.log
    run2 --set train.out_dir=two_accum --set train.grad_accum=2 2> two_accum.log
    "$compare" one_accum two_accum --loss-rtol 1e-5 --param-atol 1e-5 --world-sizes 1 2
    ;;
  resume)
    run2 --set train.out_dir=whole 2> whole.log
    run2 --set train.out_dir=split --set train.stop_at=10 2> split1.log
    run2 --set train.out_dir=split 2> split2.log
    grep -q "resuming from" split2.log || { echo "FAIL: the second 2-rank run did not resume"; cat split2.log; exit 1; }
    "$compare" whole split --loss-rtol 0 --param-atol 0 --world-sizes 2 2
    # Another world size: continues with a warning; the global batch keeps the data order.
    run2 --set train.out_dir=other --set train.stop_at=10 2> other1.log
    run1 --set train.out_dir=other 2> other2.log
    grep -q "warning: .*2 ranks.*now 1" other2.log || { echo "FAIL: no world-size warning"; cat other2.log; exit 1; }
    "$compare" whole other --loss-rtol 1e-5 --param-atol 1e-5
    ;;
  failure)
    # fail HOW: rank 1 fails at step 3 of a long run; the job must end non-zero within 30 s
    # and leave no checkpoint.
    fail() {
      local how=$1 start elapsed
      start=$(date +%s)
      status=0
      LAT_TEST_FAIL_AT=1:3:$how "$mpiexec" -n 2 "$lat" train tiny.yaml --set train.out_dir="$how" \
        --set train.max_steps=100000 --set train.warmup=1 2> "$how.log" || status=$?
      elapsed=$(( $(date +%s) - start ))
      cat "$how.log"
      echo "$how: mpirun exit status $status after ${elapsed}s"
      [ "$status" -ne 0 ] || { echo "FAIL: $how: mpirun exited 0"; exit 1; }
      [ "$elapsed" -le 30 ] || { echo "FAIL: $how: took ${elapsed}s to end"; exit 1; }
      if ls "$how"/ckpt_*.h5 > /dev/null 2>&1; then echo "FAIL: $how: a checkpoint was left"; ls "$how"; exit 1; fi
    }
    fail throw
    grep -q "^error: rank 1: .*step 3" throw.log || { echo "FAIL: no 'error: rank 1: ... step 3' line"; exit 1; }
    fail kill
    grep -qi "rank 1" kill.log || { echo "FAIL: the launcher did not name rank 1"; exit 1; }
    # A batch that does not split over the ranks is a config error (exit 2) naming the key.
    status=0
    run2 --set train.out_dir=odd --set train.batch_size=3 2> odd.log || status=$?
    cat odd.log
    [ "$status" -eq 2 ] || { echo "FAIL: batch_size 3 on 2 ranks exited $status, expected 2"; exit 1; }
    grep -q "^error: rank [01]: train.batch_size: 3 .* 2 ranks" odd.log || { echo "FAIL: no train.batch_size error"; exit 1; }
    ;;
  *)
    echo "train_ranks.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
echo "train_ranks.sh $mode: ok"
