#!/usr/bin/env bash
# Data-parallel `lat train` under mpirun, on a tiny config and a generated corpus.
#
#   train_ranks.sh MODE LAT COMPARE WORK_DIR
#     equal    1 rank (plain launch) vs 2 ranks, 20 steps (grad_accum 1, then 2, then on
#              data.task mqar, then packed documents): losses within 1e-5 relative, the
#              parameters after the last step within 1e-5 absolute (compare_runs prints the max
#              differences)
#     resume   2 ranks stopped at step 10 and resumed (2 ranks) vs 2 ranks uninterrupted:
#              bit-identical losses and parameters; then a resume under 1 rank warns and
#              matches within the tolerances of `equal`
#     failure  rank 0 cannot write the checkpoint of step 3 (a directory stands where its
#              temporary file goes, as a full disk would fail it) while rank 1 waits in the
#              next step's all-reduce: mpirun exits non-zero within 30 s, stderr names rank 0
#              and the checkpoint, no checkpoint is left; rank 1 killed (SIGKILL) once step 3
#              is logged: the same, but the launcher names rank 1; train.batch_size 3 on 2
#              ranks is a config error (exit 2) naming the key
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
    # Generated task sequences and packed documents: each rank's rows, and the rows'
    # boundaries, are those of one rank's batch.
    mqar=(--set data.path=~ --set data.task=mqar --set data.mqar.vocab=64 --set "data.mqar.pairs=[2,4]")
    run1 --set train.out_dir=one_mqar "${mqar[@]}" 2> one_mqar.log
    run2 --set train.out_dir=two_mqar "${mqar[@]}" 2> two_mqar.log
    "$compare" one_mqar two_mqar --loss-rtol 1e-5 --param-atol 1e-5 --world-sizes 1 2
    packed=(--set 'data.doc_separator="\n"' --set data.packing=true)
    run1 --set train.out_dir=one_packed "${packed[@]}" 2> one_packed.log
    run2 --set train.out_dir=two_packed "${packed[@]}" 2> two_packed.log
    "$compare" one_packed two_packed --loss-rtol 1e-5 --param-atol 1e-5 --world-sizes 1 2
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
    # ended HOW START: the job that began at START must have ended non-zero within 30 s and
    # left no checkpoint.
    ended() {
      local how=$1 start=$2 elapsed
      elapsed=$(( $(date +%s) - start ))
      cat "$how.log"
      echo "$how: mpirun exit status $status after ${elapsed}s"
      [ "$status" -ne 0 ] || { echo "FAIL: $how: mpirun exited 0"; exit 1; }
      [ "$elapsed" -le 30 ] || { echo "FAIL: $how: took ${elapsed}s to end"; exit 1; }
      if ls "$how"/ckpt_*.h5 > /dev/null 2>&1; then echo "FAIL: $how: a checkpoint was left"; ls "$how"; exit 1; fi
    }
    long_run=(--set train.max_steps=100000 --set train.warmup=1)

    # Rank 0 fails while rank 1 waits in a collective: the checkpoint of step 3 cannot be
    # written (its temporary path is taken by a directory, which the run leaves alone).
    mkdir -p throw/ckpt_00000003.h5.tmp
    start=$(date +%s)
    status=0
    run2 --set train.out_dir=throw --set train.ckpt_every=3 "${long_run[@]}" 2> throw.log || status=$?
    ended throw "$start"
    grep -q "^error: rank 0: save_checkpoint: 'throw/ckpt_00000003.h5'" throw.log ||
      { echo "FAIL: no 'error: rank 0: save_checkpoint: ...ckpt_00000003.h5' line"; exit 1; }

    # Rank 1 dies of SIGKILL once rank 0 has logged step 3 (so both ranks are training).
    # Rank 1 is the second program of an MPMD launch, which records its pid before exec. No
    # periodic checkpoints: whenever the kill lands, a checkpoint could only come from the
    # failure path.
    start=$(date +%s)
    status=0
    kill_run=(train tiny.yaml --set train.out_dir=kill --set train.ckpt_every=0 "${long_run[@]}")
    "$mpiexec" -n 1 "$lat" "${kill_run[@]}" : \
      -n 1 bash -c 'echo $$ > rank1.pid; exec "$@"' bash "$lat" "${kill_run[@]}" 2> kill.log &
    job=$!
    for _ in $(seq 1 200); do
      [ -s rank1.pid ] && grep -q '"step":3,' kill/metrics.jsonl 2> /dev/null && break
      sleep 0.1
    done
    grep -q '"step":3,' kill/metrics.jsonl ||
      { echo "FAIL: kill: rank 0 did not log step 3 within 20 s"; cat kill.log; exit 1; }
    kill -KILL "$(cat rank1.pid)"
    wait "$job" || status=$?
    ended kill "$start"
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
