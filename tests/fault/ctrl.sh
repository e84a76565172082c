#!/usr/bin/env bash
# troupe — TROUPE_FAULT on the control plane (base/fault_impl.h: ctrl:drop, ctrl:delay=MS; the
# status actor, transport/zmq/status.c, asks troupe__fault_ctrl before it answers a request):
#   ctrl.sh TROUPE MPIEXEC ARGS... PROGRAM
# PROGRAM is tests/mpi/test_status_ranks in its stall mode (rank 1 holds back a collective until
# the script lets it go). Expected outcomes:
#   ctrl:drop:rank=1       `troupe status` gets no answer from rank 1 (alive and running), names
#                          it as not answering within its timeout, and ends in time; the job
#                          itself is unaffected (it ends with status 0: control-plane messages
#                          never carry training data);
#   ctrl:delay=1500:rank=1 with --timeout 1000 rank 1 does not answer in time; with --timeout
#                          15000 it answers late (the command takes >= 1.5 s) and the verdict
#                          names it behind in allreduce #3; the job ends with status 0.
# Rank 1 logs the fault's first drop or delay.
set -u
troupe=$1
shift
launch=("$@")
work=$(mktemp -d /tmp/troupe-ctrl-test-XXXXXX)
chmod 700 "$work"
export XDG_RUNTIME_DIR=$work/run
mkdir -m 700 "$XDG_RUNTIME_DIR"
fail=0
job_pid=
fail() {
    echo "FAIL: $*"
    fail=1
}
cleanup() {
    [ -n "$job_pid" ] && kill -9 "$job_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

wait_file() { # FILE SECONDS
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ -e "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

status() { # troupe status OPTIONS...: sets $out, $rc, $ms
    local t0 t1
    t0=$(date +%s%N)
    out=$(env -u TROUPE_FAULT "$troupe" status --job "$TROUPE_JOB_ID" "$@" 2>&1)
    rc=$?
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    printf '%s\n' "--- troupe status $* (exit $rc, ${ms} ms):" "$out"
}
expect() { printf '%s\n' "$out" | grep -qF -- "$2" || fail "$1: '$2' not in the output"; }

run() { # FAULT: starts the job with FAULT and waits until rank 0 waits in allreduce #3
    rm -f "$work/waiting" "$work/go"
    export TROUPE_JOB_ID=ctrl-$$-$RANDOM
    TROUPE_FAULT=$1 "${launch[@]}" stall "$work" >"$work/job.out" 2>&1 &
    job_pid=$!
    wait_file "$work/waiting" 60 || fail "$1: rank 0 never got where it waits"
    wait_file "$XDG_RUNTIME_DIR/troupe/$TROUPE_JOB_ID/job" 10 || fail "$1: no job file"
    sleep 1.2 # past a stalled wait's threshold (1 s)
}
finish() { # FAULT: lets the job go and checks that it ended well
    touch "$work/go"
    wait "$job_pid"
    local jrc=$?
    job_pid=
    printf '%s\n' "--- the job (exit $jrc):" "$(cat "$work/job.out")"
    [ "$jrc" -eq 0 ] || fail "$1: the job exited $jrc (a control-plane fault must not end it)"
    grep -q '^FAIL' "$work/job.out" && fail "$1: the job reported a failed check"
    grep -qF "TROUPE_FAULT '$1'" "$work/job.out" || fail "$1: rank 1 did not log the fault"
}

# ctrl:drop
run ctrl:drop:rank=1
pid1=$(awk '$1 == "rank" && $2 == 1 { print $4 }' "$XDG_RUNTIME_DIR/troupe/$TROUPE_JOB_ID/job")
status --timeout 1000
[ "$rc" -eq 3 ] || fail "drop: exit status $rc, expected 3"
expect "drop" "NOT ANSWERING: no answer within 1000 ms"
expect "drop" "rank 1 (pid $pid1"
[ -n "$(awk '{print $3}' "/proc/$pid1/stat" 2>/dev/null)" ] || fail "drop: rank 1 is not alive"
# in time: its 1 s, not the job's deadline (60 s); loose, start-up alone can take seconds on a
# loaded machine
[ "$ms" -lt 15000 ] || fail "drop: troupe status took $ms ms"
status --timeout 3000 # still nothing, however long one waits
expect "drop, 3 s" "NOT ANSWERING: no answer within 3000 ms"
finish ctrl:drop:rank=1

# ctrl:delay
run ctrl:delay=1500:rank=1
status --timeout 1000
expect "delay, 1 s" "NOT ANSWERING: no answer within 1000 ms"
status --timeout 15000 --json # ends once both answered: about 1.5 s, more on a loaded machine
[ "$rc" -eq 3 ] || fail "delay: exit status $rc, expected 3 (rank 1 is behind)"
expect "delay, 15 s" '"answered": 2'
expect "delay, 15 s" '"behind": [1]'
[ "$ms" -ge 1500 ] || fail "delay: the answer took $ms ms, less than the 1500 ms delay"
finish ctrl:delay=1500:rank=1
[ "$fail" -eq 0 ] && echo "PASS: ctrl.sh"
exit "$fail"
