#!/bin/sh
# troupe — elastic runs: `troupe run` with the Fashion-MNIST trainer (tests/mpi/elastic.cmake runs
# one case per CTest test; docs/cluster.md "Failures and restarts").
# usage: elastic.sh TROUPE FMNIST DATA_DIR WORK_DIR CASE
#   bitwise     2 ranks, rank 1 SIGKILLed in the middle of step 25's merge (TROUPE_FAULT), between
#               the checkpoints of steps 21 and 28; troupe run restarts from step 21 and the final
#               checkpoint equals an uninterrupted run's, byte for byte (parameters, optimizer
#               state, step, position)
#   other_ranks the same failure, and the hostfile shrinks to 1 slot meanwhile: the restart runs
#               on 1 rank (--min-np 1) and ends within 0.5 points of the uninterrupted accuracy
#   stalled     rank 1 stalls in step 25's merge: the ranks' waits end at their deadline
#               (TROUPE_TIMEOUT_S=4) and the trainer exits 75 (the cluster failed); troupe run restarts and the result is again the
#               uninterrupted run's, byte for byte
#   exhausted   rank 1 dies in every attempt: after --max-restarts 1 the run gives up with a
#               summary and the job's non-zero status
#   min_np      the hostfile shrinks below --min-np: no restart, the failure's status
#   tempfail    a job exiting 75 (EX_TEMPFAIL) is restarted, from the start when no checkpoint
#               exists; a usage error (status 2) is not restarted
#   watchdog    --timeout ends a hung attempt: status 124, "watchdog"
#   launch      --dry-run's command lines (mpiexec on one machine, with a hostfile, srun under
#               Slurm) and troupe run's usage errors
set -u
troupe=$1 fmnist=$2 data=$3 work=$4 case=$5
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
export TROUPE_LOG=warn
# 20 steps per epoch, 2 epochs; a checkpoint every 7 steps and at step 20 (the epoch's end)
train="$fmnist --data $data --train-limit 2000 --test-limit 2000 --streams 1 --batch 100
  --epochs 2 --checkpoint-every 7"

fail() {
  echo "FAIL ($case): $*"
  for f in out err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
lacks() { ! grep -q -- "$2" "$1" || fail "$1 has '$2'"; }
accuracy() { sed -n 's/^final test_accuracy=\([0-9.]*\).*/\1/p' "$1" | tail -n 1; }

# The failure: TROUPE_FAULT (base/fault_impl.h) armed on the first launch only (TROUPE_RESUME
# empty), or on every launch with FAULT_ALWAYS=1; with SHRINK set, rank 1 also rewrites the
# hostfile then (a node leaving the job while it runs: the next attempt reads the file again).
# A kill in the middle of step k's merge is armed at the number of its collective, which the
# reference run's transport log tells (TROUPE_LOG=debug:transport: rank 0's k+1-th "allreduce
# #N: 6 tensors", the gradients of the 6 parameters), so the test does not depend on how many
# collectives the trainer issues before its first step.
cat >first.sh <<'EOF'
#!/bin/sh
if [ -z "${TROUPE_RESUME:-}" ] || [ "${FAULT_ALWAYS:-0}" = 1 ]; then
  export TROUPE_FAULT="$FAULT"
  if [ -n "${SHRINK:-}" ] && [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
    echo "$SHRINK" >hostfile
  fi
fi
exec "$@"
EOF
chmod +x first.sh
merge_of_step() {
  n=$(sed -n 's/.* r0 .*allreduce #\([0-9]*\): 6 tensors.*/\1/p' ref.err | sed -n "$(($1 + 1))p")
  [ -n "$n" ] && echo "kill:rank=1:collective=$n"
}

# The uninterrupted reference: troupe run without a failure (no summary, status 0).
reference() {
  # shellcheck disable=SC2086 # $train is words
  TROUPE_LOG=debug:transport "$troupe" run -np 2 -- $train --checkpoint ref >ref.out 2>ref.err ||
    fail "the uninterrupted run failed: $(cat ref.err)"
  lacks ref.err "summary"
  grep -q "^final " ref.out || fail "the uninterrupted run printed no final line"
}

case $case in
bitwise)
  reference
  # shellcheck disable=SC2086
  fault=$(merge_of_step 25) || fail "no merge of step 25 in the reference run's transport log"
  FAULT=$fault "$troupe" run -np 2 --max-restarts 2 -- ./first.sh $train \
    --checkpoint ck >out 2>err
  rc=$?
  [ "$rc" = 0 ] || fail "troupe run exited $rc"
  has err "TROUPE_FAULT '$fault': killing this process"
  has err "restart 1/2: rank 1 died (signal 9"
  has err "resuming from step 21 (ck) on 2 rank(s)"
  has out "resumed from ck at step 21 (epoch 1, sample 100)"
  has err "summary: 2 attempt(s), 1 restart(s)"
  grep -q "attempt 1: 2 rank(s) from the start.*rank 1 died (signal 9, Killed) at step 2[5-7]; last checkpoint at step 21: [4-6] step(s) redone" err ||
    fail "the summary does not say where attempt 1 failed and what was redone"
  has err "attempt 2: 2 rank(s) from step 21.*completed"
  cmp ref ck || fail "the resumed run's final checkpoint differs from the uninterrupted run's"
  echo "PASS: rank 1 killed in step 25's merge, restarted from step 21; final checkpoint identical"
  ;;
stalled)
  reference
  # shellcheck disable=SC2086
  fault=$(merge_of_step 25) || fail "no merge of step 25 in the reference run's transport log"
  fault=$(echo "$fault" | sed 's/^kill/stall/'):ms=60000
  FAULT=$fault TROUPE_TIMEOUT_S=4 "$troupe" run -np 2 -- \
    ./first.sh $train --checkpoint ck >out 2>err
  rc=$?
  [ "$rc" = 0 ] || fail "troupe run exited $rc"
  has err "TROUPE_FAULT '$fault'"
  has err "restart 1/3: rank [01] reported a failure of the cluster (exit status 75)"
  has err "resuming from step 21 (ck) on 2 rank(s)"
  cmp ref ck || fail "the resumed run's final checkpoint differs from the uninterrupted run's"
  echo "PASS: a stalled rank: exit 75, restarted, final checkpoint identical"
  ;;
