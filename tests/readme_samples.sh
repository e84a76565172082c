#!/usr/bin/env bash
# The samples in README.md and docs/*.md stay true: every ``` block preceded by a line
# `<!-- sample: NAME [complete] -->` is the output of a command this script runs (cheaply), and
# the script checks that output against the block:
#   info     `troupe info`: every key of the sample (the text before ": ") is a key of the
#            output; with `complete`, every config.* key of the output is also in the sample.
#   fmnist   the trainer, one process, 1 epoch on a small subset: with every number in a line
#            read as "some number", each line of the sample matches a line of the output and each
#            line of the output matches a line of the sample (fields, words and their order).
# Usage: readme_samples.sh SOURCE_DIR TROUPE FMNIST DATA_DIR WORK_DIR
# Exit status: 0 all samples hold, 1 one does not (named on stderr), 77 no Fashion-MNIST data.
set -euo pipefail
src=$1 troupe=$2 fmnist=$3 data=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
fail=0
bad() {
  echo "readme_samples: $*" >&2
  fail=1
}

# numbers become a pattern; everything else is matched literally
line_pattern() {
  printf '%s\n' "$1" | sed -e 's/[][\.*^$/]/\\&/g' -e 's/[0-9][0-9]*\(\\\.[0-9][0-9]*\)\{0,1\}/[0-9][0-9.]*/g' \
    -e 's/^/^/' -e 's/$/$/'
}

# extract every marked block: files $work/sample.N.{name,mode,where,txt}
n=0
for f in "$src/README.md" "$src"/docs/*.md; do
  awk -v out="$work/sample" -v file="${f#"$src"/}" -v start="$n" '
    BEGIN { n = start }
    /^<!-- sample: [a-z]+( complete)? -->$/ { name = $3; mode = ($4 == "complete") ? "complete" : "subset";
                                              where = file ":" FNR; want = 1; next }
    want == 1 && /^```/ { want = 2; n++; print name > (out "." n ".name"); print mode > (out "." n ".mode");
                          print where > (out "." n ".where"); printf "" > (out "." n ".txt"); next }
    want == 1 { print "readme_samples: " file ":" FNR ": a sample marker not followed by a ``` block" > "/dev/stderr"; exit 1 }
    want == 2 && /^```/ { want = 0; next }
    want == 2 { print > (out "." n ".txt") }
    END { print n > (out ".count") }' "$f"
  n=$(cat "$work/sample.count")
done
if [ "$n" -eq 0 ]; then
  bad "no marked sample in README.md or docs/ (<!-- sample: NAME --> before a \`\`\` block)"
  exit 1
fi
grep -q '^<!-- sample: info -->$' "$src/README.md" || bad "README.md shows no troupe info sample"
grep -q '^<!-- sample: fmnist -->$' "$src/README.md" || bad "README.md shows no main-job sample"

# the commands, each run once
for f in "$data/train-images-idx3-ubyte" "$data/train-images-idx3-ubyte.gz"; do
  [ -e "$f" ] && have_data=1
done
if [ -z "${have_data:-}" ]; then
  echo "readme_samples: no Fashion-MNIST data in $data (dataset-fashion-mnist); skipped" >&2
  exit 77
fi
"$troupe" info >"$work/out.info" 2>"$work/err.info" || bad "troupe info exited $?: $(cat "$work/err.info")"
"$fmnist" --data "$data" --backend cpu --streams 1 --epochs 1 --train-limit 1024 --test-limit 256 \
  >"$work/out.fmnist" 2>"$work/err.fmnist" || bad "fmnist exited $?: $(cat "$work/err.fmnist")"

for ((i = 1; i <= n; i++)); do
  name=$(cat "$work/sample.$i.name") mode=$(cat "$work/sample.$i.mode")
  where=$(cat "$work/sample.$i.where") txt="$work/sample.$i.txt" out="$work/out.$name"
  [ -s "$txt" ] || { bad "$where: empty sample"; continue; }
  case $name in
    info)
      # a build without CUDA (the sanitizer passes) prints no cuda lines: skip them there
      nocuda=0
      grep -q '^build.cuda: 0' "$out" && nocuda=1
      while IFS= read -r line; do
        key=${line%%:*}
        if [ "$nocuda" = 1 ]; then
          case $key in cuda.* | backend.cuda.*) continue ;; esac
        fi
        grep -q "^$key:" "$out" || bad "$where: troupe info prints no '$key:' line (the sample shows '$line')"
      done <"$txt"
      if [ "$mode" = complete ]; then
        while IFS= read -r line; do
          key=${line%%:*}
          grep -q "^$key:" "$txt" || bad "$where: the sample lacks '$key:', which troupe info prints ('$line')"
        done < <(grep '^config\.' "$out")
      fi
      ;;
    fmnist)
      : >"$work/pat.$i"
      while IFS= read -r line; do
        line_pattern "$line" >>"$work/pat.$i"
      done <"$txt"
      while IFS= read -r line; do
        grep -q "$(line_pattern "$line")" "$out" ||
          bad "$where: no output line has the form of the sample's '$line'"
      done <"$txt"
      # the sample's own numbers agree: batch = ranks x streams x per replica, the final line's
      # ranks, streams and epochs are the setup line's and the last epoch line's
      read -r r s b p < <(sed -n 's/.* \([0-9][0-9]*\) rank(s) x \([0-9][0-9]*\) stream(s) on [a-z]*, batch \([0-9][0-9]*\) (\([0-9][0-9]*\) per replica).*/\1 \2 \3 \4/p' "$txt") ||
        true
      if [ -z "${p:-}" ]; then
        bad "$where: the sample's setup line has no 'R rank(s) x S stream(s) on B, batch N (M per replica)'"
      else
        [ $((r * s * p)) -eq "$b" ] || bad "$where: the sample's batch $b is not $r rank(s) x $s stream(s) x $p per replica"
        grep -q "^final .* ranks=$r streams=$s epochs=$(sed -n 's|^epoch [0-9]*/\([0-9]*\) .*|\1|p' "$txt" | tail -n 1)\$" "$txt" ||
          bad "$where: the sample's final line does not repeat its ranks ($r), streams ($s) and epochs"
      fi
      while IFS= read -r line; do
        printf '%s\n' "$line" | grep -q -f "$work/pat.$i" ||
          bad "$where: the output line '$line' has no counterpart in the sample"
      done <"$out"
      ;;
    *) bad "$where: no command is known for sample '$name'" ;;
  esac
done
if [ "$fail" -eq 0 ]; then
  echo "readme_samples: $n sample(s) hold"
fi
exit "$fail"
