"""Episodes saved by Crafter's own recorder (``crafter.Recorder``): one ``.npz`` per episode.

Each file opens as one run (its own world): arrays ``image`` (T+1 frames; row 0 is the
reset observation, whose ``player_pos`` the recorder leaves at (0, 0): we take row 1's), ``action``, ``reward``, ``done``, ``discount``, ``player_pos``,
``achievement_*`` counters and ``ainventory_*`` counts (sic). There is no memory: no
index, turns or agent files were recorded, so the run's episodes are cut by us from the
trace (at each first-time achievement, and every ``SEGMENT`` steps), and the memory pages
say that there is nothing to show.
"""
from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from loaders.sources import inferred_manifest
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError
from mfm.schema import TABLES, GridRow, IndexRow, LifeEvent, MilestoneRow, Problem, StepRow, episode_id
from mfm.validate import RunContents

SEGMENT = 50
VITALS = ("health", "food", "drink", "energy")
MAX_FRAMES = 200_000


def _actions() -> tuple[str, ...]:
    from mfm.envs.crafter_env import ACTIONS

    return ACTIONS


class RecorderSource:
    """Reads one ``crafter.Recorder`` episode file in place."""

    format = "crafter-recorder"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._arrays: dict[str, np.ndarray] | None = None
        self._problems: list[Problem] = []
        self._steps: list[StepRow] = []

    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            out: dict[str, np.ndarray] = {}
            try:
                with np.load(self.path, allow_pickle=False) as z:
                    for k in z.files:
                        out[k] = z[k]
            except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
                self._problems.append(Problem(self.path.name, 0, f"not a readable .npz: {e}"))
            self._arrays = out
        return self._arrays

    def contents(self) -> RunContents:
        a = self.arrays()
        problems = list(self._problems)
        names = _actions()
        n = len(a.get("action", ()))
        need = ("action", "player_pos", "reward")
        missing = [k for k in need if k not in a]
        if missing or n == 0:
            if not problems:
                problems.append(Problem(self.path.name, 0, f"missing arrays: {', '.join(missing) or 'all are empty'}"))
            man = inferred_manifest(self.path.stem, "crafter", [], task="crafter-recorder", method="recorded")
            return RunContents(self.path, man, {k: [] for k in TABLES}, {k: [] for k in TABLES}, problems)
        n = min(n, MAX_FRAMES, *(len(a[k]) for k in need))
        ach = sorted(k[len("achievement_"):] for k in a if k.startswith("achievement_"))
        inv = [k[len("ainventory_"):] for k in a if k.startswith("ainventory_")]
        pos = a["player_pos"].astype(np.int64)
        if n > 1 and not pos[0].any():
            pos[0] = pos[1]
        first_unlock: dict[str, int] = {}
        for name in ach:
            hits = np.flatnonzero(a[f"achievement_{name}"][:n] > 0)
            if len(hits):
                first_unlock[name] = int(max(1, hits[0]))
        cuts = sorted({s for s in first_unlock.values()} | set(range(SEGMENT, n, SEGMENT)) | {n - 1})
        index: list[IndexRow] = [IndexRow(
            id=episode_id(0), kind="initial", action_kind=None, first_step=0, last_step=0, summary="initial state",
            tags=("initial",), x=float(pos[0][0]), y=float(pos[0][1]), path="", image="frame:0")]
        steps: list[StepRow] = []
        grid: list[GridRow] = []
        seen: set[tuple[int, int]] = {(int(pos[0][0]), int(pos[0][1]))}
        grid.append(GridRow(cell=tuple(int(v) for v in pos[0]), kind="walked", step=0))
        start = 0
        for cut in cuts:
            if cut <= start:
                continue
            ep = episode_id(len(index))
            acts: Counter[str] = Counter()
            for s in range(start + 1, cut + 1):
                items = {k: int(a[f"ainventory_{k}"][s]) for k in inv}
                unlocked = tuple(k for k, v in first_unlock.items() if v == s)
                act = names[int(a["action"][s])] if 0 <= int(a["action"][s]) < len(names) else str(a["action"][s])
                acts[act] += 1
                steps.append(StepRow(
                    step=s, life=0, episode=ep, action=act, x=int(pos[s][0]), y=int(pos[s][1]), facing=(0, 0),
                    **{v: items.get(v, 0) for v in VITALS},
                    inventory={k: c for k, c in items.items() if c and k not in VITALS},
                    reward=float(a["reward"][s]), unlocked=unlocked))
                cell = (int(pos[s][0]), int(pos[s][1]))
                if cell not in seen:
                    seen.add(cell)
                    grid.append(GridRow(cell=cell, kind="walked", step=s))
            before = steps[-(cut - start) - 1].inventory if len(steps) > cut - start else {}
            index.append(self._episode(ep, start, cut, steps[-(cut - start):], before, acts, pos))
            start = cut
        died = "discount" in a and float(a["discount"][n - 1]) == 0.0
        lives = [LifeEvent(event="death", life=0, step=n - 1, x=float(pos[n - 1][0]), y=float(pos[n - 1][1]),
                           cause="unknown", episode=index[-1].id)] if died else []
        milestones = [MilestoneRow(name=k, step=v, life=0, episode=next(
            (r.id for r in index if r.first_step < v <= r.last_step), None)) for k, v in
            sorted(first_unlock.items(), key=lambda kv: kv[1])]
        self._steps = steps
        man = inferred_manifest(self.path.stem, "crafter", index, task="crafter-recorder", method="recorded",
                                milestone_order=tuple(ach), milestones=first_unlock,
                                status="finished", end_reason="died" if died else None)
        tables = {"index.jsonl": index, "grid.jsonl": grid, "steps.jsonl": steps, "turns.jsonl": [],
                  "memory_writes.jsonl": [], "milestones.jsonl": milestones, "lives.jsonl": lives}
        return RunContents(self.path, man, tables, {k: list(range(1, len(v) + 1)) for k, v in tables.items()},
                           problems)

    @staticmethod
    def _episode(ep: str, start: int, cut: int, rows: list[StepRow], before: dict, acts: Counter,
                 pos: np.ndarray) -> IndexRow:
        first, last = rows[0], rows[-1]
        moved = int(abs(pos[cut][0] - pos[start][0]) + abs(pos[cut][1] - pos[start][1]))
        delta = {k: last.inventory.get(k, 0) - before.get(k, 0) for k in set(before) | set(last.inventory)}
        delta = {k: v for k, v in delta.items() if v}
        unlocked = [u for r in rows for u in r.unlocked]
        tags = []
        if unlocked:
            tags.append("milestone")
        if delta:
            tags.append("inventory_changed")
        if last.health < first.health:
            tags.append("damage")
        top = ", ".join(f"{k}×{v}" for k, v in acts.most_common(3))
        summary = f"recorded steps {start + 1}–{cut}: {top}; moved {moved}"
        if delta:
            summary += f", inv {delta}"
        if unlocked:
            summary += f", unlocked {unlocked}"
        return IndexRow(id=ep, kind="episode", action_kind="recorded", first_step=start, last_step=cut,
                        summary=summary, tags=tuple(tags), x=float(pos[cut][0]), y=float(pos[cut][1]), path="",
                        image=f"frame:{cut}", frames=cut - start, outcome="done")

    def _image(self, step: int) -> np.ndarray:
        img = self.arrays().get("image")
        if img is None or not 0 <= step < len(img):
            raise FrameError(f"{self.path.name}: no frame for step {step}")
        return img[step]

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        rows = [r for r in self._steps if ref.first_step < r.step <= ref.last_step]
        if not rows:
            return EpisodeRecord(ref, None, None, None)
        last = rows[-1]
        state = {"step": last.step, "pos": [last.x, last.y], "vitals": {v: getattr(last, v) for v in VITALS},
                 "inventory": last.inventory}
        action = {"atom": "recorded", "actions": [r.action for r in rows]}
        outcome = {"last_step": ref.last_step, "tags": list(ref.tags), "unlocked": [u for r in rows for u in r.unlocked]}
        return EpisodeRecord(ref, state, action, outcome)

    def observation(self, ref: IndexRow) -> np.ndarray:
        return self._image(ref.last_step)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        return self._image(step)

