#!/bin/sh
# check_accuracy.sh MIN COMMAND [ARGS...]
# Runs COMMAND (the fmnist trainer, possibly under mpiexec), echoes its output, and succeeds
# when it exited 0 and its `final test_accuracy=<a> ...` line reports a >= MIN. Used by the
# CTest integration test fmnist_train_np2 (examples/fmnist/CMakeLists.txt).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 MIN COMMAND [ARGS...]" >&2
    exit 2
fi
min=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
    echo "check_accuracy: the trainer exited with status $rc" >&2
    exit 1
fi
final=$(printf '%s\n' "$out" | grep '^final test_accuracy=' | tail -n 1)
if [ -z "$final" ]; then
    echo "check_accuracy: no 'final test_accuracy=' line in the output" >&2
    exit 1
fi
acc=$(printf '%s\n' "$final" | sed 's/^final test_accuracy=\([0-9.]*\).*/\1/')
if awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a + 0 >= m + 0) }'; then
    echo "check_accuracy: test accuracy $acc >= $min"
    exit 0
fi
echo "check_accuracy: test accuracy $acc is below $min" >&2
exit 1
