"""The runs overview: one row per run for the Runs page, what a run lacks, its problems, and
milestone steps across runs. Plain functions, no Streamlit."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from loaders.inherited import inherited_from
from loaders.records import TABLE_NAMES
from loaders.run import Run


def absent_records(run: Run) -> list[str]:
    """What a run did not record (a foreign format without turns or agent memory, say), in
    words for a note on the pages."""
    out = []
    if run.turns().empty:
        out.append("turns (so no searches, inspections or targets)")
    if run.memory_writes().empty:
        out.append("agent-written memory")
    if run.steps().empty:
        out.append("a per-step trace (so no per-step frames, vitals or paths)")
    return out


def problems_table(run: Run) -> pd.DataFrame:
    """The run's problems as rows ``where, severity, message`` (``where`` is file:line)."""
    return pd.DataFrame([(f"{p.file}:{p.line}" if p.line else p.file, p.severity, p.message) for p in run.problems],
                        columns=["where", "severity", "message"])


def runs_overview(runs: list[Run], root: Path, check: bool = True) -> pd.DataFrame:
    """One row per run for the Runs page, keyed by its path relative to ``root``;
    ``inherited`` names the run whose memory it inherited ("" for none).

    With ``check`` every run's tables are read (once per change of its files) so that
    ``problems`` is counted; without it only manifests and line counts are read, and
    ``problems`` is counted only for runs already read (None for the others)."""
    root = root.resolve()
    rows = []
    for r in runs:
        s = (r.load() if check else r).summary()  # read once: the summary of a read run counts its records
        try:
            key = r.path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        rows.append({
            "key": key, "task": s["task"], "method": s["method"], "ablations": s["ablations"] or "—",
            "seed": s["seed"], "steps": s["steps"], "budget": s["budget"], "lives": s["lives"],
            "deaths": s["deaths"], "milestones": f"{s['milestones']}/{s['milestones_total']}",
            "milestones_reached": s["milestones"], "milestones_total": s["milestones_total"],
            "status": s["status"], "episodes": s["episodes"],
            "problems": len(r.problems) if check or r.loaded else None,
            "inherited": str((inherited_from(r) or {}).get("run") or ""),
        })
    return pd.DataFrame(rows, columns=["key", "task", "method", "ablations", "seed", "steps", "budget", "lives",
                                       "deaths", "milestones", "milestones_reached", "milestones_total", "status",
                                       "episodes", "problems", "inherited"])


def milestone_steps(runs: list[Run], root: Path) -> pd.DataFrame:
    """When each run first reached each milestone: ``run, method, milestone, order, step``."""
    rows = []
    for r in runs:
        m = r.manifest
        if m is None:
            continue
        order = list(m.milestone_order)
        key = r.path.resolve().relative_to(root.resolve()).as_posix() if root.resolve() in r.path.resolve().parents \
            else r.name
        for name, step in m.milestones.items():
            rows.append((key, m.method, name, order.index(name) if name in order else len(order), int(step)))
    return pd.DataFrame(rows, columns=["run", "method", "milestone", "order", "step"])


def milestone_order(runs: list[Run], reached: pd.DataFrame) -> list[str]:
    """The milestones of :func:`milestone_steps` ``reached`` in the order the runs' manifests
    list them (the first run's list first, then each later run's new ones), the milestones no
    manifest lists after them, sorted by name."""
    listed: list[str] = []
    for r in runs:
        if r.manifest:
            listed += [m for m in r.manifest.milestone_order if m not in listed]
    names = set(reached["milestone"])
    return [m for m in listed if m in names] + sorted(names - set(listed))


def first_reached(reached: pd.DataFrame) -> pd.DataFrame:
    """:func:`milestone_steps` as a table of milestones (rows, in each milestone's ``order``)
    by run (columns): the step at which the run first reached it (empty: never)."""
    wide = reached.pivot_table(index="milestone", columns="run", values="step", aggfunc="min")
    order = reached.drop_duplicates("milestone").set_index("milestone")["order"].sort_values()
    return wide.reindex(order.index)


def table_sizes(run: Run) -> pd.DataFrame:
    """The tables a run's SQL sees (``loaders.records.TABLE_NAMES``): ``table`` name, ``rows`` and
    ``columns`` (their names, comma-separated)."""
    return pd.DataFrame([{"table": t, "rows": len(df := run.table(t)), "columns": ", ".join(map(str, df.columns))}
                         for t in TABLE_NAMES.values()], columns=["table", "rows", "columns"])
