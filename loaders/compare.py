"""The comparison tables of a sweep (paper Tables 2 and 4, appendix A.4, Figure 6), as markdown.

    mfm results DIR                     # or: python -m loaders.compare DIR
    mfm results DIR --task diamond

Every run under DIR is read (``loaders.open_runs``) and measured with ``loaders.paper_measures``;
the definitions are in that module's docstring.
"""
from __future__ import annotations

import argparse
import math
import sys
from datetime import date
from pathlib import Path
from typing import Sequence

import pandas as pd

from loaders import open_runs
from loaders.paper_measures import (RADIUS, RunMeasures, interaction_table, measure, milestone_table, reach_table,
                              retarget_table)


def _f(v: float, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%"


def _md(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)])


def milestones_md(ms: Sequence[RunMeasures]) -> str:
    t = milestone_table(ms)
    if t.empty:
        return ""
    out = pd.DataFrame({
        "method": t["method"], "seeds": t["seeds"],
        "milestones (mean ± std)": [f"{_f(m)} ± {_f(s)} of {o}" for m, s, o in zip(t["mean"], t["std"], t["of"])],
        "per seed": [", ".join(f"s{k}: {v}" for k, v in d.items()) for d in t["per_seed"]],
        "diamond at step": [", ".join(f"s{k}: {v if v is not None else '-'}" for k, v in d.items())
                            for d in t["diamond_step"]],
        "steps used": [", ".join(f"s{k}: {v}" for k, v in d.items()) for d in t["steps"]],
        "deaths (all seeds)": t["deaths"]})
    return _md(out)


def retarget_md(ms: Sequence[RunMeasures]) -> str:
    t = retarget_table(ms)
    if t.empty:
        return ""
    out = pd.DataFrame({
        "method": t["method"],
        "retarget rate, inspecting turns": [f"{_pct(r)} of {n}" for r, n in zip(t["inspect_retarget_rate"],
                                                                              t["inspect_turns"])],
        "retarget rate, other turns": [f"{_pct(r)} of {n}" for r, n in zip(t["other_retarget_rate"], t["other_turns"])],
        f"new targets within {RADIUS:g} of an inspected episode": [f"{a}/{n} ({_pct(a / n if n else math.nan)})"
                                                                   for a, n in zip(t["near"], t["new_targets"])],
        "null rate": [_pct(v) for v in t["null_rate"]]})
    return _md(out)


def interaction_md(ms: Sequence[RunMeasures]) -> str:
    t = interaction_table(ms)
    if t.empty:
        return ""
    out = pd.DataFrame({
        "method": t["method"], "env steps": t["steps"], "turns (model calls)": t["turns"],
        "env steps/turn": [_f(v, 2) for v in t["steps_per_turn"]],
        "model calls/milestone": [_f(v) for v in t["model_calls_per_milestone"]],
        "tool calls": t["tool_calls"], "tool calls/milestone": [_f(v) for v in t["tool_calls_per_milestone"]],
        "tool calls by tool": [", ".join(f"{k} {v}" for k, v in d.items()) or "-" for d in t["calls_by_tool"]]})
    return _md(out)


def reach_md(ms: Sequence[RunMeasures]) -> str:
    t = reach_table(ms)
    if t.empty:
        return "(no run searched or inspected an episode)"
    out = pd.DataFrame({
        "method": t["method"], "retrieved by": t["tool"], "episodes retrieved": t["episodes"],
        "median age (steps)": [_f(v, 0) for v in t["median"]], "90th percentile": [_f(v, 0) for v in t["p90"]],
        "max": t["max"], "share older than 1,000 steps": [_pct(v) for v in t["over_1000"]]})
    return _md(out)


def measures(root: Path, task: str | None = None) -> list[RunMeasures]:
    """The measures of every run under ``root`` (of ``task`` if given) that has a manifest."""
    out = []
    for run in open_runs(root):
        if run.manifest is None or (task is not None and run.manifest.task != task):
            continue
        out.append(measure(run))
    return out


def report(root: Path, task: str | None = None) -> str:
    """All tables, methods first, then the mfm ablations (with the full mfm for reference)."""
    ms = measures(root, task)
    if not ms:
        return ""
    base = [m for m in ms if " " not in m.method]
    abl = [m for m in ms if m.method.startswith("mfm")]
    budgets = sorted({m.budget for m in ms})
    parts = [f"Runs under `{root}` ({len(ms)} runs; step budget {', '.join(map(str, budgets))}; "
             f"{date.today().isoformat()}).", ""]
    not_done = [f"{m.name} ({m.status})" for m in ms if m.status != "finished"]
    if not_done:
        parts += [f"Not finished: {', '.join(not_done)}.", ""]
    sections = [("Milestones reached, per method (paper Table 2)", milestones_md(base)),
                ("Milestones reached, mfm ablations (paper Table 4)",
                 milestones_md(abl) if len({m.method for m in abl}) > 1 else ""),
                (f"Retargeting after inspection (paper A.4; radius {RADIUS:g} cells)", retarget_md(ms)),
                ("Interaction: env steps per turn, model and tool calls per milestone", interaction_md(ms)),
                ("How far back retrieval reaches (age of retrieved episodes)", reach_md(ms))]
    for title, body in sections:
        if body:
            parts += [f"### {title}", "", body, ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--task", default=None)
    args = ap.parse_args(argv)
    text = report(Path(args.root), args.task)
    print(text or f"no runs under {args.root}")
    return 0 if text else 1


if __name__ == "__main__":
    sys.exit(main())
