#!/usr/bin/env bash
# troupe — the benchmark command: installs what is missing, builds into build/ (deploy/setup.sh,
# plus the peers: OpenBLAS for bench_matmul, BLIS and libxsmm for bench_gemm_libs, Debian's
# PyTorch for bench_train), then runs every benchmark executable build/bench/bench_* in name
# order and prints their output, then bench_train again with --optimizer adamw and with --model
# cnn (the convnet job). bench_cuda (built with the CUDA toolkit) runs the cuda backend against
# bare CUDA and cuBLAS on GPU 0, and prints a `skipped` line on a machine without a GPU.
#
# The peers run at their best: a kernel choice forced from the caller's environment
# (OPENBLAS_CORETYPE, BLIS_ARCH_TYPE, LIBXSMM_TARGET) is dropped with a warning; then, when
# OpenBLAS does not recognise this CPU and falls back to a generic core (Debian 12's 0.3.21 runs
# its SSE3 "Prescott" core on AVX-512 Xeons it does not know), OPENBLAS_CORETYPE is set to the
# core the CPU's features call for (build/bench/openblas_core says which), for every OpenBLAS
# user below, torch included. Each benchmark prints its peers' identity (version, core, threads,
# file) as facts lines. The peers run on one thread: OpenBLAS by openblas_set_num_threads(1) and
# OPENBLAS_NUM_THREADS=1 for torch, BLIS's serial build, libxsmm per call.
#
# Usage: deploy/bench.sh [benchmark options...]
#   Options go to every benchmark (bench/bench_util.h): --quick (3 runs, a smoke run),
#   --runs N, --warmup N, --dump-source. TROUPE_BUILD_DIR picks another build directory.
#
# Output: per benchmark a `==== <name>` header, then its lines: machine facts (machine,
# compiler, troupe, library), then one line per (case, peer):
#   bench=<name> case=<case> bytes=<n> troupe_us=<t> peer=<name> peer_us=<t> ratio=<r> ...
# ratio = troupe_us / peer_us: below 1 means troupe is faster. Times are medians. Benchmarks
# never fail on time; they fail (exit 1, `check=fail`) when troupe's results are wrong.
# Exit status: 0 when every benchmark exited 0, else 1 (every benchmark still runs).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# peers only, never needed by the tests: OpenBLAS (both runtime flavours, so either can be the
# peer: TROUPE_BENCH_OPENBLAS_FLAVOR), BLIS's serial build, libxsmm, PyTorch
TROUPE_PACKAGES+=(libopenblas-dev libopenblas0-pthread libopenblas0-serial libblis-serial-dev
                  libblis4-serial libxsmm-dev python3-torch)
troupe_install_packages
troupe_build -DTROUPE_BUILD_BENCH=ON >&2 # build progress on stderr: stdout holds results

for v in OPENBLAS_CORETYPE BLIS_ARCH_TYPE LIBXSMM_TARGET; do
  if [ -n "${!v:-}" ]; then
    echo "troupe bench: warning: $v=${!v} forces a kernel choice, so a peer may not be at its best: unset for the run" >&2
    unset "$v"
  fi
done
if [ -x "$TROUPE_BUILD_DIR/bench/openblas_core" ]; then
  read -r ob_core ob_want < <("$TROUPE_BUILD_DIR/bench/openblas_core") || true
  if [ -n "${ob_want:-}" ] && [ "$ob_want" != - ]; then
    echo "troupe bench: OpenBLAS picks core ${ob_core} on this CPU, which takes ${ob_want}: OPENBLAS_CORETYPE=${ob_want} for the peers" >&2
    export OPENBLAS_CORETYPE=$ob_want
  fi
fi

shopt -s nullglob
benches=()
for b in "$TROUPE_BUILD_DIR"/bench/bench_*; do
  [ -f "$b" ] && [ -x "$b" ] && benches+=("$b")
done
if [ ${#benches[@]} -eq 0 ]; then
  echo "troupe bench: no bench_* executables in $TROUPE_BUILD_DIR/bench" >&2
  exit 1
fi

status=0
for b in "${benches[@]}"; do
  echo "==== $(basename "$b")"
  if ! "$b" "$@"; then
    echo "troupe bench: $(basename "$b") failed" >&2
    status=1
  fi
done
# the main job again with AdamW (and the torch peer's AdamW): its update is elementwise work
# with a square root per parameter, unlike SGD's
train="$TROUPE_BUILD_DIR/bench/bench_train"
if [ -x "$train" ]; then
  echo "==== bench_train --optimizer adamw"
  if ! "$train" --optimizer adamw "$@"; then
    echo "troupe bench: bench_train --optimizer adamw failed" >&2
    status=1
  fi
  # the convnet job (fmnist --model cnn) against PyTorch at its best, one thread and DDP
  echo "==== bench_train --model cnn"
  if ! "$train" --model cnn "$@"; then
    echo "troupe bench: bench_train --model cnn failed" >&2
    status=1
  fi
fi
exit $status
