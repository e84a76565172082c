#!/usr/bin/env bash
# troupe — the test command: installs what is missing, builds into build/, runs every test,
# then runs the actor and runtime tests again under ThreadSanitizer from build-tsan/.
# Exit status is the tests' status. Extra arguments go to the main ctest run (e.g. -R prec).
# TROUPE_SKIP_TSAN=1 skips the ThreadSanitizer pass.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
troupe_install_packages
troupe_build
status=0
(cd "$TROUPE_BUILD_DIR" && ctest --output-on-failure "$@") || status=$?
if [ "${TROUPE_SKIP_TSAN:-0}" != "1" ]; then
  # CUDA off: TSAN-instrumented binaries keep the CUDA stub libcuda.so as a dependency, and a
  # machine without a GPU driver has no libcuda.so.1 to load. The actor tests do not use CUDA.
  TROUPE_BUILD_DIR="$TROUPE_ROOT/build-tsan" troupe_build -DTROUPE_ENABLE_TSAN=ON -DTROUPE_WITH_CUDA=OFF \
    -DTROUPE_BUILD_BENCH=OFF -DTROUPE_BUILD_EXAMPLES=OFF
  (cd "$TROUPE_ROOT/build-tsan" && ctest --output-on-failure -L tsan) || status=$?
fi
exit $status
