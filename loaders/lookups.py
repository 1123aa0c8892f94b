"""Where a run was at a step: its life, the episode holding the step, the agent's position, the
frame, and an episode's records. One rule for each, used by every page and the notebooks."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pandas as pd

from loaders.inherited import inherited_id, locate
from loaders.run import Run
from mfm.memory.retrieval import FrameError, ends_in_strip
from mfm.schema import IndexRow

T = TypeVar("T")


def step_bounds(run: Run) -> tuple[int, int]:
    """First and last env step covered by the run's episodes or step trace."""
    ep = run.episodes()
    st = run.steps()
    lows = [int(ep["first_step"].min())] if len(ep) else []
    highs = [int(ep["last_step"].max())] if len(ep) else []
    if len(st):
        lows.append(int(st["step"].min()))
        highs.append(int(st["step"].max()))
    return (min(lows), max(highs)) if lows else (0, 0)


def frame_holder(run: Run, episode: str | None, step: int | None = None, life: int | None = None
                 ) -> tuple[Run, int | None, str | None, int | None]:
    """Where a frame of episode ``episode`` is, as arguments of :func:`frame_for`: ``(run
    holding it, step, episode, life)``, the episode kept only when no ``step`` is named (its
    end observation). An inherited episode's frames are in the copy of the inherited run,
    under its own id there, and ``step``/``life`` count that run's. Raises FrameError for an
    inherited episode the copy lacks."""
    if episode is not None and inherited_id(episode) is not None:
        ref = locate(run, episode)
        if ref.holder is None:
            raise FrameError(f"{run.name}: no inherited episode {episode} (the copy in inherited/ lacks it)")
        return ref.holder, step, None if step is not None else ref.local_id, life
    return run, step, None if step is not None else episode, life


