#!/bin/sh
# troupe — tests of the trainer's command line (examples/fmnist/CMakeLists.txt runs one case per
# CTest test): output paths checked before training, stale temporaries, overwriting, resuming
# with other settings, what TROUPE_LOG=info says, the built backends in --help.
# usage: test_trainer.sh FMNIST DATA_DIR WORK_DIR CASE [LAUNCHER...]
# A LAUNCHER (mpiexec -n 2 ...) runs the cases that need ranks.
set -u
fmnist=$1 data=$2 work=$3 case=$4
shift 4
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
small="--data $data --train-limit 1000 --test-limit 200 --streams 1 --backend sync"

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
# run EXPECTED_STATUS ARGS...: runs the trainer, output in ./out and ./err.
run() {
  want=$1; shift
  # shellcheck disable=SC2086 # $small is words
  "$fmnist" $small "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
lacks() { ! grep -q -- "$2" "$1" || fail "$1 has '$2'"; }
lines() { [ "$(wc -l <"$1")" = "$2" ] || fail "$1 has $(wc -l <"$1") lines, expected $2"; }

case $case in
unwritable_outputs)
  # found before any training: one line naming the option, the path and the reason; exit 2
  run 2 --epochs 1 --checkpoint /nonexistent-dir/ck
  lines err 1; has err "option --checkpoint: cannot write '/nonexistent-dir/ck'"
  has err "No such file or directory"; lacks out "epoch"
  : >file
  run 2 --epochs 1 --curve file/curve.csv
  lines err 1; has err "option --curve: cannot write 'file/curve.csv'"; lacks out "epoch"
  mkdir ckdir
  run 2 --epochs 1 --checkpoint ckdir
  lines err 1; has err "'ckdir' is a directory"
  # a 5,000-character path is shortened in the middle: the reason stays
  long=/nonexistent-dir/$(printf '%05000d' 0)/ck
  run 2 --epochs 1 --checkpoint "$long"
  lines err 1; has err "option --checkpoint: cannot write '/nonexistent-dir/000"
  has err " \.\.\. 000*/ck': File name too long"
  # timelines that could not be written are refused at start-up, not lost at exit
  TROUPE_TRACE=/nonexistent-dir/t run 1 --epochs 1
  has err "TROUPE_TRACE '/nonexistent-dir/t': its timelines .* cannot be written"; lacks out "epoch"
  ;;
stale_temporaries)
  # a temporary left by a process that no longer runs goes at the next save; a live one stays
  sh -c 'exit 0' & dead=$!; wait $dead
  echo partial >"ck.tmp.$dead"
  echo busy >"ck.tmp.$$"
  run 0 --epochs 1 --checkpoint ck
  [ ! -e "ck.tmp.$dead" ] || fail "ck.tmp.$dead is still there"
  [ -e "ck.tmp.$$" ] || fail "the running process's ck.tmp.$$ was removed"
  [ "$(head -c 8 ck)" = TROUPECK ] || fail "ck is not a checkpoint"
  ;;
no_overwrite)
  # an existing file that this run does not resume from is kept, unless --force
  echo "precious results" >ck
  run 2 --epochs 1 --checkpoint ck
  lines err 1; has err "'ck' exists and this run does not resume from it"; has err "--force"
  [ "$(cat ck)" = "precious results" ] || fail "ck was changed"
  run 0 --epochs 1 --checkpoint ck --force
  [ "$(head -c 8 ck)" = TROUPECK ] || fail "--force did not write ck"
  cp ck other
  run 2 --epochs 2 --resume other --checkpoint ck # resumes another file
  has err "'ck' exists"
  run 0 --epochs 2 --resume ck --checkpoint ck # the same file: continues it
  has out "resumed from ck at step"
  ;;
