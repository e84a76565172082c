#!/bin/sh
# troupe — the trainer (examples/fmnist) with the optimizer state sharded (ZeRO stage 1): two
# ranks of one stream on this machine fuse the update into the shared-memory allreduce, where
# each rank allocates and updates only its shard of SGD's momentum or AdamW's moments
# (parallel/dp_zero.c; transport/mpi/collective.h, troupe_coll_apply_t shard); troupe_dp_save
# gathers the shards in gradient order. trainer_shard.sh FMNIST DATA_DIR WORK_DIR MPIEXEC
# LAUNCHER_ARGS...
# For each optimizer, the sharded run must update through shared memory, hold at most 0.55x the
# optimizer-state bytes of the unsharded run (TROUPE_DP_FUSED_UPDATE=off: the optimizer routine
# on every rank, the state whole everywhere; the trainer logs optimizer_state_bytes= at
# info:tools), and write the same checkpoint, byte for byte (parameters, optimizer
# state, CRC). A mid-run save (--checkpoint-every) gathers too, and training goes on sharded
# after it. AdamW once more without shared memory (the path across nodes: a reduce-scatter of the
# shards, then the parameters' gather): the same bytes. AdamW on two streams per rank (the passes
# across the streams merge, the allreduce updates the shard): at most 0.55x the state bytes, and
# the unsharded two-stream run's checkpoint byte for byte. Then the sharded checkpoint resumes
# sharded and unsharded: the same bytes after.
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
    TROUPE_DP_FUSED_UPDATE=$mode TROUPE_LOG=debug:transport,parallel,tools timeout -k 5 240 "$@" -n 2 \
      "$fmnist" $small --optimizer $opt --checkpoint "ck_$mode" --checkpoint-every 7 >out 2>err ||
      fail "$opt, fused update $mode: exit status $?"
    grep -q "^final test_accuracy=" out || fail "$opt, fused update $mode: no final line"
    [ -s "ck_$mode" ] || fail "$opt, fused update $mode: no checkpoint"
    [ "$mode" = off ] || grep -q "the update on each rank's chunk, its state private" err ||
      fail "$opt: the fused run did not update with private state through shared memory"
    [ "$mode" = off ] || grep -q "optimizer state sharded (ZeRO-1)" err ||
      fail "$opt: the fused run did not shard its optimizer state"
    bytes=$(sed -n 's/.*optimizer_state_bytes=\([0-9]*\).*/\1/p' err | head -n 1)
    [ -n "$bytes" ] && [ "$bytes" -gt 0 ] || fail "$opt, fused update $mode: no optimizer_state_bytes"
    eval "bytes_$mode=$bytes"
  done
  cmp -s ck_on ck_off || fail "$opt: the sharded run's checkpoint differs from the unfused run's"
  echo "$opt: the sharded run wrote the unfused run's checkpoint byte for byte"
  # shellcheck disable=SC2154 # set by the eval above
  [ $((bytes_on * 100)) -le $((bytes_off * 55)) ] ||
    fail "$opt: sharded optimizer state $bytes_on bytes per rank, over 0.55x the unsharded $bytes_off"
  echo "$opt: optimizer_state_bytes per rank: sharded $bytes_on, unsharded $bytes_off"
done
# Without shared memory (TROUPE_COLL_SHM=0, as across nodes): each rank receives its shard's sums
# by a reduce-scatter, updates its shard and gathers the parameters with MPI_Iallgatherv: the
# same checkpoint again.
rm -f ck_mpi
# shellcheck disable=SC2086 # word lists
TROUPE_COLL_SHM=0 TROUPE_LOG=debug:parallel,transport timeout -k 5 240 "$@" -n 2 "$fmnist" $small \
  --optimizer adamw --checkpoint ck_mpi --checkpoint-every 7 >out 2>err ||
  fail "adamw without shared memory: exit status $?"
grep -q "optimizer state sharded (ZeRO-1)" err || fail "adamw without shared memory: not sharded"
grep -q "a reduce-scatter of the shards" err ||
  fail "adamw without shared memory: the sums did not come by the reduce-scatter"
cmp -s ck_mpi ck_off || fail "adamw without shared memory: the checkpoint differs from the unfused run's"
echo "adamw: sharded through MPI (reduce-scatter), the unfused run's checkpoint byte for byte"
# Two streams per rank: sharded (the passes across the streams, the update in the allreduce)
# against unsharded (the optimizer routine): the same checkpoint, about half the state bytes.
two=$(echo "$small" | sed 's/--streams 1/--streams 2/')
for mode in on off; do
  rm -f "ck2_$mode"
  # shellcheck disable=SC2086 # word lists
  TROUPE_DP_FUSED_UPDATE=$mode TROUPE_LOG=debug:parallel,tools timeout -k 5 240 "$@" -n 2 \
    "$fmnist" $two --optimizer adamw --checkpoint "ck2_$mode" >out 2>err ||
    fail "adamw, 2 streams, fused update $mode: exit status $?"
  [ "$mode" = off ] || grep -q "optimizer state sharded (ZeRO-1)" err ||
    fail "adamw, 2 streams: the run did not shard its optimizer state"
  bytes=$(sed -n 's/.*optimizer_state_bytes=\([0-9]*\).*/\1/p' err | head -n 1)
  [ -n "$bytes" ] && [ "$bytes" -gt 0 ] || fail "adamw, 2 streams, $mode: no optimizer_state_bytes"
  eval "bytes2_$mode=$bytes"
done
cmp -s ck2_on ck2_off || fail "adamw, 2 streams: the sharded checkpoint differs from the unsharded one"
# shellcheck disable=SC2154 # set by the eval above
[ $((bytes2_on * 100)) -le $((bytes2_off * 55)) ] ||
  fail "adamw, 2 streams: sharded state $bytes2_on bytes per rank, over 0.55x the unsharded $bytes2_off"
echo "adamw, 2 x 2 streams: sharded $bytes2_on bytes per rank, unsharded $bytes2_off; the same checkpoint"
# The sharded AdamW checkpoint resumed sharded (each rank slices its shard from the file) and
# unsharded (the state whole on every rank): one more epoch gives the same bytes.
for mode in on off; do
  cp ck_on "rs_$mode"
  # shellcheck disable=SC2086 # word lists
  TROUPE_DP_FUSED_UPDATE=$mode timeout -k 5 240 "$@" -n 2 "$fmnist" $small --epochs 2 \
    --optimizer adamw --resume "rs_$mode" --checkpoint "rs_$mode" >out 2>err ||
    fail "resume, fused update $mode: exit status $?"
done
cmp -s rs_on rs_off || fail "the sharded resume's checkpoint differs from the unsharded resume's"
echo "adamw: resumed sharded and unsharded from the sharded checkpoint: the same bytes"
