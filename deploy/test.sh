#!/usr/bin/env bash
# troupe — the test command: installs what is missing, builds into build/, runs every test
# (unit tests, the multi-rank tests of tests/mpi and examples/ under mpiexec, label mpi, and
# the two-host cluster tests of tests/cluster across two network namespaces, label cluster,
# which skip where namespaces cannot be made), then runs the actor and runtime tests again under
# ThreadSanitizer from build-tsan/, and the unit and multi-rank tests under AddressSanitizer +
# UndefinedBehaviorSanitizer from build-asan/.
# Exit status is the tests' status. Extra arguments go to the main ctest run (e.g. -R prec).
# TROUPE_SKIP_TSAN=1 skips the ThreadSanitizer pass, TROUPE_SKIP_ASAN=1 the ASan+UBSan pass.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
troupe_install_packages
troupe_build -DTROUPE_WERROR=ON
status=0
(cd "$TROUPE_BUILD_DIR" && ctest --output-on-failure "$@") || status=$?
if [ "${TROUPE_SKIP_TSAN:-0}" != "1" ]; then
  # CUDA off: TSAN-instrumented binaries keep the CUDA stub libcuda.so as a dependency, and a
  # machine without a GPU driver has no libcuda.so.1 to load. The actor tests do not use CUDA.
  # MPI off: the TSAN pass runs only the single-process actor tests (label tsan; tests/mpi and
  # examples/ are not built there), so it needs no MPI, and linking Open MPI (not built with
  # TSAN) into them would put uninstrumented code in every TSAN binary; transport/ then builds
  # as the single-rank cluster. The multi-rank tests (label mpi) run in the main pass above.
  TROUPE_BUILD_DIR="$TROUPE_ROOT/build-tsan" troupe_build -DTROUPE_WERROR=ON -DTROUPE_ENABLE_TSAN=ON -DTROUPE_WITH_CUDA=OFF \
    -DTROUPE_WITH_MPI=OFF -DTROUPE_BUILD_BENCH=OFF -DTROUPE_BUILD_EXAMPLES=OFF
  (cd "$TROUPE_ROOT/build-tsan" && ctest --output-on-failure -L tsan) || status=$?
fi
if [ "${TROUPE_SKIP_ASAN:-0}" != "1" ]; then
  # AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer, every finding fatal.
  # CUDA off, as for TSAN (the stub libcuda.so); benchmarks off. Unit tests with leak detection;
  # the multi-rank tests (label mpi) with detect_leaks=0: Open MPI 4.1 leaves ~120 KB in ~3350
  # allocations at MPI_Finalize, mostly from its components, whose stacks cannot be unwound (no
  # frame pointers), so no suppression file can single them out without hiding troupe's own;
  # troupe's allocations are checked for leaks by the unit tests, which run the same code in one
  # process. Everything else (overflows, use after free, undefined behaviour) stays on there.
  asan="halt_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # memory other libraries keep until exit on purpose (fontconfig's caches): tests/lsan.supp
  export LSAN_OPTIONS="suppressions=$TROUPE_ROOT/tests/lsan.supp:print_suppressions=0"
  TROUPE_BUILD_DIR="$TROUPE_ROOT/build-asan" troupe_build -DTROUPE_WERROR=ON -DTROUPE_ENABLE_ASAN=ON \
    -DTROUPE_ENABLE_UBSAN=ON -DTROUPE_WITH_CUDA=OFF -DTROUPE_BUILD_BENCH=OFF
  (cd "$TROUPE_ROOT/build-asan" && ASAN_OPTIONS="$asan" ctest --output-on-failure -L unit) ||
    status=$?
  (cd "$TROUPE_ROOT/build-asan" && ASAN_OPTIONS="$asan:detect_leaks=0" ctest --output-on-failure \
    -L mpi) || status=$?
fi
exit $status