two_outputs)
  # two outputs on one path (spelled alike or not, --resume too) and --curve/--plot onto a file of
  # another kind are bad options, refused before anything is written
  run 2 --epochs 1 --checkpoint x --curve x
  lines err 1; has err "options --checkpoint and --curve name one file, 'x'"
  [ ! -e x ] || fail "x was written"
  run 2 --epochs 1 --checkpoint x --plot ./x
  has err "options --checkpoint and --plot name one file"
  run 2 --epochs 1 --curve x --plot "../$case/x"
  has err "options --curve and --plot name one file"
  run 0 --epochs 1 --checkpoint ck --curve c.csv
  cp ck ck.orig
  run 2 --epochs 2 --resume ck --checkpoint ck2 --curve ck
  has err "options --curve and --resume name one file, 'ck'"
  cmp -s ck ck.orig || fail "ck was changed"
  run 2 --epochs 1 --curve ck
  lines err 1; has err "option --curve: 'ck' exists and is not a learning curve"
  run 2 --epochs 1 --plot ck
  lines err 1; has err "option --plot: 'ck' exists and is not a PNG picture"
  cmp -s ck ck.orig || fail "ck was changed"
  run 0 --epochs 1 --curve c.csv # a curve onto a curve is fine
  ;;
diverge)
  # a diverging run stops at the first non-finite loss: exit 1, the step, a hint; the curve has
  # no non-finite row and the checkpoint keeps the last state with finite parameters
  run 1 --epochs 2 --lr 100 --checkpoint ck --checkpoint-every 2 --curve c.csv
  grep -v '^data rank=' err >err.1 # the training data line comes first (docs/trainer.md)
  lines err.1 1; has err "at step [0-9]* (epoch 1, step [0-9]* of 7): the training diverged"
  has err "lower --lr (100)"; has err "ck keeps the last state with finite parameters, step"
  lacks out "final"
  ! grep -qi nan c.csv || fail "c.csv has a non-finite row"
  [ "$(head -c 8 ck)" = TROUPECK ] || fail "ck is not a checkpoint"
  ;;
limits_reduced)
  # a limit above the set's size is reduced to it, and the setup line says so: a set of 100
  # training images cut from the real test set
  mkdir tiny
  { printf '\000\000\010\003\000\000\000\144\000\000\000\034\000\000\000\034'
    gzip -dc "$data/t10k-images-idx3-ubyte.gz" | tail -c +17 | head -c 78400; } |
    gzip >tiny/train-images-idx3-ubyte.gz
  { printf '\000\000\010\001\000\000\000\144'
    gzip -dc "$data/t10k-labels-idx1-ubyte.gz" | tail -c +9 | head -c 100; } |
    gzip >tiny/train-labels-idx1-ubyte.gz
  ln -s "$data/t10k-images-idx3-ubyte.gz" "$data/t10k-labels-idx1-ubyte.gz" tiny/
  run 0 --epochs 1 --batch 50 --data tiny --train-limit 150
  has out "^fmnist: 100 train / 200 test images (--train-limit 150 reduced to the set's 100), "
  run 0 --epochs 1 --batch 50 --data tiny --train-limit 150 --test-limit 20000
  has out "(--train-limit 150 and --test-limit 20000 reduced to the sets' sizes)"
  ;;
resume_settings)
  # a resume must repeat --batch and --train-limit; the refusal names the setting
  run 0 --epochs 1 --batch 100 --checkpoint ck
  run 2 --epochs 2 --batch 50 --resume ck --checkpoint ck
  lines err 1; has err "option --batch: checkpoint 'ck' was written with --batch 100, not 50"
  "$fmnist" --data "$data" --train-limit 500 --test-limit 200 --streams 1 --backend sync \
    --epochs 2 --batch 100 --resume ck --checkpoint ck >out 2>err
  [ $? = 2 ] || fail "another --train-limit was not refused"
  lines err 1; has err "option --train-limit: checkpoint 'ck' was trained on 1000 images"
  has err "resume with --train-limit 1000"
  run 0 --epochs 2 --batch 100 --resume ck --checkpoint ck
  has out "resumed from ck at step 10 (epoch 1)"; has out "epoch 2/2"
  grep -q "^final .*samples_per_s=[1-9]" out || fail "no training after the resume"
  run 0 --epochs 2 --batch 100 --resume ck --checkpoint ck # all done already: says so
  has out "already holds 2 epoch(s)"
  ;;
