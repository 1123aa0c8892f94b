"""Computations behind the analysis pages (retargeting, steps per turn, memory, progress) and
the paper figures.

Plain functions over opened runs, no Streamlit. The statistics themselves come from
:mod:`loaders.paper_measures`; this module shapes them into tables and series for the pages and
the paper figures.
"""
from __future__ import annotations

import difflib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from loaders import paper_measures, provenance
from loaders.paper_measures import RADIUS, Retargeting
from loaders.run import Run
from mfm.schema import IndexRow, TurnRow


def method_of(run: Run) -> str:
    """The run's method as the tables name it (method plus ablations), or its folder name."""
    return paper_measures.label(run.manifest) if run.manifest else run.name


def seed_of(run: Run) -> int:
    return int(run.manifest.seed) if run.manifest else 0


def _method_key(name: str) -> tuple[int, str]:
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
    """The A.4 statistics per run and per method (pooled over seeds), counts beside rates."""
    per_run, pooled = [], {}
    for key, run in runs:
        r = run_retargeting(run, radius)
        method = method_of(run)
        per_run.append({"run": key, "method": method, "seed": seed_of(run), **_retarget_row(r)})
        seeds, total = pooled.get(method, (0, Retargeting()))
        pooled[method] = (seeds + 1, total + r)
    per_method = [{"method": m, "runs": pooled[m][0], **_retarget_row(pooled[m][1])}
                  for m in sorted(pooled, key=_method_key)]
    return pd.DataFrame(per_run), pd.DataFrame(per_method)


def _near(target: dict, looked: list[IndexRow], radius: float) -> tuple[bool, float]:
    d = min((math.hypot(float(target["x"]) - r.x, float(target["y"]) - r.y) for r in looked), default=float("nan"))
    return (not math.isnan(d) and d <= radius), d


def _looked(turn: TurnRow, by_id: dict[str, IndexRow]) -> list[IndexRow]:
    return [by_id[e] for e in paper_measures.inspected(turn) if e in by_id and by_id[e].x is not None]


def retarget_turns(run: Run, radius: float = RADIUS) -> pd.DataFrame:
    """Every turn that names a target absent from its plan: ``turn, life, step, inspected,
    targets, near, nearest`` (``near``: new targets within ``radius`` of an inspected
    episode's position; ``nearest``: the smallest such distance)."""
    by_id = {r.id: r for r in run.records("index.jsonl")}
    rows = []
    for t in run.records("turns.jsonl"):
        new = paper_measures.retargets(t)
        if not new:
            continue
        looked = _looked(t, by_id)
        near = [_near(g, looked, radius) for g in new]
        dists = [d for _, d in near if not math.isnan(d)]
        rows.append({"turn": t.turn, "life": t.life, "step": t.first_step,
                     "inspected": ", ".join(r.id for r in looked),
                     "targets": "; ".join(f"{g.get('kind', '?')} ({g['x']}, {g['y']})" for g in new),
                     "near": f"{sum(n for n, _ in near)}/{len(new)}" if looked else "",
                     "nearest": round(min(dists), 1) if dists else None})
    return pd.DataFrame(rows, columns=["turn", "life", "step", "inspected", "targets", "near", "nearest"])


@dataclass
class RetargetAudit:
    """One retarget turn in full: what it searched, inspected, had, planned, and chose."""

    turn: TurnRow
    searches: list[dict] = field(default_factory=list)
    inspections: list[dict] = field(default_factory=list)
    position: tuple[float, float] | None = None
    targets: list[dict] = field(default_factory=list)
    radius: float = RADIUS


def _position(run: Run, step: int) -> tuple[float, float] | None:
    st = run.steps()
    if len(st):
        before = st[(st["step"] <= step) & st["x"].notna()]
        if len(before):
            row = before.iloc[int(before["step"].to_numpy().argmax())]
            return float(row["x"]), float(row["y"])
    ends = [r for r in run.records("index.jsonl") if r.last_step <= step and r.x is not None]
    return (float(ends[-1].x), float(ends[-1].y)) if ends else None


def retarget_audit(run: Run, turn: int, radius: float = RADIUS) -> RetargetAudit | None:
    """The audit of turn number ``turn``, or None if the run has no such turn."""
    t = next((x for x in run.records("turns.jsonl") if x.turn == turn), None)
    if t is None:
        return None
    by_id = {r.id: r for r in run.records("index.jsonl")}
    out = RetargetAudit(turn=t, position=_position(run, t.first_step), radius=radius)
    looked = {r.id for r in _looked(t, by_id)}
    for c in t.calls:
        args, res = c.get("args") or {}, c.get("result") or {}
        if c.get("tool") == "search":
            out.searches.append({"query": {k: v for k, v in args.items()}, "returned": list(res.get("ids") or [])})
        elif c.get("tool") == "inspect":
            ep = str(args.get("episode") or "")
            row = by_id.get(ep)
            out.inspections.append({
                "episode": ep, "frames": args.get("frames"), "counted": ep in looked,
                "x": row.x if row else None, "y": row.y if row else None,
                "last_step": row.last_step if row else None,
                "found": [f"{f.get('name')} ({f.get('x')}, {f.get('y')}) @ {f.get('step')}"
                          for f in res.get("found") or [] if isinstance(f, dict)]})
    for g in paper_measures.retargets(t):
        near, d = _near(g, [by_id[e] for e in looked], radius)
        out.targets.append({**g, "near": near, "nearest": None if math.isnan(d) else round(d, 1)})
    return out


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