def life_bounds(life: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows ordered by life: which row is its life's first, and which its life's last."""
    first = np.ones(len(life), bool)
    first[1:] = life[1:] != life[:-1]
    return first, np.roll(first, -1)


def window(df: pd.DataFrame, lo: int | None, hi: int | None) -> pd.DataFrame:
    """Rows with ``lo <= step <= hi`` (either bound may be None)."""
    if lo is not None:
        df = df[df["step"] >= lo]
    if hi is not None:
        df = df[df["step"] <= hi]
    return df


def lives_of(run: Run) -> list[int]:
    """Every life of a run that has an episode, a step or a grid record, sorted."""
    return sorted({int(v) for df in (run.grid(), run.episodes(), run.steps()) if len(df) for v in df["life"].dropna()})


def episode_ending(run: Run, step: int, life: int | None = None) -> IndexRow | None:
    """The last episode (of ``life``, if given) that ended at env step ``step``."""
    hit = None
    for r in run.index.rows:
        if r.last_step == step and (life is None or r.life == life):
            hit = r
    return hit


def life_at(run: Run, step: int) -> int | None:
    """The life that took env step ``step`` (whose frame and trace row it is): the trace row's
    life, else the life of the episode holding the step, else of the newest respawn, episode
    or grid record at or before it. At a death step this is the life that died; the next
    life begins after it (a turn says which life it belongs to: pass that to the lookups)."""
    st = run.steps()
    if len(st):
        hit = st.loc[st["step"] == step, "life"]
        if len(hit):
            return int(hit.iloc[0])
    ref = run.index.episode_at(step)
    if ref is not None:
        return int(ref.life)
    best: tuple[int, int] | None = None
    for r in run.index.rows:
        if r.last_step <= step and (best is None or (r.last_step, r.life) >= best):
            best = (r.last_step, r.life)
    for e in run.records("lives.jsonl"):
        if e.event == "respawn" and e.step < step and (best is None or (e.step, e.life) >= best):
            best = (e.step, e.life)
    return None if best is None else best[1]


def episode_holding(run: Run, step: int, life: int | None = None) -> IndexRow | None:
    """The episode whose per-step frames hold env step ``step`` (``first_step < step <=
    first_step + frames``), only if it belongs to ``life`` (None: the life that took the step)."""
    ref = run.index.episode_at(step)
    if ref is None or step > ref.first_step + ref.frames:
        return None
    return ref if life is None or ref.life == life else None


def position_at(run: Run, step: int, life: int | None = None) -> tuple[float, float] | None:
    """Where the agent of ``life`` stood after env step ``step`` (None: the life that took the
    step, :func:`life_at`), in the map's plane ((x, z) for 3-D runs), or None if unknown.

    The newest of: the life's trace row at or before the step (``steps.jsonl``), its respawn
    at or before it (``lives.jsonl``: a life starts where it respawned, at the step the last
    one died), the end position of its newest episode ended by then (``index.jsonl``). At a
    step that is both a death and a respawn, life L's position is where it died, life L + 1's
    where it respawned."""
    life = life_at(run, step) if life is None else life
    if life is None:
        return None
    best: tuple[int, int, tuple[float, float]] | None = None

    def offer(at: int, rank: int, xy: tuple[float, float]) -> None:
        nonlocal best
        if best is None or (at, rank) > best[:2]:
            best = (at, rank, xy)

    three_d = run.is_3d
    for r in run.index.rows:
        if r.life == life and r.last_step <= step and r.x is not None:
            second = r.z if three_d else r.y
            if second is not None:
                offer(r.last_step, 0, (float(r.x), float(second)))
    for e in run.records("lives.jsonl"):
        if e.event == "respawn" and e.life == life and e.step <= step and e.x is not None and e.y is not None:
            offer(e.step, 1, (float(e.x), float(e.y)))
    st = run.steps()
    if len(st):
        mine = st[(st["life"] == life) & (st["step"] <= step) & st["x"].notna() & st["y"].notna()]
        if len(mine):
            row = mine.iloc[int(mine["step"].to_numpy().argmax())]
            offer(int(row["step"]), 2, (float(row["x"]), float(row["y"])))
    return None if best is None else best[2]


def frame_at(run: Run, step: int, life: int | None = None) -> np.ndarray:
    """The frame the agent of ``life`` had after env step ``step`` (None: the life that took the
    step, :func:`life_at`): the step's per-step frame if that life took it, else the end
    observation of an episode of that life ending at the step (a life's initial state).

    A life that began at a step another life died at has no frame there (its first frame is
    the next step's): FrameError says so rather than showing the other life's frame. Raises
    FrameError (missing/unreadable) or UnsafePath."""
    life = life_at(run, step) if life is None else life
    ref = episode_holding(run, step, life)
    if ref is not None:
        return run.frame(step)
    end = episode_ending(run, step, life)
    if end is not None and (end.image or ends_in_strip(end)):
        return run.observation(end.id)
    other = episode_holding(run, step)
    if other is not None and life is not None and other.life != life:
        later = [r.first_step + 1 for r in run.index.rows if r.life == life and r.frames and r.first_step >= step]
        raise FrameError(f"{run.name}: no stored frame of life {life} at step {step} (that step's frame is life "
                         f"{other.life}'s)" + (f"; life {life}'s next frame is step {min(later)}" if later else ""))
    raise FrameError(f"{run.name}: no stored frame for step {step}" + (f" in life {life}" if life is not None else ""))


def frame_for(run: Run, step: int | None = None, episode: str | None = None, life: int | None = None
              ) -> np.ndarray:
    """A frame of the run: the frame of env ``step`` as life ``life`` saw it (:func:`frame_at`;
    None: the life that took the step), or the end observation of ``episode`` (an inherited
    one's from the copy of its run, :func:`frame_holder`).
    Raises FrameError (missing/unreadable) or UnsafePath."""
    if episode is not None:
        run, _, episode, _ = frame_holder(run, episode)
        ref = run.episode(episode)
        if ref is None:
            raise FrameError(f"{run.name}: no episode {episode}")
        return run.observation(episode)
    if step is None:
        raise FrameError("name a step or an episode")
    return frame_at(run, step, life)


def around(items: Sequence[T] | pd.Series, current: T | None, side: int) -> list[T]:
    """The items a picker lists: ``2 * side + 1`` consecutive ``items`` (all when fewer) with
    ``current`` as near the middle as the ends allow; the first ones when ``current`` is None
    or not an item. Lists the picker sends on every rerun so stay small however long the run
    (a Series is searched and cut without turning every item into a Python object)."""
    if isinstance(items, pd.Series):
        hits = np.flatnonzero((items == current).to_numpy(dtype=bool)) if current is not None else ()
        at = int(hits[0]) if len(hits) else 0
    else:
        at = next((i for i, v in enumerate(items) if v == current), 0) if current is not None else 0
    lo = max(0, min(at - side, len(items) - (2 * side + 1)))
    cut = items.iloc[lo:lo + 2 * side + 1] if isinstance(items, pd.Series) else items[lo:lo + 2 * side + 1]
    return list(cut)


def frame_strip(run: Run, episode: str, max_frames: int = 32) -> list[tuple[int, np.ndarray]]:
    """Up to ``max_frames`` of an episode's per-step frames, evenly spaced: ``[(step, frame)]``;
    an inherited episode's from the copy of its run, at that run's steps (:func:`frame_holder`)."""
    run, _, episode, _ = frame_holder(run, episode)
    ref = run.episode(episode)
    if ref is None:
        raise FrameError(f"{run.name}: no episode {episode}")
    if ref.frames == 0:
        return []
    idx = sorted(set(np.linspace(0, ref.frames - 1, min(max_frames, ref.frames)).round().astype(int).tolist()))
    return [(ref.first_step + 1 + i, run.frame(ref.first_step + 1 + i)) for i in idx]


@dataclass(frozen=True)
class EpisodeDetail:
    """An episode's index row and its stored records (None where missing or unreadable)."""

    row: IndexRow
    state: dict | None
    action: dict | None
    outcome: dict | None
    steps: pd.DataFrame
    extra: dict = field(default_factory=dict)
    """Index fields of a foreign run that our format does not name (an MFM export's
    ``inventory_delta``, ``_frame``…), as the run recorded them."""


def episode_detail(run: Run, episode: str) -> EpisodeDetail:
    """Index row, state.json, action.json, outcome.json and step rows of one episode."""
    ref = run.episode(episode)
    if ref is None:
        raise KeyError(f"{run.name}: no episode {episode}")
    rec = run.episode_record(episode)
    st = run.steps()
    rows = st[st["episode"] == episode] if len(st) else st
    return EpisodeDetail(ref, rec.state, rec.action, rec.outcome, rows.reset_index(drop=True),
                         episode_extra(run, episode))


def episode_extra(run: Run, episode: str) -> dict:
    """The index fields of ``episode`` our format does not name, kept from a foreign run (the
    episodes table's ``extra`` column, JSON text); empty for our runs."""
    ep = run.episodes()
    if "extra" not in ep.columns or not len(ep):
        return {}
    hit = ep.loc[ep["id"] == episode, "extra"]
    text = hit.iloc[0] if len(hit) else None
    return json.loads(text) if isinstance(text, str) else {}


def step_row(run: Run, step: int, life: int | None = None) -> dict | None:
    """The step trace row of one env step (of ``life``, if given) as a dict, or None."""
    st = run.steps()
    if not len(st):
        return None
    hit = st[(st["step"] == step) & ((st["life"] == life) if life is not None else True)]
    return None if not len(hit) else hit.iloc[0].to_dict()
