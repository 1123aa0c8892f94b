"""The spatial grid's data: cells the agent acted on, its paths, and what happened at a cell.
Plain functions over a run's tables, bounded for a browser, no Streamlit."""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from loaders.lookups import episode_ending, episode_holding, life_bounds, window
from loaders.run import Run


def height_band(df: pd.DataFrame, band: tuple[int, int]) -> pd.DataFrame:
    """Rows of a 3-D run whose height ``y`` lies in ``band`` (inclusive)."""
    return df[(df["y"] >= band[0]) & (df["y"] <= band[1])]


MAX_PATH_POINTS = 6_000
"""The most path points the Grid map draws (eight per pixel of its 720-pixel side; a narrower
step range shows more): 20,000 took ~0.5 s more of a first visit's drawing in Chromium."""


def trajectories(steps: pd.DataFrame, lo: int | None = None, hi: int | None = None,
                 max_points: int = MAX_PATH_POINTS) -> pd.DataFrame:
    """Each life's path (``life, step, x, y``) through the points where it turns.

    A step that stays on the cell before it, or goes on straight in the same direction, adds
    nothing to the drawn polyline and is left out (on Crafter runs 4-6x fewer points; the
    line is the same); what is left is strided to at most ``max_points`` in all. Every life
    keeps its first and last point, so starts and ends stay exact.
    """
    cols = ["life", "step", "x", "y"]
    if not len(steps):
        return pd.DataFrame(columns=cols)
    s = window(steps[cols], lo, hi).sort_values(["life", "step"], kind="stable")
    s = s[_turns(s["life"].to_numpy(), s["x"].to_numpy(), s["y"].to_numpy())]
    if len(s) <= max_points:
        return s.reset_index(drop=True)
    stride = int(np.ceil(len(s) / max_points))
    parts = []
    for _, g in s.groupby("life", sort=True):
        keep = np.zeros(len(g), bool)
        keep[::stride] = True
        keep[-1] = True
        parts.append(g[keep])
    return pd.concat(parts, ignore_index=True)


