#!/bin/sh
# troupe — the trainer (examples/fmnist) with the optimizer state sharded (ZeRO stage 1): two
# ranks of one stream on this machine fuse the update into the shared-memory allreduce, where
# each rank keeps only its chunk of SGD's momentum or AdamW's moments current
# (transport/mpi/collective.h, troupe_coll_apply_t n_private); troupe_dp_save gathers the state
# first (TROUPE_COLL_UNSHARD). trainer_shard.sh FMNIST DATA_DIR WORK_DIR MPIEXEC LAUNCHER_ARGS...
# For each optimizer, the fused run must use shared memory and write the same checkpoint, byte
# for byte (parameters, optimizer state, CRC), as the unfused run (TROUPE_DP_FUSED_UPDATE=off:
# the optimizer routine on every rank, the state whole everywhere). A mid-run save
# (--checkpoint-every) gathers too, and training goes on sharded after it.
set -u
fmnist=$1 data=$2 work=$3
shift 3
mkdir -p "$work" && cd "$work" || exit 1
small="--data $data --train-limit 6000 --test-limit 1000 --epochs 1 --streams 1"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat out; echo "--- stderr"; cat err; exit 1; }
for opt in sgd adamw; do
  for mode in on off; do
    rm -f "ck_$mode"
    # shellcheck disable=SC2086 # word lists
    TROUPE_DP_FUSED_UPDATE=$mode TROUPE_LOG=debug:transport timeout -k 5 240 "$@" -n 2 "$fmnist" \
      $small --optimizer $opt --checkpoint "ck_$mode" --checkpoint-every 7 >out 2>err ||
      fail "$opt, fused update $mode: exit status $?"
    grep -q "^final test_accuracy=" out || fail "$opt, fused update $mode: no final line"
    [ -s "ck_$mode" ] || fail "$opt, fused update $mode: no checkpoint"
    [ "$mode" = off ] || grep -q "the update on each rank's chunk, its state private" err ||
      fail "$opt: the fused run did not update with private state through shared memory"
    [ "$mode" = off ] || grep -q "the private side arrays gathered" err ||
      fail "$opt: the fused run's saves did not gather the state through shared memory"
  done
  cmp -s ck_on ck_off || fail "$opt: the sharded run's checkpoint differs from the unfused run's"
  echo "$opt: the sharded run wrote the unfused run's checkpoint byte for byte"
done
