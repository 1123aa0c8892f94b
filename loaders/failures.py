"""The failure finder: every failed or interrupted action and every death of a run, with what
was attempted (action, material, target cell), why it stopped, and the frames around it.
Plain functions over a run, no Streamlit.

What an episode called and why it ended are read from its index row's fields (format 1.3,
:func:`outcome_fields`): ``action_kind``, ``material``, ``target``, ``outcome`` and ``reason``.
A run older than 1.3 (and a foreign run) has no such fields: for it alone they are read back
from the summary's prose, which starts with the call, ``collect(material=stone, x=23, y=35) ->
interrupted: died (arrow); …`` (:func:`parse_call`, the fallback; a 1.3 run never goes
through it, so rewording a summary changes nothing here). A death is taken from
``lives.jsonl`` with its cause; it joins the row of the episode it ended, or stands alone when
no episode is named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from loaders.frame_compare import TARGET_OUTLINE, outline_tiles, tile_of_cell
from loaders.lookups import episode_holding, position_at
from loaders.run import Run
from mfm.schema import STRUCTURED_OUTCOMES, IndexRow, version_at_least

COLUMNS = ["episode", "life", "first_step", "last_step", "step", "action", "material", "target_x", "target_y",
           "outcome", "cause", "turn", "frames", "summary"]
OUTCOMES = ("failed", "interrupted", "death")
CALL = re.compile(r"^\s*([A-Za-z_][\w]*)\((.*?)\)\s*->\s*(\w+)(?::\s*([^;]*))?")
ARG = re.compile(r"(\w+)=([^,]+)")
CELL = re.compile(r"\(-?\d+, -?\d+\)")
MATERIAL_ARGS = ("material", "item", "name", "target", "what", "tool")
"""The fallback's rule for a call's material (the first of these arguments it has), as the
writer's (``mfm.memory.episode_recorder.MATERIAL_ARGS``)."""


LISTED = 1000
"""The Failures page lists this many matching rows (table and picker), in step order: a
360k-step run has 7,000 failures and deaths, and sending them all on every rerun made a
click there 3x the bare framework's. The filters and the step range reach the others."""


@dataclass(frozen=True)
class CallOutcome:
    """What an episode called and how it ended: the ``action`` (atom or procedure), the
    ``material`` and ``target`` cell it named, its ``outcome`` (done, failed, interrupted) and
    the ``reason`` it ended so (None where not recorded)."""

    action: str | None
    material: str | None
    target: tuple[int, int] | None
    outcome: str | None
    reason: str | None


def outcome_fields(run: Run) -> bool:
    """Whether ``run`` records its episodes' calls and endings as index-row fields: a run in
    this project's format (not a foreign one) of format 1.3 or later."""
    m = run.manifest
    return run.format == "mfm" and m is not None and version_at_least(m.schema_version, STRUCTURED_OUTCOMES)


def call_outcome(row: IndexRow, fields: bool) -> CallOutcome:
    """The call and ending of an index row: from its fields when ``fields`` (the run is 1.3 or
    later, :func:`outcome_fields`), else read back from its summary (:func:`parse_call`)."""
    if fields:
        target = (int(row.target[0]), int(row.target[1])) if row.target else None
        return CallOutcome(row.action_kind, row.material, target, row.outcome, row.reason)
    action, args, outcome, reason = parse_call(row.summary)
    material = next((args[k] for k in MATERIAL_ARGS if k in args), None)
    x, y = _num(args.get("x")), _num(args.get("y"))
    return CallOutcome(row.action_kind or action, material, None if x is None or y is None else (x, y),
                       row.outcome or outcome, reason)


def parse_call(summary: str) -> tuple[str | None, dict[str, str], str | None, str | None]:
    """``(action, args, outcome, reason)`` read back from an episode summary (None where
    absent): the fallback for runs older than format 1.3, whose index rows hold no such fields."""
    m = CALL.match(summary or "")
    if not m:
        return None, {}, None, None
    args = {k: v.strip() for k, v in ARG.findall(m.group(2))}
    return m.group(1), args, m.group(3), (m.group(4) or "").strip() or None


def cause_of(reason: str | None) -> str:
    """A reason with its cells taken out, so that like failures group: ``no tree at (x, y)
    (grass)``."""
    return CELL.sub("(x, y)", reason).strip() if reason else "unknown"