def _turns(life: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which points of paths (rows ordered by life, then step) a polyline needs: each life's
    first and last, and every point where the path turns (not a repeat of the point before,
    not the middle of a straight run in one direction)."""
    if len(life) < 3:
        return np.ones(len(life), bool)
    first, last = life_bounds(life)
    keep = first | last | (x != np.roll(x, 1)) | (y != np.roll(y, 1))
    idx = np.flatnonzero(keep)
    px, py, pl = x[idx], y[idx], life[idx]
    dx, dy = np.diff(px), np.diff(py)
    straight = ((dx[1:] * dy[:-1] - dy[1:] * dx[:-1] == 0) & (dx[1:] * dx[:-1] + dy[1:] * dy[:-1] > 0)
                & (pl[1:-1] == pl[:-2]) & (pl[1:-1] == pl[2:]))  # neighbours in its own life: not a first or last
    keep[idx[1:-1][straight]] = False
    return keep


def grid_cells(grid: pd.DataFrame, lo: int | None = None, hi: int | None = None,
               kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """The traversed-cell grid: the latest kind of each cell within the filters.

    Columns: ``x, y, kind, count, first_step, last_step, lives``.
    """
    cols = ["x", "y", "kind", "count", "first_step", "last_step", "lives"]
    if not len(grid):
        return pd.DataFrame(columns=cols)
    g = grid
    if lo is not None:
        g = g[g["step"] >= lo]
    if hi is not None:
        g = g[g["step"] <= hi]
    if kinds is not None:
        g = g[g["kind"].isin(list(kinds))]
    if not len(g):
        return pd.DataFrame(columns=cols)
    g = g.sort_values("step", kind="stable")
    agg = g.groupby(["x", "y"], sort=True).agg(
        kind=("kind", "last"), count=("kind", "size"), first_step=("step", "min"), last_step=("step", "max"),
        lives=("life", lambda v: ",".join(str(i) for i in sorted(set(v))))).reset_index()
    return agg[cols]


def grid_extent(grid: pd.DataFrame, steps: pd.DataFrame, episodes: pd.DataFrame, pad: int = 2
                ) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)`` covering every cell, position and episode of a run, padded."""
    xs: list[float] = []
    ys: list[float] = []
    for df in (grid, steps, episodes):
        if len(df) and "x" in df:
            x = pd.to_numeric(df["x"], errors="coerce").dropna()
            y = pd.to_numeric(df["y"], errors="coerce").dropna()
            if len(x) and len(y):
                xs += [x.min(), x.max()]
                ys += [y.min(), y.max()]
    if not xs:
        return 0, 0, 8, 6
    return int(min(xs)) - pad, int(min(ys)) - pad, int(max(xs)) + pad, int(max(ys)) + pad


def episodes_at_cell(run: Run, x: int, y: int, plane: str = "y") -> pd.DataFrame:
    """Episodes that touched cell (x, y): the player stood there, or the grid records it.

    ``plane`` names the grid coordinate used as the map's second axis (``z`` for 3-D runs,
    whose horizontal plane is (x, z)). Columns: ``episode, life, first_step, last_step,
    action_kind, summary, how, step`` where ``step`` is the first step in the episode at
    that cell and ``how`` says why it is listed.
    """
    cols = ["episode", "life", "first_step", "last_step", "action_kind", "summary", "how", "step"]
    ep = run.episodes()
    if not len(ep):
        return pd.DataFrame(columns=cols)
    hits: dict[str, tuple[str, int]] = {}
    st = run.steps()
    if len(st) and plane == "y":
        here = st[(st["x"] == x) & (st["y"] == y)]
        for e, s in zip(here["episode"], here["step"]):
            if e not in hits:
                hits[e] = ("stood here", int(s))
    gr = run.grid()
    if len(gr):
        here = gr[(gr["x"] == x) & (gr[plane] == y)]
        for kind, s, life in zip(here["kind"], here["step"], here["life"]):
            ref = episode_holding(run, int(s), int(life)) or episode_ending(run, int(s), int(life))
            if ref is not None:
                how, first = hits.get(ref.id, ("", int(s)))
                how = kind if not how else (how if kind in how else f"{how}, {kind}")
                hits[ref.id] = (how, min(first, int(s)))
    if not hits:
        return pd.DataFrame(columns=cols)
    sub = ep[ep["id"].isin(list(hits))].copy()
    sub["how"] = [hits[i][0] for i in sub["id"]]
    sub["step"] = [hits[i][1] for i in sub["id"]]
    sub = sub.rename(columns={"id": "episode"}).sort_values("first_step", ignore_index=True)
    return sub[cols]


def grid_at_cell(run: Run, x: int, y: int, plane: str = "y", life: int | None = None) -> pd.DataFrame:
    """The grid records of cell (x, y) (for ``plane`` ``z``: every height of column (x, z)),
    of one ``life`` or all: ``step, life, kind, item, damage, cause``."""
    cols = ["step", "life", "kind", "item", "damage", "cause"]
    g = run.grid()
    if not len(g):
        return pd.DataFrame(columns=cols)
    g = g[(g["x"] == x) & (g[plane] == y) & ((g["life"] == life) if life is not None else True)]
    return g[cols].reset_index(drop=True)


def frames_at_cell(steps: pd.DataFrame, x: int, y: int) -> pd.DataFrame:
    """Every step whose frame was taken with the player on cell (x, y): ``step, life, episode``."""
    if not len(steps):
        return pd.DataFrame(columns=["step", "life", "episode"])
    here = steps[(steps["x"] == x) & (steps["y"] == y)]
    return here[["step", "life", "episode"]].reset_index(drop=True)


def frames_at_cell_of(run: Run, x: int, y: int, plane: str = "y", life: int | None = None) -> pd.DataFrame:
    """:func:`frames_at_cell` of a run, of one ``life`` or all: ``step, life, episode``. A run
    whose map's second axis is ``z`` (3-D, seen from above) records no frame per cell: none."""
    steps = run.steps()
    if plane != "y" or not len(steps):
        return frames_at_cell(steps.iloc[0:0], x, y)
    return frames_at_cell(steps[steps["life"] == life] if life is not None else steps, x, y)


def frames_at_cell_in(runs: Iterable[tuple[str, Run]], x: int, y: int) -> pd.DataFrame:
    """:func:`frames_at_cell` over several runs, run by run: ``step, life, episode, run``
    (``run``: the key the run is given)."""
    parts = [f.assign(run=k) for k, r in runs if len(f := frames_at_cell(r.steps(), x, y))]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", "life", "episode", "run"])


def one_per_life(frames: pd.DataFrame, limit: int, by_run: bool = False) -> pd.DataFrame:
    """The first frame of each life (of each run and life, ``by_run``) among ``frames`` (rows
    of :func:`frames_at_cell` or :func:`frames_at_cell_in`), at most ``limit`` of them: the
    same place across lives."""
    return frames.drop_duplicates(["run", "life"] if by_run else ["life"]).head(limit)


def visit_frame(run: Run, step: int, life: int, episode: str) -> tuple[int | None, str | None]:
    """The frame that shows a visit of ``episode`` (of ``life``) to a cell at env ``step``, as
    ``(step, None)`` when an episode of that life stored the frame of that step, else as
    ``(None, episode)``: the episode's end observation."""
    return (step, None) if episode_holding(run, step, life) is not None else (None, episode)


def visits_per_cell(runs: list[Run]) -> pd.DataFrame:
    """How often each cell holds a frame, over several runs: ``x, y, frames, runs, lives``."""
    parts = []
    for r in runs:
        s = r.steps()
        if len(s):
            parts.append(s[["x", "y", "life"]].assign(run=r.name))
    if not parts:
        return pd.DataFrame(columns=["x", "y", "frames", "runs", "lives"])
    df = pd.concat(parts, ignore_index=True)
    return df.groupby(["x", "y"]).agg(frames=("life", "size"), runs=("run", "nunique"),
                                       lives=("life", "nunique")).reset_index()
