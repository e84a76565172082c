#!/bin/sh
# troupe — ranks started with different trainer options (an MPMD launch, as a new user would
# try): trainer_disagree.sh FMNIST DATA_DIR WORK_DIR MPIEXEC LAUNCHER_ARGS...
# For --optimizer, --seed, --batch and --epochs, rank 1 differs from rank 0: both ranks must
# stop at start-up (well within TROUPE_TIMEOUT_S), each with the line naming the option and the
# ranks' values, and train nothing. --streams may differ (parallel/dp.h, Ranks that disagree):
# 2 + 1 streams train like 3 ranks of 1 stream (the same 3 replicas: the same losses and test
# accuracy) and the setup line says so.
set -u
fmnist=$1 data=$2 work=$3
shift 3
mkdir -p "$work" && cd "$work" || exit 1
small="--data $data --train-limit 3000 --test-limit 500 --backend sync --batch 120 --epochs 2"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat out; echo "--- stderr"; cat err; exit 1; }

for opt in "--optimizer sgd:--optimizer adamw:--optimizer: 'sgd' on rank 0, 'adamw' on rank 1" \
           "--seed 1:--seed 2:--seed: '1' on rank 0, '2' on rank 1" \
           "--batch 120:--batch 60:--batch: '120' on rank 0, '60' on rank 1" \
           "--epochs 2:--epochs 3:--epochs: '2' on rank 0, '3' on rank 1"; do
  a=${opt%%:*} rest=${opt#*:}
  b=${rest%%:*} want=${rest#*:}
  t0=$(date +%s)
  # shellcheck disable=SC2086 # word lists
  timeout -k 5 60 "$@" -n 1 "$fmnist" $small $a : -n 1 "$fmnist" $small $b >out 2>err
  rc=$? took=$(($(date +%s) - t0))
  [ "$rc" != 0 ] || fail "$a / $b: exit status 0"
  [ "$took" -lt 20 ] || fail "$a / $b: took $took s"
  line="^fmnist: checking the options across ranks: dp_agree: the ranks disagree on the run's settings: .*$want"
  grep -q -- "$line" err || fail "$a / $b: no rank named the option ('$want')"
  ! grep -q "^epoch" out || fail "$a / $b: a rank trained"
  # again with mpiexec's abort on the first non-zero exit off (then mpiexec itself exits 0):
  # every rank reports
  # shellcheck disable=SC2086
  timeout -k 5 60 "$@" --mca orte_abort_on_non_zero_status 0 -n 1 "$fmnist" $small $a : \
    -n 1 "$fmnist" $small $b >out 2>err
  n=$(grep -c -- "$line" err)
  [ "$n" = 2 ] || fail "$a / $b: $n rank(s) of 2 named the option ('$want')"
  ! grep -q "^epoch" out || fail "$a / $b: a rank trained"
  echo "ok: $a / $b refused on both ranks in $took s"
done

# different --streams: allowed
# shellcheck disable=SC2086
timeout -k 5 120 "$@" -n 1 "$fmnist" $small --streams 2 : -n 1 "$fmnist" $small --streams 1 \
  >out 2>err || fail "2 + 1 streams: the run failed"
grep -q "2 rank(s), 3 replicas (2 stream(s) on rank 0) on sync, batch 120 (40 per replica)" out ||
  fail "2 + 1 streams: the setup line does not describe the layout"
cp out het.out
# shellcheck disable=SC2086
timeout -k 5 120 "$@" -n 3 "$fmnist" $small --streams 1 >out 2>err || fail "3 ranks: the run failed"
cp out ref.out
# the epoch losses within 0.002, the final accuracies within one test image in 250
awk '$1 == "epoch" { print $6 }' het.out >het.loss
awk '$1 == "epoch" { print $6 }' ref.out >ref.loss
paste het.loss ref.loss | awk '{ n++; d = $1 - $2; if (d > 0.002 || d < -0.002) bad = 1 }
  END { exit !(n == 2 && !bad) }' ||
  { cat het.out ref.out; fail "2 + 1 streams: the losses differ from 3 ranks x 1 stream"; }
a1=$(sed -n 's/^final test_accuracy=\([0-9.]*\).*/\1/p' het.out)
a2=$(sed -n 's/^final test_accuracy=\([0-9.]*\).*/\1/p' ref.out)
awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; exit !(a != "" && d <= 0.004 && d >= -0.004) }' ||
  fail "2 + 1 streams: test accuracy $a1, 3 ranks x 1 stream: $a2"
echo "ok: 2 + 1 streams train like 3 x 1 (accuracy $a1 and $a2)"
