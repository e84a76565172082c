#!/usr/bin/env bash
# troupe — the benchmark command: installs what is missing, builds into build/ (deploy/setup.sh,
# plus libopenblas-dev so bench_matmul has its BLAS peer), then runs every benchmark executable
# build/bench/bench_* in name order and prints their output.
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
TROUPE_PACKAGES+=(libopenblas-dev)
troupe_install_packages
troupe_build -DTROUPE_BUILD_BENCH=ON >&2 # build progress on stderr: stdout holds results

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
exit $status
