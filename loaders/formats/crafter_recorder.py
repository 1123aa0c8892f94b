"""Episodes saved by Crafter's own recorder (``crafter.Recorder``): one ``.npz`` per episode.

Each file opens as one run (its own world): arrays ``image`` (T+1 frames; row 0 is the
reset observation, whose ``player_pos`` the recorder leaves at (0, 0): we take row 1's), ``action``, ``reward``, ``done``, ``discount``, ``player_pos``,
``achievement_*`` counters and ``ainventory_*`` counts (sic). There is no memory: no
index, turns or agent files were recorded, so the run's episodes are cut by us from the
trace (at each first-time achievement, and every ``SEGMENT`` steps), and the memory pages
say that there is nothing to show.

Every array is taken through :class:`Arrays`, the one typed-extraction layer: an array of
the wrong type or shape, or a row with a bad value, becomes one Problem naming
``file.npz › key``, and only that array (or those rows) is left out.
"""
from __future__ import annotations

import lzma
import math
import struct
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npy

from loaders.formats.mfm_export import MAX_INT
from loaders.sources import inferred_manifest
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import MAX_PIXELS, EpisodeRecord, FrameError
from mfm.run_reader import RunContents
from mfm.schema import (MAX_COORD, TABLES, GridRow, IndexRow, LifeEvent, MilestoneRow, NotRegularFile, Problem, StepRow,
                        check_regular, episode_id)

SEGMENT = 50
VITALS = ("health", "food", "drink", "energy")
MAX_FRAMES = 200_000
MAX_LOAD_BYTES = 2 << 30
"""Array bytes read from one recording at most; each array's size is checked from its header first."""
READ = ("image", "action", "reward", "discount", "player_pos")
PREFIXES = ("achievement_", "ainventory_")
MAX_ARRAYS = 256
"""Arrays read from one recording at most (Crafter records 5 plus 22 achievements and 16 items)."""
ZIP_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError, RuntimeError, zlib.error,
              lzma.LZMAError, struct.error)
"""What the zip and .npy readers raise on damaged or hostile bytes."""
KIND_WORDS = {"b": "booleans", "i": "integers", "u": "unsigned integers", "f": "numbers"}


def _actions() -> tuple[str, ...]:
    from mfm.envs.crafter_env import ACTIONS

    return ACTIONS


def _key(member: str) -> str:
    return member[:-4] if member.endswith(".npy") else member


def _wanted(member: str) -> bool:
    """Whether a zip member holds an array mfm reads."""
    key = _key(member)
    return key in READ or key.startswith(PREFIXES)


def _header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from a .npy header (nothing else is read)."""
    version = npy.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = npy.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = npy.read_array_header_2_0(f)
    else:
        raise ValueError(f"npy format {version[0]}.{version[1]} is not read")
    return shape, dtype


def _refusal(shape: tuple[int, ...], dtype: np.dtype, stored: int, budget: int) -> str | None:
    """Why an array with this header is not loaded, or None."""
    if dtype.hasobject:
        return "holds Python objects (never loaded: unpickling could run code)"
    if dtype.kind not in KIND_WORDS:
        return f"holds {dtype} values, not numbers"
    if any(d < 0 for d in shape):
        return f"declares a negative dimension {shape}"
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > stored:
        return f"declares shape {shape} of {dtype} ({nbytes} bytes) but its member holds {stored} bytes"
    if nbytes > budget:
        return f"{nbytes >> 20} MiB would pass the {MAX_LOAD_BYTES >> 20} MiB read from one recording"
    return None


def _counts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts as int64 and where they are valid (whole, 0..MAX_INT)."""
    if v.dtype.kind == "f":
        v = v.astype(np.float64)
    ok = (v >= 0) & (v <= MAX_INT)
    if v.dtype.kind == "f":
        ok &= np.floor(v) == v
    return np.where(ok, v, 0).astype(np.int64), ok


