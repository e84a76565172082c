#!/usr/bin/env bash
# troupe — the two-host cluster tests (CTest label `cluster`, tests/cluster/CMakeLists.txt): jobs
# of 2 and 4 ranks across two network namespaces (tests/cluster/netns.sh), MPI over TCP
# between them.
#
#   run.sh mpi NP PROGRAM [ARGS...]     a multi-rank test program (tests/mpi/) across the hosts:
#                                       exit 0, a PASS line per rank, and every rank logs that
#                                       the ranks span several nodes (shared-memory allreduce
#                                       off: the hosts share this machine's /dev/shm, yet they
#                                       are two nodes)
#   run.sh train NP FMNIST DATA_DIR     the trainer on a clean wire, then on a wire with 2 ms
#                                       (+0..2 ms) of delay and 0.5 % loss each way: both reach
#                                       test accuracy >= 0.6, the wire did drop frames, and the
#                                       two checkpoints are the same bytes (merges unchanged);
#                                       the clean run's update is fused into the overlapped
#                                       buckets and its optimizer state sharded (ZeRO-1 across
#                                       the hosts: the sums through MPI, each rank's shard
#                                       updated, the parameters gathered); with NP 2, once more
#                                       with the fused update off (the whole state on every
#                                       rank): the clean run holds at most 0.55 of its bytes
#                                       per rank, and writes the same checkpoint bytes
#   run.sh gpt NP GPT                   `gpt train` (examples/gpt: L=2 NH=2 C=32, T=16, global
#                                       batch 4, 20 steps) on one rank outside the cluster, then
#                                       on NP ranks across it on a clean wire and on the
#                                       impaired one: every loss of the cluster runs within
#                                       relative 1e-5 of the one rank's, and the clean and
#                                       impaired runs print the same losses and write the same
#                                       model bytes
#   run.sh partition NP MODE PARTITION  tests/cluster/partition.c in MODE gate or stream: the
#                                       wire is cut once every rank is connected (gate) or
#                                       streams allreduces (stream); every rank
#                                       reports the other host's ranks within TROUPE_TIMEOUT_S
#                                       (4) + 2 s probe + 3 s from the cut; the wire is then
#                                       restored and the job ends, non-zero (the ranks exit 3),
#                                       within 30 s
#   run.sh partition 2 behind PARTITION no cut: rank 0 waits in an allreduce that rank 1 never
#                                       issues, rank 1 in a receive that rank 0 never sends;
#                                       each must name the other as alive but not at the
#                                       collective ("answered a liveness probe but did not
#                                       reach"), within the same bound
#   run.sh teardown                     a run killed with SIGKILL (as CTest's timeout does)
#                                       leaves no namespace, process or directory behind, and
#                                       namespaces of dead runs are removed at the next start
#
# CLUSTER_WIRE names the wire program (tests/cluster/wire.c). Each mpirun is bounded
# (`timeout`), below the CTest TIMEOUT, so the script cleans up itself in every case.
# Exit status: 0 pass, 1 fail, 77 skipped (the reason printed: no namespaces here).
set -u
# shellcheck source-path=SCRIPTDIR source=netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

fail=0
s_fail() {
  echo "FAIL: $*"
  fail=1
}

# Prints file $1 and fails on any FAIL line in it.
s_show() {
  cat "$1"
  if grep -q '^FAIL' "$1"; then
    s_fail "the program reported a failed check (FAIL lines above)"
  fi
}

# s_count FILE REGEX: number of lines of FILE matching REGEX.
s_count() { grep -c -E -- "$2" "$1" 2>/dev/null || true; }

s_now() { date +%s.%N; }
s_since() { awk -v a="$1" -v b="$(s_now)" 'BEGIN { printf "%.1f", b - a }'; }

case_mpi() {
  local np=$1
  shift
  cl_up
  local out=$CL_DIR/out t0 rc
  t0=$(s_now)
  TROUPE_LOG=info:transport cl_mpirun "$np" 150 "$@" >"$out" 2>&1
  rc=$?
  s_show "$out"
  echo "run.sh: mpirun exited $rc after $(s_since "$t0") s"
  [ "$rc" -eq 0 ] || s_fail "mpirun exited $rc, expected 0"
  local pass nodes
  pass=$(s_count "$out" '^PASS rank')
  nodes=$(s_count "$out" 'shared-memory allreduce off: the ranks span several nodes')
  [ "$pass" -eq "$np" ] || s_fail "$pass PASS lines, expected one per rank ($np)"
  [ "$nodes" -eq "$np" ] ||
    s_fail "$nodes of $np ranks logged that the ranks span several nodes"
}

