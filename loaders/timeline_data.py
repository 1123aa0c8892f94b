"""Timeline data: episode bars, marks (milestones, deaths, searches, inspections, memory writes,
model calls) and vitals over a step window, bounded for a browser. Plain functions, no Streamlit."""
from __future__ import annotations

import numpy as np
import pandas as pd

from loaders.agent_calls import (
    MODEL_KINDS,
    model_calls,
    model_turns,
    run_tool_calls,
    search_label,
    tool_calls,
)
from loaders.lookups import life_bounds, step_bounds, window
from loaders.run import Run
from mfm.envs.crafter_env import VITALS

MAX_POINTS = 50_000
"""The most points any one chart built from these views may hold."""


MARK_KINDS = ("milestone", "death", "search", "inspect", "memory_write", *MODEL_KINDS)


DECISION_KINDS = ("search", "inspect", *MODEL_KINDS)
"""Marks made while deciding a turn (at its first step, before the action)."""


def _bins(lo: int, hi: int, n: int) -> np.ndarray:
    return np.linspace(lo, hi + 1, max(2, n + 1))


def _category(episodes: pd.DataFrame, color_by: str) -> pd.Series:
    if color_by == "outcome":
        return episodes["outcome"].fillna("none").astype(str)
    kinds = episodes["action_kind"].astype(object)
    return kinds.where(kinds.notna(), episodes["kind"]).astype(str)


def episodes_in_range(episodes: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """The episodes (rows of an episodes table) that overlap steps ``lo``–``hi``: ending at
    ``lo`` or later and starting at ``hi`` or earlier, in the table's order."""
    if not len(episodes):
        return episodes
    return episodes[(episodes["last_step"] >= lo) & (episodes["first_step"] <= hi)]


def timeline_bars(episodes: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                  color_by: str = "action_kind", max_bars: int = 3000) -> pd.DataFrame:
    """Episode bars for the timeline: one row per episode, or per step bin when too many.

    Columns: ``life, start, end, category, episode, label, count``. ``start``/``end`` are env
    steps; when more than ``max_bars`` episodes overlap ``[lo, hi]``, episodes of each life are
    merged into step bins coloured by their most frequent category (``count`` episodes each;
    ``episode`` is set only for a bin holding one episode).
    """
    cols = ["life", "start", "end", "category", "episode", "label", "count"]
    if not len(episodes):
        return pd.DataFrame(columns=cols)
    ep = episodes
    lo = int(ep["first_step"].min()) if lo is None else lo
    hi = int(ep["last_step"].max()) if hi is None else hi
    ep = episodes_in_range(ep, lo, hi)
    cat = _category(ep, color_by)
    if len(ep) <= max_bars:
        end = np.maximum(ep["last_step"].to_numpy(), ep["first_step"].to_numpy() + 0.5)
        return pd.DataFrame({
            "life": ep["life"].astype(int).to_numpy(), "start": ep["first_step"].to_numpy(), "end": end,
            "category": cat.to_numpy(), "episode": ep["id"].to_numpy(),
            "label": [f"{i} · {s}" for i, s in zip(ep["id"], ep["summary"])], "count": 1,
        }, columns=cols)
    edges = _bins(lo, hi, max(1, max_bars - ep["life"].nunique()))
    mid = (ep["first_step"].to_numpy() + ep["last_step"].to_numpy()) / 2
    b = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, len(edges) - 2)
    df = pd.DataFrame({"life": ep["life"].astype(int).to_numpy(), "bin": b, "category": cat.to_numpy(),
                       "first": ep["first_step"].to_numpy(), "last": ep["last_step"].to_numpy(),
                       "id": ep["id"].to_numpy()})
    keys = ["life", "bin"]
    agg = df.groupby(keys, sort=True).agg(start=("first", "min"), stop=("last", "max"), id=("id", "first"),
                                         count=("category", "size")).reset_index()
    cc = df.groupby([*keys, "category"]).size().rename("n").reset_index()
    cc = cc.sort_values([*keys, "n", "category"], ascending=[True, True, False, True])
    top = cc.drop_duplicates(keys).set_index(keys)["category"]
    head = cc.groupby(keys, sort=False).head(4)
    mix: dict[tuple[int, int], list[str]] = {}  # plain lists: a pandas string aggregation per bin took 0.2 s
    for life, b_, c, n in zip(head["life"].tolist(), head["bin"].tolist(), head["category"].tolist(),
                              head["n"].tolist()):
        mix.setdefault((life, b_), []).append(f"{c} {n}")
    idx = pd.MultiIndex.from_frame(agg[keys])
    return pd.DataFrame({
        "life": agg["life"], "start": agg["start"], "end": np.maximum(agg["stop"], agg["start"] + 0.5),
        "category": top.reindex(idx).to_numpy(), "episode": np.where(agg["count"] == 1, agg["id"], ""),
        "label": [f"{n} episodes, steps {a}–{z}: {', '.join(mix[(life, b_)])}" for n, a, z, life, b_ in
                  zip(agg["count"], agg["start"], agg["stop"], agg["life"].tolist(), agg["bin"].tolist())],
        "count": agg["count"]}, columns=cols)


def _bin_marks(df: pd.DataFrame, lo: int, hi: int, max_per_kind: int | None) -> pd.DataFrame:
    if max_per_kind is None or len(df) <= max_per_kind:
        return df
    edges = _bins(lo, hi, max_per_kind)
    df = df.assign(bin=np.clip(np.searchsorted(edges, df["step"].to_numpy(), side="right") - 1, 0, len(edges) - 2))
    g = df.groupby(["life", "bin"], sort=True)
    out = g.agg(step=("step", "first"), count=("count", "sum"), label=("label", "first"), kind=("kind", "first"))
    out = out.reset_index()
    out["label"] = [f"{n} × {k}, from step {s}" for n, k, s in zip(out["count"], out["kind"], out["step"])]
    out["episode"] = ""
    return out[["kind", "step", "life", "label", "episode", "count"]]


