"""Independent readers for the audit of issue 43 ("to the end"): what a page must show, worked
out from a run's raw files with json alone (never through the loaders), and the cases the
tests need, picked from the raw files so that they survive the samples' regeneration."""
from __future__ import annotations

import json
from pathlib import Path

from raw import action_of, jsonl, sample_runs

BACK = 8
"""Steps a failure's filmstrip reaches back before its episode by default."""


def framed_steps(run_dir: Path, life: int, lo: int, hi: int) -> list[int]:
    """The steps ``lo..hi`` whose frame is stored in an episode of ``life``."""
    out = set()
    for r in jsonl(run_dir / "index.jsonl"):
        if r["life"] == life and r.get("frames"):
            out |= {s for s in range(r["first_step"] + 1, r["first_step"] + r["frames"] + 1) if lo <= s <= hi}
    return sorted(out)


def strip_steps(run_dir: Path, row: dict, back: int = BACK) -> list[int]:
    """The steps a failure's filmstrip shows: the frames of its episode (index row ``row``)
    after those of up to ``back`` steps before it in the same life."""
    lo = max(1, row["first_step"] + 1 - back)
    hi = row["first_step"] + row["frames"]
    if not row["frames"]:
        lo, hi = min(lo, row["first_step"]), row["last_step"]
    return framed_steps(run_dir, row["life"], lo, hi)


def trace(run_dir: Path) -> dict[tuple[int, int], dict]:
    """steps.jsonl by ``(step, life)``."""
    return {(s["step"], s["life"]): s for s in jsonl(run_dir / "steps.jsonl")}


def death_with_causes_before(root: Path) -> tuple[Path, dict, dict]:
    """A death during a collect whose episode has fewer frames than :data:`BACK` and whose
    previous episode (ending where it begins) is of the same life and has frames, the health
    falling in the steps before: its run, index row and death record. The one with the fewest
    frames of its own first."""
    found = []
    for run in sample_runs(root):
        index = jsonl(run / "index.jsonl")
        ends = {(r["last_step"], r["life"]): r for r in index if r.get("frames")}
        steps = trace(run)
        for e in jsonl(run / "lives.jsonl"):
            if e["event"] != "death" or not e.get("episode"):
                continue
            r = next(x for x in index if x["id"] == e["episode"])
            prev = ends.get((r["first_step"], r["life"]))
            if r["action_kind"] != "collect" or r["frames"] >= BACK or prev is None:
                continue
            before = [steps[(s, r["life"])]["health"] for s in range(max(1, r["first_step"] + 1 - BACK),
                                                                     r["first_step"] + 1) if (s, r["life"]) in steps]
            if before and min(before) < 9:
                found.append((r["frames"], run, r, e))
    assert found, "no sample run has a death during a collect whose previous episode is in the same life"
    best = min(found, key=lambda f: f[0])
    return best[1], best[2], best[3]


def target_of(run_dir: Path, row: dict) -> tuple[int, int] | None:
    """The target cell of an episode's action (action.json), if it names one."""
    args = action_of(run_dir, row).get("args") or {}
    return (args["x"], args["y"]) if isinstance(args.get("x"), int) and isinstance(args.get("y"), int) else None


def inspected_episodes(turn: dict) -> list[str]:
    """The episodes a turn inspected, in the order first inspected, each once."""
    return list(dict.fromkeys(c["args"]["episode"] for c in turn["calls"] if c["tool"] == "inspect"))


def shown_step(turn: dict, episode: str, index_row: dict | None) -> tuple[int | None, str]:
    """The frame the Retargeting page shows for ``episode`` of ``turn`` and why: the step of
    the find(s) on a new target (most such finds, the earliest of equals), else on a target in
    the plan, else the step with the most finds, else the episode's last stored frame (the
    first an inspection looks at), else None. Worked out from the turn's record alone."""
    new = {(g["x"], g["y"]) for g in turn["targets"] if not g.get("in_plan")}
    planned = {(g["x"], g["y"]) for g in turn["targets"]} - new
    finds = [dict(k) for k in dict.fromkeys(
        tuple(sorted(f.items())) for c in turn["calls"] if c["tool"] == "inspect" and c["args"]["episode"] == episode
        for f in c["result"].get("found") or [] if isinstance(f.get("step"), int))]
    for cells, why in ((new, "new"), (planned, "plan"), (None, "most")):
        hits = [f for f in finds if cells is None or (f["x"], f["y"]) in cells]
        if hits:
            count: dict[int, int] = {}
            for f in hits:
                count[f["step"]] = count.get(f["step"], 0) + 1
            return min(count, key=lambda s: (-count[s], s)), why
    if index_row and index_row.get("frames"):
        return index_row["first_step"] + index_row["frames"], "none"
    return None, "none"


def most_inspected_retarget(root: Path) -> tuple[Path, dict]:
    """Of the agent runs under ``root``, the retargeting turn (a target outside its plan) that
    inspected the most distinct episodes, the first of equals: its run and record."""
    best: tuple[int, Path, dict] | None = None
    for run in sample_runs(root):
        for t in sorted(jsonl(run / "turns.jsonl"), key=lambda t: t["turn"]):
            n = len(inspected_episodes(t))
            if any(not g.get("in_plan") for g in t["targets"]) and (best is None or n > best[0]):
                best = (n, run, t)
    assert best is not None
    return best[1], best[2]


