"""The memory tools the policy calls: search, inspect, read, write, consolidate.

Every call is logged for the turn (``calls`` of the TurnRow, tool names from
``mfm.schema.TOOLS``). Inspection is real visual evidence: stored frames are decoded from
pixels into tiles and placed in world coordinates by the position the per-step trace
recorded for that frame.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from mfm.agent.mapping import Cell
from mfm.envs import Perception, decode_frame, estimate_daylight
from mfm.envs.rules import CONTENT, LOCAL_VIEW
from mfm.memory import ContentHit, Fact, IndexQuery, RunWriter, WorkingPlan, consolidate
from mfm.memory.consolidation import GUIDE, WORKING, parse_guide, parse_plan_targets
from mfm.memory.index import nearest_first
from mfm.memory.inheritance import InheritedMemory, inherited_id
from mfm.memory.retrieval import FrameError, episode_frame, read_trace, search
from mfm.memory.run_writer import LOG_RULE
from mfm.schema import LOGS, GridRow, IndexRow

HALF_COLS, HALF_ROWS = LOCAL_VIEW[0] // 2, LOCAL_VIEW[1] // 2
CENTRE_COLS, CENTRE_ROWS = range(HALF_COLS - 2, HALF_COLS + 3), range(HALF_ROWS - 2, HALF_ROWS + 3)
"""The central 5x5 tiles of the view (the player's tile in the middle)."""
FrameReader = Callable[[Path, IndexRow, int], np.ndarray]
"""Reads frame ``i`` of an episode of a run directory (``retrieval.episode_frame``)."""
DARK = 0.45
"""Below this daylight only the central 5x5 tiles of a frame are read (decoding the rest of a
night frame is unreliable: CRAFTER_NOTES, 82% over the full view)."""
Seen = dict[str, dict[Cell, None]]
"""What frames showed: material -> its cells, each once, in the order first seen."""


def legible(daylight: float, col: int, row: int) -> bool:
    """Whether tile (``col``, ``row``) of the 9x7 view can be read from a frame of this daylight."""
    return daylight >= DARK or (col in CENTRE_COLS and row in CENTRE_ROWS)


def note_seen(p: Perception, seen: Seen) -> None:
    """Add to ``seen`` the :data:`~mfm.envs.rules.CONTENT` tiles of ``p``'s view that its frame
    shows legibly (:func:`legible`): the content half of the episode index."""
    x0, y0 = p.pos
    for c, column in enumerate(p.local):
        for r, name in enumerate(column):
            if name in CONTENT and legible(p.daylight, c, r):
                seen.setdefault(name, {})[(x0 + c - HALF_COLS, y0 + r - HALF_ROWS)] = None


@dataclass(frozen=True)
class Sighting:
    """A tile read from a stored frame, placed in the world."""

    name: str
    cell: Cell
    episode: str
    step: int


@dataclass(frozen=True)
class LogLine:
    """One line of ``logs.txt`` with the episode and env step of its section."""

    episode: str
    step: int
    text: str


class TextLog:
    """The harness's ``logs.txt`` read incrementally (it is append-only), for grep."""

    HEAD = re.compile(r"^Action \d+ \| Step (?P<step>\d+) \|.*\| (?P<ep>ep_\d+)$")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[LogLine] = []
        self._offset = 0

    def refresh(self) -> None:
        """Read the sections appended since the last call."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        ep, step = "", 0
        for line in data[:end].decode("utf-8").splitlines():
            m = self.HEAD.match(line)
            if m:
                ep, step = m["ep"], int(m["step"])
            elif line and line != LOG_RULE and ep:
                self.lines.append(LogLine(ep, step, line))

    def grep(self, pattern: str, since_step: int = 0) -> list[LogLine]:
        """Lines matching the regular expression ``pattern`` in sections ending at or after ``since_step``."""
        self.refresh()
        rx = re.compile(pattern)
        return [ln for ln in self.lines if ln.step >= since_step and rx.search(ln.text)]


class MemoryTools:
    """The agent's access to its run directory's memory, with a per-turn call log.

    ``past``: the memory of the run this one inherited (:mod:`mfm.memory.inheritance`);
    content searches cover its episodes too, named ``inherited:ep_…``, and inspection reads
    their frames from its copy."""

    def __init__(self, writer: RunWriter, frames: FrameReader = episode_frame, notes_tokens: int | None = None,
                 past: InheritedMemory | None = None) -> None:
        self.writer = writer
        self.notes_tokens = notes_tokens
        self.past = past
        self._frames = frames
        self.dir: Path = writer.dir
        self.calls: list[dict] = []
        self.turn: int | None = None
        self.step = 0
        self.life = 0
        self._trace: dict[int, tuple[int, int]] = {}
        self._trace_offset = 0
        self.inspected_frames = 0
        self.text_log = TextLog(self.dir / LOGS)

    def begin_turn(self, turn: int, step: int, life: int) -> None:
        """Start a new call log for a turn."""
        self.calls = []
        self.turn, self.step, self.life = turn, step, life

    def log(self, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        self.calls.append({"tool": tool, "args": args, "result": result})

    # -- search and inspection ---------------------------------------------------------------
    def search(self, **predicates: Any) -> list[IndexRow]:
        """Search the index (see IndexQuery) and log the query and the ids found."""
        rows = search(self.writer.index, **predicates)
        args = {k: (list(v) if isinstance(v, tuple) else v) for k, v in predicates.items() if v is not None}
        self.log("search", args, {"ids": [r.id for r in rows]})
        return rows

    def find_seen(self, material: str, *, near: tuple[float, float] | None = None, radius: float | None = None,
                  limit: int | None = None) -> list[ContentHit]:
        """Search what episodes' frames showed for ``material`` (the index's content half), over
        every episode finished so far; logged as a search with the episodes found."""
        hits = self.writer.content.find(material, near=near, radius=radius, as_of_step=self.step, limit=limit)
        if self.past is not None:
            hits += self.past.find(material, near=near, radius=radius, limit=limit)
            if near is not None:
                hits = nearest_first(hits, near)
            hits = hits[:limit] if limit is not None else hits
        args: dict[str, Any] = {"seen": material}
        if near is not None:
            args["near"] = list(near)
        if radius is not None:
            args["radius"] = radius
        self.log("search", args, {"ids": list(dict.fromkeys(h.episode for h in hits)),
                                  "cells": [[*h.cell] for h in hits[:8]]})
        return hits

    def recent_episodes(self, since_step: int, limit: int) -> list[IndexRow]:
        """The episodes of the last ``limit`` turns (newest first) that ended at or after
        ``since_step``: frames addressed by turn, without any search."""
        out = []
        for row in reversed(self.writer.index.rows):
            if row.last_step < since_step or len(out) >= limit:
                break
            if row.kind == "episode" and row.frames:
                out.append(row)
        return out

    def turn_episodes(self, below: int, limit: int) -> list[IndexRow]:
        """The episodes of turns numbered below ``below`` (newest first, at most ``limit``) that
        have frames: earlier turns' frames addressed by turn id, without any search."""
        rows = self.writer.index.rows
        i = bisect.bisect_left(rows, below, key=lambda r: -1 if r.turn is None else r.turn)
        out = []
        while i > 0 and len(out) < limit:
            i -= 1
            row = rows[i]
            if row.kind == "episode" and row.frames:
                out.append(row)
        return out

    def grep(self, pattern: str, since_step: int = 0) -> list[LogLine]:
        """Search the text log (``logs.txt``) with a regular expression; logged as a search."""
        hits = self.text_log.grep(pattern, since_step)
        self.log("search", {"grep": pattern, "file": LOGS, "since_step": since_step},
                 {"ids": list(dict.fromkeys(h.episode for h in hits)), "lines": len(hits)})
        return hits

    def _load_trace(self) -> None:
        self._trace_offset = read_trace(self.dir / "steps.jsonl", self._trace_offset, self._trace)

    def position_at(self, step: int) -> tuple[int, int] | None:
        """The player's position after env step ``step``, from the per-step trace."""
        if step not in self._trace:
            self._load_trace()
        return self._trace.get(step)

    def frame(self, ref: IndexRow, i: int) -> np.ndarray:
        """Stored frame ``i`` of an episode, the run's own or an inherited one (without
        logging); raises FrameError."""
        if self.past is not None and inherited_id(ref.id) is not None:
            return self._frames(self.past.dir, self.past.bare(ref), i)
        return self._frames(self.dir, ref, i)

    def position_in(self, ref: IndexRow, step: int) -> tuple[int, int] | None:
        """The player's position after env step ``step`` of episode ``ref``'s game."""
        if self.past is not None and inherited_id(ref.id) is not None:
            return self.past.position_at(step)
        return self.position_at(step)

    def inspect(self, ref: IndexRow, want: Iterable[str], stride: int = 2, by: str = "search") -> list[Sighting]:
        """Decode every ``stride``-th stored frame of an episode; return the wanted tiles seen.

        ``by`` says how the episode was chosen: ``search`` (an index search) or ``turn``
        (by its turn number, counting back from the present)."""
        wanted = set(want)
        found: dict[tuple[str, Cell], Sighting] = {}
        frames = list(range(ref.frames - 1, -1, -stride))
        looked = 0
        for i in frames:
            step = ref.first_step + 1 + i
            pos = self.position_in(ref, step)
            if pos is None:
                continue
            try:
                frame = self.frame(ref, i)
            except FrameError:
                continue
            looked += 1
            light = estimate_daylight(frame)
            tiles = decode_frame(frame, light)
            for c, column in enumerate(tiles):
                for r, name in enumerate(column):
                    if name not in wanted or not legible(light, c, r):
                        continue
                    cell = (pos[0] + c - HALF_COLS, pos[1] + r - HALF_ROWS)
                    found.setdefault((name, cell), Sighting(name, cell, ref.id, step))
        self.inspected_frames += looked
        out = sorted(found.values(), key=lambda s: (s.name, s.cell))
        self.log("inspect", {"episode": ref.id, "turn": ref.turn, "by": by, "frames": looked, "stride": stride,
                             "want": sorted(wanted)},
                 {"found": [{"name": s.name, "x": s.cell[0], "y": s.cell[1], "step": s.step} for s in out]})
        return out

    # -- agent-written files -----------------------------------------------------------------
    def read(self, path: str) -> str | None:
        """Read a ``mine/`` file (logged)."""
        text = self.writer.memory.read(path)
        self.log("read", {"path": path}, {"chars": 0 if text is None else len(text)})
        return text

    def peek(self, path: str) -> str | None:
        """Read a ``mine/`` file without logging (what every turn's state is built from)."""
        return self.writer.memory.read(path)

    def facts(self) -> dict[str, Fact]:
        """The facts of GUIDE.md (without logging; part of every turn's state block)."""
        return parse_guide(self.peek(GUIDE) or "")

    def plan_targets(self) -> list[tuple[int, int, str]]:
        """The targets of working.md (without logging)."""
        return [(t.x, t.y, t.label) for t in parse_plan_targets(self.peek(WORKING) or "")]

    # -- the run's tables, read without logging ------------------------------------------------
    def grid_rows(self) -> list[GridRow]:
        """The spatial grid's rows, oldest first."""
        return self.writer.grid.rows

    def episode(self, ep_id: str) -> IndexRow | None:
        """The index row of an episode (``inherited:ep_…`` for one of the inherited run's),
        None if it is not in the index."""
        if self.past is not None and inherited_id(ep_id) is not None:
            return self.past.episode(ep_id)
        return self.writer.index.get(ep_id)

    def episode_at(self, step: int) -> IndexRow | None:
        """The episode in which env step ``step`` was played."""
        return self.writer.index.episode_at(step)

    def tagged(self, tag: str) -> list[IndexRow]:
        """The episodes tagged ``tag``, oldest first."""
        return self.writer.index.query(tags=(tag,), newest_first=False)

    def milestones(self) -> dict[str, int]:
        """The milestones the run has reached, with the step of each (``run.json``)."""
        return self.writer.manifest.milestones

    def write(self, path: str, content: str, reason: str, sources: Iterable[str] = ()) -> bool:
        """Write a ``mine/`` file with provenance; True if it changed."""
        w = self.writer.memory.write(path, content, author="agent", reason=reason, sources=sources,
                                     step=self.step, life=self.life, turn=self.turn)
        self.log("write", {"path": path, "reason": reason, "sources": list(sources)},
                 {"changed": w is not None, "seq": None if w is None else w.seq})
        return w is not None

    def consolidate(self, facts: list[Fact], plan: WorkingPlan | None, reason: str,
                    tool: str = "consolidate") -> dict[str, Any]:
        """Merge facts into GUIDE.md and replace working.md (logged with what changed).

        ``tool`` is ``consolidate`` for a consolidation (revising knowledge and plan from the
        evidence so far) and ``write`` for noting facts as they come (sight, inspection)."""
        rep = consolidate(self.writer.memory, facts, plan=plan, step=self.step, life=self.life, turn=self.turn,
                          reason=reason, budget_tokens=self.notes_tokens)
        result = {"added": rep.added, "revised": rep.revised, "removed": rep.removed,
                  "plan_changed": rep.plan_changed}
        if rep.evicted:
            result["evicted"] = rep.evicted
        if rep.changed:
            self.log(tool, {"path": GUIDE, "reason": reason, "facts": len(facts)} if tool == "write" else
                     {"reason": reason, "facts": len(facts)}, result)
        return result

    def query(self, **kw: Any) -> IndexQuery:
        """Build an IndexQuery (a convenience for the policy)."""
        return IndexQuery(**kw)
