#!/usr/bin/env bash
# troupe — the main jobs: installs what is missing, builds into build/, prints `troupe info`, then
# trains the Fashion-MNIST example (examples/fmnist), or with `gpt` the byte-level GPT-2
# (examples/gpt, docs/gpt.md), with MPI ranks on this machine (deploy/mpirun.sh) and says where
# the learning curve (CSV, and PNG when the build has cairo) and the checkpoint went. The
# backend: cuda when `troupe info` reports a CUDA device (one rank per GPU, each on its own:
# TROUPE_DEVICE is left to the node-local rank), else cpu on 2 ranks; $TROUPE_BACKEND, when
# set, wins. The script says which it chose and why.
#
# Usage: deploy/quickstart.sh [fmnist] [TRAINER ARGS...]   (extra arguments go to the trainer)
#        deploy/quickstart.sh gpt [GPT TRAIN ARGS...]
#        deploy/quickstart.sh --help
#   TROUPE_QUICKSTART_EPOCHS   fmnist: epochs (default 3: a few minutes on 2 cores)
#   TROUPE_QUICKSTART_STEPS    gpt: steps (default 3000) of 16 sequences of 64 bytes; the model
#                              L=4 NH=4 C=128 (0.83 M parameters), Debian's fortunes as bytes
#   TROUPE_BUILD_DIR           build directory (default build/); the curve and the checkpoint
#                              are written there: fmnist-curve.csv, fmnist-curve.png, fmnist.ckpt;
#                              gpt-curve.csv, gpt-curve.png, gpt.bin (+ gpt.bin.state), and the
#                              shards in gpt-data/
#   TROUPE_BACKEND             cpu, sync or cuda instead of the choice above
#   TROUPE_QUICKSTART_RANKS    ranks (default: the GPU count on cuda, else 2)
#   TROUPE_QUICKSTART_DRY_RUN=1  print the job's commands, one per line, and run nothing (no
#                              install, no build; backend cpu unless TROUPE_BACKEND is set)
# It prints one line per build phase (the build's output goes to $TROUPE_BUILD_DIR/build.log, named
# on failure). Every TROUPE_* variable reaches every rank (see deploy/mpirun.sh and docs/cluster.md).
# Exit status: the training job's (0 on success); 2 for an unknown job.
set -euo pipefail
TROUPE_DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
job=fmnist
case "${1:-}" in
  -h | --help)
    sed -n '2,/^# Exit status/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  fmnist | gpt)
    job=$1
    shift
    ;;
  "" | -*) ;;
  *)
    echo "troupe quickstart: unknown job '$1' (fmnist, gpt; deploy/quickstart.sh --help)" >&2
    exit 2
    ;;
esac
dry_run=${TROUPE_QUICKSTART_DRY_RUN:-0}
# run COMMAND...: runs it, or under TROUPE_QUICKSTART_DRY_RUN=1 prints it (words quoted as %q)
run() {
  if [ "$dry_run" = 1 ]; then
    local line
    line=$(printf '%q ' "$@")
    printf '%s\n' "${line% }"
    return 0
  fi
  "$@"
}
# run_quiet COMMAND...: run, with the command's standard output dropped
run_quiet() {
  if [ "$dry_run" = 1 ]; then
    run "$@"
    return 0
  fi
  "$@" >/dev/null
}
if [ "$dry_run" = 1 ]; then
  TROUPE_BUILD_DIR=${TROUPE_BUILD_DIR:-$(cd "$TROUPE_DEPLOY_DIR/.." && pwd)/build}
  info="(dry run: troupe info not run)"
  backend=${TROUPE_BACKEND:-cpu}
  why=${TROUPE_BACKEND:+TROUPE_BACKEND is set}
  why=${why:-dry run}
  gpus=0
else
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
fi
ranks=${TROUPE_QUICKSTART_RANKS:-2}
if [ "$backend" = cuda ] && [ -z "${TROUPE_QUICKSTART_RANKS:-}" ] && [ "$gpus" -gt 0 ]; then
  ranks=$gpus # one rank per GPU
fi

