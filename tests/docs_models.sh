#!/usr/bin/env bash
# docs/models.md shows examples/model/two_layer.c: every line of its ```c blocks must be a line
# of the example (which CTest builds and runs), so the page cannot drift from working code.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
doc="$root/docs/models.md" src="$root/examples/model/two_layer.c"
missing=0 lines=0
while IFS= read -r line; do
  [ -z "${line//[[:space:]]/}" ] && continue
  lines=$((lines + 1))
  if ! grep -qxF -- "$line" "$src"; then
    echo "docs/models.md: not in examples/model/two_layer.c: $line" >&2
    missing=$((missing + 1))
  fi
done < <(awk '/^```c$/{on=1; next} /^```/{on=0} on' "$doc")
[ "$lines" -gt 20 ] || { echo "docs/models.md: found only $lines code lines" >&2; exit 1; }
[ "$missing" -eq 0 ] || exit 1
echo "docs/models.md: $lines code lines, all in examples/model/two_layer.c"
