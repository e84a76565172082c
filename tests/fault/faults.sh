#!/bin/sh
# troupe — TROUPE_FAULT through the trainer (examples/fmnist), one CTest test per case
# (tests/fault/CMakeLists.txt). Each case states the outcome its fault must have: a clear error
# naming the fault and its place, an end within the deadline (every run is bounded by
# `timeout`), no corrupted checkpoint, no lost committed step.
# usage: faults.sh FMNIST DATA_DIR WORK_DIR CASE [LAUNCHER...]
# A LAUNCHER (mpiexec -n 2 ...) runs the cases with ranks.
set -u
fmnist=$1 data=$2 work=$3 case=$4
shift 4
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
# 1000 images, --batch 100: 10 steps per epoch, one stream of the sync backend
small="--data $data --train-limit 1000 --test-limit 200 --streams 1 --backend sync --batch 100"
limit=60 # seconds any run may take

fail() {
  echo "FAIL ($case): $*"
  echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null
  exit 1
}
# run EXPECTED_STATUS ARGS...: runs ARGS, output in ./out and ./err, bounded by $limit seconds;
# sets $took (seconds). EXPECTED_STATUS: a number, or `nonzero`.
run() {
  want=$1; shift
  t0=$(date +%s)
  # shellcheck disable=SC2086 # $small is words
  timeout -k 5 "$limit" "$@" >out 2>err
  got=$?
  took=$(($(date +%s) - t0))
  [ "$took" -lt "$limit" ] || fail "the run did not end within $limit s"
  if [ "$want" = nonzero ]; then
    [ "$got" != 0 ] || fail "exit status 0, expected a failure, for: $*"
  else
    [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
  fi
}
trainer() { want_=$1; shift; run "$want_" "$fmnist" $small "$@"; }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
lacks() { ! grep -q -- "$2" "$1" || fail "$1 has '$2'"; }

case $case in
bad_spec)
  # refused at start-up, naming the variable, the bad part and why; no training
  TROUPE_FAULT=kill:rank=one:step=1,alloc trainer 1 --epochs 1
  has err "TROUPE_FAULT='kill:rank=one:step=1,alloc': fault 1 'kill:rank=one:step=1': rank='one'"
  lacks out "epoch"
  ;;
kill_step)
  # SIGKILL at step 13 (epoch 2): the process dies by the signal, after its line naming the
  # fault; the checkpoint of epoch 1 is intact and resumes at step 10 (nothing committed lost)
  TROUPE_FAULT=kill:step=13 trainer 137 --epochs 3 --checkpoint ck
  has err "TROUPE_FAULT 'kill:step=13': killing this process (SIGKILL) at training step 13"
  has out "epoch 1/3"; lacks out "epoch 2/3"; lacks out "^final"
  trainer 0 --epochs 3 --resume ck --checkpoint ck
  has out "resumed from ck at step 10 (epoch 1)"; has out "epoch 3/3"; has out "^final"
  ;;
ckpt_half)
  # the second checkpoint write stops half-way: the save fails naming the fault, the
  # checkpoint is the first one byte for byte, and a resume continues from its step (10)
  trainer 0 --epochs 1 --checkpoint ck
  cp ck ck.epoch1
  TROUPE_FAULT=ckpt:half trainer 1 --epochs 2 --resume ck --checkpoint ck
  has err "fmnist: writing the checkpoint: checkpoint write 1 stopped half-way by TROUPE_FAULT 'ckpt:half' (injected crash)"
  cmp -s ck ck.epoch1 || fail "the checkpoint changed"
  tmp=$(ls ck.tmp.* 2>/dev/null | head -n 1)
  [ -n "$tmp" ] || fail "no temporary left behind"
  [ "$(wc -c <"$tmp")" -eq $(($(wc -c <ck) / 2)) ] || fail "$tmp is not half a checkpoint"
  trainer 0 --epochs 2 --resume ck --checkpoint ck
  has out "resumed from ck at step 10 (epoch 1)"; has out "epoch 2/2"
  [ ! -e "$tmp" ] || fail "$tmp, left by a process that no longer runs, was not removed"
  ;;