@dataclass(frozen=True)
class Trace:
    """The checked per-step values of one recording (row s: env step s; row 0: the reset)."""

    pos: np.ndarray
    """(n, 2) int64; 0 where ``ok_pos`` is False."""
    ok_pos: np.ndarray
    ok: np.ndarray
    """Steps a row can be made for: position and reward valid."""
    actions: list[str]
    reward: np.ndarray
    inventory: dict[str, tuple[np.ndarray, np.ndarray]]
    """Per item: counts and where they are known."""
    achievements: tuple[str, ...]
    first_unlock: dict[str, int]
    died: bool

    def at(self, s: int) -> tuple[int, int] | None:
        """The position at step ``s``, or None if it was not valid."""
        return (int(self.pos[s][0]), int(self.pos[s][1])) if self.ok_pos[s] else None


class Arrays:
    """Typed extraction from one recording: loads the arrays mfm reads, each checked from its
    .npy header first (numbers, no larger than the zip member holding it, ``MAX_LOAD_BYTES``
    in all; never pickles), and hands each out checked or records one Problem naming the key."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.problems: list[Problem] = []
        self.arrays: dict[str, np.ndarray] = {}
        self._refused: set[str] = set()
        self._load(path)
        self.image = self._frames()

    def bad(self, key: str | None, message: str, severity: str = "error") -> None:
        self.problems.append(Problem(f"{self.name} › {key}" if key else self.name, 0, message, severity))

    def _load(self, path: Path) -> None:
        try:
            check_regular(path, self.name)
        except NotRegularFile as e:
            self.bad(None, e.reason)
            return
        except OSError:
            pass
        try:
            with zipfile.ZipFile(path) as zf:
                members = [i for i in zf.infolist() if _wanted(i.filename)]
                if len(members) > MAX_ARRAYS:
                    self.bad(None, f"{len(members)} arrays; only the first {MAX_ARRAYS} are read", "warning")
                    members = members[:MAX_ARRAYS]
                loaded: dict[str, np.ndarray] = {}
                budget = MAX_LOAD_BYTES
                for info in sorted(members, key=lambda i: i.file_size):
                    key = _key(info.filename)
                    if key in loaded or key in self._refused:
                        self.bad(key, "stored twice; one copy is read", "warning")
                        continue
                    try:
                        with zf.open(info) as f:
                            why = _refusal(*_header(f), info.file_size, budget)
                        if why is None:
                            with zf.open(info) as f:
                                loaded[key] = npy.read_array(f, allow_pickle=False)
                            budget -= loaded[key].nbytes
                    except ZIP_ERRORS as e:
                        why = f"unreadable ({e})"
                    if why is not None:
                        self._refused.add(key)
                        self.bad(key, f"{why}; not read")
                self.arrays = {k: loaded[k] for k in dict.fromkeys(_key(i.filename) for i in members) if k in loaded}
        except ZIP_ERRORS as e:
            self.bad(None, f"not a readable .npz: {e}")

    def series(self, key: str, kinds: str = "biuf", tail: tuple[int | None, ...] = (),
               required: bool = False) -> np.ndarray | None:
        """The array ``key`` with one row per step, rows of shape ``tail`` (None: any size)
        and values of the dtype kinds ``kinds``; else None and a Problem (none for an
        optional array that is absent)."""
        a = self.arrays.get(key)
        if a is None:
            if required and key not in self._refused:
                self.bad(key, "missing")
            return None
        if a.dtype.kind not in kinds:
            self.bad(key, f"holds {a.dtype} values, expected {' or '.join(KIND_WORDS[k] for k in kinds)}; not read")
            return None
        if a.ndim != 1 + len(tail) or any(t is not None and t != s for t, s in zip(tail, a.shape[1:])):
            want = ", ".join(["steps", *("any" if t is None else str(t) for t in tail)])
            self.bad(key, f"has shape {a.shape}, expected ({want}{',' if not tail else ''}); not read")
            return None
        return a

    def rows(self, key: str, v: np.ndarray, n: int, outcome: str) -> np.ndarray:
        """The first ``n`` rows of ``v``, reporting when it holds fewer."""
        if len(v) < n:
            self.bad(key, f"holds {len(v)} rows for {n} steps; {outcome}", "warning")
        return v[:n]

    def bad_rows(self, key: str, bad: np.ndarray, what: str, outcome: str) -> None:
        """One Problem for the rows of ``key`` where ``bad`` holds."""
        where = np.flatnonzero(bad)
        if len(where):
            self.bad(key, f"{len(where)} row(s) {what} (first: step {where[0]}); {outcome}")

    def _frames(self) -> np.ndarray | None:
        """The frames, (T, height, width, 3) uint8, or None."""
        img = self.series("image", "u", (None, None, 3))
        if img is not None and (img.dtype != np.uint8 or not 0 < img.shape[1] * img.shape[2] <= MAX_PIXELS):
            self.bad("image", f"frames of {img.shape[1]}x{img.shape[2]} {img.dtype} are not shown (uint8, 1 "
                              f"to {MAX_PIXELS} pixels)")
            return None
        return img

    @cached_property
    def trace(self) -> Trace | None:
        """The per-step values, or None when no step can be read (the problems say why)."""
        pos = self.series("player_pos", "iuf", (2,), required=True)
        action = self.series("action", "biu", required=True)
        reward = self.series("reward", required=True)
        if pos is None or action is None or reward is None:
            return None
        lengths = {"player_pos": len(pos), "action": len(action), "reward": len(reward)}
        n = min(*lengths.values(), MAX_FRAMES)
        for k, m in lengths.items():
            if m < max(lengths.values()):
                self.bad(k, f"holds {m} rows where another array holds {max(lengths.values())}; the trace ends at "
                            f"step {m - 1}", "warning")
        if n < min(lengths.values()):
            self.bad(None, f"only the first {MAX_FRAMES} steps are read", "warning")
        if n == 0:
            self.bad(None, "no steps recorded (the arrays are empty)")
            return None
        p = pos[:n].astype(np.float64)
        if n > 1 and not p[0].any():
            p[0] = p[1]
        ok_pos = np.isfinite(p).all(axis=1) & (np.abs(p) <= MAX_COORD).all(axis=1)
        self.bad_rows("player_pos", ~ok_pos, f"NaN, infinite or beyond ±{MAX_COORD:g}", "those steps are left out")
        r = reward[:n].astype(np.float64)
        ok_r = np.isfinite(r) & (np.abs(r) <= MAX_COORD)
        self.bad_rows("reward", ~ok_r, f"NaN, infinite or beyond ±{MAX_COORD:g}", "those steps are left out")
        names = _actions()
        unlocks = self._unlocks(n)
        return Trace(
            pos=np.where(ok_pos[:, None], p, 0).astype(np.int64), ok_pos=ok_pos, ok=ok_pos & ok_r,
            actions=[names[v] if 0 <= v < len(names) else str(v) for v in action[:n].tolist()],
            reward=np.where(ok_r, r, 0.0), inventory=self._inventory(n), achievements=tuple(unlocks),
            first_unlock={k: s for k, s in unlocks.items() if s is not None}, died=self._died(n))

    def _inventory(self, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for key in [k for k in self.arrays if k.startswith("ainventory_")]:
            v = self.series(key)
            if v is None:
                continue
            v = self.rows(key, v, n, "later steps are read without it")
            counts, ok = _counts(v)
            self.bad_rows(key, ~ok, "negative, fractional, NaN or beyond 2**53", "left out at those steps")
            full, known = np.zeros(n, np.int64), np.zeros(n, bool)
            full[:len(v)], known[:len(v)] = counts, ok
            out[key[len("ainventory_"):]] = (full, known)
        return out

    def _unlocks(self, n: int) -> dict[str, int | None]:
        """Each achievement and the step it was first reached (None: not reached)."""
        out: dict[str, int | None] = {}
        for key in sorted(k for k in self.arrays if k.startswith("achievement_")):
            v = self.series(key)
            if v is not None:
                hits = np.flatnonzero(self.rows(key, v, n, "later unlocks are not seen") > 0)
                out[key[len("achievement_"):]] = int(max(1, hits[0])) if len(hits) else None
        return out

    def _died(self, n: int) -> bool:
        d = self.series("discount")
        if d is None:
            return False
        d = self.rows("discount", d, n, "whether the episode ended in a death is not known")
        return len(d) == n and float(d[n - 1]) == 0.0


class RecorderSource:
    """Reads one ``crafter.Recorder`` episode file in place."""

    format = "crafter-recorder"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._arrays: Arrays | None = None
        self._steps: list[StepRow] = []

    def arrays(self) -> Arrays:
        """The recording's arrays, loaded (and checked) on first use."""
        if self._arrays is None:
            self._arrays = Arrays(self.path)
        return self._arrays

    def contents(self) -> RunContents:
        a = self.arrays()
        t = a.trace
        if t is None:
            man = inferred_manifest(self.path.stem, "crafter", [], task="crafter-recorder", method="recorded")
            return RunContents(self.path, man, {k: [] for k in TABLES}, {k: [] for k in TABLES}, list(a.problems))
        n = len(t.pos)
        xy = t.at(0)
        index: list[IndexRow] = [IndexRow(
            id=episode_id(0), kind="initial", action_kind=None, first_step=0, last_step=0, summary="initial state",
            tags=("initial",), x=float(xy[0]) if xy else None, y=float(xy[1]) if xy else None, path="",
            image="frame:0")]
        steps: list[StepRow] = []
        grid: list[GridRow] = [GridRow(cell=xy, kind="walked", step=0)] if xy else []
        seen: set[tuple[int, int]] = {xy} if xy else set()
        cuts = sorted(set(t.first_unlock.values()) | set(range(SEGMENT, n, SEGMENT)) | {n - 1})
        start, here, before = 0, xy, {}
        for cut in cuts:
            if cut <= start:
                continue
            ep = episode_id(len(index))
            rows: list[StepRow] = []
            for s in range(start + 1, cut + 1):
                if not t.ok[s]:
                    continue
                items = {k: int(v[s]) for k, (v, known) in t.inventory.items() if known[s]}
                x, y = t.at(s)
                rows.append(StepRow(
                    step=s, life=0, episode=ep, action=t.actions[s], x=x, y=y, facing=(0, 0),
                    **{v: items.get(v, 0) for v in VITALS},
                    inventory={k: c for k, c in items.items() if c and k not in VITALS},
                    reward=float(t.reward[s]), unlocked=tuple(k for k, v in t.first_unlock.items() if v == s)))
                if (x, y) not in seen:
                    seen.add((x, y))
                    grid.append(GridRow(cell=(x, y), kind="walked", step=s))
            if rows:
                index.append(self._episode(ep, start, cut, rows, before, here or (rows[0].x, rows[0].y)))
                steps.extend(rows)
                before, here = rows[-1].inventory, (rows[-1].x, rows[-1].y)
            start = cut
        end = t.at(n - 1)
        lives = [LifeEvent(event="death", life=0, step=n - 1, x=float(end[0]) if end else None,
                           y=float(end[1]) if end else None, cause="unknown", episode=index[-1].id)] if t.died else []
        milestones = [MilestoneRow(name=k, step=v, life=0, episode=next(
            (r.id for r in index if r.first_step < v <= r.last_step), None)) for k, v in
            sorted(t.first_unlock.items(), key=lambda kv: kv[1])]
        self._steps = steps
        man = inferred_manifest(self.path.stem, "crafter", index, task="crafter-recorder", method="recorded",
                                milestone_order=t.achievements, milestones=t.first_unlock,
                                status="finished", end_reason="died" if t.died else None)
        tables = {"index.jsonl": index, "grid.jsonl": grid, "steps.jsonl": steps, "turns.jsonl": [],
                  "memory_writes.jsonl": [], "milestones.jsonl": milestones, "lives.jsonl": lives, "seen.jsonl": []}
        return RunContents(self.path, man, tables, {k: list(range(1, len(v) + 1)) for k, v in tables.items()},
                           list(a.problems))

    @staticmethod
    def _episode(ep: str, start: int, cut: int, rows: list[StepRow], before: dict, origin: tuple[int, int]) -> IndexRow:
        first, last = rows[0], rows[-1]
        moved = abs(last.x - origin[0]) + abs(last.y - origin[1])
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
        top = ", ".join(f"{k}×{v}" for k, v in Counter(r.action for r in rows).most_common(3))
        summary = f"recorded steps {start + 1}–{cut}: {top}; moved {moved}"
        if delta:
            summary += f", inv {delta}"
        if unlocked:
            summary += f", unlocked {unlocked}"
        return IndexRow(id=ep, kind="episode", action_kind="recorded", first_step=start, last_step=cut,
                        summary=summary, tags=tuple(tags), x=float(last.x), y=float(last.y), path="",
                        image=f"frame:{cut}", frames=cut - start, outcome="done")

    def _image(self, step: int) -> np.ndarray:
        img = self.arrays().image
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
