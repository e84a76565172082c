#!/usr/bin/env bash
# troupe — two "hosts" on one machine for the cluster tests (tests/cluster/run.sh sources this).
#
# Each host is a network namespace with its own host name (a UTS namespace per process tree) and
# one interface, tr0, with a private address that exists only inside it: host a 10.213.0.1/24,
# host b 10.213.0.2/24. The hosts are joined either by one veth pair (cl_up), or (cl_up wire)
# through a third namespace, the "wire", where tests/cluster/wire.c forwards frames between two
# veth pairs with netem's delay, loss and partition (cl_wire_start, cl_cut, cl_heal). Jobs
# start on host a (cl_mpirun: deploy/mpirun.sh with a hostfile naming both addresses); Open MPI
# reaches host b through its plm_rsh_agent, a script that runs the orted command inside b's
# namespace (`ip netns exec`), and carries MPI over TCP on tr0 only (btl tcp,self: no shared
# memory between the hosts, although /dev/shm is one file system).
#
# Namespaces are named troupe-cl-<pid>-<random>-{a,b,w} (<pid>: the script that made them), so
# parallel runs never collide. They go away with everything running in them:
#   - on exit, INT or TERM of that script (trap, cl_down);
#   - when it is killed outright (CTest's timeout sends SIGKILL): a reaper detached from it
#     (setsid -f, so a kill of the script's process tree misses it) polls its pid and then
#     removes them (`netns.sh reap PID ID DIR`);
#   - at the start of any later run, namespaces whose script is gone (cl_reap_stale).
# Nothing is made outside them but a temporary directory (CL_DIR), removed alike: no address,
# route, qdisc or interface of this machine's own network changes.
#
# Functions: cl_preflight (why namespaces cannot be made here, "" when they can), cl_up [wire],
# cl_down, cl_reap_stale, cl_wire_start [wire options], cl_wire_stop, cl_wire_count, cl_cut,
# cl_heal, cl_mpirun NP LIMIT_S PROGRAM [ARGS...]. Variables: CL_A CL_B CL_W (namespaces),
# CL_DIR, CL_ROOT (the repository); CLUSTER_WIRE names the wire program (from CTest).

CL_PREFIX=troupe-cl
CL_NET=10.213.0
CL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CL_ROOT=$(cd "$CL_HERE/../.." && pwd)
CL_ID=""
CL_DIR=""
CL_WIRE_PID=""

# Removes the namespaces of run ID (every process in them first) and its directory DIR.
cl__remove() {
  local id=$1 dir=$2 ns pids
  for ns in "$id-a" "$id-b" "$id-w"; do
    [ -e "/run/netns/$ns" ] || [ -e "/var/run/netns/$ns" ] || continue
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086 # one pid per word
      kill -KILL $pids 2>/dev/null
      sleep 0.2
    done
    ip netns del "$ns" 2>/dev/null
  done
  [ -n "$dir" ] && rm -rf "$dir"
  return 0
}

# Why this machine cannot host the two namespaces ("" when it can): not root, no ip or unshare,
# no network namespaces, veth or UTS namespaces.
cl_preflight() {
  local probe=$CL_PREFIX-$$-probe-a err # a name cl_reap_stale knows, should this run die here
  command -v ip >/dev/null 2>&1 || { echo "no 'ip' command (iproute2)"; return; }
  command -v unshare >/dev/null 2>&1 || { echo "no 'unshare' command (util-linux)"; return; }
  command -v setsid >/dev/null 2>&1 || { echo "no 'setsid' command (util-linux)"; return; }
  command -v mpirun >/dev/null 2>&1 || { echo "no 'mpirun' (Open MPI)"; return; }
  if [ "$(id -u)" != 0 ]; then
    echo "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    return
  fi
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace: ${err:-ip netns add failed}"
    return
  fi
  if ! err=$(ip -n "$probe" link add p0 type veth peer name p1 2>&1); then
    echo "cannot create a veth pair: ${err:-ip link add failed}"
  elif ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then
    echo "cannot create a UTS namespace inside a network namespace: ${err:-unshare failed}"
  fi
  ip netns del "$probe" 2>/dev/null
}

# Removes the namespaces and directories of runs whose script no longer runs.
cl_reap_stale() {
  local ns pid rest id
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in "$CL_PREFIX"-[0-9]*-*-[abw]) ;; *) continue ;; esac
    rest=${ns#"$CL_PREFIX"-}
    pid=${rest%%-*}
    if kill -0 "$pid" 2>/dev/null && grep -qa cluster "/proc/$pid/cmdline" 2>/dev/null; then
      continue
    fi
    id=${ns%-[abw]}
    echo "netns.sh: removing $ns, left by a run that no longer runs (pid $pid)"
    cl__remove "$id" ""
    rm -rf "${TMPDIR:-/tmp}/$id".*
  done
}

# Tears down this run's cluster; safe to call twice.
cl_down() {
  [ -n "$CL_ID" ] || return 0
  cl__remove "$CL_ID" "$CL_DIR"
  CL_ID=""
  CL_WIRE_PID=""
}

