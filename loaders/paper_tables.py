"""The paper's tables (Table 2 milestones per method, Table 4 the mfm ablations, A.4
retargeting, the interaction counts, the reach of retrieval and the temporal-reach successes
against the delay D) as tables of display cells,
written once and rendered three ways: Markdown (``mfm results``), LaTeX with booktabs rules
and CSV (``mfm figures``, beside the figures). The numbers come from
:mod:`loaders.paper_measures`; each cell here is only their formatting.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from loaders.escape import latex_label, latex_text, md_text
from loaders.paper_measures import RADIUS, RunMeasures, inherit_table, interaction_table, milestone_table, \
    reach_success_table, reach_table, retarget_table, seed_label


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%"


def _of(rate: float, n: int, what: str) -> str:
    return f"{_pct(rate)} of {n}" if n else f"n/a (0 {what})"


def _seeds(d: dict) -> str:
    return ", ".join(f"{seed_label(k)}: {'-' if v is None else v}" for k, v in d.items())


def milestones(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Milestones reached per method (Table 2; Table 4 for ablations): mean ± std over seeds."""
    t = milestone_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "seeds": t["seeds"],
        "milestones (mean ± std)": [f"{_f(m)} ± {_f(s)} of {o}" if n > 1 else f"{_f(m)} of {o} (single run)"
                                    for m, s, o, n in zip(t["mean"], t["std"], t["of"], t["seeds"])],
        "per seed": [_seeds(d) for d in t["per_seed"]],
        "diamond at step": [_seeds(d) for d in t["diamond_step"]],
        "steps used": [_seeds(d) for d in t["steps"]],
        "deaths (all seeds)": t["deaths"]})


def retargeting(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Retargeting after inspection (A.4), pooled over seeds."""
    t = retarget_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "seeds": t["seeds"],
        "retarget rate, inspecting turns": [_of(r, n, "turns") for r, n in zip(t["inspect_retarget_rate"],
                                                                             t["inspect_turns"])],
        "retarget rate, other turns": [_of(r, n, "turns") for r, n in zip(t["other_retarget_rate"], t["other_turns"])],
        f"new targets within {RADIUS:g} of an inspected episode": [
            f"{a}/{n} ({_pct(a / n)})" if n else "n/a (0 targets)" for a, n in zip(t["near"], t["new_targets"])],
        "null rate": [_pct(v) if not math.isnan(v) else "n/a" for v in t["null_rate"]]})


def interaction(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Env steps per turn, model and tool calls per milestone, pooled over seeds."""
    t = interaction_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "env steps": t["steps"], "turns (model calls)": t["turns"],
        "env steps/turn": [_f(v, 2) for v in t["steps_per_turn"]],
        "model calls/milestone": [_f(v) for v in t["model_calls_per_milestone"]],
        "tool calls": t["tool_calls"], "tool calls/milestone": [_f(v) for v in t["tool_calls_per_milestone"]],
        "tool calls by tool": [", ".join(f"{k} {v}" for k, v in d.items()) or "-" for d in t["calls_by_tool"]]})


def reach(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """How far back retrieval reaches: the age of retrieved episodes, pooled over seeds."""
    t = reach_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "retrieved by": t["tool"], "episodes retrieved": t["episodes"],
        "median age (steps)": [_f(v, 0) for v in t["median"]], "90th percentile": [_f(v, 0) for v in t["p90"]],
        "max": t["max"], "share older than 1,000 steps": [_pct(v) for v in t["over_1000"]]})


