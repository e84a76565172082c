#!/bin/sh
# troupe — tests of what the trainer shows a user (examples/fmnist/CMakeLists.txt runs one case
# per CTest test): the --plot PNG (valid, 900x640, redrawn after each epoch, resumed runs), its
# refusal of unwritable paths, the progress bar on a terminal (through script(1)'s
# pseudo-terminal) and none in a pipe or a file.
# usage: test_view.sh FMNIST DATA_DIR WORK_DIR CASE
# Exit status: 0 pass, 1 fail, 77 skipped (the reason on stdout).
set -u
fmnist=$1 data=$2 work=$3 case=$4
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
small="--data $data --train-limit 2000 --test-limit 200 --streams 1 --backend sync"

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
run() {
  want=$1; shift
  # shellcheck disable=SC2086 # $small is words
  "$fmnist" $small "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
png() {
  [ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 has no PNG signature"
  [ "$(od -An -c -j12 -N4 "$1" | tr -d ' \n')" = IHDR ] || fail "$1: IHDR is not the first chunk"
  [ "$(od -An -tx1 -j16 -N8 "$1" | tr -d ' \n')" = 0000038400000280 ] || fail "$1 is not 900x640"
  [ "$(wc -c <"$1")" -gt 8000 ] || fail "$1 is $(wc -c <"$1") bytes: too small for two panels"
}
cr=$(printf '\r') esc=$(printf '\033')

case $case in
plot)
  if "$fmnist" --help | grep -q "not built: this fmnist has no cairo"; then
    run 2 --epochs 1 --plot c.png; has err "option --plot: this fmnist was built without cairo"
    echo "SKIP ($case): built without cairo; the refusal was checked"; exit 77
  fi
  run 0 --epochs 1 --curve c.csv --plot c.png --checkpoint ck
  png c.png
  cp c.png one.png
  # resumed with the same curve: the plot holds both epochs (another picture than one epoch's)
  run 0 --epochs 2 --curve c.csv --plot c.png --resume ck --checkpoint ck
  png c.png
  cmp -s c.png one.png && fail "the plot did not change after the second epoch"
  [ "$(grep -c '^[0-9]' c.csv)" = 2 ] || fail "c.csv does not hold 2 epochs"
  ls ./*.tmp.* >/dev/null 2>&1 && fail "a temporary was left"
  grep -v '^data rank=' err | grep -q . && fail "warnings on stderr"
  ;;
plot_unwritable)
  "$fmnist" --help | grep -q "not built: this fmnist has no cairo" && {
    echo "SKIP ($case): built without cairo"; exit 77; }
  run 2 --epochs 1 --plot /nonexistent-dir/c.png
  has err "option --plot: cannot write '/nonexistent-dir/c.png': No such file or directory"
  mkdir d
  run 2 --epochs 1 --plot d
  has err "option --plot: 'd' is a directory"
  ;;
progress_pipe)
  # stdout a file: no bar, no carriage return, no escape sequence; one line per epoch
  run 0 --epochs 2
  ! grep -q "$cr\|$esc" out || fail "a pipe got terminal control characters"
  [ "$(grep -c '^epoch [12]/2  samples/s' out)" = 2 ] || fail "not one line per epoch"
  ! grep -q "ETA" out || fail "a pipe got the progress bar"
  ! grep -q "compiling the training routines" out || fail "a pipe got the compile notice"
  ;;
progress_tty)
  command -v script >/dev/null || { echo "SKIP ($case): no script(1) for a pseudo-terminal"; exit 77; }
  # shellcheck disable=SC2086
  script -qec "stty cols 120; $fmnist $small --train-limit 6000 --epochs 2" /dev/null >out 2>err ||
    fail "the run under script failed"
  # the compile notice, replaced by its time once the routines are built
  has out "^fmnist: compiling the training routines ([a-z]*) \.\.\.${cr}${esc}\[Kfmnist: training routines compiled and linked in [0-9.]* s"
  has out "${cr}${esc}\[Kepoch 1/2 \[=*>* *\] [0-9]*/46 steps  [0-9]* samples/s  loss [0-9.]*  ETA [0-9.]* s"
  has out "${cr}${esc}\[Kepoch 2/2  samples/s [0-9]*  loss [0-9.]*  test_accuracy" # the epoch line replaces it
  # no bar is wider than the terminal (119 columns and the erase sequence)
  tr '\r' '\n' <out | grep ETA | awk 'length($0) > 122 { bad = 1 } END { exit bad }' ||
    fail "a bar wider than 120 columns"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case)"
