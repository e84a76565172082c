#!/bin/sh
# troupe — tests of `troupe plot` (tools/troupe/tests.cmake runs one case per CTest test): a
# small curve drawn as a valid PNG of the promised size, the default and -o names, a malformed
# CSV refused with its line number, usage errors. tests/test_curve_plot.c reads the picture back.
# usage: test_plot.sh TROUPE WORK_DIR CASE
set -u
troupe=$1 work=$2 case=$3
dir=$work/$case
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat out 2>/dev/null; echo "--- stderr"; cat err 2>/dev/null; exit 1; }
run() {
  want=$1; shift
  "$@" >out 2>err
  got=$?
  [ "$got" = "$want" ] || fail "exit status $got, expected $want for: $*"
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }
# png FILE: the PNG signature, IHDR first, 900x640, and more than a blank page's bytes
png() {
  [ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 has no PNG signature"
  [ "$(od -An -c -j12 -N4 "$1" | tr -d ' \n')" = IHDR ] || fail "$1: IHDR is not the first chunk"
  [ "$(od -An -tx1 -j16 -N8 "$1" | tr -d ' \n')" = 0000038400000280 ] || fail "$1 is not 900x640"
  [ "$(wc -c <"$1")" -gt 8000 ] || fail "$1 is $(wc -c <"$1") bytes: too small for two panels"
}
header=epoch,loss,test_accuracy,samples_per_s,seconds
cairo=1
"$troupe" plot --help | grep -q "has no cairo" && cairo=0

case $case in
not_regular)
  # a device, a FIFO or a directory is refused at once (no read without bound), as is a line
  # without end; the same for `troupe trace merge`
  run 1 "$troupe" plot /dev/zero
  has err "/dev/zero: a character device, not a regular file"
  mkfifo fifo && run 1 "$troupe" plot fifo
  has err "fifo: a FIFO, not a regular file"
  run 1 "$troupe" plot .
  has err "a directory, not a regular file"
  head -c 5000 /dev/zero | tr '\0' 1 >long.csv
  run 1 "$troupe" plot long.csv
  has err "long.csv:1: a line longer than 1024 bytes"
  if "$troupe" trace --help 2>&1 | grep -q merge; then
    run 1 "$troupe" trace merge /dev/zero
    has err "/dev/zero: a character device, not a regular file"
  fi
  ;;
png)
  printf '%s\n1,0.61,0.78,20512.3,2.9\n2,0.42,0.83,21000,5.8\n3,0.37,0.85,20800,8.7\n' $header >curve.csv
  if [ $cairo = 0 ]; then
    run 1 "$troupe" plot curve.csv; has err "built without cairo"
    echo "SKIP ($case): built without cairo; the refusal was checked"; exit 77
  fi
  run 0 "$troupe" plot curve.csv
  has out "^plot: curve.png (3 epochs)$"; png curve.png
  run 0 "$troupe" plot curve.csv -o other.png
  has out "^plot: other.png (3 epochs)$"; png other.png
  cp curve.csv noext && run 0 "$troupe" plot noext && png noext.png
  ls ./*.tmp.* >/dev/null 2>&1 && fail "a temporary was left"
  run 1 "$troupe" plot curve.csv -o /nonexistent/dir/x.png
  has err "^troupe plot: cannot write the plot '/nonexistent/dir/x.png'"
  ;;
malformed)
  printf '%s\n1,0.61,0.78,20512.3,2.9\n2,0.42,oops,21000,5.8\n' $header >bad.csv
  run 1 "$troupe" plot bad.csv
  has err "^troupe plot: bad.csv:3: field test_accuracy: expected a number in \[0, 1\], got 'oops'$"
  [ ! -e bad.png ] || fail "a PNG was written for a malformed CSV"
  printf 'epoch;loss\n' >bad2.csv
  run 1 "$troupe" plot bad2.csv; has err "bad2.csv:1: expected the header"
  run 1 "$troupe" plot missing.csv; has err "missing.csv: cannot open: No such file"
  ;;
usage)
  run 2 "$troupe" plot; has err "usage: troupe plot"
  run 2 "$troupe" plot a.csv b.csv; has err "one CSV file only"
  run 2 "$troupe" plot a.csv -o; has err "needs a file name"
  run 2 "$troupe" plot --bogus; has err "unknown option '--bogus'"
  run 0 "$troupe" plot --help; has out "usage: troupe plot CURVE.csv"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case)"
