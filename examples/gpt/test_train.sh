#!/bin/sh
# troupe — tests of `gpt train` and the gpt command line (examples/gpt/CMakeLists.txt runs one
# case per CTest test), on a tiny model (L=2 NH=2 C=32, byte vocabulary, T=16, B=4) and a small
# shard made here:
#   streams  1 rank x 2 streams equals 1 x 1 within relative 1e-5 on every loss over 20 steps,
#            and each layout trains bitwise the same from run to run; with TROUPE_DP_OVERLAP=on
#            (the gradient routine in segments, its gathers included) bitwise as without; with
#            --shuffle too, on batches other than the sequential ones; with --grad-accum 2 within
#            1e-5 of 1 x 1 (each rank's micro-steps read their own sequences of the batch); with
#            --grad-clip above any norm bitwise as without, with a small one not
#   ranks    the same for LAUNCHER (mpiexec -n 2 ...) x 1 stream; each rank holds less training
#            data than the one rank of 1 x 1 (the `data ... resident_bytes=N` lines); with
#            --grad-accum 2 too
#   resume   a run saved at step 8 and resumed to 20 gives the uninterrupted run's losses and
#            final model file bit for bit (with validation, --curve and --plot on, which must
#            not change them); the curve holds every step once and the validations
#   restart  `troupe run -np 2 --max-restarts 2` (TROUPE, the 4th argument) with rank 1 SIGKILLed
#            when step 12 starts (TROUPE_FAULT, first launch only), between the checkpoints of
#            steps 10 and 15: the run restarts from step 10 and its final model and training
#            state equal an uninterrupted run's, byte for byte, as do the losses it printed
#   cli      bad options and bad files: one clear error line and a non-zero exit status;
#            --help after a command prints the usage
#   quickstart  deploy/quickstart.sh's job argument, as a dry run (TROUPE_QUICKSTART_DRY_RUN=1:
#            its commands printed, nothing built or run): `gpt` and its options, `fmnist`, an
#            unknown job, --help
# "Bitwise the same" is checked on the final model file (cmp: every parameter after the last
# step) and on the printed `step=K loss=X` lines.
# usage: test_train.sh GPT WORK_DIR CASE [LAUNCHER...]
# Share one TROUPE_CACHE_DIR across the runs: compiling the gradient routine is the slow part.
set -u
here=$(cd "$(dirname "$0")" && pwd)
gpt=$1 work=$2 case=$3
shift 3
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
# run EXPECTED_STATUS ARGS...: runs gpt, output in ./out and ./err.
run() {
  want=$1; shift
  "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
}

# the tiny model and a shard of ~13 kB of text (64 tokens a step: 20 steps stay in the first pass)
setup() {
  awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d: the quick brown fox %d jumps.\n", i, (i * i) % 97 }' >text.txt
  run 0 "$gpt" data --text text.txt --out-dir . --name t --val-fraction 0.1
  run 0 "$gpt" init --layers 2 --heads 2 --channels 32 --max-seq 16 --vocab 256 --seed 5 --out m.bin
}
# train NAME STREAMS [LAUNCHER...]: 20 steps into NAME.out (all its output in NAME.log), model
# NAME.bin; $extra holds more options
extra=
train() {
  name=$1 streams=$2; shift 2
  # shellcheck disable=SC2086 # $extra is words
  run 0 "$@" "$gpt" train --model m.bin --data t_train.bin --batch 4 --seq 16 --steps 20 \
    --lr 1e-3 --weight-decay 0.01 --streams "$streams" --backend cpu --save "$name.bin" $extra
  cp out "$name.log"
  grep '^step=' out >"$name.out"
  [ "$(wc -l <"$name.out")" = 20 ] || fail "$name: $(wc -l <"$name.out") step lines, expected 20"
  has out "^final loss=.* streams=$streams steps=20"
}
# same A B: the two runs printed the same losses and wrote the same model, bit for bit
same() {
  cmp -s "$1.out" "$2.out" || fail "the losses of $1 and $2 differ: $(diff "$1.out" "$2.out" | head -4)"
  cmp -s "$1.bin" "$2.bin" || fail "the final models $1.bin and $2.bin differ"
}
# close A B: every loss of B within relative 1e-5 of A's, step by step
close() {
  awk -v a="$1.out" -v b="$2.out" 'BEGIN {
      while ((getline la <a) > 0) {
        if ((getline lb <b) <= 0) { print "fewer lines in " b; exit 1 }
        split(la, pa, /[= ]/); split(lb, pb, /[= ]/)
        if (pa[2] != pb[2]) { print "step " pa[2] " against " pb[2]; exit 1 }
        d = pa[4] - pb[4]; if (d < 0) d = -d
        if (!(d <= 1e-5 * pa[4])) { print "step " pa[2] ": loss " pa[4] " against " pb[4]; exit 1 }
        if (d > worst) worst = d
        n++
      }
      if (n != 20) { print n " steps compared"; exit 1 }
      printf "largest loss difference %g over %d steps\n", worst, n
    }' || fail "$2 is not within relative 1e-5 of $1"
}

