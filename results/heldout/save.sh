#!/usr/bin/env bash
# Copy each finished run of a held-out sweep (HELDOUT/runs-BLOCK) into its compact record here:
# run.json, milestones.jsonl, lives.jsonl, the sweep's sweeps.jsonl, and measures.json
# (save_measures.py). Usage: bash results/heldout/save.sh pixels|map
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
block=${1:-pixels}
out=${HELDOUT:-/root/heldout}/runs-$block
[ -d "$out" ] || exit 0
for run in "$out"/*/; do
  name=$(basename "$run")
  grep -q '"status":"finished"' "$run/run.json" 2>/dev/null || continue
  [ -e "$here/$block/$name/measures.json" ] && continue
  mkdir -p "$here/$block/$name"
  for f in run.json milestones.jsonl lives.jsonl; do
    [ -e "$run/$f" ] && cp "$run/$f" "$here/$block/$name/"
  done
done
cp "$out/sweeps.jsonl" "$here/$block/sweeps.jsonl"
(cd "$here/../.." && python3 results/heldout/save_measures.py "$out" --into "$here/$block")