def timeline_marks(run: Run, lo: int | None = None, hi: int | None = None,
                   max_per_kind: int | None = 2000) -> pd.DataFrame:
    """:func:`marks` of a run over ``[lo, hi]`` (the whole run by default)."""
    a, b = step_bounds(run)
    return marks(run.milestones(), run.lives(), run.turns(), run.memory_writes(), a if lo is None else lo,
                 b if hi is None else hi, max_per_kind, run_tool_calls(run))


def marks(ms: pd.DataFrame, lv: pd.DataFrame, turns: pd.DataFrame, mw: pd.DataFrame, lo: int, hi: int,
          max_per_kind: int | None = 2000, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Milestones, deaths, index searches, frame inspections, memory writes and the model
    requests of each LLM turn (:data:`MODEL_KINDS`, by :func:`model_turns`) as step marks.

    Columns: ``kind, step, life, label, episode, count``; kinds beyond ``max_per_kind`` marks
    are binned (``count`` marks per row; None: never). ``calls``: ``tool_calls(turns)`` when the caller
    holds it already. Each source is cut to ``[lo, hi]`` before its labels are made.
    """
    def within(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["step"].between(lo, hi)] if len(df) else df

    ms, lv, mw = within(ms), within(lv), within(mw)
    calls = within(tool_calls(turns) if calls is None else calls)
    parts = []
    if len(ms):
        parts.append(pd.DataFrame({"kind": "milestone", "step": ms["step"], "life": ms["life"],
                                   "label": "milestone: " + ms["name"].astype(str), "episode": ms["episode"]}))
    if len(lv):
        d = lv[lv["event"] == "death"]
        parts.append(pd.DataFrame({"kind": "death", "step": d["step"], "life": d["life"],
                                   "label": "death: " + d["cause"].fillna("unknown").astype(str),
                                   "episode": d["episode"]}))
    if len(calls):
        s = calls[calls["tool"] == "search"]
        parts.append(pd.DataFrame({"kind": "search", "step": s["step"], "life": s["life"],
                                   "label": [search_label(t, n) for t, n in zip(s["text"], s["results"])],
                                   "episode": None}))
        i = calls[calls["tool"] == "inspect"]
        parts.append(pd.DataFrame({"kind": "inspect", "step": i["step"], "life": i["life"],
                                   "label": "inspect " + i["episode"].fillna("?"), "episode": i["episode"]}))
    mt = within(model_turns(model_calls(turns[turns["first_step"].between(lo, hi)] if len(turns) else turns)))
    if len(mt):
        parts.append(pd.DataFrame({"kind": "model_" + mt["status"], "step": mt["step"], "life": mt["life"],
                                   "label": mt["label"], "episode": None}))
    if len(mw):
        parts.append(pd.DataFrame({"kind": "memory_write", "step": mw["step"], "life": mw["life"],
                                   "label": mw["op"].astype(str) + " " + mw["path"].astype(str) + ": "
                                   + mw["reason"].astype(str).str.slice(0, 80), "episode": None}))
    cols = ["kind", "step", "life", "label", "episode", "count"]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    df = pd.concat(parts, ignore_index=True)
    df["count"] = 1
    out = [_bin_marks(g.sort_values("step"), lo, hi, max_per_kind) for _, g in df.groupby("kind", sort=False)]
    out = [o for o in out if len(o)]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def vitals_series(steps: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                  max_points: int = 2000) -> pd.DataFrame:
    """Health, food, drink and energy over steps; binned to the minimum per bin when long.

    Columns: ``step, life, health, food, drink, energy``.
    """
    cols = ["step", "life", *VITALS]
    if not len(steps):
        return pd.DataFrame(columns=cols)
    s = window(steps[cols], lo, hi)
    if len(s) <= max_points:
        return s.reset_index(drop=True)
    edges = _bins(int(s["step"].min()), int(s["step"].max()), max_points)
    b = np.searchsorted(edges, s["step"].to_numpy(), side="right") - 1
    g = s.assign(bin=b).groupby(["life", "bin"], sort=True)
    out = g.agg(step=("step", "first"), health=("health", "min"), food=("food", "min"),
                drink=("drink", "min"), energy=("energy", "min")).reset_index()
    return out[cols].sort_values("step", ignore_index=True)


def vital_changes(vitals: pd.DataFrame) -> pd.DataFrame:
    """The vitals of :func:`vitals_series` in long form, only where a value changes.

    Columns: ``step, life, vital, value``. Per life and vital: its first point, every point
    whose value differs from the point before, and its last point. A step-after line through
    these rows is the line through all of them: the Timeline draws it with far fewer items
    (a vital changes every few dozen steps in Crafter; ~15-20x fewer on the sample runs).
    """
    cols = ["step", "life", "vital", "value"]
    if not len(vitals):
        return pd.DataFrame(columns=cols)
    v = vitals.sort_values(["life", "step"], kind="stable")
    life = v["life"].to_numpy()
    first, last = life_bounds(life)
    ends = first | last
    parts = []
    for name in VITALS:
        a = v[name].to_numpy()
        keep = ends.copy()
        keep[1:] |= a[1:] != a[:-1]
        parts.append(pd.DataFrame({"step": v["step"].to_numpy()[keep], "life": life[keep], "vital": name,
                                   "value": a[keep]}))
    return pd.concat(parts, ignore_index=True)[cols]