def replay_memory(run_dir: Path) -> list[tuple[dict, str, str]]:
    """Every memory write with its file's text before and after it, rebuilt from the log's
    snapshots and line diffs (each hunk ``[lo, hi, lines]`` replaces lines ``lo..hi`` of the
    previous text, hunks applied from the last), checked against the write's sha256."""
    import hashlib

    files: dict[str, list[str]] = {}
    out = []
    for w in jsonl(run_dir / "memory_writes.jsonl"):
        before = "".join(files.get(w["path"], []))
        if "snapshot" in w and w["snapshot"] is not None:
            lines = w["snapshot"].splitlines(keepends=True)
        elif w.get("op") == "delete":
            lines = []
        else:
            lines = list(files.get(w["path"], []))
            for lo, hi, new in sorted(w.get("diff") or [], key=lambda h: h[0], reverse=True):
                lines[lo:hi] = new
        after = "".join(lines)
        if w.get("sha256") and w.get("op") != "delete":
            assert hashlib.sha256(after.encode("utf-8")).hexdigest() == w["sha256"], f"write {w['seq']}"
        files[w["path"]] = lines
        out.append((w, before, after))
    return out


def retarget_seen_in_many(root: Path, more_than: int = 3) -> tuple[Path, dict]:
    """Of the agent runs under ``root``, a retargeting turn that inspected more than
    ``more_than`` episodes, one of whose finds lies on a new target: the one with the most
    inspected episodes (the first of equals), its run and record."""
    best: tuple[int, Path, dict] | None = None
    for run in sample_runs(root):
        for t in sorted(jsonl(run / "turns.jsonl"), key=lambda t: t["turn"]):
            eps = inspected_episodes(t)
            if len(eps) > more_than and any(shown_step(t, e, None)[1] == "new" for e in eps) \
                    and (best is None or len(eps) > best[0]):
                best = (len(eps), run, t)
    assert best is not None, f"no sample turn inspects more than {more_than} episodes and sees a new target"
    return best[1], best[2]


# The time cursor, search and notes (issue 43, the rest): plain json readers of the run files.


def turn_taking(run_dir: Path, life: int, step: int) -> dict | None:
    """The turn record of ``life`` whose actions took ``step`` (first_step < step <= last_step,
    the last such in the file), else the last one of the life decided at ``step``."""
    turns = [t for t in jsonl(run_dir / "turns.jsonl") if t["life"] == life]
    took = [t for t in turns if t["first_step"] < step <= t["last_step"]]
    if took:
        return sorted(took, key=lambda t: (t["first_step"], t["turn"]))[-1]
    at = [t for t in turns if t["first_step"] == step]
    return sorted(at, key=lambda t: (t["first_step"], t["turn"]))[-1] if at else None


def episode_playing(run_dir: Path, life: int, step: int) -> dict | None:
    """The index row of ``life`` that played ``step`` (the last in the file), else the last
    ending at it."""
    rows = [r for r in jsonl(run_dir / "index.jsonl") if r["life"] == life]
    played = [r for r in rows if r["first_step"] < step <= r["last_step"]]
    if played:
        return played[-1]
    ended = [r for r in rows if r["last_step"] == step]
    return ended[-1] if ended else None


def memory_as_of(run_dir: Path, path: str, step: int) -> tuple[str | None, int, int]:
    """``path`` as of env ``step`` under the docs' as-of rule (a write holds from its step; a
    plan write, ``plan:`` to mine/working.md, from its turn's first step; never later than a
    later write to the file): its text (None before the first write), its version number
    (0 before it) and the number of versions."""
    firsts = {t["turn"]: t["first_step"] for t in jsonl(run_dir / "turns.jsonl")}
    writes = [(w, after) for w, _, after in replay_memory(run_dir) if w["path"] == path]
    own = []
    for w, _ in writes:
        start = w["step"]
        if path == "mine/working.md" and str(w["reason"]).startswith("plan:") and w.get("turn") in firsts \
                and firsts[w["turn"]] <= w["step"]:
            start = firsts[w["turn"]]
        own.append(start)
    holds, low = [0] * len(own), None
    for i in range(len(own) - 1, -1, -1):
        low = own[i] if low is None else min(low, own[i])
        holds[i] = low
    shown = [i for i, h in enumerate(holds) if h <= step]
    if not shown:
        return None, 0, len(writes)
    i = shown[-1]
    return (None if writes[i][0].get("op") == "delete" else writes[i][1]), i + 1, len(writes)


def turns_mentioning(run_dir: Path, word: str) -> tuple[list[int], list[int]]:
    """The turns whose search calls name ``word`` in their arguments, and those whose
    inspections found a thing called ``word`` (sorted, each once)."""
    asked, found = set(), set()
    for t in jsonl(run_dir / "turns.jsonl"):
        for c in t["calls"]:
            if c["tool"] == "search" and word in json.dumps(c["args"]).lower():
                asked.add(t["turn"])
            if c["tool"] == "inspect" and any(f.get("name") == word for f in c["result"].get("found") or []):
                found.add(t["turn"])
    return sorted(asked), sorted(found)
