#!/usr/bin/env bash
# troupe — the main job: installs what is missing, builds into build/, prints `troupe info`, then
# trains the Fashion-MNIST example (examples/fmnist) with MPI ranks on this machine
# (deploy/mpirun.sh) and says where the learning curve (CSV, and PNG when the build has cairo)
# and the checkpoint went. The backend: cuda when `troupe info` reports a CUDA device (one rank
# per GPU, each on its own: TROUPE_DEVICE is left to the node-local rank), else cpu on 2 ranks;
# $TROUPE_BACKEND, when set, wins. The script says which it chose and why.
#
# Usage: deploy/quickstart.sh [TRAINER ARGS...]     (extra arguments go to the trainer)
#   TROUPE_QUICKSTART_EPOCHS   epochs (default 3: a few minutes on 2 cores)
#   TROUPE_BUILD_DIR           build directory (default build/); the curve and the checkpoint
#                              are written there: fmnist-curve.csv, fmnist-curve.png, fmnist.ckpt
#   TROUPE_BACKEND             cpu, sync or cuda instead of the choice above
#   TROUPE_QUICKSTART_RANKS    ranks (default: the GPU count on cuda, else 2)
# It prints one line per build phase (the build's output goes to $TROUPE_BUILD_DIR/build.log, named
# on failure). Every TROUPE_* variable reaches every rank (see deploy/mpirun.sh and docs/cluster.md).
# Exit status: the training job's (0 on success).
set -euo pipefail
TROUPE_DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$TROUPE_DEPLOY_DIR/setup.sh"
troupe_install_packages
troupe_build_quiet
info=$("$TROUPE_BUILD_DIR/tools/troupe/troupe" info)
printf '%s\n' "$info"
gpus=$(printf '%s\n' "$info" | sed -n 's/^backend\.cuda\.devices: \([0-9][0-9]*\)$/\1/p')
gpus=${gpus:-0}
if [ -n "${TROUPE_BACKEND:-}" ]; then
  backend=$TROUPE_BACKEND
  why="TROUPE_BACKEND is set"
elif [ "$gpus" -gt 0 ]; then
  backend=cuda
  why="troupe info reports $gpus CUDA device(s)"
else
  backend=cpu
  reason=$(printf '%s\n' "$info" | sed -n 's/^cuda\.devices: 0 (\(.*\))$/\1/p' | head -n 1)
  why="troupe info reports no CUDA device${reason:+: $reason}"
fi
ranks=${TROUPE_QUICKSTART_RANKS:-2}
if [ "$backend" = cuda ] && [ -z "${TROUPE_QUICKSTART_RANKS:-}" ] && [ "$gpus" -gt 0 ]; then
  ranks=$gpus # one rank per GPU
fi

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
echo "troupe quickstart: backend $backend ($why)" >&2
echo "troupe quickstart: training $epochs epoch(s) on $ranks ranks" >&2
status=0
"$TROUPE_DEPLOY_DIR/mpirun.sh" -np "$ranks" -- "$trainer" --backend "$backend" --epochs "$epochs" \
  --curve "$curve" --checkpoint "$checkpoint" --force "${plot_args[@]}" "$@" || status=$?
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
echo "checkpoint: $checkpoint (train on: deploy/mpirun.sh -np $ranks -- --backend $backend --resume $checkpoint --epochs $((epochs + 2)))"