# cl_up [wire]: makes the two hosts (and the wire's namespace), the agent and the hostfile.
cl_up() {
  local wire=${1:-}
  cl_reap_stale
  CL_ID=$CL_PREFIX-$$-$RANDOM
  CL_A=$CL_ID-a CL_B=$CL_ID-b CL_W=$CL_ID-w
  CL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$CL_ID.XXXXXX")
  trap cl_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  setsid -f bash "${BASH_SOURCE[0]}" reap "$$" "$CL_ID" "$CL_DIR" </dev/null >/dev/null 2>&1
  set -e
  ip netns add "$CL_A"
  ip netns add "$CL_B"
  if [ "$wire" = wire ]; then
    ip netns add "$CL_W"
    ip link add tr0 netns "$CL_A" type veth peer name wa netns "$CL_W"
    ip link add tr0 netns "$CL_B" type veth peer name wb netns "$CL_W"
    ip -n "$CL_W" link set wa up
    ip -n "$CL_W" link set wb up
  else
    ip link add tr0 netns "$CL_A" type veth peer name tr0 netns "$CL_B"
  fi
  ip -n "$CL_A" addr add "$CL_NET.1/24" dev tr0
  ip -n "$CL_B" addr add "$CL_NET.2/24" dev tr0
  local ns
  for ns in "$CL_A" "$CL_B"; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set tr0 up
  done
  set +e
  printf '%s.1 slots=64\n%s.2 slots=64\n' "$CL_NET" "$CL_NET" >"$CL_DIR/hosts"
  cat >"$CL_DIR/agent" <<EOF
#!/bin/sh
# Open MPI's plm_rsh_agent for this run: "agent HOST COMMAND..." runs COMMAND (an orted command
# line for a shell) on HOST: inside HOST's network namespace, under HOST's own host name.
host=\$1
shift
case \$host in
  $CL_NET.1) ns=$CL_A name=troupe-a ;;
  $CL_NET.2) ns=$CL_B name=troupe-b ;;
  *) echo "cluster agent: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && \$*"
EOF
  chmod +x "$CL_DIR/agent"
  echo "cluster: hosts troupe-a ($CL_NET.1, namespace $CL_A) and troupe-b ($CL_NET.2," \
    "namespace $CL_B)${wire:+, joined by a wire in $CL_W}"
}

# cl_wire_start [--delay-ms D] [--jitter-ms J] [--loss-pct P] [--seed S]: (re)starts the wire
# between the hosts; its output goes to $CL_DIR/wire.out.
cl_wire_start() {
  cl_wire_stop >/dev/null
  ip netns exec "$CL_W" "$CLUSTER_WIRE" wa wb "$@" >"$CL_DIR/wire.out" 2>&1 &
  CL_WIRE_PID=$!
  for _ in $(seq 50); do
    grep -q '^wire: up' "$CL_DIR/wire.out" 2>/dev/null && { cat "$CL_DIR/wire.out"; return 0; }
    kill -0 "$CL_WIRE_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: the wire did not start:"
  cat "$CL_DIR/wire.out"
  return 1
}

# Stops the wire and prints its counts (the lines "wire: X->Y: N forwarded, N lost, ..."; they
# stay in $CL_DIR/wire.out for cl_wire_count).
cl_wire_stop() {
  [ -n "$CL_WIRE_PID" ] || return 0
  kill -TERM "$CL_WIRE_PID" 2>/dev/null
  wait "$CL_WIRE_PID" 2>/dev/null
  CL_WIRE_PID=""
  grep -E '^wire: [^ ]+: [0-9]+ forwarded' "$CL_DIR/wire.out"
}

# cl_wire_count COLUMN: the wire's last count of COLUMN (lost, cut, ...), both ways together.
cl_wire_count() {
  grep -E '^wire: [^ ]+: [0-9]+ forwarded' "$CL_DIR/wire.out" |
    awk -v c="$1" '{ for (i = 4; i <= NF; i++) if ($i ~ "^" c) s += $(i - 1) } END { print s + 0 }'
}

cl_cut() { kill -USR1 "$CL_WIRE_PID"; }
cl_heal() { kill -USR2 "$CL_WIRE_PID"; }

# cl_mpirun NP LIMIT_S PROGRAM [ARGS...]: runs PROGRAM on NP ranks, alternately on host a and
# host b (rank r on host r mod 2), through deploy/mpirun.sh started on host a; killed after
# LIMIT_S seconds. Exit status: mpirun's (124 or 137 when the limit ended it).
cl_mpirun() {
  local np=$1 limit=$2
  shift 2
  OMPI_MCA_btl=tcp,self \
    OMPI_MCA_btl_tcp_if_include=tr0 \
    OMPI_MCA_oob_tcp_if_include=tr0 \
    OMPI_MCA_plm_rsh_agent="$CL_DIR/agent" \
    OMPI_MCA_rmaps_base_mapping_policy=node \
    OMPI_MCA_hwloc_base_binding_policy=none \
    timeout --kill-after=5 "$limit" \
    ip netns exec "$CL_A" unshare --uts sh -c 'hostname troupe-a && exec "$@"' sh \
    "$CL_ROOT/deploy/mpirun.sh" -np "$np" --hostfile "$CL_DIR/hosts" "$@"
}

# `netns.sh reap PID ID DIR`: waits until PID is gone, then removes run ID's namespaces and DIR.
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = reap ]; then
  while kill -0 "$2" 2>/dev/null; do
    sleep 1
  done
  cl__remove "$3" "$4"
  exit 0
fi
