#!/usr/bin/env bash
# troupe — runs a troupe program (by default the Fashion-MNIST trainer) on several MPI ranks with
# Open MPI's mpirun.
#
# Usage: deploy/mpirun.sh [-np N | --hostfile FILE] [--dry-run] [--] [PROGRAM] [ARGS...]
#
#   -np N, -n N        number of ranks. Default: 2 on this machine; with --hostfile (or inside a
#                      multi-node Slurm allocation) mpirun's default, one rank per slot.
#   --hostfile FILE    run on the hosts of FILE (Open MPI format: `node1 slots=4`).
#   --dry-run          print the mpirun command, one word per line, and exit (builds nothing).
#   -h, --help         this text.
#   PROGRAM [ARGS...]  the program and its arguments. When the first word after the options does
#                      not start with '-', it is the program; otherwise (or when there is none)
#                      the program is build/examples/fmnist/fmnist and every remaining word is an
#                      argument of it: any option `fmnist --help` lists (--data, --epochs,
#                      --batch, --optimizer, --lr, --momentum, --weight-decay, --schedule, --seed,
#                      --backend, --streams, --compress, --train-limit, --test-limit, --curve,
#                      --plot, --checkpoint, --checkpoint-every, --resume, --force). Option
#                      parsing stops at the first word that is not one of the options above.
#
# Examples:
#   deploy/mpirun.sh -np 2 -- --epochs 3 --curve build/fmnist-curve.csv
#   deploy/mpirun.sh --hostfile hosts.txt -- --epochs 10 --streams 8
#   deploy/mpirun.sh -np 2 build/tests/mpi/some_test
#
# Building: when the program is the default trainer and it is missing, this installs what is
# missing and builds into build/ first (deploy/setup.sh; TROUPE_BUILD_DIR picks another build
# directory). Another program must exist.
#
# Environment: every exported TROUPE_* variable (TROUPE_TIMEOUT_S, TROUPE_LOG, TROUPE_CACHE_DIR,
# TROUPE_BACKEND, TROUPE_FUSION_BYTES, ...), every OMPI_MCA_* variable and CC reach all ranks
# (`-x NAME` each).
#
# Network: on this machine alone (no --hostfile, not in a multi-node Slurm allocation) MPI stays on
# shared memory and loopback: `--mca btl self,vader --mca oob_tcp_if_include lo --oversubscribe
# --bind-to none`. Across machines nothing about interfaces is hard-coded: choose them with
#   export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0
# (or a CIDR such as 10.0.0.0/24); OMPI_MCA_hwloc_base_binding_policy=none leaves a rank's stream
# threads unbound. --allow-run-as-root is added only when running as root.
#
# Exit status: mpirun's (the job's); 2 on a usage error; 1 when the program is missing or the
# build fails.
set -euo pipefail

TROUPE_DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$TROUPE_DEPLOY_DIR/setup.sh"

s_usage() {
  sed -n '/^# Usage:/,/^set -euo/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

s_die_usage() {
  echo "troupe mpirun: $1 (try 'deploy/mpirun.sh --help')" >&2
  exit 2
}

np=""
hostfile=""
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    -np | -n)
      [ $# -ge 2 ] || s_die_usage "$1 needs a number"
      np=$2
      shift 2
      ;;
    --hostfile)
      [ $# -ge 2 ] || s_die_usage "$1 needs a file"
      hostfile=$2
      shift 2
      ;;
    --dry-run)
      dry_run=1
      shift
      ;;
    -h | --help)
      s_usage
      exit 0
      ;;
    --)
      shift
      break
      ;;
    *)
      break
      ;;
  esac
done

if [ -n "$np" ]; then
  case "$np" in
    '' | *[!0-9]* | 0*) s_die_usage "-np wants a positive integer, got '$np'" ;;
  esac
fi
if [ -n "$hostfile" ] && [ ! -r "$hostfile" ]; then
  s_die_usage "hostfile '$hostfile' is not a readable file"
fi

default_program="$TROUPE_BUILD_DIR/examples/fmnist/fmnist"
if [ $# -gt 0 ] && [ "${1:0:1}" != "-" ]; then
  program=$1
  shift
else
  program=$default_program
fi

if [ "$program" = "$default_program" ] && [ ! -x "$program" ] && [ "$dry_run" -eq 0 ]; then
  echo "troupe mpirun: $program is missing; building it first (deploy/setup.sh)" >&2
  troupe_install_packages
  troupe_build >&2
  if [ ! -x "$program" ]; then
    echo "troupe mpirun: the build did not produce $program" >&2
    exit 1
  fi
fi
if [ "$dry_run" -eq 0 ]; then
  case "$program" in
    */*) [ -x "$program" ] || { echo "troupe mpirun: '$program' is not an executable file" >&2; exit 1; } ;;
    *) command -v "$program" >/dev/null || { echo "troupe mpirun: '$program' not found" >&2; exit 1; } ;;
  esac
fi

# Across machines when a hostfile is given or Slurm allocated more than one node (mpirun then
# takes the hosts from Slurm); otherwise everything is on this machine.
multi_node=0
if [ -n "$hostfile" ] || [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ] 2>/dev/null; then
  multi_node=1
fi

cmd=(mpirun)
if [ -n "$np" ]; then
  cmd+=(-np "$np")
elif [ "$multi_node" -eq 0 ]; then
  cmd+=(-np 2)
fi
if [ -n "$hostfile" ]; then
  cmd+=(--hostfile "$hostfile")
fi
if [ "$multi_node" -eq 0 ]; then
  cmd+=(--mca btl "self,vader" --mca oob_tcp_if_include lo --oversubscribe --bind-to none)
fi
if [ "$(id -u)" -eq 0 ]; then
  cmd+=(--allow-run-as-root)
fi
while IFS= read -r name; do
  case "$name" in
    TROUPE_* | OMPI_MCA_* | CC) cmd+=(-x "$name") ;;
  esac
done < <(compgen -e | LC_ALL=C sort)
cmd+=("$program" "$@")

if [ "$dry_run" -eq 1 ]; then
  printf '%s\n' "${cmd[@]}"
  exit 0
fi
exec "${cmd[@]}"
