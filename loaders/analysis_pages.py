"""Computations behind the analysis pages (retargeting, steps per turn, memory, progress) and
the paper figures.

Plain functions over opened runs, no Streamlit. The statistics themselves come from
:mod:`loaders.paper_measures`; this module shapes them into tables and series for the pages and
the paper figures.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from loaders import paper_measures, paper_tables, provenance
from loaders.inherited import is_inherited, locate
from loaders.paper_measures import RADIUS, Retargeting
from loaders.remote.mirror import run_identity
from loaders.run import Run
from loaders.agent_calls import search_hits, search_text
from loaders.lookups import position_at
from mfm.schema import IndexRow, TurnRow


def method_of(run: Run) -> str:
    """The run's method as the tables name it (method plus ablations), or its folder name."""
    return paper_measures.label(run.manifest) if run.manifest else run.name


def seed_of(run: Run) -> int | None:
    """The run's world seed, or None where the run records none (a foreign export)."""
    seed = run.manifest.seed if run.manifest else None
    return None if seed is None else int(seed)


def distinct(runs: Sequence[tuple[str, Run]]) -> list[tuple[str, Run]]:
    """``runs`` with each run once (its first entry), however often and under whatever keys
    it was named (``loaders.remote.mirror.run_identity``): no statistic counts a run twice."""
    seen: dict[str, tuple[str, Run]] = {}
    for key, run in runs:
        seen.setdefault(run_identity(run.path), (key, run))
    return list(seen.values())


def method_key(name: str) -> tuple[int, str]:
    """Sort key of a method: the paper's order first, then by name."""
    return (paper_measures.ORDER.index(name) if name in paper_measures.ORDER else len(paper_measures.ORDER), name)


def _rate(num: int, den: int) -> float:
    return num / den if den else float("nan")


def _retarget_row(r: Retargeting) -> dict[str, Any]:
    return {"inspect_turns": r.inspect_turns, "inspect_retargets": r.inspect_retargets,
            "inspect_rate": r.inspect_rate, "other_turns": r.other_turns, "other_retargets": r.other_retargets,
            "other_rate": r.other_rate, "new_targets": r.new_targets, "near": r.near,
            "near_rate": _rate(r.near, r.new_targets), "null_rate": r.null_rate}


def run_retargeting(run: Run, radius: float = RADIUS) -> Retargeting:
    """The A.4 counts of one run (see :func:`loaders.paper_measures.retargeting`)."""
    return paper_measures.retargeting(run.records("turns.jsonl"), run.records("index.jsonl"), radius)


