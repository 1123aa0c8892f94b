"""The data of each chart, prepared once and drawn twice: on screen (Vega-Lite,
``dashboard.vega_charts``) and in print (Altair, ``dashboard.figures``), and in notebooks.

One function per view returns a small frozen record of tables; a page draws it and hands the
same record to the figure export, so an exported figure shows exactly the data the page shows.
``mfm figures`` calls the same functions headless. No Streamlit, no plotting library here.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from loaders import analysis_pages as ap
from loaders import provenance
from loaders import lookups, paper_measures, runs_summary, spatial_data, timeline_data
from loaders.run import Run

RunList = Sequence[tuple[str, Run]]
PATH_COLUMNS = ["life", "step", "x", "y"]
POSITION_COLUMNS = ["id", "x", "y", "life", "summary"]
DEATH_COLUMNS = ["x", "y", "step", "cause"]


@dataclass(frozen=True)
class SeedBands:
    """Per method, a series' mean over seeds and the band its seeds span (``bands``: method,
    step, mean, lo, hi, seeds), the axis title, and step intervals to shade with their meaning."""

    bands: pd.DataFrame
    y_title: str
    shade: tuple[tuple[int, int], ...] = ()
    shade_label: str = ""
    filters: dict = field(default_factory=dict)
    x_title: str = "env step"

    @property
    def methods(self) -> list[str]:
        """The methods drawn, in drawing order."""
        return list(dict.fromkeys(self.bands["method"])) if len(self.bands) else []

    def seeds(self, method: str) -> int:
        """How many seeds (runs) of ``method`` the series holds."""
        g = self.bands[self.bands["method"] == method]
        return int(g["seeds"].max()) if len(g) else 0

    def label(self, method: str) -> str:
        """The legend entry of a method: its name and how many seeds the line averages."""
        n = self.seeds(method)
        return f"{method} (1 run)" if n == 1 else f"{method} (mean of {n} seeds)"

    @property
    def note(self) -> str:
        """What the lines, bands and shading mean, for the figure itself."""
        several = any(self.seeds(m) > 1 for m in self.methods)
        parts = ["Lines: mean over seeds (n in the legend); bands: 95% bootstrap interval of the mean" if several
                 else "Lines: one run per method (no interval)"]
        if self.shade:
            parts.append(f"shaded: {self.shade_label}")
        return "; ".join(parts) + "."


BOOTSTRAP = 2000
"""Resamples of the seeds behind each 95% interval (fixed generator: figures are reproducible)."""
BAND_COLUMNS = ["method", "step", "mean", "lo", "hi", "seeds"]


def seed_bands(series: Sequence[tuple[str, int, pd.DataFrame]], column: str, points: int = 200,
               hold: bool = False) -> pd.DataFrame:
    """Per method, the mean over seeds of a series on a common step grid and its 95% interval
    (percentile bootstrap over seeds; none where one seed holds a value).

    ``series`` items are ``(method, seed, frame with step and column)``. Each seed is
    interpolated (or, with ``hold``, carried forward as a step function) over its own step
    range only (with ``hold``, a finished run keeps its last value). Columns: ``method, step,
    mean, lo, hi, seeds`` (``seeds``: how many seeds hold a value at that step)."""
    usable = [(m, s, d.dropna(subset=[column])) for m, s, d in series if len(d)]
    usable = [(m, s, d) for m, s, d in usable if len(d)]
    if not usable:
        return pd.DataFrame(columns=BAND_COLUMNS)
    top = max(int(d["step"].max()) for _, _, d in usable)
    low = min(int(d["step"].min()) for _, _, d in usable)
    grid = np.unique(np.linspace(low, top, max(2, points)).round().astype(int))
    rng = np.random.default_rng(0)
    out = []
    for method in sorted({m for m, _, _ in usable}, key=ap.method_key):
        stack = []
        for _, _, d in (u for u in usable if u[0] == method):
            d = d.sort_values("step")
            xs, ys = d["step"].to_numpy(float), d[column].to_numpy(float)
            if hold:
                vals = ys[np.clip(np.searchsorted(xs, grid, side="right") - 1, 0, None)].astype(float)
            else:
                vals = np.interp(grid, xs, ys)
            vals[(grid < xs.min()) | ((grid > xs.max()) & (not hold))] = np.nan
            stack.append(vals)
        arr = np.vstack(stack)
        seen = (~np.isnan(arr)).sum(axis=0)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(arr, axis=0)
            lo = hi = np.full(len(grid), np.nan)
            if len(arr) > 1:
                means = np.nanmean(arr[rng.integers(0, len(arr), (BOOTSTRAP, len(arr)))], axis=1)
                lo, hi = np.nanpercentile(means, [2.5, 97.5], axis=0)
                lo, hi = np.where(seen > 1, lo, np.nan), np.where(seen > 1, hi, np.nan)
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


def progress(runs: RunList) -> SeedBands:
    """Milestones reached against env step, per method (a finished run keeps its final count)."""
    bands = seed_bands([(ap.method_of(r), ap.seed_of(r), ap.milestone_curve(r)) for _, r in ap.distinct(runs)],
                       "milestones", points=400, hold=True)
    return SeedBands(bands, "milestones reached")


SHADE_LABEL = "MFM above PRO-LONG and VISTA"


def steps_per_turn(runs: RunList, window: int = 25) -> SeedBands:
    """Rolling median env steps per turn over ``window`` turns, per method, shaded where MFM's
    mean exceeds both PRO-LONG's and VISTA's (paper Figure 9)."""
    bands = seed_bands([(ap.method_of(r), ap.seed_of(r), ap.steps_per_turn(r, window)) for _, r in ap.distinct(runs)],
                       "median")
    return SeedBands(bands, f"env steps per turn (rolling median, {window} turns)",
                     tuple(exceed_intervals(bands)), SHADE_LABEL, {"window": window})


@dataclass(frozen=True)
class TimelineView:
    """Episode bars (binned when many), event marks and vitals of steps ``lo``–``hi``."""

    bars: pd.DataFrame
    marks: pd.DataFrame
    vitals: pd.DataFrame
    lo: int
    hi: int
    color_by: str

    @property
    def lives(self) -> list[int]:
        """The lives with a bar (one lane each); ``[0]`` when none."""
        return sorted({int(v) for v in self.bars["life"]}) if len(self.bars) else [0]

    @cached_property
    def vital_lines(self) -> pd.DataFrame:
        """The vitals where they change (``step, life, vital, value``): what the chart draws."""
        return timeline_data.vital_changes(self.vitals)


def episode_marks(run: Run, first_step: int, last_step: int, life: int) -> pd.DataFrame:
    """The marks (columns of :attr:`TimelineView.marks`) that belong to one episode of
    ``life`` spanning steps ``first_step``–``last_step``, each on its own row (never binned,
    whatever the Timeline's range): the marks made while deciding the turn that started it
    (:data:`loaders.timeline_data.DECISION_KINDS`, stamped with the step the agent stood at,
    ``first_step`` up to ``last_step - 1``) and the others made by its steps (``first_step + 1``
    up to ``last_step``)."""
    marks = timeline_data.timeline_marks(run, first_step, last_step, max_per_kind=None)
    if not len(marks):
        return marks
    step = marks["step"]
    decision = marks["kind"].isin(timeline_data.DECISION_KINDS)
    during = (step > first_step) & (step <= last_step)
    before = (step >= first_step) & (step < last_step)
    return marks[(marks["life"] == life) & ((decision & before) | (~decision & during))]


def clip_range(run: Run, lo: int | None, hi: int | None) -> tuple[int, int]:
    """``lo``–``hi`` within the run's step range (None: the run's first or last step)."""
    first, last = lookups.step_bounds(run)
    return (first if lo is None else max(first, lo), last if hi is None else min(last, hi))


TIMELINE_BARS = 500
"""Episode bars the Timeline draws at most (more episodes in the range are binned): about one
per 1.5 pixels of its plot, about 740 pixels wide in a 1,440-pixel window. 3,000 bars (the cap
until 2026-12) were 4 per pixel and cost 0.1 s of each drawing of the page in the browser at
36,000 steps; 1,000 still drew more bars than pixels."""
TIMELINE_MARKS = 120
"""Marks of one kind (search, inspect, memory write, ...) the Timeline draws at most; more are
binned (``count`` marks per row, the symbol larger with the count). A mark is a symbol about 13
pixels wide, so 120 across a plot of about 740 pixels already touch. The cap went 2,000 → 250
(with :data:`TIMELINE_BARS` 1,000 → 500: a click on the Timeline with an episode open 0.67 →
0.58 s at 360,000 steps, medians of 10) and 250 → 120 (985 marks drawn at 360,000 steps → 604:
0.36 → 0.33 s, medians of 24, one sitting)."""


def timeline(run: Run, lo: int | None = None, hi: int | None = None, color_by: str = "action_kind") -> TimelineView:
    """The timeline of steps ``lo``–``hi``, episodes coloured by ``action_kind`` or ``outcome``
    (at most :data:`TIMELINE_BARS` bars)."""
    lo, hi = clip_range(run, lo, hi)
    return TimelineView(timeline_data.timeline_bars(run.episodes(), lo, hi, color_by, TIMELINE_BARS),
                        timeline_data.timeline_marks(run, lo, hi, TIMELINE_MARKS),
                        timeline_data.vitals_series(run.steps(), lo, hi),
                        lo, hi, color_by)


@dataclass(frozen=True)
class GridView:
    """The traversed-cell map of a step range: cells (latest kind each), each life's path,
    episode end positions, deaths, the extent ``(x0, y0, x1, y1)`` and the second axis
    (``y``, or ``z`` for 3-D runs seen from above)."""

    cells: pd.DataFrame
    paths: pd.DataFrame
    positions: pd.DataFrame
    deaths: pd.DataFrame
    extent: tuple[int, int, int, int]
    plane: str
    lo: int
    hi: int
    kinds: tuple[str, ...] | None = None
    life: int | None = None
    merged: int = 0
    """How many episode end positions the cells' markers stand for when some cell holds more
    than one (0: one episode per cell)."""


def merge_positions(pos: pd.DataFrame) -> pd.DataFrame:
    """Episode end positions (in episode order) merged per cell: the latest episode's id,
    life and summary, with ``count`` (episodes that ended there) and ``first_life``; cells
    ordered by their latest episode, so the last row is still the latest position.

    The grid always draws these: markers of one cell lie on top of each other, so one
    marker per cell shows the same picture (the latest on top, in its life's colour), says
    in its hover how many episodes ended there, and is what the browser can draw quickly
    (3,693 episode markers of a 36k-step run cost Plotly about 200 ms more per drawing than
    the 396 cells they fall in)."""
    latest = pos.drop_duplicates(["x", "y"], keep="last")
    by_cell = pos.groupby(["x", "y"], sort=False)
    stats = pd.DataFrame({"count": by_cell.size(), "first_life": by_cell["life"].min()})
    return latest.join(stats, on=["x", "y"]).reset_index(drop=True)


def heights(run: Run) -> list[int]:
    """The heights (``y``) of a 3-D run's grid cells, sorted; ``[0]`` when none."""
    g = run.grid()
    return sorted({int(v) for v in g["y"].dropna()}) if len(g) else [0]


def grid(run: Run, lo: int | None = None, hi: int | None = None, kinds: Sequence[str] | None = None,
         life: int | None = None, height: tuple[int, int] | None = None, paths: bool = True,
         positions: bool = True) -> GridView:
    """The spatial grid of steps ``lo``–``hi``: cells of ``kinds`` (None: all), one ``life``
    (None: all); a 3-D run shows its horizontal plane (x, z) and keeps what lies in the
    ``height`` band (paths and deaths are 2-D only)."""
    lo, hi = clip_range(run, lo, hi)
    plane = "z" if run.is_3d else "y"
    rows, eps, steps, lv = run.grid(), run.episodes(), run.steps(), run.lives()
    if plane == "z":
        hs = heights(run)
        band = height or (hs[0], hs[-1])
        rows = spatial_data.height_band(rows, band).assign(y=lambda d: d["z"]) if len(rows) else rows
        eps = spatial_data.height_band(eps, band).assign(y=lambda d: d["z"]) if len(eps) else eps
        steps, lv = steps.iloc[0:0], lv.iloc[0:0]
    if life is not None:
        rows, eps, steps, lv = (df[df["life"] == life] if len(df) else df for df in (rows, eps, steps, lv))
    extent = spatial_data.grid_extent(rows, steps, eps)
    cells = spatial_data.grid_cells(rows, lo, hi, kinds)
    path = spatial_data.trajectories(steps, lo, hi) if paths else pd.DataFrame(columns=PATH_COLUMNS)
    near = timeline_data.episodes_in_range(eps, lo, hi)
    pos = near[near["x"].notna() & near["y"].notna()][POSITION_COLUMNS] if positions and len(eps) \
        else pd.DataFrame(columns=POSITION_COLUMNS)
    deaths = lv[(lv["event"] == "death") & (lv["step"] >= lo) & (lv["step"] <= hi) & lv["x"].notna()][
        DEATH_COLUMNS] if len(lv) else pd.DataFrame(columns=DEATH_COLUMNS)
    per_cell = merge_positions(pos)
    return GridView(cells, path, per_cell, deaths.reset_index(drop=True), extent, plane, lo, hi,
                    tuple(kinds) if kinds is not None else None, life, len(pos) if len(per_cell) < len(pos) else 0)


RETARGET_MEASURES = ("retarget | inspect", "retarget | other", "near", "null")
"""The A.4 rates: retargets among inspecting turns and among the others, the share of new
targets near an inspected episode, and that share's null rate (its expectation by chance)."""
RATE_COLUMNS = ["method", "measure", "rate", "lo", "hi", "label", "runs"]


def retarget_rates(runs: RunList, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The A.4 rates per method in long form, pooled over its seeds: ``rate`` with its Wilson 95%
    interval ``lo``–``hi`` over the turns (or targets) counted, ``label`` the counts behind it
    (``n/a`` when there is nothing to count; for the null rate the expected count), ``runs``
    the seeds pooled. Methods in the paper's order. ``table``: the per-method table of
    :func:`loaders.analysis_pages.retarget_tables` of these runs when the caller has it (it is
    then not computed again)."""
    if table is None:
        _, table = ap.retarget_tables(runs)
    rows = []
    for r in table.itertuples():
        for measure, k, n in ((RETARGET_MEASURES[0], r.inspect_retargets, r.inspect_turns),
                              (RETARGET_MEASURES[1], r.other_retargets, r.other_turns),
                              (RETARGET_MEASURES[2], r.near, r.new_targets)):
            lo, hi = paper_measures.wilson(int(k), int(n))
            rows.append({"method": r.method, "measure": measure, "rate": k / n if n else float("nan"), "lo": lo,
                         "hi": hi, "label": f"{k}/{n}" if n else "n/a (none)", "runs": r.runs})
        null = r.null_rate
        rows.append({"method": r.method, "measure": RETARGET_MEASURES[3], "rate": null, "lo": float("nan"),
                     "hi": float("nan"), "runs": r.runs,
                     "label": f"≈{null * r.new_targets:.1f}/{r.new_targets} expected" if r.new_targets else "n/a (none)"})
    return pd.DataFrame(rows, columns=RATE_COLUMNS)


def progress_tables(runs: RunList, root: Path) -> tuple[SeedBands, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """What the Progress page shows of ``runs`` (of one task): the milestone bands
    (:func:`progress`), the milestones per method (mean ± std over seeds), the reach table
    (age of retrieved episodes) and the step at which each run first reached each milestone
    (``runs_summary.milestone_steps``, run keys relative to ``root``)."""
    ms = ap.measures(runs)
    return (progress(runs), ap.milestone_summary(ms), paper_measures.reach_table(ms),
            runs_summary.milestone_steps([r for _, r in runs], root))


def steps_per_turn_tables(runs: RunList, window: int) -> tuple[SeedBands, pd.DataFrame]:
    """What the Steps per turn page shows of ``runs`` (of one task): the rolling-median bands
    (:func:`steps_per_turn`) and the interaction table pooled over seeds, its calls per tool
    written ``tool: count, ...``."""
    pooled = paper_measures.interaction_table(ap.measures(runs))
    if len(pooled):
        pooled["calls_by_tool"] = [", ".join(f"{k}: {v}" for k, v in d.items()) for d in pooled["calls_by_tool"]]
    return steps_per_turn(runs, window), pooled


def tasks(runs: RunList) -> list[tuple[str, list[tuple[str, Run]]]]:
    """The runs grouped by task (from each manifest; ``?`` without one), tasks sorted: figures
    and tables compare methods within one task, never across tasks."""
    groups: dict[str, list[tuple[str, Run]]] = {}
    for key, run in runs:
        groups.setdefault(run.manifest.task if run.manifest else "?", []).append((key, run))
    return sorted(groups.items())


PROVENANCE_LANES = {"episode": 0, "knowledge": 1, "procedure": 2, "plan": 3, "file": 4}
"""Rows of the printed provenance graph, bottom to top: episodes, then each kind of memory."""


@dataclass(frozen=True)
class ProvenancePrint:
    """The provenance graph laid out for paper: ``nodes`` (id, kind, step, lane, label, cites)
    at x = env step and y = their kind's lane, ``edges`` (kind, x, y, x2, y2), and ``labels``
    (text, x, y) for the most cited versions, stacked so that none overlaps another."""

    nodes: pd.DataFrame
    edges: pd.DataFrame
    labels: pd.DataFrame
    lo: int
    hi: int
    unlabelled: int
    """Versions in range left without a label (too many to label legibly)."""


LABEL_PREFIX = re.compile(r"^(?:[-*]\s+)?(?:\[[^\]]*\]\s*)?")
"""A knowledge line's bullet and key, left out of its printed label."""


def provenance_print(run: Run, lo: int | None = None, hi: int | None = None, max_versions: int = 40,
                     max_labels: int = 10, width_pt: float = 500, char_pt: float = 3.6,
                     label_chars: int = 26) -> ProvenancePrint:
    """The provenance graph of steps ``lo``–``hi`` for print. Without a range: from the first
    memory write to the step holding the first ``max_versions`` versions. Labels (``label_chars``
    at most) go to the ``max_labels`` most cited versions; each takes the lowest of four
    levels above its lane where it clears the labels before it (its width estimated from
    ``char_pt`` per character on a plot ``width_pt`` wide); one that fits nowhere is left out."""
    g = provenance.build_graph(run)
    versions = sorted((n for n in g.nodes if n.kind != "episode"), key=lambda n: (n.step, n.id))
    if lo is None:
        lo = versions[0].step if versions else 0
    if hi is None:
        inside = [n for n in versions if n.step >= lo]
        hi = inside[min(len(inside), max_versions) - 1].step if inside else lo
    g = provenance.filter_steps(g, lo, hi)
    cites: dict[str, int] = {}
    for e in g.edges:
        if e.kind in ("cites", "disabled_because", "used_in"):
            cites[e.src] = cites.get(e.src, 0) + e.count
    rows = [{"id": n.id, "kind": n.kind, "step": n.step, "lane": PROVENANCE_LANES.get(n.kind, 4),
             "label": n.label, "cites": cites.get(n.id, 0)} for n in g.nodes]
    nodes = pd.DataFrame(rows, columns=["id", "kind", "step", "lane", "label", "cites"])
    at = {r["id"]: (r["step"], r["lane"]) for r in rows}
    edges = pd.DataFrame([{"kind": e.kind, "x": at[e.src][0], "y": at[e.src][1], "x2": at[e.dst][0],
                           "y2": at[e.dst][1]} for e in g.edges if e.src in at and e.dst in at],
                         columns=["kind", "x", "y", "x2", "y2"])
    span = max(1, (nodes["step"].max() - nodes["step"].min()) if len(nodes) else 1)
    per_pt = span / width_pt
    ends: dict[tuple[int, int], float] = {}
    labels = []
    chosen = sorted((r for r in rows if r["kind"] != "episode"), key=lambda r: (-r["cites"], r["step"]))[:max_labels]
    for r in sorted(chosen, key=lambda r: r["step"]):
        text = LABEL_PREFIX.sub("", r["label"]).strip()
        text = text if len(text) <= label_chars else text[:label_chars - 1] + "…"
        width = len(text) * char_pt * per_pt
        for level in range(4):
            if ends.get((r["lane"], level), -math.inf) < r["step"]:
                ends[(r["lane"], level)] = r["step"] + width
                labels.append({"text": text, "x": r["step"], "y": r["lane"] + 0.18 + 0.17 * level})
                break
    n_versions = sum(1 for r in rows if r["kind"] != "episode")
    return ProvenancePrint(nodes, edges, pd.DataFrame(labels, columns=["text", "x", "y"]), int(lo), int(hi),
                           n_versions - len(labels))