case $case in
streams)
  setup
  train a1x1 1; train b1x1 1; same a1x1 b1x1
  train a1x2 2; train b1x2 2; same a1x2 b1x2
  close a1x1 a1x2
  # the gradient routine cut into overlap segments (as across nodes) computes the same bits
  train o1x1 1 env TROUPE_DP_OVERLAP=on TROUPE_DP_BUCKET_BYTES=1; same a1x1 o1x1
  extra=--shuffle
  train s1x1 1; train s1x2 2; close s1x1 s1x2
  extra=
  cmp -s a1x1.out s1x1.out && fail "--shuffle trained on the sequential batches"
  # --grad-accum 2 on 2 streams: each step's minibatches in 4 rows of x_all, the same batches
  extra="--grad-accum 2"; train g1x2 2; close a1x1 g1x2; extra=
  # --grad-clip: a C above any gradient norm trains bitwise as without; a small one clips
  extra="--grad-clip 1e30"; train c1x1 1; same a1x1 c1x1
  extra="--grad-clip 0.05"; train k1x1 1; extra=
  cmp -s a1x1.out k1x1.out && fail "--grad-clip 0.05 left every loss as it was"
  # the loss falls: the test would pass on a model that does not train otherwise
  awk 'NR == 1 { f = $2 } END { exit !($2 < f) }' FS='loss=' a1x1.out || fail "the loss did not fall"
  ;;
ranks)
  [ $# -gt 0 ] || fail "the ranks case needs a LAUNCHER"
  setup
  train a1x1 1
  train a2x1 1 "$@"; has out "ranks=2"; train b2x1 1 "$@"; same a2x1 b2x1
  close a1x1 a2x1
  # --grad-accum 2 on 2 ranks (a row per replica and micro-step), the same batches
  extra="--grad-accum 2"; train g2x1 1 "$@"; close a1x1 g2x1; extra=
  # the training data each rank holds falls with the ranks
  one=$(sed -n 's/^data rank=0 .* resident_bytes=\([0-9]*\)$/\1/p' a1x1.log)
  [ -n "$one" ] || fail "no 'data rank=0 ... resident_bytes=' line with 1 rank"
  for r in 0 1; do
    two=$(sed -n "s/^data rank=$r .* resident_bytes=\\([0-9]*\\)\$/\\1/p" a2x1.log)
    [ -n "$two" ] || fail "no 'data rank=$r ... resident_bytes=' line with 2 ranks"
    [ "$two" -lt "$one" ] || fail "rank $r of 2 holds $two bytes of data, 1 rank $one"
  done
  ;;
resume)
  setup
  train full 1
  # 8 steps saved, then resumed from the state to 20: same lines and model as the full run
  view="--val t_val.bin --val-every 5 --val-batches 2 --curve c.csv --plot c.png"
  # shellcheck disable=SC2086 # $view is words
  run 0 "$gpt" train --model m.bin --data t_train.bin --batch 4 --seq 16 --steps 8 \
    --lr 1e-3 --weight-decay 0.01 --streams 1 --backend cpu --save part.bin $view
  grep '^step=' out >part.out
  [ -s part.bin.state ] || fail "no part.bin.state"
  # shellcheck disable=SC2086 # $view is words
  run 0 "$gpt" train --model m.bin --data t_train.bin --batch 4 --seq 16 --steps 20 \
    --lr 1e-3 --weight-decay 0.01 --streams 1 --backend cpu --resume part.bin.state --save res.bin $view
  grep '^step=' out >>part.out
  grep -q '^step=0 ' out && fail "the resumed run started again at step 0"
  cp part.out res.out
  same full res
  cmp -s full.bin.state res.bin.state || fail "the final training states (moments, step) differ"
  # the curve: the header, steps 0..19 once each with the printed losses, validations before
  # steps 0, 5, 10, 15 and after the last (20)
  [ "$(head -n 1 c.csv)" = "step,loss,val_loss,seconds" ] || fail "c.csv's header: $(head -n 1 c.csv)"
  awk -F, 'NR > 1 && $2 != "" { printf "step=%s loss=%s\n", $1, $2 }' c.csv >curve.out
  cmp -s curve.out full.out || fail "c.csv's losses are not the printed ones: $(diff curve.out full.out | head -4)"
  [ "$(awk -F, 'NR > 1 && $3 != "" { printf "%s ", $1 }' c.csv)" = "0 5 10 15 20 " ] ||
    fail "c.csv's validations are at steps $(awk -F, 'NR > 1 && $3 != "" { printf "%s ", $1 }' c.csv)"
  if "$gpt" --help | grep -q "this gpt has no cairo"; then
    echo "no cairo: the picture is not checked"
  else
    [ "$(head -c 4 c.png | tail -c 3)" = PNG ] || fail "c.png is not a PNG"
  fi
  ;;
