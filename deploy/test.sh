#!/usr/bin/env bash
# troupe — the test command: installs what is missing, builds into build/, runs every test.
# Exit status is the tests' status. Extra arguments go to ctest (e.g. -R prec, -L mpi).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
troupe_install_packages
troupe_build
cd "$TROUPE_BUILD_DIR"
ctest --output-on-failure "$@"