# s_train NP LABEL CKPT FMNIST DATA: one short training run; prints its accuracy.
s_train() {
  local np=$1 label=$2 ckpt=$3 fmnist=$4 data=$5 out t0 rc acc
  out=$CL_DIR/train-$label.out
  t0=$(s_now)
  cl_mpirun "$np" 200 "$fmnist" --data "$data" --train-limit 2000 --test-limit 1000 --epochs 2 \
    --streams 1 --seed 7 --checkpoint "$ckpt" >"$out" 2>&1
  rc=$?
  s_show "$out"
  echo "run.sh: $label run: mpirun exited $rc after $(s_since "$t0") s"
  [ "$rc" -eq 0 ] || s_fail "$label run: mpirun exited $rc, expected 0"
  acc=$(sed -n 's/^final test_accuracy=\([0-9.]*\) .*/\1/p' "$out")
  if [ -z "$acc" ]; then
    s_fail "$label run: no 'final test_accuracy=' line"
  elif ! awk -v a="$acc" 'BEGIN { exit !(a >= 0.6) }'; then
    s_fail "$label run: test accuracy $acc < 0.6"
  fi
}

case_train() {
  local np=$1 fmnist=$2 data=$3
  if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
    echo "SKIP: no Fashion-MNIST in $data (package dataset-fashion-mnist)"
    exit 77
  fi
  cl_up wire
  cl_wire_start || exit 1
  export TROUPE_LOG=info:tools # the trainer's optimizer_state_bytes= line
  s_train "$np" clean "$CL_DIR/clean.ckpt" "$fmnist" "$data"
  cl_wire_stop
  cl_wire_start --delay-ms 2 --jitter-ms 2 --loss-pct 0.5 --seed 3 || exit 1
  s_train "$np" impaired "$CL_DIR/impaired.ckpt" "$fmnist" "$data"
  local lost
  cl_wire_stop
  lost=$(cl_wire_count lost)
  [ "$lost" -gt 0 ] || s_fail "the impaired wire dropped no frame: the test proved nothing"
  if [ -s "$CL_DIR/clean.ckpt" ] && [ -s "$CL_DIR/impaired.ckpt" ]; then
    if cmp "$CL_DIR/clean.ckpt" "$CL_DIR/impaired.ckpt"; then
      echo "run.sh: the checkpoints are bitwise equal ($(stat -c %s "$CL_DIR/clean.ckpt") bytes)"
    else
      s_fail "the checkpoint after delay and loss differs from the clean run's"
    fi
  else
    s_fail "a run wrote no checkpoint"
  fi
  [ "$np" -eq 2 ] || return 0
  cl_wire_start || exit 1
  export TROUPE_DP_FUSED_UPDATE=off
  s_train "$np" unsharded "$CL_DIR/unsharded.ckpt" "$fmnist" "$data"
  unset TROUPE_DP_FUSED_UPDATE
  cl_wire_stop
  local whole half
  whole=$(sed -n 's/.*optimizer_state_bytes=\([0-9]*\).*/\1/p' "$CL_DIR/train-unsharded.out" | head -n 1)
  half=$(sed -n 's/.*optimizer_state_bytes=\([0-9]*\).*/\1/p' "$CL_DIR/train-clean.out" | head -n 1)
  if [ -z "$whole" ] || [ -z "$half" ] || [ $((half * 100)) -gt $((whole * 55)) ]; then
    s_fail "optimizer state per rank: ${half:-?} bytes sharded, ${whole:-?} whole: not sharded"
  else
    echo "run.sh: optimizer state per rank: $half bytes sharded, $whole whole"
  fi
  cmp "$CL_DIR/clean.ckpt" "$CL_DIR/unsharded.ckpt" ||
    s_fail "the unsharded run's checkpoint differs from the sharded clean run's"
}

# s_gpt LABEL GPT ARGS...: `gpt train` on the tiny model in $CL_DIR (its losses into
# $CL_DIR/LABEL.loss, its model into $CL_DIR/LABEL.bin), run by ARGS (a launcher, or nothing).
s_gpt() {
  local label=$1 gpt=$2 out rc t0
  shift 2
  out=$CL_DIR/gpt-$label.out
  t0=$(s_now)
  "$@" "$gpt" train --model "$CL_DIR/m.bin" --data "$CL_DIR/t_train.bin" --batch 4 --seq 16 \
    --steps 20 --lr 1e-3 --weight-decay 0.01 --streams 1 --backend cpu \
    --save "$CL_DIR/$label.bin" >"$out" 2>&1
  rc=$?
  grep -v '^step=' "$out"
  echo "run.sh: gpt $label run: exited $rc after $(s_since "$t0") s"
  [ "$rc" -eq 0 ] || { cat "$out"; s_fail "gpt $label run: exited $rc, expected 0"; }
  grep '^step=' "$out" >"$CL_DIR/$label.loss"
  [ "$(wc -l <"$CL_DIR/$label.loss")" -eq 20 ] ||
    s_fail "gpt $label run: $(wc -l <"$CL_DIR/$label.loss") step lines, expected 20"
}