restart)
  [ $# -gt 0 ] || fail "the restart case needs the troupe command"
  troupe=$1
  setup
  args="--model m.bin --data t_train.bin --batch 4 --seq 16 --steps 20 --lr 1e-3
    --weight-decay 0.01 --streams 1 --backend cpu --save-every 5"
  # shellcheck disable=SC2086 # $args is words
  run 0 "$troupe" run -np 2 -- "$gpt" train $args --save ref.bin
  grep '^step=' out >ref.out
  grep -q summary err && fail "the uninterrupted run restarted"
  printf '#!/bin/sh\n[ -z "${TROUPE_RESUME:-}" ] && export TROUPE_FAULT=kill:rank=1:step=12\nexec "$@"\n' >first.sh
  chmod +x first.sh
  # shellcheck disable=SC2086 # $args is words
  run 0 "$troupe" run -np 2 --max-restarts 2 --checkpoint ck.bin.state -- ./first.sh "$gpt" \
    train $args --save ck.bin
  has err "restart 1/2: rank 1 died (signal 9"
  has err "resuming from step 10 (ck.bin.state) on 2 rank(s)"
  has err "attempt 2: 2 rank(s) from step 10.*completed"
  cmp -s ref.bin ck.bin || fail "the restarted run's final model differs from the uninterrupted run's"
  cmp -s ref.bin.state ck.bin.state || fail "the restarted run's final training state differs"
  # the second attempt's losses (steps 10..19) are the uninterrupted run's
  awk '/^step=10 /{ n++ } n == 2' out | grep '^step=' >second.out
  [ "$(wc -l <second.out)" = 10 ] || fail "the second attempt printed $(wc -l <second.out) steps, expected 10"
  tail -n 10 ref.out | cmp -s - second.out || fail "the resumed losses differ: $(tail -n 10 ref.out | diff - second.out | head -4)"
  ;;
cli)
  setup
  tr='--batch 4 --seq 16 --steps 1 --backend cpu --streams 1'
  # shellcheck disable=SC2086 # $tr is words
  {
  run 2 "$gpt"; has err "usage"
  run 2 "$gpt" frobnicate; has err "unknown command"
  run 0 "$gpt" train --model m.bin --help; has out "usage: gpt COMMAND"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --bogus 1; has err "unknown option '--bogus'"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --lr; has err "option --lr needs a value"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --lr fast; has err "option --lr: 'fast' is not a number"
  run 2 "$gpt" train --data t_train.bin $tr; has err "options --model and --data are required"
  run 2 "$gpt" train --model m.bin --data t_train.bin --seq 16 --steps 1; has err "option --batch is required"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --schedule wavy; has err "option --schedule"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --save-every 2; has err "needs --save"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --grad-clip -1; has err "option --grad-clip: '-1' is not a number"
  # --save's place is checked before training, not when the first save fails
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --save no/such/dir/s.bin
  has err "option --save: cannot write 'no/such/dir/s.bin': No such file or directory"
  grep -q '^step=' out && fail "trained before refusing --save"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --save .; has err "option --save: '.' is a directory"
  # --curve and --plot do not overwrite another kind of file
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --curve text.txt
  has err "option --curve: 'text.txt' exists and is not a gpt learning curve"
  run 2 "$gpt" train --model m.bin --data t_train.bin $tr --plot text.txt
  has err "option --plot: 'text.txt' exists and is not a PNG picture"
  run 2 "$gpt" train --model m.bin --data t_train.bin --batch 3 --seq 16 --steps 1 --streams 2 --backend cpu
  has err "do not split evenly"
  run 1 "$gpt" train --model m.bin --data t_train.bin --batch 4 --seq 32 --steps 1 --backend cpu
  has err "maxT = 16 is below --seq 32"
  run 1 "$gpt" train --model missing.bin --data t_train.bin $tr; has err "missing.bin"
  run 1 "$gpt" train --model m.bin --data 'nothing*.bin' $tr; has err "nothing\*.bin: no token shard matches"
  # a model cut short, a shard with a wrong magic, a token id >= V, a shard below one batch
  head -c 5000 m.bin >short.bin
  run 1 "$gpt" train --model short.bin --data t_train.bin $tr; has err "short.bin"
  cp t_train.bin bad.bin && printf 'XXXX' | dd of=bad.bin conv=notrunc 2>/dev/null
  run 1 "$gpt" train --model m.bin --data bad.bin $tr; has err "bad.bin"; has err "magic"
  run 0 "$gpt" init --layers 1 --heads 2 --channels 32 --max-seq 16 --vocab 60 --seed 1 --out v60.bin
  run 1 "$gpt" train --model v60.bin --data t_train.bin $tr; has err "t_train.bin: token .* is not below the vocabulary size V = 60"
  run 1 "$gpt" train --model m.bin --data t_val.bin --batch 128 --seq 16 --steps 1 --backend cpu --streams 1
  has err "t_val.bin: the shard holds 1582 tokens, fewer than one batch needs"
  run 2 "$gpt" init --layers 2 --heads 3 --channels 32 --max-seq 16 --vocab 256 --seed 1; has err "option --out is required"
  run 1 "$gpt" sample --model short.bin --tokens 4 --seed 1; has err "short.bin"
  run 2 "$gpt" sample --model m.bin --tokens 0; has err "option --tokens"
  run 1 "$gpt" data --text missing.txt --out-dir .; has err "missing.txt"
  # --out-dir is created; a file in its way is refused
  run 0 "$gpt" data --text text.txt --out-dir new/sub --name n; [ -s new/sub/n_train.bin ] || fail "no new/sub/n_train.bin"
  run 1 "$gpt" data --text text.txt --out-dir text.txt/x; has err "text.txt/x: cannot create the directory"
  run 2 "$gpt" sample --model m.bin --tokens 4 --prompt-tokens 1,x; has err "option --prompt-tokens: '1,x' is not a list of token ids from 0 to 255"
  run 2 "$gpt" sample --model m.bin --tokens 4 --prompt-tokens 256; has err "from 0 to 255"
  run 2 "$gpt" sample --model m.bin --tokens 4 --prompt a --prompt-tokens 1; has err "exclude each other"
  }
  ;;