# After a training run: exit with its status when it failed, or 0 after a dry run; check that
# the curve ($2) and the checkpoint or model ($3) were written, and say where they and the plot
# ($plot, when plot_args is set) went.
finish_training() {
  if [ "$1" -ne 0 ]; then
    echo "troupe quickstart: training failed (exit status $1)" >&2
    exit "$1"
  fi
  if [ "$dry_run" = 1 ]; then
    exit 0
  fi
  for f in "$2" "$3"; do
    if [ ! -s "$f" ]; then
      echo "troupe quickstart: the trainer exited 0 but did not write $f" >&2
      exit 1
    fi
  done
  echo "learning curve: $2"
  if [ ${#plot_args[@]} -gt 0 ]; then
    echo "learning curve plot: $plot"
  fi
}

if [ "$job" = gpt ]; then
  gpt="$TROUPE_BUILD_DIR/examples/gpt/gpt"
  if [ "$dry_run" != 1 ] && [ ! -x "$gpt" ]; then
    echo "troupe quickstart: the build did not produce $gpt" >&2
    exit 1
  fi
  data="$TROUPE_BUILD_DIR/gpt-data"
  init="$TROUPE_BUILD_DIR/gpt-init.bin"
  model="$TROUPE_BUILD_DIR/gpt.bin"
  curve="$TROUPE_BUILD_DIR/gpt-curve.csv"
  plot="$TROUPE_BUILD_DIR/gpt-curve.png"
  plot_args=(--plot "$plot")
  if [ "$dry_run" != 1 ] && "$gpt" --help | grep -q "not built: this gpt has no cairo"; then
    plot_args=() # a build without cairo cannot draw
  fi
  steps=${TROUPE_QUICKSTART_STEPS:-3000}
  # the first run compiles the model's routines (gradient, validation, sampling: tens of
  # thousands of lines of C each); on a busy machine one compile can outlast the default 600 s
  export TROUPE_CC_TIMEOUT_S=${TROUPE_CC_TIMEOUT_S:-3600}
  echo "troupe quickstart: backend $backend ($why)" >&2
  echo "troupe quickstart: GPT-2 L=4 NH=4 C=128 on Debian's fortunes as bytes, $steps steps of 16 x 64 tokens on $ranks ranks" >&2
  if [ ! -s "$data/fortunes_train.bin" ] || [ ! -s "$data/fortunes_val.bin" ]; then
    run mkdir -p "$data"
    run "$gpt" data --out-dir "$data"
  fi
  run "$gpt" init --layers 4 --heads 4 --channels 128 --max-seq 64 --vocab 256 --seed 1 --out "$init"
  # a fresh run: the curve and picture of an earlier one go
  run rm -f "$curve" "$plot" "$model.state"
  status=0
  if [ "$backend" = cpu ] && [ "$ranks" -gt 1 ]; then
    # one process compiles the routines first (1 rank x $ranks streams has the same per-replica
    # batch, so the same code): the ranks then find them in the code cache instead of each
    # compiling them at once (the gradient's compiler takes about 8 GB of memory)
    echo "troupe quickstart: compiling the model's routines once (the first run takes minutes)" >&2
    run_quiet "$gpt" train --backend "$backend" --streams "$ranks" --model "$init" \
      --data "$data/fortunes_train.bin" --val "$data/fortunes_val.bin" --batch 16 --seq 64 \
      --steps 0 --val-batches 1 --sample-every 1 --seed 1 || status=$?
  fi
  if [ "$status" -eq 0 ]; then
    run "$TROUPE_DEPLOY_DIR/mpirun.sh" -np "$ranks" -- "$gpt" train --backend "$backend" --streams 1 \
      --model "$init" --data "$data/fortunes_train.bin" --val "$data/fortunes_val.bin" \
      --batch 16 --seq 64 --steps "$steps" --lr 1e-3 --val-every 250 --val-batches 4 \
      --sample-every "$steps" --sample-tokens 240 --seed 1 \
      --curve "$curve" "${plot_args[@]}" --save "$model" "$@" || status=$?
  fi
  finish_training "$status" "$curve" "$model"
  echo "model: $model (llm.c's format; sample with: $gpt sample --model $model --tokens 400 --seed 2)"
  exit 0
fi

trainer="$TROUPE_BUILD_DIR/examples/fmnist/fmnist"
if [ "$dry_run" != 1 ] && [ ! -x "$trainer" ]; then
  echo "troupe quickstart: the build did not produce $trainer" >&2
  exit 1
fi
curve="$TROUPE_BUILD_DIR/fmnist-curve.csv"
checkpoint="$TROUPE_BUILD_DIR/fmnist.ckpt"
plot="$TROUPE_BUILD_DIR/fmnist-curve.png"
plot_args=(--plot "$plot")
if [ "$dry_run" != 1 ] && "$trainer" --help | grep -q "not built: this fmnist has no cairo"; then
  plot_args=() # a build without cairo cannot draw
fi
epochs=${TROUPE_QUICKSTART_EPOCHS:-3}
echo "troupe quickstart: backend $backend ($why)" >&2
echo "troupe quickstart: training $epochs epoch(s) on $ranks ranks" >&2
status=0
run "$TROUPE_DEPLOY_DIR/mpirun.sh" -np "$ranks" -- "$trainer" --backend "$backend" --epochs "$epochs" \
  --curve "$curve" --checkpoint "$checkpoint" --force "${plot_args[@]}" "$@" || status=$?
finish_training "$status" "$curve" "$checkpoint"
echo "checkpoint: $checkpoint (train on: deploy/mpirun.sh -np $ranks -- --backend $backend --resume $checkpoint --epochs $((epochs + 2)))"