case_gpt() {
  local np=$1 gpt=$2 lost
  cl_up wire
  # a shard of ~13 kB of text and the tiny model, as examples/gpt/test_train.sh makes them
  awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d: the quick brown fox %d jumps.\n", i, (i * i) % 97 }' \
    >"$CL_DIR/text.txt"
  "$gpt" data --text "$CL_DIR/text.txt" --out-dir "$CL_DIR" --name t --val-fraction 0.1 >/dev/null &&
    "$gpt" init --layers 2 --heads 2 --channels 32 --max-seq 16 --vocab 256 --seed 5 \
      --out "$CL_DIR/m.bin" >/dev/null || { s_fail "gpt data/init failed"; return; }
  s_gpt one "$gpt" timeout --kill-after=5 200
  cl_wire_start || exit 1
  s_gpt clean "$gpt" cl_mpirun "$np" 200
  cl_wire_stop
  cl_wire_start --delay-ms 2 --jitter-ms 2 --loss-pct 0.5 --seed 3 || exit 1
  s_gpt impaired "$gpt" cl_mpirun "$np" 200
  cl_wire_stop
  lost=$(cl_wire_count lost)
  [ "$lost" -gt 0 ] || s_fail "the impaired wire dropped no frame: the test proved nothing"
  grep -q "ranks=$np " "$CL_DIR/gpt-clean.out" || s_fail "the clean run's final line lacks ranks=$np"
  awk -v a="$CL_DIR/one.loss" -v b="$CL_DIR/clean.loss" 'BEGIN {
      while ((getline la <a) > 0) {
        if ((getline lb <b) <= 0) { print "fewer lines in " b; exit 1 }
        split(la, pa, /[= ]/); split(lb, pb, /[= ]/)
        d = pa[4] - pb[4]; if (d < 0) d = -d
        if (pa[2] != pb[2] || !(d <= 1e-5 * pa[4])) { print "step " pa[2] ": " pa[4] " against " pb[4]; exit 1 }
        if (d > worst) worst = d
        n++
      }
      if (n != 20) { print n " steps compared"; exit 1 }
      printf "run.sh: largest loss difference, 1 rank against the cluster: %g over %d steps\n", worst, n
    }' || s_fail "the cluster's losses are not within relative 1e-5 of one rank's"
  cmp -s "$CL_DIR/clean.loss" "$CL_DIR/impaired.loss" ||
    s_fail "the losses after delay and loss differ from the clean run's"
  cmp -s "$CL_DIR/clean.bin" "$CL_DIR/impaired.bin" ||
    s_fail "the model after delay and loss differs from the clean run's"
}

case_partition() {
  local np=$1 mode=$2 prog=$3
  local timeout_s=4 bound t0 t_cut rc reported=0 took
  bound=$((timeout_s + 2 + 3))
  cl_up wire
  cl_wire_start || exit 1
  local out=$CL_DIR/out dir=$CL_DIR/partition
  mkdir "$dir"
  t0=$(s_now)
  TROUPE_TIMEOUT_S=$timeout_s cl_mpirun "$np" 120 "$prog" "$mode" "$dir" >"$out" 2>&1 &
  local job=$!
  local ready=': connected$'
  [ "$mode" = stream ] && ready=': streaming$'
  for _ in $(seq 600); do
    [ "$(s_count "$out" "$ready")" -ge "$np" ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$(s_count "$out" "$ready")" -lt "$np" ]; then
    s_fail "not every rank printed '$ready' within 60 s"
  else
    [ "$mode" = stream ] && sleep 0.5 # into the stream, past the allreduce that printed it
    [ "$mode" != behind ] && cl_cut
    t_cut=$(s_now)
    : >"$dir/cut"
    if [ "$mode" = behind ]; then
      echo "run.sh: every rank is connected $(s_since "$t0") s after the start; the wire stays up"
    else
      echo "run.sh: the wire is cut $(s_since "$t0") s after the start"
    fi
    # The ranks across the cut write their reports to files: their output reaches mpirun only
    # through the wire.
    for _ in $(seq $(((bound + 10) * 10))); do
      reported=$(find "$dir" -name 'report.[0-9]*' | wc -l)
      [ "$reported" -ge "$np" ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    took=$(s_since "$t_cut")
    echo "run.sh: $reported of $np ranks reported, the last $took s after the cut (or gate):"
    cat "$dir"/report.[0-9]* 2>/dev/null
    [ "$reported" -ge "$np" ] || s_fail "only $reported of $np ranks reported the partition"
    awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t <= b) }' ||
      s_fail "the reports took $took s from the cut, more than $bound s"
  fi
  cl_heal
  : >"$dir/end"
  local t_heal
  t_heal=$(s_now)
  for _ in $(seq 300); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$job" 2>/dev/null; then
    s_fail "mpirun did not end within 30 s after the wire was restored"
  fi
  wait "$job"
  rc=$?
  echo "run.sh: mpirun exited $rc, $(s_since "$t_heal") s after the wire was restored and the" \
    "ranks were let go; its output:"
  s_show "$out"
  cl_wire_stop
  if [ "$mode" != behind ] && [ "$(cl_wire_count cut)" -eq 0 ]; then
    s_fail "the wire dropped no frame while cut: the test proved nothing"
  fi
  case $rc in
    0) s_fail "mpirun exited 0; the ranks were to leave with status 3" ;;
    124 | 137) s_fail "mpirun ran into its time limit" ;;
  esac
}