precision)
  # --precision bf16 and fp16 (the products on bfloat16 or half copies, fp32 sums; fp16 with
  # dynamic loss scaling): 200 steps end within 2 % of fp32's loss; the bf16 run is bitwise the
  # same run to run; the start line names it; fp16's last line appends skipped_steps
  setup
  p200='--batch 4 --seq 16 --steps 200 --lr 1e-3 --backend cpu --streams 1'
  for r in fp32 bf16 bf16b fp16; do
    # shellcheck disable=SC2086 # $p200 is words
    run 0 "$gpt" train --model m.bin --data t_train.bin $p200 --precision "${r%b}" --save "$r.bin"
    grep '^step=' out >"$r.out"; cp out "$r.log"
  done
  has fp32.log "precision fp32"; has bf16.log "precision bf16"
  same bf16 bf16b
  cmp -s fp32.bin bf16.bin && fail "bf16 and fp32 trained the same model bit for bit"
  f=$(sed -n 's/^final loss=\([^ ]*\).*/\1/p' fp32.log)
  for r in bf16 fp16; do
    b=$(sed -n 's/^final loss=\([^ ]*\).*/\1/p' "$r.log")
    awk -v f="$f" -v b="$b" 'BEGIN { d = b - f; if (d < 0) d = -d; exit !(f > 0 && d <= 0.02 * f) }' ||
      fail "$r's final loss $b is not within 2 % of fp32's $f"
    awk 'NR == 1 { f = $2 } END { exit !($2 < 0.8 * f) }' FS='loss=' "$r.out" || fail "$r did not train"
  done
  has fp16.log "precision fp16"
  grep -q '^final loss=.* steps=200 skipped_steps=[0-9]* loss_scale=' fp16.log ||
    fail "fp16's last line lacks skipped_steps"
  grep -q 'skipped_steps' fp32.log && fail "fp32's last line has skipped_steps"
  # shellcheck disable=SC2086 # $p200 is words
  run 2 "$gpt" train --model m.bin --data t_train.bin $p200 --precision fp8
  has err "option --precision: 'fp32', 'bf16' or 'fp16'"
  ;;
