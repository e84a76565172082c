#!/usr/bin/env bash
# troupe — `troupe status` against live two-rank jobs (issue 17):
#   status.sh stall   TROUPE MPIEXEC ARGS... PROGRAM   rank 1 sleeps before allreduce #3 while
#                     rank 0 waits in it: the verdict names rank 1 and the collective (JSON and
#                     text; exit status 3); SIGUSR1 makes rank 0 log the same report;
#   status.sh kill    TROUPE MPIEXEC ARGS... PROGRAM   rank 1 is SIGKILLed: the report names it
#                     as not answering, its process gone;
#   status.sh trainer TROUPE MPIEXEC ARGS... FMNIST    the Fashion-MNIST trainer on two ranks,
#                     TROUPE_TIMEOUT_S=8: rank 1 is SIGSTOPped; `troupe status` names it as
#                     stopped; rank 0's deadline names rank 1 and the collective once at error
#                     level, logs the hang report once, and the teardown after it is quiet.
# PROGRAM is tests/mpi/test_status_ranks for stall and kill. The job runs in a private status
# directory (XDG_RUNTIME_DIR) under its own TROUPE_JOB_ID. Prints what it saw; exit 0 on pass.
set -u
mode=$1
troupe=$2
shift 2
work=$(mktemp -d /tmp/troupe-status-test-XXXXXX)
chmod 700 "$work"
export XDG_RUNTIME_DIR=$work/run
mkdir -m 700 "$XDG_RUNTIME_DIR"
export TROUPE_JOB_ID=status-$mode-$$
fail=0
job_pid=
fail() {
    echo "FAIL: $*"
    fail=1
}
cleanup() {
    [ -n "$job_pid" ] && kill -9 "$job_pid" 2>/dev/null
    for p in "${rank_pids[@]:-}"; do
        [ -n "$p" ] && kill -CONT "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

# Waits up to $2 seconds for file $1.
wait_file() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ -e "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# The pid of rank $1, from the job file.
rank_pid() {
    awk -v r="$1" '$1 == "rank" && $2 == r { print $4 }' "$XDG_RUNTIME_DIR/troupe/$TROUPE_JOB_ID/job"
}

# Runs troupe status (args: its options), keeping stdout in $out, the exit status in $rc and
# the time it took in $ms.
status() {
    local t0 t1
    t0=$(date +%s%N)
    out=$("$troupe" status --job "$TROUPE_JOB_ID" "$@" 2>&1)
    rc=$?
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    printf '%s\n' "--- troupe status $* (exit $rc, ${ms} ms):" "$out"
}

expect() { # expect WHAT NEEDLE: $out holds NEEDLE
    printf '%s\n' "$out" | grep -qF -- "$2" || fail "$1: '$2' not in the output"
}

rank_pids=()
case "$mode" in
stall | kill)
    "$@" "$mode" "$work" >"$work/job.out" 2>&1 &
    job_pid=$!
    wait_file "$work/waiting" 60 || fail "rank 0 never got where it waits"
    wait_file "$XDG_RUNTIME_DIR/troupe/$TROUPE_JOB_ID/job" 10 || fail "no job file"
    rank_pids=("$(rank_pid 0)" "$(rank_pid 1)")
    if [ "$mode" = stall ]; then
        sleep 1.5 # longer than a stalled wait's threshold (1 s)
        status --json
        [ "$rc" -eq 3 ] || fail "exit status $rc, expected 3 (a rank is stalled)"
        expect "json" '"behind": [1]'
        expect "json" '"collective": "allreduce #3"'
        expect "json" '"answered": 2'
        python3 -c 'import json,sys; json.loads(sys.stdin.read())' <<<"$out" ||
            fail "the JSON report does not parse"
        # every rank answers: the command ends with the answers, long before its timeout (the
        # bound is loose: start-up alone can take seconds on a loaded machine)
        status --timeout 60000
        expect "text" "verdict: rank 1 is behind in allreduce #3: it has issued 2 collective(s) (not yet #3)"
        expect "text" "waits on allreduce #3 (from rank 1)"
        echo "troupe status took ${ms} ms (the whole command)"
        [ "$ms" -lt 30000 ] || fail "troupe status took ${ms} ms with --timeout 60000: it waited for its timeout, not for the answers"
        kill -USR1 "${rank_pids[0]}"
        sleep 1
    else
        for ((i = 0; i < 100; i++)); do # rank 1 is gone (or a zombie)
            state=$(awk '{print $3}' "/proc/${rank_pids[1]}/stat" 2>/dev/null)
            [ -z "$state" ] || [ "$state" = Z ] && break
            sleep 0.1
        done
        status
        [ "$rc" -eq 3 ] || fail "exit status $rc, expected 3"
        expect "text" "rank 1 (pid ${rank_pids[1]}"
        expect "text" "NOT ANSWERING: no answer within 1000 ms: process ${rank_pids[1]} has exited"
        expect "text" "verdict: rank 1 does not answer"
    fi
    touch "$work/go"
    wait "$job_pid"
    jrc=$?
    job_pid=
    printf '%s\n' "--- the job (exit $jrc):" "$(cat "$work/job.out")"
    grep -q '^FAIL' "$work/job.out" && fail "the job reported a failed check"
    if [ "$mode" = stall ]; then
        [ "$jrc" -eq 0 ] || fail "the job exited $jrc"
        grep -q 'r0 .*status report (SIGUSR1):' "$work/job.out" || fail "no SIGUSR1 report from rank 0"
        grep -q 'r0 .*verdict: rank 1 is behind in allreduce #3' "$work/job.out" ||
            fail "the SIGUSR1 report does not name rank 1"
    fi
    ;;