ckpt_half_kill)
  # the same write stops half-way and the process dies there, as a crash does
  trainer 0 --epochs 1 --checkpoint ck
  cp ck ck.epoch1
  TROUPE_FAULT=ckpt:half:kill trainer 137 --epochs 2 --resume ck --checkpoint ck
  has err "TROUPE_FAULT 'ckpt:half:kill': killing this process (SIGKILL) at the half-written checkpoint"
  cmp -s ck ck.epoch1 || fail "the checkpoint changed"
  trainer 0 --epochs 2 --resume ck --checkpoint ck
  has out "resumed from ck at step 10 (epoch 1)"; has out "epoch 2/2"
  ;;
alloc)
  # a device pool allocation fails: one line naming the pool and the fault, exit 1
  TROUPE_FAULT=alloc:nth=3 trainer 1 --epochs 1
  has err "^fmnist: .*alloc_pool: pool .* allocation refused by TROUPE_FAULT 'alloc:nth=3'"
  lacks out "^final"
  ;;
kernel)
  # the 15th run of the gradient routine fails: exit 1 naming the routine and the fault
  TROUPE_FAULT=kernel:routine=dp_grad:nth=15 trainer 1 --epochs 3 --checkpoint ck
  has err "^fmnist: training: .*routine dp_grad: run 15 failed by TROUPE_FAULT 'kernel:routine=dp_grad:nth=15'"
  has out "epoch 1/3"; lacks out "epoch 2/3"
  trainer 0 --epochs 3 --resume ck --checkpoint ck
  has out "resumed from ck at step 10 (epoch 1)"
  ;;
stall_step_ranks)
  # rank 1 stalls 60 s at step 5, past TROUPE_TIMEOUT_S=4: rank 0 fails naming rank 1 (it did
  # not answer) and the job ends long before the stall would, with the trainer's status for a
  # failed cluster (75: worth a restart)
  [ $# -gt 0 ] || fail "no launcher given"
  TROUPE_TIMEOUT_S=4 TROUPE_FAULT=stall:rank=1:step=5:ms=60000 run 75 "$@" "$fmnist" $small \
    --epochs 1
  has err "TROUPE_FAULT 'stall:rank=1:step=5:ms=60000': stalling 60000 ms at training step 5"
  has err "DEADLINE_EXCEEDED\|rank 1 did not answer"
  has err "rank 1"
  [ "$took" -lt 40 ] || fail "the job took $took s"
  ;;
kill_step_ranks)
  # rank 1 dies at step 5; with mpiexec's defaults the launcher ends the job at once, non-zero,
  # and rank 1's line names the fault
  [ $# -gt 0 ] || fail "no launcher given"
  TROUPE_TIMEOUT_S=4 TROUPE_FAULT=kill:rank=1:step=5 run nonzero "$@" "$fmnist" $small --epochs 1
  has err "TROUPE_FAULT 'kill:rank=1:step=5': killing this process (SIGKILL) at training step 5"
  lacks out "^final"
  [ "$took" -lt 40 ] || fail "the job took $took s"
  ;;
slow_ranks)
  # a straggler (rank 1, 150 ms per step) changes nothing but the time: the checkpoint is the
  # same, byte for byte, as a run without it
  [ $# -gt 0 ] || fail "no launcher given"
  run 0 "$@" "$fmnist" $small --epochs 1 --checkpoint ck0
  fast=$took
  TROUPE_FAULT=slow:rank=1:ms=150 run 0 "$@" "$fmnist" $small --epochs 1 --checkpoint ck1
  has out "^final"
  cmp -s ck0 ck1 || fail "the straggler's run differs from the plain run"
  epoch_s=$(sed -n 's/^epoch 1\/1 .*(\([0-9.]*\) s)$/\1/p' out)
  awk -v t="$epoch_s" 'BEGIN { exit !(t + 0 >= 1.5) }' ||
    fail "10 steps with 150 ms of sleep each took '$epoch_s' s"
  echo "plain run $fast s, with the straggler $took s (its epoch: $epoch_s s)"
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
echo "ok ($case)"
