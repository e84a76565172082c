#!/bin/sh
# troupe — docs/configuration.md against the registry of environment variables (base/config.h):
# every variable `troupe info --env` lists is documented with the same default, every TROUPE_*
# variable the page documents is registered, and every TROUPE_* variable the library's sources
# read with getenv is registered.
# Usage: config_docs.sh SOURCE_DIR TROUPE
set -u
src=$1 troupe=$2
doc=$src/docs/configuration.md
fail() { echo "config_docs: $*" >&2; status=1; }
status=0
table=$("$troupe" info --env) || { echo "config_docs: troupe info --env failed" >&2; exit 1; }
# name and default: the first and fourth columns (columns are two blanks or more apart)
pairs=$(printf '%s\n' "$table" | tail -n +2 | awk -F '  +' '{ print $1 "\t" $4 }')
[ -n "$pairs" ] || { echo "config_docs: troupe info --env lists nothing" >&2; exit 1; }
# the section of the page that lists the environment variables
env_doc=$(mktemp) || exit 1
pairs_file=$(mktemp) || exit 1
trap 'rm -f "$env_doc" "$pairs_file"' EXIT
sed -n '/^## Environment variables/,/^##* /{/^### /q;p;}' "$doc" >"$env_doc"
printf '%s\n' "$pairs" >"$pairs_file"
tab=$(printf '\t')
while IFS="$tab" read -r name def; do
  bq='`'
  line=$(grep -m1 -F -- "- $bq$name$bq (default: " "$env_doc") || { fail "$name is not in $doc"; continue; }
  # the documented default: after "(default: " up to ";" or the end of the line, without backquotes
  d=$(printf '%s\n' "$line" | sed -e 's/^[^(]*(default: //' -e 's/;.*//' -e 's/`//g' -e 's/ *$//')
  case "$d" in
    "$def" | "$def ("*) ;;                    # the same, or the same and a note
    *) case "$def" in
         "$d"*) case "$line" in *";"*) fail "$name: documented default '$d', registered '$def'" ;; esac ;;
         *) fail "$name: documented default '$d', registered '$def'" ;;
       esac ;;
  esac
done <"$pairs_file"
names=$(printf '%s\n' "$pairs" | cut -f1)
for name in $(sed -n 's/^- `\(TROUPE_[A-Z0-9_]*\)` (default: .*/\1/p' "$env_doc"); do
  printf '%s\n' "$names" | grep -qx "$name" || fail "$doc documents $name, which is not registered"
done
for name in $(cd "$src" && grep -rhoE 'getenv\("(TROUPE_[A-Z0-9_]*|CC)"\)' base actors compiler devices ir nn parallel transport |
              sed 's/getenv("\(.*\)")/\1/' | sort -u); do
  printf '%s\n' "$names" | grep -qx "$name" || fail "the library reads $name (getenv), which is not registered"
done
[ "$status" = 0 ] && echo "config_docs: $(printf '%s\n' "$names" | wc -l) variables, documented alike"
exit "$status"
