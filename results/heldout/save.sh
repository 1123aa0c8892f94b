#!/usr/bin/env bash
# Copy what a held-out sweep (HELDOUT/runs-BLOCK) has finished into its compact record here: the
# sweep's sweeps.jsonl, and per finished run its compact record and measures.json
# (save_measures.py --record). Usage: bash results/heldout/save.sh pixels|map
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
block=${1:-pixels}
out=${HELDOUT:-/root/heldout}/runs-$block
[ -d "$out" ] || exit 0
cp "$out/sweeps.jsonl" "$here/$block/sweeps.jsonl"
(cd "$here/../.." && python3 results/heldout/save_measures.py "$out" --into "$here/$block" --record)