def retarget_tables(runs: Sequence[tuple[str, Run]], radius: float = RADIUS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The A.4 statistics per run and per method (pooled over seeds, each run once), counts
    beside rates."""
    per_run, pooled = [], {}
    for key, run in distinct(runs):
        r = run_retargeting(run, radius)
        method = method_of(run)
        per_run.append({"run": key, "method": method, "seed": seed_of(run), **_retarget_row(r)})
        seeds, total = pooled.get(method, (0, Retargeting()))
        pooled[method] = (seeds + 1, total + r)
    per_method = [{"method": m, "runs": pooled[m][0], **_retarget_row(pooled[m][1])}
                  for m in sorted(pooled, key=method_key)]
    return pd.DataFrame(per_run), pd.DataFrame(per_method)


def _near(target: dict, looked: list[IndexRow], radius: float) -> tuple[bool, float]:
    d = min((math.hypot(float(target["x"]) - r.x, float(target["y"]) - r.y) for r in looked), default=float("nan"))
    return (not math.isnan(d) and d <= radius), d


def _looked(turn: TurnRow, by_id: dict[str, IndexRow]) -> list[IndexRow]:
    return [by_id[e] for e in paper_measures.inspected(turn) if e in by_id and by_id[e].x is not None]


def retarget_turns(run: Run, radius: float = RADIUS) -> pd.DataFrame:
    """Every turn that names a target absent from its plan: ``turn, life, step, inspected,
    targets, near, nearest`` (``near``: new targets within ``radius`` of an inspected
    episode's position; ``nearest``: the smallest such distance). ``inspected`` also lists the
    inherited episodes the turn inspected, named with the run they came from; like the §A.4
    statistics (:func:`loaders.paper_measures.retargeting`), ``near`` and ``nearest`` count
    only the run's own episodes (empty ``near``: the turn inspected none of them)."""
    by_id = {r.id: r for r in run.records("index.jsonl")}
    rows = []
    for t in run.records("turns.jsonl"):
        new = paper_measures.retargets(t)
        if not new:
            continue
        looked = _looked(t, by_id)
        near = [_near(g, looked, radius) for g in new]
        dists = [d for _, d in near if not math.isnan(d)]
        theirs = [locate(run, e).label for e in paper_measures.inspected(t) if is_inherited(e)]
        rows.append({"turn": t.turn, "life": t.life, "step": t.first_step,
                     "inspected": ", ".join([r.id for r in looked] + theirs),
                     "targets": "; ".join(f"{g.get('kind', '?')} ({g['x']}, {g['y']})" for g in new),
                     "near": f"{sum(n for n, _ in near)}/{len(new)}" if looked else "",
                     "nearest": round(min(dists), 1) if dists else None})
    return pd.DataFrame(rows, columns=["turn", "life", "step", "inspected", "targets", "near", "nearest"])


@dataclass
class RetargetAudit:
    """One retarget turn in full: what it searched, inspected, had, planned, and chose.

    ``position`` is where the agent of the turn's life stood when the turn began
    (:func:`loaders.lookups.position_at` at ``turn.first_step`` in ``turn.life``: after a
    respawn, the respawn point, not where the last life died); ``had`` the ``(step, life)``
    of the frame the agent had then (for :func:`loaders.lookups.frame_at`)."""

    turn: TurnRow
    searches: list[dict] = field(default_factory=list)
    inspections: list[dict] = field(default_factory=list)
    position: tuple[float, float] | None = None
    targets: list[dict] = field(default_factory=list)
    radius: float = RADIUS
    had: tuple[int, int] | None = None


def retarget_audit(run: Run, turn: int, radius: float = RADIUS) -> RetargetAudit | None:
    """The audit of turn number ``turn``, or None if the run has no such turn. Each search is
    ``query`` (in words, :func:`loaders.agent_calls.search_text`), ``args``, ``returned`` (the
    episode ids) and ``count`` (None when the record holds no result list); each inspection
    names the inspected episode's ``life`` and the ``step`` of the frame it looked at. An
    inspection of an inherited episode is marked ``inherited`` with the run it came from
    (``from_run``); its position, life and steps are the earlier game's, read from the copy
    of that run, and it is not ``counted`` (as in the §A.4 statistics). An inspection's
    ``sightings`` are what it recognised, as recorded (``name``, ``x``, ``y``, ``step``);
    ``found`` the same in words (``name (x, y) @ step``), for display only."""
    t = next((x for x in run.records("turns.jsonl") if x.turn == turn), None)
    if t is None:
        return None
    by_id = {r.id: r for r in run.records("index.jsonl")}
    out = RetargetAudit(turn=t, position=position_at(run, t.first_step, t.life), radius=radius,
                        had=(t.first_step, t.life))
    looked = {r.id for r in _looked(t, by_id)}
    for c in t.calls:
        args = c.get("args") if isinstance(c.get("args"), dict) else {}
        res = c.get("result") if isinstance(c.get("result"), dict) else {}
        if c.get("tool") == "search":
            ids = res.get("ids")
            out.searches.append({"query": search_text(args), "args": dict(args), "count": search_hits(res),
                                 "returned": [str(i) for i in ids] if isinstance(ids, list) else []})
        elif c.get("tool") == "inspect":
            ep = str(args.get("episode") or "")
            ref = locate(run, ep) if is_inherited(ep) else None
            row = ref.row if ref is not None else by_id.get(ep)
            sightings = [{k: f.get(k) for k in ("name", "x", "y", "step")} for f in res.get("found") or []
                         if isinstance(f, dict)]
            seen = [f["step"] for f in sightings]
            seen = [v for v in seen if isinstance(v, int) and not isinstance(v, bool)]
            out.inspections.append({
                "episode": ep, "from_run": ref.origin if ref is not None else "",
                "frames": args.get("frames"), "counted": ep in looked,
                "x": row.x if row else None, "y": row.y if row else None,
                "life": row.life if row else None, "last_step": row.last_step if row else None,
                "step": args.get("step") if isinstance(args.get("step"), int) else (min(seen) if seen else None),
                "sightings": sightings,
                "found": [f"{f['name']} ({f['x']}, {f['y']}) @ {f['step']}" for f in sightings],
                "inherited": ref is not None})
    for g in paper_measures.retargets(t):
        near, d = _near(g, [by_id[e] for e in looked], radius)
        out.targets.append({**g, "near": near, "nearest": None if math.isnan(d) else round(d, 1)})
    return out


def searches_table(searches: list[dict]) -> pd.DataFrame:
    """A retarget turn's searches (:attr:`RetargetAudit.searches`) as the Retargeting page
    lists them: the query in words, how many episodes it returned and their ids."""
    return pd.DataFrame([{"query": str(s["query"]), "returned": len(s["returned"]), "ids": ", ".join(s["returned"])}
                         for s in searches], columns=["query", "returned", "ids"])


def plan_table(plan: Sequence[dict]) -> pd.DataFrame:
    """A plan (``TurnRow.plan_before`` / ``plan_after``) as a table: ``label, x, y``."""
    return pd.DataFrame(list(plan), columns=["label", "x", "y"])


def map_labels_table(groups: Sequence[tuple[float, float, Sequence[str]]]) -> pd.DataFrame:
    """What each numbered marker of the retarget map stands for: ``#``, the inspected episodes
    it groups, and where it sits (``groups`` as ``dashboard.vega_charts.inspected_groups``
    makes them: ``(x, y, episode ids)``)."""
    return pd.DataFrame({"#": range(1, len(groups) + 1), "episodes": [", ".join(g[2]) for g in groups],
                         "x": [g[0] for g in groups], "y": [g[1] for g in groups]})


def steps_per_turn(run: Run, window: int = 25) -> pd.DataFrame:
    """Env steps each turn executed (``last_step - first_step``) and their rolling median
    over ``window`` turns, against the env step at which the turn ended: ``step, steps, median``."""
    turns = run.turns()
    if not len(turns):
        return pd.DataFrame(columns=["step", "steps", "median"])
    df = pd.DataFrame({"step": turns["last_step"].astype(int),
                       "steps": (turns["last_step"] - turns["first_step"]).astype(float)}).sort_values("step")
    df["median"] = df["steps"].rolling(max(1, int(window)), min_periods=1).median()
    return df.reset_index(drop=True)


def memory_paths(run: Run) -> list[str]:
    """Every ``mine/`` path the run ever wrote, sorted."""
    return sorted({w.path for w in run.records("memory_writes.jsonl")})


def memory_steps(run: Run, path: str) -> list[int]:
    """The env steps from which the versions of ``path`` hold (the as-of rule,
    :func:`loaders.provenance.holds_from`), sorted and distinct."""
    return sorted({w.step for w in provenance.held_writes(run) if w.path == path})


def memory_versions(run: Run, path: str) -> pd.DataFrame:
    """Every version of ``path``, one per write: ``version`` (from 1), ``seq``, ``step`` (from
    which it holds), ``written_step`` (the step stamped on the write), ``turn``, ``op``,
    ``author``, ``reason``, ``sources``."""
    cols = ["version", "seq", "step", "written_step", "turn", "op", "author", "reason", "sources"]
    raw = {w.seq: w.step for w in run.records("memory_writes.jsonl")}
    rows = [(0, w.seq, w.step, raw.get(w.seq, w.step), w.turn, w.op, w.author, w.reason, ", ".join(w.sources))
            for w in provenance.held_writes(run) if w.path == path]
    df = pd.DataFrame(rows, columns=cols)
    df["version"] = range(1, len(df) + 1)
    df["turn"] = df["turn"].astype("Int64")
    return df


def memory_text(run: Run, path: str, step: int | None) -> str | None:
    """``path`` as it stood at env step ``step`` (None: its last version) under the as-of rule
    (:func:`loaders.provenance.holds_from`); None before its first write or after a delete."""
    return provenance.file_as_of(run, path, step)


def memory_unknown(run: Run, path: str) -> tuple[int, int] | None:
    """``(first, known)`` when ``path`` existed from step ``first`` but its content is unknown
    until step ``known`` (a foreign run whose history of it cannot be replayed, e.g. an MFM
    export marking it not replayable); None when every version is known. In that span
    :func:`memory_text` returns None: the page must say *unknown*, not *not written*."""
    span = getattr(run.source, "unknown", {}).get(path)
    return None if span is None else (int(span[0]), int(span[1]))


def memory_version_at(run: Run, path: str, step: int) -> int:
    """How many writes of ``path`` hold at ``step`` (0: none yet): the version shown then."""
    return sum(w.step <= step for w in provenance.held_writes(run) if w.path == path)


def previous_version_step(run: Run, path: str, step: int) -> int:
    """A step at which ``path`` stood at the version before the one current at ``step``:
    one step before the current version began to hold (before the first version: one step
    before the file's first write, where it does not exist yet)."""
    held = [w.step for w in provenance.held_writes(run) if w.path == path]
    current = [s for s in held if s <= step]
    return (current[-1] if current else (held[0] if held else step)) - 1


def memory_diff(run: Run, path: str, a: int | None = None, b: int | None = None) -> str:
    """A unified diff of ``path`` between its versions as of steps ``a`` and ``b`` (the as-of
    rule). ``b`` None: its last version; ``a`` None: the version before ``b``'s
    (:func:`previous_version_step`), so by default the diff shows what the last write changed."""
    if b is None:
        b = max(memory_steps(run, path), default=0)
    if a is None:
        a = previous_version_step(run, path, b)
    old = memory_text(run, path, a) or ""
    new = memory_text(run, path, b) or ""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{path} @ step {a}", tofile=f"{path} @ step {b}"))


def memory_provenance(run: Run, path: str, as_of_step: int | None) -> pd.DataFrame:
    """Each line of ``path`` as of a step (the as-of rule) with the write that set it, whether
    and when a later write removed it, and whether a later write contradicted it (see
    :func:`loaders.provenance.contradictions`): ``line, text, step, turn, author, reason,
    sources, cites, removed_at, contradicted_at, contradiction, now, contradicted_by, contradicting_sources``
    (``step``: the step from which the write holds; ``sources``: the write's; ``cites``: the
    episodes a knowledge line names itself, which may be fewer, e.g. one of the many sources of
    an inherited GUIDE.md's first write)."""
    lines = provenance.blame_as_of(run, path, as_of_step)
    removed = provenance.removal_steps(run, path, as_of_step, lines)
    knowledge = provenance.kind_of(path) == "knowledge"
    rows = [{"line": i + 1, "text": b.text.rstrip("\n"), "step": b.write.step, "turn": b.write.turn,
             "author": b.write.author, "reason": b.write.reason, "sources": ", ".join(b.write.sources),
             "cites": ", ".join(provenance.line_cites(b.text) if knowledge else ()), "removed_at": removed[i]}
            for i, b in enumerate(lines)]
    df = pd.DataFrame(rows, columns=["line", "text", "step", "turn", "author", "reason", "sources", "cites",
                                     "removed_at"])
    df["removed_at"] = df["removed_at"].astype("Int64")
    df["turn"] = df["turn"].astype("Int64")
    return df.merge(provenance.contradictions(run, path, as_of_step, lines), on="line", how="left")


def milestone_curve(run: Run) -> pd.DataFrame:
    """Milestones reached so far against env step (a step function): ``step, milestones``."""
    m = run.manifest
    steps = sorted(int(s) for s in (m.milestones.values() if m else ()))
    last = int(m.last_step) if m else (steps[-1] if steps else 0)
    pts = [(0, 0)] + [(s, i + 1) for i, s in enumerate(steps)] + [(max(last, steps[-1] if steps else 0),
                                                                   len(steps))]
    return pd.DataFrame(pts, columns=["step", "milestones"]).drop_duplicates("step", keep="last")


def measures(runs: Sequence[tuple[str, Run]]) -> list[paper_measures.RunMeasures]:
    """:func:`loaders.paper_measures.measure` of every run with a manifest, each run once."""
    return [paper_measures.measure(r) for _, r in distinct(runs) if r.manifest is not None]


def milestone_summary(ms: Sequence[paper_measures.RunMeasures]) -> pd.DataFrame:
    """The milestones table (mean ± std over seeds; a single run labelled so), as the paper's
    Table 2 prints it (:func:`loaders.paper_tables.milestones`), its first columns."""
    t = paper_tables.milestones(ms)
    if not len(t):
        return pd.DataFrame(columns=["method", "seeds", "milestones", "per seed"])
    return t.rename(columns={"milestones (mean ± std)": "milestones"})[["method", "seeds", "milestones", "per seed"]]