other_ranks)
  reference
  echo "localhost slots=2" >hostfile
  # with a hostfile troupe run adds no MCA settings: keep this machine's MPI on loopback
  # shellcheck disable=SC2086
  fault=$(merge_of_step 25) || fail "no merge of step 25 in the reference run's transport log"
  FAULT=$fault SHRINK="localhost slots=1" OMPI_MCA_btl=self,vader \
    OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 \
    "$troupe" run -np 2 --min-np 1 --hostfile hostfile -- ./first.sh $train --checkpoint ck \
    >out 2>err
  rc=$?
  [ "$rc" = 0 ] || fail "troupe run exited $rc"
  has err "restart 1/3: rank 1 died (signal 9"
  has err "resuming from step 21 (ck) on 1 rank(s)"
  has err "attempt 2: 1 rank(s) from step 21"
  has out "written by 2 rank(s) x 1 stream(s) (2 replicas), this run has 1 x 1 (1)"
  want=$(accuracy ref.out) got=$(accuracy out)
  [ -n "$want" ] && [ -n "$got" ] || fail "no final accuracy (reference '$want', resumed '$got')"
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
    fail "accuracy $got after resuming on 1 rank, $want uninterrupted: more than 0.5 points apart"
  echo "PASS: resumed on 1 rank: accuracy $got, uninterrupted $want"
  ;;
exhausted)
  # shellcheck disable=SC2086
  FAULT=kill:rank=1:step=3 FAULT_ALWAYS=1 "$troupe" run -np 2 --max-restarts 1 -- ./first.sh \
    $train --checkpoint ck >out 2>err
  rc=$?
  [ "$rc" != 0 ] || fail "troupe run exited 0 although every attempt failed"
  [ "$rc" = 137 ] || fail "exit status $rc, expected the job's 137 (rank 1's SIGKILL)"
  has err "restart 1/1: rank 1 died (signal 9"
  has err "attempt 2: rank 1 died (signal 9, Killed); giving up after 1 restart(s) (--max-restarts 1)"
  has err "summary: 2 attempt(s), 1 restart(s) (--max-restarts 1)"
  has err "attempt 1: 2 rank(s) from the start.*at step [2-4]; no checkpoint: from step 0: [2-4] step(s) redone"
  has err "restart 1/1: .*no checkpoint yet: starting over on 2 rank(s)"
  has err "work redone: [4-8] step(s) in all"
  lacks err "restart 2/"
  echo "PASS: gave up after 1 restart with status $rc and a summary"
  ;;
