#!/usr/bin/env bash
# troupe — the GPU check: everything that must run on a machine with an NVIDIA GPU, in one command
# with a time budget, so that a short loan of a GPU machine is spent on running, not on set-up.
#
# Phases, each bounded by `timeout` and logged to its own file; a failed phase does not stop the
# next (a build failure does):
#   1. facts    nvidia-smi, nvcc, the driver; `troupe info` once built           -> facts.log
#   2. build    cmake -DTROUPE_WITH_CUDA=ON into $TROUPE_BUILD_DIR (default build-gpu), all
#               cores, warnings fatal only with TROUPE_GPU_WERROR=ON (the GPU machine's
#               compiler may be newer than CI's)                                  -> build.log
#   3. tests    the GPU-facing unit tests (test_cuda: the driver, copies, faults, the
#               conformance suite on cuda; test_async, test_runtime, test_stream, test_merge,
#               test_event, test_schedule_fuzz: FOR_EACH_DRIVER includes cuda when a device is
#               there; test_cgen, test_gemm, test_epilogue; test_dp: the trainer's layouts
#               on the GPU; test_dp_feed: the fed gradient routine replaying one CUDA graph
#               a step, the indexed one never; test_dp_gpu_np2: two ranks training on the
#               GPU, staged exchange), with TROUPE_LOG=debug:devices (kernel attributes,
#               the device's context), 4 at a time (each holds a CUDA context), 90 s each;
#               --all-tests adds the rest of label unit (CPU only: CI runs them) -> tests.log,
#               and ctest's LastTest.log (every test's output, passing ones too)
#   4. bench    build-gpu/bench/bench_cuda (copies, round trip, matmul against cuBLAS) -> bench.log
#   5. train    build-gpu/bench/bench_train --backend cuda: the main job on the GPU against
#               PyTorch on it                                                     -> train.log
#   6. job      the main job as the README runs it, on the GPU: deploy/quickstart.sh (it
#               picks cuda; TROUPE_SKIP_INSTALL=1, the build above), 10 epochs (its test
#               accuracy and samples/s), then the per-step breakdown of a
#               short run on 1 rank and on 2 ranks sharing the GPU    -> appended to train.log
#   7. models   the convnet and GPT-2 on the GPU (issues 32 and 31): bench_train --model cnn
#               --backend cuda (batches 128 and 1024 against torch_cnn.py --mode gpu, cuDNN);
#               one short fmnist --model cnn epoch on cuda and on cpu (their losses and
#               accuracies side by side); then GPT-2 124M's config (random init, B=8, T=1024,
#               random tokens) on cuda, its GEMM steps on cuBLASLt after the index check,
#               on troupe's tiles and on cuBLASLt unchecked (TROUPE_CUDA_GATHER_GEMM),
#               against torch_gpt.py --device cuda (SDPA, fused AdamW, TF32 off): per-step times from the step lines' arrival (the median)
#               and both sides' losses; then, where the toolkit has Nsight Compute (ncu), the
#               time of each kernel of one 124M step and of one convnet step at batch 1024,
#               largest first                                                     -> models.log
#   8. cpu      build-gpu/bench/bench_train --scaling 2,4,8,16 on the host's cores: weak
#               scaling against independent processes, with the optimizer step unfused,
#               and as one process of as many streams; PyTorch one thread      -> cpu.log
# then summary.txt: one line per phase (ok/FAIL/skipped, seconds), the failed tests' names and
# the bench ratios. Files go to $OUT when set (the device tool's folder), else
# $TROUPE_BUILD_DIR/gpu-check/.
#
# Usage: deploy/gpu-check.sh [--setup SCRIPT] [--debs DIR] [--budget SECONDS] [--phases LIST]
#   --setup SCRIPT  run SCRIPT first (installs libzmq/CZMQ/Criterion on a bare machine)
#   --debs DIR      unpack every DIR/*.deb into / first (dpkg -x; for a machine without a package
#                   registry: OpenBLAS and libxsmm for the cpu phase's GEMMs), then ldconfig
#   --budget S      total seconds for the phases (default 540); each phase gets what is left,
#                   capped: build 180, tests 180, bench 90, train 90, job 120, models 420,
#                   cpu 180
#   --phases LIST   comma-separated subset of facts,build,tests,bench,train,job,models,cpu
#                   (default all)
#   --all-tests     the tests phase also runs the CPU-only unit tests
#   --tests REGEX   the tests phase runs only the unit tests matching REGEX (ctest -R), 4 at a
#                   time, nothing else (a short loan's subset)
# Exit status: 0 when every phase that ran passed, 1 otherwise, 2 on a bad argument.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build-gpu}
out=${OUT:-$build/gpu-check}
budget=540
phases=facts,build,tests,bench,train,job,models,cpu
setup=
debs=
all_tests=0
only_tests=
while [ $# -gt 0 ]; do
  case $1 in
    --setup) setup=${2:?--setup needs a script}; shift 2 ;;
    --all-tests) all_tests=1; shift ;;
    --tests) only_tests=${2:?--tests needs a regular expression}; shift 2 ;;
    --debs) debs=${2:?--debs needs a folder}; shift 2 ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --phases) phases=${2:?--phases needs a list}; shift 2 ;;
    -h|--help) sed -n '2,54p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $budget in ''|*[!0-9]*) echo "gpu-check: --budget '$budget' is not a number of seconds" >&2; exit 2 ;; esac