quickstart)
  qs=$here/../../deploy/quickstart.sh
  export TROUPE_QUICKSTART_DRY_RUN=1 TROUPE_BUILD_DIR="$dir/b"
  unset TROUPE_BACKEND TROUPE_QUICKSTART_RANKS TROUPE_QUICKSTART_STEPS
  run 0 "$qs" gpt
  has out "gpt data --out-dir $dir/b/gpt-data"
  has out "gpt init --layers 4 --heads 4 --channels 128 --max-seq 64 --vocab 256 "
  has out "mpirun.sh -np 2 -- $dir/b/examples/gpt/gpt train --backend cpu "
  # the routines compiled once by one process (1 rank x 2 streams: the same code) first
  has out "^$dir/b/examples/gpt/gpt train --backend cpu --streams 2 .* --batch 16 --seq 64 --steps 0 "
  has out " --batch 16 --seq 64 --steps 3000 "
  has out " --curve $dir/b/gpt-curve.csv --plot $dir/b/gpt-curve.png --save $dir/b/gpt.bin$"
  has err "backend cpu"
  grep -q fmnist out && fail "the gpt job runs fmnist"
  # the shards are made once; the settings and extra options reach the trainer
  mkdir -p b/gpt-data && echo x >b/gpt-data/fortunes_train.bin && echo x >b/gpt-data/fortunes_val.bin
  TROUPE_QUICKSTART_STEPS=7 TROUPE_QUICKSTART_RANKS=3 TROUPE_BACKEND=sync run 0 "$qs" gpt --lr 3e-4
  grep -q "gpt data" out && fail "the shards were made again"
  has out "mpirun.sh -np 3 -- .* train --backend sync .* --steps 7 .* --lr 3e-4$"
  has err "backend sync (TROUPE_BACKEND is set)"
  run 0 "$qs" fmnist --epochs 1
  has out "examples/fmnist/fmnist --backend cpu --epochs 3 .* --epochs 1$"
  run 0 "$qs" --epochs 1 # the default job
  has out "examples/fmnist/fmnist .* --epochs 1$"
  run 2 "$qs" gtp
  has err "unknown job 'gtp' (fmnist, gpt"
  [ -s out ] && fail "an unknown job printed commands"
  run 0 "$qs" --help
  has out "deploy/quickstart.sh gpt"; has out "TROUPE_QUICKSTART_STEPS"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case)"