trainer)
    # rank 0 must still wait in its collective when `troupe status` asks (1.5 s after the stop,
    # plus the command's start-up): its deadline leaves room for a loaded machine
    export TROUPE_TIMEOUT_S=8
    "$@" --epochs 200 --train-limit 20000 --test-limit 500 >"$work/job.out" 2>&1 &
    job_pid=$!
    wait_file "$XDG_RUNTIME_DIR/troupe/$TROUPE_JOB_ID/job" 60 || fail "no job file"
    rank_pids=("$(rank_pid 0)" "$(rank_pid 1)")
    for ((i = 0; i < 300; i++)); do # training has begun: both ranks issued collectives
        grep -q '^epoch 1/' "$work/job.out" && break
        sleep 0.1
    done
    kill -STOP "${rank_pids[1]}"
    sleep 1.5
    status
    [ "$rc" -eq 3 ] || fail "exit status $rc, expected 3"
    expect "text" "NOT ANSWERING: no answer within 1000 ms: process ${rank_pids[1]} is stopped"
    expect "text" "verdict: rank 1 is behind in allreduce #"
    for ((i = 0; i < 300; i++)); do # rank 0 fails by its deadline and the job ends
        kill -0 "${rank_pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    kill -CONT "${rank_pids[1]}" 2>/dev/null
    wait "$job_pid"
    jrc=$?
    job_pid=
    printf '%s\n' "--- the job (exit $jrc):" "$(cat "$work/job.out")"
    [ "$jrc" -ne 0 ] || fail "the job exited 0 although a rank was stopped"
    r0=$(grep -E '(^fmnist|r0 )' "$work/job.out")
    n=$(printf '%s\n' "$r0" | grep -cE 'error .* r0 .*rank 1 did not answer')
    [ "$n" -eq 1 ] || fail "rank 0 logged $n error lines naming rank 1 (expected exactly 1)"
    printf '%s\n' "$r0" | grep -qE '^fmnist: .*allreduce #[0-9]+: rank 1 did not answer' ||
        fail "the trainer's error does not name rank 1 and the collective"
    n=$(printf '%s\n' "$r0" | grep -c 'hang report (a deadline expired')
    [ "$n" -eq 1 ] || fail "rank 0 logged $n hang reports (expected 1)"
    printf '%s\n' "$r0" | grep -q 'verdict: rank 1 is behind' || fail "the hang report does not name rank 1"
    n=$(printf '%s\n' "$r0" | grep -E ' (warn|error) ' | grep -vE 'transport (r0 )?.*\| (  |hang report|cluster failed|allreduce #[0-9]+: no progress)' | wc -l)
    [ "$n" -eq 0 ] || fail "the teardown logged $n warning/error lines: $(printf '%s\n' "$r0" | grep -E ' (warn|error) ' | grep -vE 'transport (r0 )?.*\| (  |hang report|cluster failed|allreduce #[0-9]+: no progress)')"
    ;;
*)
    echo "usage: status.sh stall|kill|trainer TROUPE MPIEXEC ARGS... PROGRAM"
    exit 2
    ;;
esac
[ "$fail" -eq 0 ] && echo "PASS: status.sh $mode"
exit "$fail"
