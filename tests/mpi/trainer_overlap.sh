#!/bin/sh
# troupe — the trainer (examples/fmnist) with each gradient bucket's allreduce overlapping the
# rest of the backward pass (parallel/dp.h, Overlap): trainer_overlap.sh FMNIST DATA_DIR
# WORK_DIR MPIEXEC LAUNCHER_ARGS... Two ranks of 2 streams train one epoch with
# TROUPE_DP_OVERLAP=off and =on (which auto does not choose on this 2-core machine): the
# run with overlap must say it split the MLP's gradient routine into 3 segments (one per
# layer's backward) and must write the same checkpoint, byte for byte (parameters, optimizer
# state, CRC), as the unsplit run; the unsplit run must say it is unsplit.
set -u
fmnist=$1 data=$2 work=$3
shift 3
mkdir -p "$work" && cd "$work" || exit 1
small="--data $data --train-limit 6000 --test-limit 1000 --epochs 1 --streams 2"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat out; echo "--- stderr"; cat err; exit 1; }
for mode in off on; do
  rm -f "ck_$mode"
  # shellcheck disable=SC2086 # word lists
  TROUPE_DP_OVERLAP=$mode TROUPE_DP_BUCKET_BYTES=1 TROUPE_LOG=debug:parallel timeout -k 5 240 "$@" -n 2 "$fmnist" $small \
    --checkpoint "ck_$mode" >out 2>err || fail "overlap $mode: exit status $?"
  grep -q "^final test_accuracy=" out || fail "overlap $mode: no final line"
  [ -s "ck_$mode" ] || fail "overlap $mode: no checkpoint"
  [ "$mode" = on ] || grep -q "dp: overlap off (1 segments" err ||
    fail "overlap off: no line says it runs unsplit"
done
grep -q "dp: overlap on (3 segments" err || fail "overlap on: no line says it split in 3 segments"
cmp -s ck_off ck_on || fail "the checkpoints with and without overlap differ"
echo "overlap on (3 segments) wrote the unsplit run's checkpoint byte for byte"
