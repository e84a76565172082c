#!/usr/bin/env bash
# troupe — installs what the build needs (Debian 12) and configures + builds into build/.
# Sourced by deploy/test.sh and deploy/quickstart.sh; can be run alone.
# Idempotent: when every package is present it prints nothing and installs nothing.
# TROUPE_SKIP_INSTALL=1: installs nothing (what dpkg lacks is named on stderr), for machines
# where the libraries come from elsewhere or there is no package registry.
set -euo pipefail

TROUPE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TROUPE_BUILD_DIR=${TROUPE_BUILD_DIR:-$TROUPE_ROOT/build}
TROUPE_PACKAGES=(libzmq3-dev libczmq-dev libopenmpi-dev openmpi-bin libcriterion-dev zlib1g-dev
                 libopenblas-dev libopenblas0-pthread libxsmm-dev libcairo2-dev pkg-config
                 dataset-fashion-mnist fortunes libjansson-dev iproute2)

troupe_install_packages() {
  local missing=()
  for p in "${TROUPE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${TROUPE_SKIP_INSTALL:-0}" = 1 ]; then
    # installed by other means (a cluster's modules, packages unpacked with dpkg -x): the
    # build's own checks name whatever is really missing
    echo "troupe setup: TROUPE_SKIP_INSTALL=1: not installing ${missing[*]} (dpkg does not list them)" >&2
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "troupe setup: need root or sudo to install: ${missing[*]}" >&2; return 1; }
    sudo="sudo"
  fi
  echo "troupe setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

troupe_build() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S "$TROUPE_ROOT" -B "$TROUPE_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$TROUPE_BUILD_DIR" -j "$jobs"
}

# troupe_build_quiet [CMAKE ARGS...]: troupe_build with one line per phase on stderr (configure,
# build) and CMake's output in $TROUPE_BUILD_DIR/build.log, named with its last lines on failure.
troupe_build_quiet() {
  local log="$TROUPE_BUILD_DIR/build.log" jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  mkdir -p "$TROUPE_BUILD_DIR"
  : >"$log"
  echo "troupe: configuring into $TROUPE_BUILD_DIR" >&2
  if ! cmake -S "$TROUPE_ROOT" -B "$TROUPE_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >>"$log" 2>&1; then
    echo "troupe: configuring failed; the log is $log. Its last lines:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  echo "troupe: building ($jobs jobs)" >&2
  if ! cmake --build "$TROUPE_BUILD_DIR" -j "$jobs" >>"$log" 2>&1; then
    echo "troupe: the build failed; the log is $log. Its last lines:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  echo "troupe: built (log: $log)" >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  troupe_install_packages
  troupe_build "$@"
fi