def reach_success(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Temporal reach: success against the delay D per method, with 95% intervals (Wilson for
    the rate; Student's t for the mean steps, its lower end shown no lower than 0), and the age
    of the recalls that led to the successes."""
    t = reach_success_table(ms)
    if t.empty:
        return pd.DataFrame()

    def ages(v: list[int]) -> str:
        return f"median {int(np.median(v)):,}, max {max(v):,}" if v else "-"

    return pd.DataFrame({
        "D": [f"{d} (kit)" if "-kit-" in task else str(d) for d, task in zip(t["delay"], t["task"])],
        "method": t["method"],
        "diamonds": [f"{k}/{n}" for k, n in zip(t["successes"], t["seeds"])],
        "rate (95% CI)": [f"{_pct(r)} ({_pct(lo)}-{_pct(hi)})" for r, lo, hi in zip(t["rate"], t["rate_lo"], t["rate_hi"])],
        "steps to diamond (95% CI)": [("-" if m != m else _f(m, 0) if lo != lo else
                                       f"{_f(m, 0)} ({_f(max(lo, 0.0), 0)}-{_f(hi, 0)})")
                                      for m, lo, hi in zip(t["steps_mean"], t["steps_lo"], t["steps_hi"])],
        "place last noted from frames / by sight / no recall": [
            f"{a} / {b} / {c}" for a, b, c in zip(t["by_frames"], t["by_notes"], t["by_sight"])],
        "age of the episode that showed it (steps)": [ages(v) for v in t["recall_ages"]],
        "shown in an earlier life": [f"{k}/{n}" if n else "-" for k, n in zip(t["earlier_life"], t["successes"])],
        "kept in GUIDE.md before use (steps)": [ages(v) for v in t["kept"]],
        "share older than 1,000 steps": [_pct(v) if v == v else "-" for v in t["over_1000"]]})


def inherited_memory(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """New games in a known world (paper §5.2): the task done with no memory and with an
    earlier run's memory, and how often that memory held the target's place."""
    t = inherit_table(ms)
    if t.empty:
        return pd.DataFrame()
    held = [("-" if h is None or h != h else f"{int(h)}/{n} ({int(k)}/{int(h)} done)")
            for h, n, k in zip(t["held"], t["runs"], t["held_successes"])]
    return pd.DataFrame({
        "task": t["task"], "method": t["method"], "memory": [
            m if m == "none" else f"{m} from {', '.join(f)}" for m, f in zip(t["memory"], t["from"])],
        "done": [f"{k}/{n}" for k, n in zip(t["successes"], t["runs"])],
        "rate (95% CI)": [f"{_pct(r)} ({_pct(lo)}-{_pct(hi)})" for r, lo, hi in zip(t["rate"], t["rate_lo"], t["rate_hi"])],
        "median steps (successes)": ["-" if v != v else _f(v, 0) for v in t["steps_median"]],
        "steps per seed (-: not done)": [", ".join(f"{seed_label(k)} {'-' if v is None else v}" for k, v in d.items())
                                         for d in t["per_seed"]],
        "memory held the target": held})


def to_markdown(df: pd.DataFrame) -> str:
    """A Markdown table whose cells show their text literally (:func:`loaders.escape.md_text`:
    no raw HTML, link, image or emphasis; pipes and line breaks cannot break a row)."""
    head = "| " + " | ".join(map(md_text, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(map(md_text, row)) + " |"
                                     for row in df.itertuples(index=False)])


latex_escape = latex_text
"""Text as LaTeX source that prints it literally (:func:`loaders.escape.latex_text`)."""


def to_latex(df: pd.DataFrame, caption: str, label: str) -> str:
    """A ``table`` with a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``): numbers and
    counts right-aligned, text left-aligned; the caption and every cell escaped
    (:func:`loaders.escape.latex_text`), the label reduced to a safe key
    (:func:`loaders.escape.latex_label`)."""
    align = "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in df.columns) or "l"
    rows = [" & ".join(latex_text(v) for v in row) + r" \\" for row in df.itertuples(index=False)]
    return "\n".join([r"\begin{table}[t]", r"\centering", r"\small",
                      rf"\caption{{{latex_text(caption)}}}", rf"\label{{{latex_label(label)}}}",
                      rf"\begin{{tabular}}{{{align}}}", r"\toprule",
                      " & ".join(latex_text(c) for c in df.columns) + r" \\", r"\midrule", *rows,
                      r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def tables(ms: Sequence[RunMeasures]) -> list[tuple[str, str, pd.DataFrame]]:
    """Every table that has rows, as ``(name, title, table)``: methods first, then the mfm
    ablations (with the full mfm for reference) when there are any."""
    base = [m for m in ms if not m.ablations]
    abl = [m for m in ms if m.base == "mfm"]
    out = [("milestones", "Milestones reached, per method (paper Table 2)", milestones(base)),
           ("ablations", "Milestones reached, mfm ablations (paper Table 4)",
            milestones(abl) if len({m.method for m in abl}) > 1 else pd.DataFrame()),
           ("retargeting", f"Retargeting after inspection (paper A.4; radius {RADIUS:g} cells)", retargeting(ms)),
           ("interaction", "Interaction: env steps per turn, model and tool calls per milestone", interaction(ms)),
           ("reach", "How far back retrieval reaches (age of retrieved episodes)", reach(ms)),
           ("reach-success", "Temporal reach: diamonds got against the delay D (95% intervals)", reach_success(ms)),
           ("inherited-memory", "New games in a known world: no memory vs an earlier run's (paper §5.2)",
            inherited_memory(ms))]
    return [(n, t, df) for n, t, df in out if len(df)]
