#!/bin/sh
# troupe — tests of `troupe doctor` (tools/troupe/tests.cmake runs one case per CTest test):
# every check passing, and each check made to fail on purpose: a failing, a missing and a hung
# compiler, an unwritable cache directory, a missing and a corrupt data set, a rank without a
# GPU, a rank with another TROUPE_FUSION_BYTES (an MPMD launch), a rank that does not answer, a
# rank that never starts MPI, ranks in different PID namespaces (no shared memory), a failing
# compiler on one rank.
# usage: test_doctor.sh TROUPE DATA_DIR WORK_DIR CASE [MPIEXEC LAUNCHER_ARGS...]
# Exit status: 0 pass, 1 fail, 77 skipped (the reason on stdout).
set -u
troupe=$1 data=$2 work=$3 case=$4
shift 4
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
export TMPDIR="$dir" # the compile check's private cache, kept here when it fails

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
skip() { echo "SKIP ($case): $*"; exit 77; }
# run EXPECTED_STATUS COMMAND...: output in ./out and ./err, seconds taken in $took
run() {
  want=$1; shift
  t0=$(date +%s)
  "$@" >out 2>err
  got=$?
  took=$(($(date +%s) - t0))
  [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
lacks() { ! grep -q -- "$2" "$1" || fail "$1 has '$2'"; }
# every line is a check's or the summary, each check exactly once
well_formed() {
  bad=$(grep -v -E '^((PASS|FAIL|SKIP) (compiler|cache|data|gpu|agreement|shared-memory|mpi): .+|summary: [0-9]+ pass, [0-9]+ fail, [0-9]+ skip)$' out)
  [ -z "$bad" ] || fail "malformed line(s): $bad"
  for c in compiler cache data gpu agreement shared-memory mpi; do
    [ "$(grep -c -E "^(PASS|FAIL|SKIP) $c: " out)" = 1 ] || fail "check $c is not reported once"
  done
  fails=$(grep -c '^FAIL' out)
  has out "fail, "
  grep -q "^summary: [0-9]* pass, $fails fail" out || fail "the summary does not count $fails failure(s)"
  # a failure says how to fix it
  ! grep '^FAIL' out | grep -v -q '; fix: ' || fail "a FAIL line has no fix hint"
}
# the gpu line this build must print (troupe info tells whether the cuda backend is built)
gpu_expected() {
  if "$troupe" info 2>/dev/null | grep -q '^backends:.* cuda'; then
    echo '^\(PASS\|SKIP\) gpu: '
  else
    echo '^SKIP gpu: .*\(not built\|without CUDA\)'
  fi
}
slow_cc() { printf '#!/bin/sh\nsleep 20\n' >slowcc && chmod +x slowcc; }
mpi_setup() {
  [ $# -ge 1 ] || skip "no MPI launcher given (a build without MPI)"
  mpiexec=$1; shift
  launcher="$*"
}

case $case in
pass)
  run 0 "$troupe" doctor --data "$data"
  well_formed
  has out "^PASS compiler: '.*' compiled and loaded a routine through the cpu backend"
  has out "^PASS cache: '$TROUPE_CACHE_DIR' is writable"
  has out "^PASS data: '$data': 60000 training and 10000 test images"
  has out "$(gpu_expected)"
  for c in agreement shared-memory mpi; do has out "^SKIP $c: one process"; done
  has out "^summary: 3 pass, 0 fail, 4 skip"
  [ -z "$(ls -d troupe-doctor-* 2>/dev/null)" ] || fail "the compile check left its directory"
  ;;
usage)
  run 2 "$troupe" doctor --bogus; has err "unknown option '--bogus'"
  run 2 "$troupe" doctor --timeout 0; has err "option --timeout"
  run 2 "$troupe" doctor --timeout x; has err "got 'x'"
  run 2 "$troupe" doctor --data; has err "needs a value"
  run 0 "$troupe" doctor --help; has out "usage: troupe doctor"
  ;;
compiler_fails)
  CC=false run 1 "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL compiler: 'false .*C compiler 'false' failed (exit 1)"
  has out "fix: install a C compiler"
  has out "^PASS cache: "; has out "^PASS data: " # the other checks still run
  ;;
compiler_missing)
  CC=/nonexistent/cc run 1 "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL compiler: .*C compiler '/nonexistent/cc' not found"
  ;;
compiler_hangs)
  slow_cc
  CC=$dir/slowcc run 1 "$troupe" doctor --data "$data" --timeout 2
  well_formed
  has out "^FAIL compiler: the C compiler did not finish within 2 s (hung)"
  [ "$took" -lt 15 ] || fail "took $took s with --timeout 2"
  # the next checks ran, with the cache setting restored after the compile check
  has out "^PASS cache: '$TROUPE_CACHE_DIR' is writable"; has out "^PASS data: "
  ;;
cache_unwritable)
  : >file # as root a mode does not stop a write: a file where a directory must be does
  TROUPE_CACHE_DIR=$dir/file/cache run 1 "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL cache: cannot create '$dir/file/cache'"; has out "Not a directory"
  has out "fix: set TROUPE_CACHE_DIR to a writable directory"
  has out "^PASS compiler: " # compiles in a private directory: independent of the cache
  ;;
data_missing)
  run 1 "$troupe" doctor --data "$dir/nowhere"
  well_formed
  has out "^FAIL data: $dir/nowhere/train-images-idx3-ubyte.gz: cannot open: No such file"
  has out "apt-get install dataset-fashion-mnist"
  ;;