# The reaper at work: a run of this script that holds a cluster is killed with SIGKILL.
case_teardown() {
  local dir state holder id cldir left
  dir=$(mktemp -d "${TMPDIR:-/tmp}/troupe-cl-teardown.XXXXXX")
  state=$dir/state
  bash "${BASH_SOURCE[0]}" hold "$state" >"$dir/hold.out" 2>&1 &
  holder=$!
  for _ in $(seq 100); do
    [ -s "$state" ] && break
    sleep 0.1
  done
  if [ ! -s "$state" ]; then
    cat "$dir/hold.out"
    s_fail "the holding run did not set its cluster up"
    kill -KILL "$holder" 2>/dev/null
    rm -rf "$dir"
    return
  fi
  read -r id cldir <"$state"
  echo "run.sh: run $holder holds $id (a process sleeps in each host); killing it with SIGKILL"
  kill -KILL "$holder"
  wait "$holder" 2>/dev/null
  for _ in $(seq 100); do
    left=$(ip netns list | awk '{print $1}' | grep -c -- "^$id-" || true)
    [ "$left" -eq 0 ] && [ ! -e "$cldir" ] && break
    sleep 0.1
  done
  [ "$left" -eq 0 ] || s_fail "$left namespaces of $id left 10 s after the kill"
  [ ! -e "$cldir" ] || s_fail "$cldir left 10 s after the kill"
  pgrep -f "sleep 3600 $id" >/dev/null && s_fail "a process of $id still runs"
  echo "run.sh: the reaper removed $id"

  # A namespace left by a run that no longer runs (a dead pid) goes at the next start.
  sh -c 'exit 0' &
  local dead=$!
  wait "$dead"
  local stale=$CL_PREFIX-$dead-1-a
  ip netns add "$stale" || { s_fail "cannot create $stale"; rm -rf "$dir"; return; }
  cl_reap_stale
  if ip netns list | awk '{print $1}' | grep -qx -- "$stale"; then
    s_fail "$stale (pid $dead is gone) was not removed"
    ip netns del "$stale"
  fi
  rm -rf "$dir"
}

# Used by case_teardown: sets a wired cluster up, starts a process in each host, writes
# "ID DIR" to STATE and waits to be killed.
case_hold() {
  cl_up wire
  ip netns exec "$CL_A" sleep 3600 "$CL_ID" &
  ip netns exec "$CL_B" sleep 3600 "$CL_ID" &
  echo "$CL_ID $CL_DIR" >"$1.tmp" && mv "$1.tmp" "$1"
  sleep 60
}

what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in
  mpi | train | gpt | partition | teardown) ;;
  hold) case_hold "$@"; exit 0 ;;
  *)
    echo "usage: run.sh mpi NP PROGRAM [ARGS...] | train NP FMNIST DATA_DIR | gpt NP GPT |"
    echo "       partition NP gate|stream PARTITION | teardown"
    exit 2
    ;;
esac
why=$(cl_preflight)
if [ -n "$why" ]; then
  echo "SKIP: the two-host cluster needs network namespaces: $why"
  exit 77
fi
t_start=$(s_now)
case "$what" in
  mpi) case_mpi "$@" ;;
  train)
    [ -x "${CLUSTER_WIRE:-}" ] || { echo "FAIL: CLUSTER_WIRE is not the wire program"; exit 1; }
    case_train "$@"
    ;;
  gpt)
    [ -x "${CLUSTER_WIRE:-}" ] || { echo "FAIL: CLUSTER_WIRE is not the wire program"; exit 1; }
    case_gpt "$@"
    ;;
  partition)
    [ -x "${CLUSTER_WIRE:-}" ] || { echo "FAIL: CLUSTER_WIRE is not the wire program"; exit 1; }
    case_partition "$@"
    ;;
  teardown) case_teardown ;;
esac
cl_down
echo "run.sh: $what: $([ "$fail" -eq 0 ] && echo PASS || echo FAIL) after $(s_since "$t_start") s"
exit "$fail"