def seed_bands(series: Sequence[tuple[str, int, pd.DataFrame]], column: str, points: int = 200,
               hold: bool = False) -> pd.DataFrame:
    """Per method, the mean and the min-max band over seeds of a series on a common step grid.

    ``series`` items are ``(method, seed, frame with step and column)``. Each seed is
    interpolated (or, with ``hold``, carried forward as a step function) over its own step
    range only (with ``hold``, a finished run keeps its last value). Columns: ``method, step, mean, lo, hi, seeds``."""
    usable = [(m, s, d.dropna(subset=[column])) for m, s, d in series if len(d)]
    usable = [(m, s, d) for m, s, d in usable if len(d)]
    if not usable:
        return pd.DataFrame(columns=["method", "step", "mean", "lo", "hi", "seeds"])
    top = max(int(d["step"].max()) for _, _, d in usable)
    low = min(int(d["step"].min()) for _, _, d in usable)
    grid = np.unique(np.linspace(low, top, max(2, points)).round().astype(int))
    out = []
    for method in sorted({m for m, _, _ in usable}, key=_method_key):
        stack = []
        for _, _, d in (u for u in usable if u[0] == method):
            d = d.sort_values("step")
            xs, ys = d["step"].to_numpy(float), d[column].to_numpy(float)
            if hold:
                idx = np.searchsorted(xs, grid, side="right") - 1
                vals = ys[np.clip(idx, 0, None)].astype(float)
            else:
                vals = np.interp(grid, xs, ys)
            vals[(grid < xs.min()) | ((grid > xs.max()) & (not hold))] = np.nan
            stack.append(vals)
        arr = np.vstack(stack)
        seen = (~np.isnan(arr)).sum(axis=0)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, lo, hi = np.nanmean(arr, axis=0), np.nanmin(arr, axis=0), np.nanmax(arr, axis=0)
        out.append(pd.DataFrame({"method": method, "step": grid, "mean": mean, "lo": lo, "hi": hi, "seeds": seen}))
    return pd.concat(out, ignore_index=True)


def exceed_intervals(bands: pd.DataFrame, method: str = "mfm",
                     others: Sequence[str] = ("pro-long", "vista")) -> list[tuple[int, int]]:
    """Step intervals where ``method``'s mean exceeds every one of ``others`` (all present)."""
    have = set(bands["method"]) if len(bands) else set()
    if method not in have or not all(o in have for o in others):
        return []
    wide = bands.pivot_table(index="step", columns="method", values="mean")
    above = wide[method].notna()
    for o in others:
        above &= wide[method] > wide[o]
    steps = wide.index.to_numpy()
    out, start = [], None
    for i, flag in enumerate(above.to_numpy()):
        if flag and start is None:
            start = steps[i]
        if not flag and start is not None:
            out.append((int(start), int(steps[i - 1])))
            start = None
    if start is not None:
        out.append((int(start), int(steps[-1])))
    return out


def memory_paths(run: Run) -> list[str]:
    """Every ``mine/`` path the run ever wrote, sorted."""
    return sorted({w.path for w in run.records("memory_writes.jsonl")})


def memory_steps(run: Run, path: str) -> list[int]:
    """The env steps at which ``path`` was written."""
    return sorted({w.step for w in run.records("memory_writes.jsonl") if w.path == path})


def memory_diff(run: Run, path: str, a: int, b: int) -> str:
    """A unified diff of ``path`` between its versions as of steps ``a`` and ``b``."""
    old = run.memory_file(path, a) or ""
    new = run.memory_file(path, b) or ""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{path} @ step {a}", tofile=f"{path} @ step {b}"))


def memory_provenance(run: Run, path: str, as_of_step: int | None) -> pd.DataFrame:
    """Each line of ``path`` as of a step with the write that set it, whether and when a later
    write removed it, and whether a later write contradicted it (see
    :func:`loaders.provenance.contradictions`): ``line, text, step, turn, author, reason,
    sources, removed_at, contradicted_at, contradiction, now, contradicted_by, contradicting_sources``."""
    lines = run.memory_blame(path, as_of_step)
    removed = provenance.removal_steps(run, path, as_of_step, lines)
    rows = [{"line": i + 1, "text": b.text.rstrip("\n"), "step": b.write.step, "turn": b.write.turn,
             "author": b.write.author, "reason": b.write.reason, "sources": ", ".join(b.write.sources),
             "removed_at": removed[i]} for i, b in enumerate(lines)]
    df = pd.DataFrame(rows, columns=["line", "text", "step", "turn", "author", "reason", "sources", "removed_at"])
    df["removed_at"] = df["removed_at"].astype("Int64")
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
    """:func:`loaders.paper_measures.measure` of every run with a manifest."""
    return [paper_measures.measure(r) for _, r in runs if r.manifest is not None]


def milestone_summary(ms: Sequence[paper_measures.RunMeasures]) -> pd.DataFrame:
    """The milestones table (mean ± std over seeds) in printable form."""
    t = paper_measures.milestone_table(ms)
    if not len(t):
        return pd.DataFrame(columns=["method", "seeds", "milestones", "per seed"])
    return pd.DataFrame({"method": t["method"], "seeds": t["seeds"],
                         "milestones": [f"{m:.1f} ± {s:.1f} / {o}" for m, s, o in zip(t["mean"], t["std"], t["of"])],
                         "per seed": [", ".join(f"s{k}: {v}" for k, v in d.items()) for d in t["per_seed"]]})