data_corrupt)
  mkdir d
  for f in train-images-idx3 train-labels-idx1 t10k-images-idx3 t10k-labels-idx1; do
    cp "$data/$f-ubyte.gz" d/ || fail "cannot copy $data/$f-ubyte.gz"
  done
  printf '\000\000\010\002\000\000\000\001' | gzip >d/t10k-labels-idx1-ubyte.gz
  run 1 "$troupe" doctor --data "$dir/d"
  well_formed
  has out "^FAIL data: $dir/d/t10k-labels-idx1-ubyte.gz: bad magic 0x00000802 (expected 0x00000801"
  printf '\000\000\010' | gzip >d/t10k-labels-idx1-ubyte.gz
  run 1 "$troupe" doctor --data "$dir/d"
  has out "^FAIL data: .*t10k-labels-idx1-ubyte.gz: truncated: 3 of the header's 8 bytes"
  ;;
pass_np2)
  mpi_setup "$@"
  # shellcheck disable=SC2086 # $launcher is words
  run 0 "$mpiexec" -n 2 $launcher "$troupe" doctor --data "$data"
  well_formed # rank 0 alone prints: one line per check
  has out "^PASS compiler: 2 ranks pass"; has out "^PASS data: 2 ranks pass"
  has out "$(gpu_expected)"
  has out "^PASS agreement: 2 ranks share troupe "
  has out "^PASS shared-memory: 2 rank(s) with a peer on their node"
  has out "^PASS mpi: 1 MiB from rank 0 to every rank and from rank 1 to every rank, bytes checked"
  ;;
fusion_np2)
  mpi_setup "$@"
  # MPMD: rank 1 alone gets another fusion bucket size
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher -n 1 "$troupe" doctor --data "$data" \
    : -n 1 -x TROUPE_FUSION_BYTES=1048576 "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL agreement: TROUPE_FUSION_BYTES (the fusion bucket size.*) differs: '67108864' on rank 0, '1048576' on rank 1; fix: "
  # the doctor's own collectives still agree: the other cross-rank checks ran
  has out "^PASS mpi: "; has out "^PASS shared-memory: "
  ;;
compiler_np2)
  mpi_setup "$@"
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher -n 1 "$troupe" doctor --data "$data" \
    : -n 1 -x CC=false "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL compiler: rank 1: 'false .*failed (exit 1)"
  lacks out "rank 0: 'cc"
  has out "^FAIL agreement: CC (the C compiler of generated code) differs: 'cc' on rank 0, 'false' on rank 1"
  ;;
hung_rank_np2)
  mpi_setup "$@"
  slow_cc
  # rank 1 is stuck in its compiler far past rank 0's deadline: rank 0 names it, in bounded time
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher -n 1 "$troupe" doctor --data "$data" --timeout 2 \
    : -n 1 -x CC="$dir/slowcc" "$troupe" doctor --data "$data" --timeout 30
  well_formed
  has out "^FAIL mpi: rank 0: .*DEADLINE_EXCEEDED: .*rank 1 did not answer within 4 s"
  has out "^SKIP agreement: needs the exchange between ranks"
  has out "^PASS compiler: rank 0: "
  [ "$took" -lt 25 ] || fail "took $took s with --timeout 2"
  ;;
mpi_init_np2)
  mpi_setup "$@"
  # rank 1 never starts MPI: rank 0's MPI_Init cannot finish; its watchdog ends it with a FAIL
  # line after --timeout + 10 s
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher -n 1 "$troupe" doctor --data "$data" --timeout 2 : -n 1 sleep 60
  has out "^FAIL mpi: starting MPI (troupe_cluster_init) did not finish within 12 s (hung); fix: every rank must get there"
  [ "$took" -lt 40 ] || fail "took $took s with --timeout 2"
  ;;
shm_np2)
  mpi_setup "$@"
  unshare --pid --fork --mount-proc true 2>/dev/null ||
    skip "cannot make a PID namespace here (unshare --pid needs privileges)"
  # rank 1 in a PID namespace of its own: the ranks cannot reach each other's /proc/<pid>/fd
  # (Open MPI's single-copy shared memory would fail alike: it is turned off)
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher --mca btl_vader_single_copy_mechanism none \
    -n 1 "$troupe" doctor --data "$data" \
    : -n 1 unshare --pid --fork --mount-proc "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL shared-memory: rank [01] cannot map rank [01]'s memory: "
  has out "fix: the ranks of a node must share a PID namespace"
  has out "^PASS mpi: " # MPI itself still works
  # with shared memory turned off on every rank, the check has nothing to vouch for
  # shellcheck disable=SC2086
  TROUPE_COLL_SHM=0 run 0 "$mpiexec" $launcher --mca btl_vader_single_copy_mechanism none \
    -n 1 "$troupe" doctor --data "$data" \
    : -n 1 unshare --pid --fork --mount-proc "$troupe" doctor --data "$data"
  has out "^SKIP shared-memory: TROUPE_COLL_SHM=0 on every rank"
  ;;
gpu_np2)
  mpi_setup "$@"
  "$troupe" info 2>/dev/null | grep -q '^backends:.* cuda' || skip "the cuda backend is not built"
  "$troupe" info 2>/dev/null | grep -q '^backend.cuda.devices: [1-9]' || skip "no GPU visible"
  # shellcheck disable=SC2086
  run 1 "$mpiexec" $launcher -n 1 "$troupe" doctor --data "$data" \
    : -n 1 -x CUDA_VISIBLE_DEVICES= "$troupe" doctor --data "$data"
  well_formed
  has out "^FAIL gpu: rank 0: local rank 0 of 2 sees [1-9]"
  has out "rank 1: local rank 1 sees no GPU"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case)"