min_np)
  echo "localhost slots=2" >hostfile
  # shellcheck disable=SC2086
  FAULT=kill:rank=1:step=3 SHRINK="localhost slots=1" OMPI_MCA_btl=self,vader \
    OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 \
    "$troupe" run -np 2 --hostfile hostfile -- ./first.sh $train --checkpoint ck >out 2>err
  rc=$?
  [ "$rc" = 137 ] || fail "exit status $rc, expected the failed attempt's 137"
  has err "only 1 rank(s) available (the slots of hostfile hostfile), fewer than --min-np 2"
  has err "summary: 1 attempt(s), 1 restart(s)"
  lacks err "attempt 2:"
  echo "PASS: no restart below --min-np"
  ;;
tempfail)
  # first attempt: status 75 (a cluster failure, as the trainer reports one); then success
  "$troupe" run -np 2 --checkpoint none.ck -- sh -c \
    'if [ ! -e marker ]; then sleep 0.2; touch marker; exit 75; fi; echo "resume=[$TROUPE_RESUME]"' \
    >out 2>err
  rc=$?
  [ "$rc" = 0 ] || fail "troupe run exited $rc"
  has err "restart 1/3: .*failure of the cluster (exit status 75)"
  has err "no checkpoint yet: starting over on 2 rank(s)"
  has out "resume=\[\]"
  # a usage error of the program is not restarted: its status, one attempt
  # shellcheck disable=SC2086
  "$troupe" run -np 2 -- $train --checkpoint ck --batch 7 >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit status $rc, expected the trainer's 2"
  has err "not restarted"
  lacks err "attempt 2:"
  echo "PASS: 75 restarted, 2 not"
  ;;
watchdog)
  start=$(date +%s)
  "$troupe" run -np 1 --timeout 2 --max-restarts 0 -- sleep 60 >out 2>err
  rc=$? elapsed=$(($(date +%s) - start))
  [ "$rc" = 124 ] || fail "exit status $rc, expected 124"
  [ "$elapsed" -lt 30 ] || fail "the watchdog took ${elapsed} s"
  has err "watchdog: the attempt ran past --timeout 2 s"
  has err "attempt 1: 1 rank(s) from the start, .*watchdog: still running after 2 s"
  echo "PASS: the watchdog ended the attempt after ${elapsed} s"
  ;;
launch)
  "$troupe" run -np 3 --dry-run -- prog --checkpoint ck a >out 2>err || fail "--dry-run failed"
  has out "mpiexec -n 3 --mca btl self,vader --mca oob_tcp_if_include lo --oversubscribe"
  has out "-x TROUPE_RESUME -x TROUPE_PROGRESS_FILE"
  has out " prog --checkpoint ck a$"
  "$troupe" run -np 2 --hostfile hf --dry-run -- prog >out 2>err || fail "--dry-run failed"
  has out "mpiexec -n 2 --hostfile hf"
  lacks out "oob_tcp_if_include"
  SLURM_JOB_ID=7 "$troupe" run -np 4 --dry-run -- prog x >out 2>err || fail "--dry-run failed"
  has out "^srun -n 4 --kill-on-bad-exit=1 prog x$"
  for bad in "run" "run -np 0 -- p" "run -np 2 --min-np 3 -- p" "run -np 2" \
    "run -np 2 --bogus 1 -- p" "run -np 2 --timeout x -- p"; do
    # shellcheck disable=SC2086
    "$troupe" $bad >out 2>err
    [ $? = 2 ] || fail "'troupe $bad' did not exit 2"
    [ "$(wc -l <err)" = 1 ] || fail "'troupe $bad': not one line on stderr"
  done
  "$troupe" run --help >out 2>err || fail "--help failed"
  has out "usage: troupe run -np N"
  # a program that is not there, or not executable: 127 and one line naming it, before any
  # launch; through a hostfile (not checked here), the launcher's words map to 127 too
  for bad in ./no-such-prog no-such-prog-on-path /etc/passwd; do
    "$troupe" run -np 1 -- "$bad" >out 2>err
    st=$?
    [ $st = 127 ] || fail "troupe run of '$bad' exited $st, not 127"
    [ "$(wc -l <err)" = 1 ] || fail "troupe run of '$bad': not one line on stderr"
    has err "troupe run: cannot run '$bad': "
  done
  echo "localhost slots=1" >hf
  "$troupe" run -np 1 --hostfile hf -- ./no-such-prog >out 2>err
  st=$?
  [ $st = 127 ] || fail "troupe run --hostfile of a missing program exited $st, not 127"
  has err "the ranks could not start the program './no-such-prog' (not found or not executable"
  echo "PASS: launch commands, usage errors, a missing program"
  ;;
*)
  fail "unknown case"
  ;;
esac
