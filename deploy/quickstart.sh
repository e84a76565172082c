#!/usr/bin/env bash
# troupe — the main job: installs what is missing, builds into build/, prints `troupe info`, then
# trains the Fashion-MNIST example (examples/fmnist) with 2 MPI ranks on this machine
# (deploy/mpirun.sh -np 2) and says where the learning curve (CSV, and PNG when the build has
# cairo) and the checkpoint went.
#
# Usage: deploy/quickstart.sh [TRAINER ARGS...]     (extra arguments go to the trainer)
#   TROUPE_QUICKSTART_EPOCHS   epochs (default 3: a few minutes on 2 cores)
#   TROUPE_BUILD_DIR           build directory (default build/); the curve and the checkpoint
#                              are written there: fmnist-curve.csv, fmnist-curve.png, fmnist.ckpt
# Every TROUPE_* variable reaches both ranks (see deploy/mpirun.sh and README.md).
# Exit status: the training job's (0 on success).
set -euo pipefail
TROUPE_DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$TROUPE_DEPLOY_DIR/setup.sh"
troupe_install_packages
troupe_build
"$TROUPE_BUILD_DIR/tools/troupe/troupe" info

trainer="$TROUPE_BUILD_DIR/examples/fmnist/fmnist"
if [ ! -x "$trainer" ]; then
  echo "troupe quickstart: the build did not produce $trainer" >&2
  exit 1
fi
curve="$TROUPE_BUILD_DIR/fmnist-curve.csv"
checkpoint="$TROUPE_BUILD_DIR/fmnist.ckpt"
plot="$TROUPE_BUILD_DIR/fmnist-curve.png"
plot_args=(--plot "$plot")
if "$trainer" --help | grep -q "not built: this fmnist has no cairo"; then
  plot_args=() # a build without cairo cannot draw
fi
epochs=${TROUPE_QUICKSTART_EPOCHS:-3}
echo "troupe quickstart: training $epochs epoch(s) on 2 ranks" >&2
status=0
"$TROUPE_DEPLOY_DIR/mpirun.sh" -np 2 -- "$trainer" --epochs "$epochs" --curve "$curve" \
  --checkpoint "$checkpoint" --force "${plot_args[@]}" "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "troupe quickstart: training failed (exit status $status)" >&2
  exit "$status"
fi
for f in "$curve" "$checkpoint"; do
  if [ ! -s "$f" ]; then
    echo "troupe quickstart: the trainer exited 0 but did not write $f" >&2
    exit 1
  fi
done
echo "learning curve: $curve"
if [ ${#plot_args[@]} -gt 0 ]; then
  echo "learning curve plot: $plot"
fi
echo "checkpoint: $checkpoint (train on: deploy/mpirun.sh -np 2 -- --resume $checkpoint --epochs $((epochs + 2)))"
