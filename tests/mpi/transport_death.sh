#!/usr/bin/env bash
# troupe — runs a dead/stuck-rank test under mpiexec and checks its outcome
# (tests/mpi/test_transport_death.c):
#   transport_death.sh <limit_s> <mpiexec> <args...>
# Passes when the run ends within <limit_s> seconds (it is killed at the limit), with a
# non-zero exit status (the program leaves the cluster and calls MPI_Abort(3)), and rank 0's output holds
# "DEADLINE_EXCEEDED", "rank 1" and "did not answer".
set -u
limit=$1
shift
start=$(date +%s)
out=$(timeout --kill-after=5 "$limit" "$@" 2>&1)
rc=$?
elapsed=$(($(date +%s) - start))
printf '%s\n' "$out"
echo "transport_death.sh: exit status $rc after ${elapsed} s (limit ${limit} s)"
fail=0
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 -a "$elapsed" -ge "$limit" ]; then
    echo "FAIL: the run did not end within ${limit} s"
    fail=1
elif [ "$rc" -eq 0 ]; then
    echo "FAIL: mpiexec exited 0; expected a non-zero status (rank 0 aborts the job with 3)"
    fail=1
fi
rank0=$(printf '%s\n' "$out" | grep '^rank 0: ')
for needle in "DEADLINE_EXCEEDED" "rank 1" "did not answer"; do
    if ! printf '%s\n' "$rank0" | grep -q -- "$needle"; then
        echo "FAIL: rank 0's report does not contain '$needle'"
        fail=1
    fi
done
# TROUPE_DEATH_EXPECT: a line the run's output must also hold (a TROUPE_FAULT's own report).
if [ -n "${TROUPE_DEATH_EXPECT:-}" ] && ! printf '%s\n' "$out" | grep -qF -- "$TROUPE_DEATH_EXPECT"; then
    echo "FAIL: the output does not contain '$TROUPE_DEATH_EXPECT'"
    fail=1
fi
if printf '%s\n' "$out" | grep -q '^FAIL'; then
    echo "FAIL: the program reported a failed check"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "PASS: the dead/stuck rank was reported and the job ended with a failure status"
exit "$fail"