info_log)
  # TROUPE_LOG=info: streams and why, compile times and cache hits, timing split, merge path
  TROUPE_LOG=info run 0 --epochs 1 --checkpoint ck
  has err "1 stream(s) per rank: --streams"
  has err "compile .*: cache \(hit\|miss\)"
  has err "training routines compiled and linked"
  has err "epoch 1: training .* s = issuing steps"; has err "evaluation"; has err "checkpoint"
  has err "epoch 1 merge: 7 steps, one stream: no local merge; one rank: no allreduce"
  ;;
info_log_ranks)
  # under the launcher given: the merge across ranks and the path it took
  [ $# -gt 0 ] || fail "no launcher given"
  # shellcheck disable=SC2086 # $small is words
  TROUPE_LOG=info "$@" "$fmnist" $small --epochs 1 --streams 2 >out 2>err ||
    fail "the run failed"
  has err "epoch 1 merge: 7 steps, 2 streams merged by merge-buffer copies (a tree); across 2 ranks"
  has err "allreduce(s): .* through shared memory, .* bucket(s) over MPI"
  ;;
help_backends)
  # --help lists the built backends and --force; an unbuilt backend is named as such
  "$fmnist" --help >out 2>err || fail "--help failed"
  has out "one of the built backends: cpu, sync"; has out "--force"
  run 2 --backend bogus
  lines err 1; has err "option --backend: expected one of the built backends (cpu, sync"
  run 2 --force=yes
  has err "option --force takes no value"
  ;;
cnn_resume_model)
  # a checkpoint records its --model: resuming it as the other model is refused before
  # anything is built, naming both; the convnet resumes as itself
  run 0 --epochs 1 --train-limit 256 --checkpoint mlp.ck
  run 2 --epochs 2 --train-limit 256 --model cnn --resume mlp.ck
  lines err 1
  has err "option --model: checkpoint 'mlp.ck' was written by --model mlp, this run has --model cnn; resume with --model mlp"
  lacks out "epoch"
  run 0 --epochs 1 --train-limit 256 --model cnn --checkpoint cnn.ck
  has out "model cnn: conv3x3 1->32"
  run 2 --epochs 2 --train-limit 256 --resume cnn.ck
  has err "checkpoint 'cnn.ck' was written by --model cnn, this run has --model mlp"
  run 0 --epochs 2 --train-limit 256 --model cnn --resume cnn.ck --checkpoint cnn.ck
  has out "resumed from cnn.ck at step 2"; has out "epoch 2/2"
  ;;
cnn_repeat)
  # the convnet over 2 streams of the cpu backend: bitwise the same checkpoint twice
  for i in 1 2; do
    run 0 --epochs 1 --train-limit 384 --model cnn --backend cpu --streams 2 --checkpoint "ck$i"
  done
  cmp -s ck1 ck2 || fail "two runs of one layout wrote different checkpoints"
  ;;