mkdir -p "$out" "$build"
rm -f "$out"/{facts,build,tests,bench,train,models,cpu}.log
start=$(date +%s)
summary=$out/summary.txt
: > "$summary"
status=0

left() { echo $(( budget - ($(date +%s) - start) )); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
want() { [[ ",$phases," == *",$1,"* ]]; }
# phase NAME CAP_SECONDS LOG COMMAND...: runs COMMAND under timeout, records the outcome.
phase() {
  local name=$1 limit log=$out/$3 t0 rc
  limit=$(cap "$2"); shift 3
  if ! want "$name"; then echo "phase=$name result=skipped reason=not-asked" >> "$summary"; return 0; fi
  if [ "$limit" -le 10 ]; then
    echo "phase=$name result=skipped reason=budget-spent" >> "$summary"; status=1; return 1
  fi
  t0=$(date +%s)
  echo "==== $name (limit ${limit}s) $(date -u +%FT%TZ)" >> "$log"
  # bash -c: the command may be one of the functions below (exported), which timeout cannot run
  timeout --signal=TERM --kill-after=10 "$limit" bash -c '"$@"' bash "$@" >> "$log" 2>&1
  rc=$?
  local res=ok
  [ $rc -eq 124 ] && res=timeout
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && res=FAIL
  [ $rc -ne 0 ] && status=1
  echo "phase=$name result=$res rc=$rc seconds=$(( $(date +%s) - t0 ))" >> "$summary"
  return $rc
}

if [ -n "$setup" ]; then
  "$setup" > "$out/facts.log" 2>&1 || { echo "gpu-check: set-up script $setup failed (facts.log)" >&2; status=1; }
fi

if [ -n "$debs" ]; then
  for d in "$debs"/*.deb; do dpkg -x "$d" / || echo "gpu-check: cannot unpack $d" >&2; done
  ldconfig
  # dpkg -x runs no maintainer scripts, so Debian's alternatives links (openblas.pc among them)
  # are missing: point pkg-config at the pthread build's own folder
  p=/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig
  [ -d "$p" ] && export PKG_CONFIG_PATH=$p${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fi

facts() {
  # CUDA 13's runtime needs driver R580 or newer; an exclusive-process compute mode allows one
  # context at a time (the tests run 4 processes): both decide whether the tests can run at all
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,compute_mode \
    --format=csv || true
  nvcc --version | tail -2 || true
  echo "cores: $(nproc)"
  ls /usr/local/cuda/bin 2>/dev/null | tr '\n' ' '; echo
}
export -f facts
phase facts 30 facts.log facts

jobs=$(nproc)
export root build jobs out
build_it() {
  # warnings are fatal in CI (gcc 12 here); the GPU machine's compiler may be newer and warn
  # where CI's does not, which must not cost a short loan its run: TROUPE_GPU_WERROR=ON to insist
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_WITH_CUDA=ON \
    -DTROUPE_WERROR="${TROUPE_GPU_WERROR:-OFF}" -DTROUPE_BUILD_BENCH=ON &&
    cmake --build "$build" -j "$jobs" && { grep -c 'warning:' "$out/build.log" |
      sed 's/^/build warnings: /'; true; }
}
export -f build_it
if ! phase build 180 build.log build_it && want build; then
  echo "gpu-check: the build failed; the tail of build.log:" >&2
  tail -40 "$out/build.log" >&2
  cat "$summary"
  exit 1
fi
want facts && [ -x "$build/tools/troupe/troupe" ] && "$build/tools/troupe/troupe" info >> "$out/facts.log" 2>&1


gpu_tests='^test_(cuda|async|runtime|stream|merge|event|schedule_fuzz|cgen|gemm|epilogue|dp|dp_feed|cnn|nn_conv|nn_embedding|gather|mlp)$'
run_tests() {
  local rc=0
  if [ -n "$only_tests" ]; then
    (cd "$build" && TROUPE_LOG=debug:devices ctest -L unit -R "$only_tests" -j 4 \
       --output-on-failure --timeout 90) || rc=1
    cp "$build/Testing/Temporary/LastTest.log" "$out/LastTest.log" 2>/dev/null || true
    return $rc
  fi
  # test_cuda directly, verbose: Criterion counts a skipped test as passing in its synthesis,
  # and only --verbose names each skip with its reason
  echo "== test_cuda --verbose"
  TROUPE_LOG=debug:devices timeout 150 "$build/tests/test_cuda" --jobs 2 --verbose 2>&1 || rc=1
  # the multi-rank GPU test (label mpi): two ranks sharing the GPU, staged exchange (first:
  # ctest's LastTest.log keeps only the last ctest run, the unit tests' below)
  (cd "$build" && ctest -R '^test_dp_gpu_np2$' --output-on-failure --timeout 120) || rc=1
  (cd "$build" && TROUPE_LOG=debug:devices ctest -L unit -R "$gpu_tests" -E '^test_cuda$' -j 4 \
     --output-on-failure --timeout 90) || rc=1
  cp "$build/Testing/Temporary/LastTest.log" "$out/LastTest.log" 2>/dev/null || true
  if [ "$all_tests" = 1 ]; then
    (cd "$build" && ctest -L unit -E "$gpu_tests" -j "$jobs" --output-on-failure --timeout 90) ||
      rc=1
  fi
  return $rc
}
export -f run_tests
export gpu_tests out all_tests only_tests
phase tests 180 tests.log run_tests
grep -E '^[[:space:]]*[0-9]+ - |tests passed|\[SKIP\]|\[FAIL\]|Synthesis' "$out/tests.log" 2>/dev/null |
  cut -c1-300 | sed 's/^/tests: /' >> "$summary"

phase bench 90 bench.log "$build/bench/bench_cuda"
grep '^bench=' "$out/bench.log" 2>/dev/null >> "$summary"

phase train 90 train.log "$build/bench/bench_train" --backend cuda
grep -E '^bench=|not measured' "$out/train.log" 2>/dev/null >> "$summary"
# the main job end to end (README: deploy/quickstart.sh, fmnist on the machine's GPUs)
# then the per-step breakdown (compute, merge, exchange, optimizer: parallel/dp_steplog.c) of a
# short run on the GPU, one rank and two ranks sharing it (the staged exchange)
job_breakdown() {
  local f="$build/examples/fmnist/fmnist" a="--backend cuda --epochs 1 --train-limit 25600 --test-limit 1000"
  echo "== breakdown, 1 rank"
  TROUPE_LOG=debug:parallel "$f" $a 2>&1 | grep -E 'breakdown|^final' | tail -4
  echo "== breakdown, 2 ranks sharing the GPU"
  (cd "$build" && TROUPE_LOG=debug:parallel mpiexec -n 2 --mca btl self,vader \
     --mca oob_tcp_if_include lo --oversubscribe --allow-run-as-root "$f" $a 2>&1 |
     grep -E 'breakdown|^final' | tail -6)
}
export -f job_breakdown
if [ -d /usr/share/datasets/fashion-mnist ] || ! want job; then
  # the README's command itself: it picks cuda (one rank per GPU) and says why; nothing to
  # install here (the set-up unpacked the libraries), the build is the one above
  phase job 120 train.log env TROUPE_SKIP_INSTALL=1 TROUPE_BUILD_DIR="$build" \
    TROUPE_QUICKSTART_EPOCHS=10 "$root/deploy/quickstart.sh" &&
    if want job && ! grep -q '^troupe quickstart: backend cuda' "$out/train.log"; then
      # a quickstart that fell back to the CPU did not run the job on the GPU
      echo "phase=job result=FAIL reason=quickstart-did-not-choose-cuda" >> "$summary"
      status=1
      false
    fi &&
    { ! want job || phase job 60 train.log job_breakdown; } # one skipped line when not asked
else
  echo "phase=job result=skipped reason=no-data-set-in-/usr/share/datasets/fashion-mnist" >> "$summary"
fi
grep -E '^final |^fmnist: [0-9]|^troupe quickstart: ' "$out/train.log" 2>/dev/null | sed 's/^/job: /' >> "$summary"
# the models on the GPU (issues 31 and 32): the PyTorch peer is the CUDA build in
# TROUPE_BENCH_PYTHON (default /opt/torch/.venv/bin/python3 where it exists)
[ -z "${TROUPE_BENCH_PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ] &&
  export TROUPE_BENCH_PYTHON=/opt/torch/.venv/bin/python3
# ncu_step LABEL CSV last|between: the kernels of one step of an ncu --csv log (one
# gpu__time_duration row per kernel), from the last launch of the feed routine to the end
# (last), or between its last two launches (between: what follows is evaluation), summed by
# kernel, largest first
ncu_step() {
  "${TROUPE_BENCH_PYTHON:-python3}" - "$@" <<'PY'
import collections, csv, sys
label, path, which = sys.argv[1:4]
rows = [r for r in csv.reader(open(path)) if len(r) > 14 and r[0] != "ID"]
feeds = [i for i, r in enumerate(rows) if r[4].startswith("dp_feed")]
if which == "between" and len(feeds) > 1:
    step = rows[feeds[-2]:feeds[-1]]
else:
    step = rows[feeds[-1]:] if feeds else rows
t = collections.Counter(); n = collections.Counter(); g = {}
for r in step:
    k = r[4][:90]
    t[k] += float(r[14].replace(",", "")) / 1e6; n[k] += 1; g[k] = r[8]
print("%s profile: %d kernels, %.3f ms of kernels in the step" % (label, len(step), sum(t.values())))
for k, v in t.most_common(25):
    print("  %9.3f ms %4d x %s grid %s" % (v, n[k], k, g[k]))
PY
}
export -f ncu_step
models_check() {
  local rc=0 g="$build/examples/gpt/gpt" f="$build/examples/fmnist/fmnist"
  local w=${TMPDIR:-/tmp}/troupe-gpu-models py=${TROUPE_BENCH_PYTHON:-python3}
  export TROUPE_CACHE_DIR=$w/cache
  mkdir -p "$w/cache"
  echo "== bench_train --model cnn --backend cuda"
  timeout 100 "$build/bench/bench_train" --model cnn --backend cuda --quick || rc=1
  echo "== fmnist --model cnn: one short epoch on cuda (im2col folded) and on cpu"
  for b in cuda cpu; do
    timeout 60 "$f" --model cnn --backend $b --epochs 1 --train-limit 2560 --test-limit 500 \
      --streams 1 --seed 7 --data /usr/share/datasets/fashion-mnist > "$w/cnn-$b.log" 2>&1 ||
      { rc=1; tail -3 "$w/cnn-$b.log"; }
    grep -E '^final|loss' "$w/cnn-$b.log" | tail -2 | sed "s/^/cnn $b: /"
  done
  echo "== fmnist --model cnn at batch 1024: cuBLASLt's picks (split-K, waves) per product"
  TROUPE_LOG=debug:devices timeout 60 "$f" --model cnn --backend cuda --epochs 1 --batch 1024 \
    --train-limit 2048 --test-limit 100 --streams 1 --seed 7 \
    --data /usr/share/datasets/fashion-mnist > "$w/cnn-lt.log" 2>&1 || { rc=1; tail -3 "$w/cnn-lt.log"; }
  grep -o 'cuBLASLt for .*' "$w/cnn-lt.log" | sort | uniq -c | sed 's/^/cnn lt: /'
  # stamp: each line with its arrival time (s), so the step lines give per-step times
  stamp() { while IFS= read -r l; do echo "$EPOCHREALTIME $l"; done; }
  # median of the gaps (ms) between consecutive step lines of a stamped log, from step K+1 on
  gaps() { awk -v skip="$2" '/ step=[0-9]+ loss=/ { if (n++ > skip) print 1000 * ($1 - p); p = $1 }' \
    "$1" | sort -g | awk '{ d[m++] = $1 } END { if (m) printf "%.2f", d[int((m - 1) / 2)]; else print "nan" }'; }
  echo "== gpt: GPT-2 124M's config (L=12 NH=12 C=768, Vp=50304), B=8 T=1024, random tokens"
  "$g" init --layers 12 --heads 12 --channels 768 --max-seq 1024 --vocab 50257 \
    --padded-vocab 50304 --seed 1 --out "$w/g124.bin" > /dev/null || rc=1
  "$py" - "$w/rand.bin" <<'PY' || rc=1
import random, struct, sys
n = 8 * 1024 * 40 + 1
r = random.Random(7)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(r.randrange(50257) for _ in range(n))))
PY
  # the GEMM steps of the gradient routine (it has gathers): cuBLASLt after the index check
  # (the default), troupe's tiles, cuBLASLt unchecked
  for mode in checked tiles library; do
    local t0=$EPOCHREALTIME
    TROUPE_CUDA_GATHER_GEMM=$mode timeout 200 stdbuf -oL "$g" train --model "$w/g124.bin" \
      --data "$w/rand.bin" --batch 8 --seq 1024 --steps 10 --backend cuda --streams 1 2>&1 |
      stamp > "$w/g124-$mode.log" || rc=1
    echo "gpt-124m troupe $mode: the whole run $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}') s"
    grep -E 'step=(0|1|2|9) |^[0-9.]+ (final|gpt)|rror' "$w/g124-$mode.log" | cut -d' ' -f2- | head -8
    echo "gpt-124m troupe $mode: median step $(gaps "$w/g124-$mode.log" 2) ms (steps 3..9)"
  done
  timeout 120 "$py" "$root/bench/peers/torch_gpt.py" --model "$w/g124.bin" --data "$w/rand.bin" \
    --batch 8 --seq 1024 --steps 10 --warmup 3 --device cuda > "$w/g124-torch.log" 2>&1 || rc=1
  grep -E '^library|step=(0|1|2|12) |^peer=|rror' "$w/g124-torch.log" | head -8
  for mode in checked tiles library; do
    paste -d' ' <(grep -o 'step=[0-9]* loss=[^ ]*' "$w/g124-$mode.log") \
      <(grep '^step=' "$w/g124-torch.log") |
      awk -v m=$mode 'NF == 4 { split($2, a, "="); split($4, b, "="); r = a[2] - b[2]; if (r < 0) r = -r;
             r /= b[2]; if (r > x) x = r; n++ }
           END { printf "gpt-124m troupe %s vs torch: %d losses, max relative difference %.3g\n", m, n, x }'
  done
  # a kernel profile of two 124M steps (the code cache is warm by now) with Nsight Compute,
  # when the toolkit has it: each kernel's time (gpu__time_duration, clocks and caches as they
  # are), summed by kernel over the second step, largest first
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -n "$ncu" ]; then
    echo "== gpt-124m: kernel profile of the second of 2 steps ($ncu)"
    timeout 150 "$ncu" --metrics gpu__time_duration.sum --csv \
      --print-units base --clock-control none --cache-control none --log-file "$w/g124-ncu.csv" \
      "$g" train --model "$w/g124.bin" --data "$w/rand.bin" --batch 8 --seq 1024 --steps 2 \
      --backend cuda --streams 1 > "$w/g124-ncu.log" 2>&1 || { rc=1; tail -5 "$w/g124-ncu.log"; }
    ncu_step gpt-124m "$w/g124-ncu.csv" last || rc=1
    # the convnet's step at batch 1024 (4 steps; the profile takes the last one's kernels: from
    # the last launch of its feed routine on)
    echo "== cnn: kernel profile of a step at batch 1024 ($ncu)"
    timeout 150 "$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
      --clock-control none --cache-control none --log-file "$w/cnn-ncu.csv" \
      "$f" --model cnn --backend cuda --epochs 1 --train-limit 4096 --test-limit 100 \
      --batch 1024 --streams 1 --seed 7 --data /usr/share/datasets/fashion-mnist \
      > "$w/cnn-ncu.log" 2>&1 || { rc=1; tail -5 "$w/cnn-ncu.log"; }
    ncu_step cnn "$w/cnn-ncu.csv" between || rc=1
  else
    echo "== gpt-124m: no ncu on this machine, no kernel profile"
  fi
  tar czf "$out/models-logs.tgz" -C "$w" $(cd "$w" && ls *.log *.csv 2>/dev/null) 2>/dev/null
  return $rc
}
export -f models_check
phase models 420 models.log models_check
grep -E '^bench=|^gpt-|^cnn |^library|^peer=' "$out/models.log" 2>/dev/null | sed 's/^/models: /' >> "$summary"
phase cpu 180 cpu.log "$build/bench/bench_train" --scaling 2,4,8,16
grep -E '^bench=|^library|not measured' "$out/cpu.log" 2>/dev/null >> "$summary"

echo "total_seconds=$(( $(date +%s) - start )) status=$status" >> "$summary"
cat "$summary"
exit $status
