#!/usr/bin/env bash
# The held-out sweeps of issue 44, resumable on a new machine. Each sweep runs from the commit that
# ran the rest of its block (in a git worktree of it), into a folder under $HELDOUT (default
# /root/heldout). The compact records kept here are copied into each --out first, so a run this
# folder already records as finished is skipped (mfm sweep --retry reruns only unfinished ones).
# Every 10 minutes, and at the end, save.sh copies what finished back into this folder.
#   JOBS=2 nohup nice -n 15 bash results/heldout/sweep.sh pixels >> /root/heldout/log.txt 2>&1 &
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
block=${1:-pixels}
heldout=${HELDOUT:-/root/heldout}
commit=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['commit'])" "$here/$block/sweeps.jsonl")
wt=$heldout/wt
[ -d "$wt" ] || git -C "$repo" worktree add "$wt" "$commit"
[ "$(git -C "$wt" rev-parse HEAD)" = "$commit" ] || { echo "$wt is not at $commit"; exit 1; }
out=$heldout/runs-$block
mkdir -p "$out"
[ -e "$out/sweeps.jsonl" ] || cp "$here/$block/sweeps.jsonl" "$out/sweeps.jsonl"
for rec in "$here/$block"/*/; do
  name=$(basename "$rec")
  [ -e "$out/$name/run.json" ] || cp -r "$rec" "$out/$name"
done
( while sleep 600; do bash "$here/save.sh" "$block"; done ) &
saver=$!
trap 'kill $saver 2>/dev/null; bash "$here/save.sh" "$block"' EXIT
seeds100_119=$(seq -s, 100 119)
seeds100_139=$(seq -s, 100 139)
# reach-3000: the first 40 seeds from 100 that its screen keeps (109, 120 and 127 are dropped), as in the map block
seeds100_142=$(seq -s, 100 142)
sweep() { (cd "$wt" && PYTHONPATH="$wt" python3 -m mfm.cli sweep "$@" --perception "$block" --jobs "${JOBS:-2}" --out "$out" --retry); }
sweep --task reach-1000 --methods direct,pro-long,vista,mfm --ablations no-budget --seeds "$seeds100_119" --screen
sweep --task reach-3000 --methods direct,pro-long,vista,mfm --ablations no-budget --seeds "$seeds100_142" --screen
sweep --task diamond --methods direct,pro-long,vista,mfm --seeds "$seeds100_139"
sweep --task reach-kit-10000 --methods direct,pro-long,vista,mfm --seeds "$seeds100_119" --screen