data_layout)
  # each rank's share of the training set (the default) trains on the same batches as the whole
  # set: the same losses and checkpoint bytes, from a stderr line saying what the rank holds;
  # with a LAUNCHER, 2 ranks (and --grad-accum 2: a row per replica) against the whole set, and
  # each rank of 2 holds less than 1 rank
  # shellcheck disable=SC2086 # $small is words
  pair() { # pair NAME LAUNCH... : the whole set, then the share
    name=$1; shift
    for l in whole share; do
      "$@" "$fmnist" $small --epochs 2 --batch 100 --data-layout $l --checkpoint "$name.$l" \
        >"$name.$l.out" 2>"$name.$l.err" || { cp "$name.$l.out" out; cp "$name.$l.err" err; fail "$name $l: exit status $?"; }
      grep "^epoch" "$name.$l.out" | awk '{ print $6, $8 }' >"$name.$l.loss"
    done
    [ "$(wc -l <"$name.share.loss")" = 2 ] || fail "$name: not 2 epoch lines"
    cmp -s "$name.whole.loss" "$name.share.loss" || fail "$name: the share's losses differ from the whole set's"
    cmp -s "$name.whole" "$name.share" || fail "$name: the share's checkpoint differs from the whole set's"
  }
  resident() { sed -n "s/^data rank=$2 layout=$3 images=.* resident_bytes=\([0-9]*\)\$/\1/p" "$1"; }
  pair r1
  has r1.share.err "^data rank=0 layout=share images=1000 of 1000 minibatch_rows=1 resident_bytes=[0-9]*$"
  has r1.whole.err "^data rank=0 layout=whole images=1000 of 1000 minibatch_rows=10 resident_bytes="
  [ "$(resident r1.share.err 0 share)" -lt "$(resident r1.whole.err 0 whole)" ] ||
    fail "the share holds no less than the whole set"
  run 2 --data-layout half
  lines err 1; has err "option --data-layout: expected share or whole, got 'half'"
  if [ $# -gt 0 ]; then
    pair r2 "$@"
    for r in 0 1; do
      has r2.share.err "^data rank=$r layout=share images=500 of 1000 minibatch_rows=1 "
      [ "$(resident r2.share.err $r share)" -lt "$(resident r1.share.err 0 share)" ] ||
        fail "rank $r of 2 holds no less than 1 rank"
    done
    small="$small --grad-accum 2"
    pair a2 "$@"
    has a2.share.err "^data rank=1 layout=share images=500 of 1000 minibatch_rows=4 "
  fi
  ;;
precision)
  # --precision bf16 and fp16 (the linear layers' products on bfloat16 or half copies, fp32
  # sums; fp16 with dynamic loss scaling) on the cpu backend: 200 steps (12800 images, batch 64)
  # end within 2 % of fp32's loss, bitwise the same run to run; the start line and the
  # checkpoint's note name it; fp16's last line counts the skipped steps, and an overflow
  # injected at step 5 (TROUPE_FAULT) is one skipped step; a bad name is refused
  p200='--epochs 1 --train-limit 12800 --batch 64 --backend cpu'
  for r in fp32 bf16 bf16b fp16 fp16b; do
    # shellcheck disable=SC2086 # $p200 is words
    run 0 $p200 --precision "${r%b}" --checkpoint "ck_$r"
    cp out "$r.log"
  done
  has fp32.log "precision fp32"; has bf16.log "precision bf16"
  cmp -s ck_bf16 ck_bf16b || fail "two bf16 runs wrote different checkpoints"
  cmp -s ck_fp32 ck_bf16 && fail "bf16 and fp32 wrote the same checkpoint"
  grep -q "precision=bf16" ck_bf16 || fail "the checkpoint's note lacks precision=bf16"
  f=$(sed -n 's/.*epoch 1\/1 .* loss \([0-9.]*\) .*/\1/p' fp32.log)
  for r in bf16 fp16; do
    b=$(sed -n 's/.*epoch 1\/1 .* loss \([0-9.]*\) .*/\1/p' "$r.log")
    awk -v f="$f" -v b="$b" 'BEGIN { d = b - f; if (d < 0) d = -d; exit !(f > 0 && d <= 0.02 * f) }' ||
      fail "$r's loss '$b' is not within 2 % of fp32's '$f'"
  done
  has fp16.log "precision fp16"
  cmp -s ck_fp16 ck_fp16b || fail "two fp16 runs wrote different checkpoints"
  cmp -s ck_bf16 ck_fp16 && fail "bf16 and fp16 wrote the same checkpoint"
  grep -q "precision=fp16" ck_fp16 || fail "the checkpoint's note lacks precision=fp16"
  grep -q "^final .* skipped_steps=[0-9]* loss_scale=" fp16.log || fail "fp16's last line lacks skipped_steps"
  grep -q "skipped_steps" fp32.log && fail "fp32's last line has skipped_steps"
  TROUPE_FAULT=overflow:step=5 run 0 --epochs 1 --train-limit 640 --batch 64 --backend cpu --precision fp16
  has out "skipped_steps=1 loss_scale=32768"
  run 2 --precision fp8; has err "fp32, bf16 or fp16"
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
echo "ok ($case)"