def _num(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def failures(run: Run) -> pd.DataFrame:
    """Every failed or interrupted episode and every death: columns :data:`COLUMNS`.

    ``step`` is the step it failed at (the episode's last step, or the death's);
    ``outcome`` is ``death`` when the episode ended in one, else its outcome; ``cause`` the
    death's cause (``died (arrow)``) or the episode's reason without cells; ``action`` the atom
    or procedure called, ``material`` and ``target_x``, ``target_y`` what it named
    (:func:`call_outcome`). ``summary`` is the episode's text, shown as it is."""
    deaths = [e for e in run.records("lives.jsonl") if e.event == "death"]
    by_ep = {e.episode: e for e in deaths if e.episode}
    fields = outcome_fields(run)
    rows = []
    seen: set[str] = set()
    for r in run.records("index.jsonl"):
        death = by_ep.get(r.id)
        if r.outcome not in ("failed", "interrupted") and death is None:
            continue
        c = call_outcome(r, fields)
        cause = f"died ({death.cause or 'unknown'})" if death else cause_of(c.reason)
        rows.append((r.id, r.life, r.first_step, r.last_step, death.step if death else r.last_step,
                     c.action, c.material, *(c.target or (None, None)),
                     "death" if death else r.outcome, cause, r.turn, r.frames, r.summary))
        seen.add(r.id)
    for e in deaths:
        if e.episode in seen:
            continue
        ref = run.index.episode_at(e.step) if e.episode is None else run.episode(e.episode)
        rows.append((ref.id if ref else None, e.life, ref.first_step if ref else e.step, e.step, e.step,
                     ref.action_kind if ref else None, None, None, None, "death", f"died ({e.cause or 'unknown'})",
                     ref.turn if ref else None, ref.frames if ref else 0, ref.summary if ref else ""))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["material"] = df["material"].fillna("")
    df["action"] = df["action"].fillna("")
    for c in ("target_x", "target_y", "turn"):
        df[c] = df[c].astype("Int64")
    return df.sort_values(["step", "life"], kind="stable", ignore_index=True)


def filter_failures(df: pd.DataFrame, actions: list[str] | None = None, materials: list[str] | None = None,
                    outcomes: list[str] | None = None, causes: list[str] | None = None,
                    lives: list[int] | None = None, steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """The rows of :func:`failures` matching every given filter (None or empty: no filter)."""
    keep = pd.Series(True, index=df.index)
    for col, values in (("action", actions), ("material", materials), ("outcome", outcomes), ("cause", causes),
                        ("life", lives)):
        if values:
            keep &= df[col].isin(list(values))
    if steps is not None:
        keep &= (df["step"] >= steps[0]) & (df["step"] <= steps[1])
    return df[keep].reset_index(drop=True)


def filter_options(df: pd.DataFrame, col: str) -> list:
    """The values a filter on column ``col`` of :func:`failures` offers: each non-empty value
    once, numbers (lives) in numeric order, texts in text order."""
    values = {v.item() if isinstance(v, np.generic) else v for v in df[col] if not pd.isna(v) and v != ""}
    return sorted(values, key=lambda v: (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))


def target_of(row: pd.Series | dict) -> tuple[int, int] | None:
    """The target cell ``(x, y)`` a :func:`failures` row names, None when it names none."""
    x, y = row["target_x"], row["target_y"]
    return None if x is None or y is None or pd.isna(x) or pd.isna(y) else (int(x), int(y))


BACK_STEPS = 8
"""How many steps before its episode a filmstrip reaches back by default (within the life)."""
VITALS = ("health", "food", "drink", "energy")


@dataclass(frozen=True)
class StripFrame:
    """One frame of a filmstrip: its step, the player's cell, the target's tile in it (None:
    no target, or outside the view) and its role (``before``: the frame of the step before the
    failure step, ``after``: the frame of the failure step, else empty). ``episode`` owns the
    frame (an earlier one of the same life when the strip reaches back); ``vitals`` are the
    step's health, food, drink and energy (empty: no trace row); ``damage`` what hurt the
    player at that step, when recorded (``zombie −2``, or the death's cause)."""

    step: int
    position: tuple[int, int] | None
    target_tile: tuple[int, int] | None
    role: str
    episode: str | None = None
    life: int | None = None
    vitals: dict = field(default_factory=dict)
    damage: str | None = None

    @property
    def vitals_text(self) -> str:
        """The vitals in words (``health 2 · food 8 · drink 8 · energy 9``), empty if unknown."""
        return " · ".join(f"{k} {self.vitals[k]}" for k in VITALS if k in self.vitals)


def damage_at(run: Run, life: int) -> dict[int, str]:
    """What hurt the player of ``life`` at each step where it is recorded: the grid's
    ``hazard`` records with a cause (and the damage, when given), and the life's death."""
    out: dict[int, list[str]] = {}
    for g in run.records("grid.jsonl"):
        if g.kind == "hazard" and g.life == life and g.cause and g.damage is not None:
            out.setdefault(int(g.step), []).append(f"{g.cause} −{float(g.damage):g}")
    for e in run.records("lives.jsonl"):
        if e.event == "death" and e.life == life:
            out.setdefault(int(e.step), []).append(f"died ({e.cause or 'unknown'})")
    return {k: ", ".join(dict.fromkeys(v)) for k, v in out.items()}


def filmstrip(run: Run, episode: str, target: tuple[int, int] | None, fail_step: int | None = None,
              back: int = BACK_STEPS) -> list[StripFrame]:
    """Every stored frame of an episode, oldest first, after the frames of up to ``back``
    steps before it in the same life (they can hold what explains the failure: a zombie
    closing in during the previous episode), each with the target tile, vitals, damage and
    role. The failure happens at ``fail_step`` (default the episode's last step): the frame of
    that step is ``after`` and the frame of the step before it ``before``, whichever episode
    of the life holds them (an episode without frames of its own failed in the state of the
    frame of its first step)."""
    ref = run.episode(episode)
    if ref is None:
        raise KeyError(f"{run.name}: no episode {episode}")
    fail = ref.last_step if fail_step is None else fail_step
    first = max(1, ref.first_step + 1 - max(0, back))
    last = ref.first_step + ref.frames
    if not ref.frames:
        first, last = min(first, ref.first_step), max(fail, ref.first_step)
    held = {s: h for s in range(first, last + 1) if (h := episode_holding(run, s, ref.life)) is not None}
    trace = run.steps()
    rows = trace[(trace["life"] == ref.life) & (trace["step"] >= first) & (trace["step"] <= last)] \
        if len(trace) else trace
    by_step = {int(r["step"]): r for r in rows.to_dict("records")}
    hurt = damage_at(run, ref.life)
    out = []
    for s in sorted(held):
        pos = position_at(run, s, ref.life)
        cell = (int(pos[0]), int(pos[1])) if pos else None
        tile = tile_of_cell(target, cell) if target is not None and cell is not None else None
        role = "after" if s == fail else "before" if s == fail - 1 else ""
        r = by_step.get(s)
        vit = {k: int(r[k]) for k in VITALS if r is not None and k in r and not pd.isna(r[k])}
        out.append(StripFrame(s, cell, tile, role, held[s].id, ref.life, vit, hurt.get(s)))
    if not any(f.role == "after" for f in out):
        out = [replace(f, role="") if f.role == "before" else f for f in out]
        if out and out[-1].step <= fail:
            out[-1] = replace(out[-1], role="before")
    return out


def reached_back(strip: list[StripFrame], episode: str, first_step: int) -> list[StripFrame]:
    """The frames of a :func:`filmstrip` of ``episode`` (starting after ``first_step``) that
    belong to the episodes before it in its life: what led to the failure."""
    return [sf for sf in strip if sf.episode != episode and sf.step <= first_step]


def strip_image(frame: np.ndarray, sf: StripFrame, factor: int = 3) -> np.ndarray:
    """A filmstrip frame enlarged ``factor`` times with its target tile outlined (cyan, as a
    target on the Turns page, ``factor // 2`` pixels wide)."""
    return outline_tiles(frame, [sf.target_tile] if sf.target_tile else [], TARGET_OUTLINE, factor=factor,
                         width=max(1, factor // 2))


def around(strip: list[StripFrame]) -> tuple[int | None, int | None]:
    """The steps of the ``before`` and ``after`` frames of a filmstrip (None: absent)."""
    before = next((f.step for f in strip if f.role == "before"), None)
    after = next((f.step for f in strip if f.role == "after"), None)
    return before, after


def known_values(text: str | None, options: list, sep: str = ",", cast: Callable[[str], Any] = str
                 ) -> tuple[list, list[str]]:
    """A ``sep``-separated URL value read against the values a filter offers: ``(kept,
    dropped)``, ``kept`` the options it names (in its order, each once), ``dropped`` the parts,
    as written, that are unreadable by ``cast`` or name no option (a page says so)."""
    kept: list = []
    dropped: list[str] = []
    for part in (p.strip() for p in (text or "").split(sep)):
        if not part:
            continue
        try:
            value = cast(part)
        except ValueError:
            dropped.append(part)
            continue
        if value in options:
            if value not in kept:
                kept.append(value)
        else:
            dropped.append(part)
    return kept, dropped


def failure_cell(run: Run, row: pd.Series | dict) -> tuple[int, int] | None:
    """Where the player of a failure's life stood at its failure step (``step``, ``life`` of a
    :func:`failures` row): the cell the Spatial grid opens on. None when not recorded."""
    pos = position_at(run, int(row["step"]), int(row["life"]))
    return (int(pos[0]), int(pos[1])) if pos else None
