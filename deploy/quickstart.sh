#!/usr/bin/env bash
# troupe — the main job. Installs what is missing, builds into build/, then runs it.
# Until the Fashion-MNIST trainer lands (examples/fmnist), the main job is `troupe info`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
troupe_install_packages
troupe_build
"$TROUPE_BUILD_DIR/tools/troupe/troupe" info
