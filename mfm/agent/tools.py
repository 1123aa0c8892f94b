"""The memory tools the policy calls: search, inspect, read, write, consolidate.

Every call is logged for the turn (``calls`` of the TurnRow, tool names from
``mfm.schema.TOOLS``). Inspection is real visual evidence: stored frames are decoded from
pixels into tiles and placed in world coordinates by the position the per-step trace
recorded for that frame.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from mfm.agent.mapping import Cell
from mfm.envs import decode_frame, estimate_daylight
from mfm.memory import Fact, IndexQuery, RunWriter, WorkingPlan, consolidate
from mfm.memory.consolidation import GUIDE, WORKING, parse_guide, parse_plan_targets
from mfm.memory.retrieval import FrameError, episode_frame, search
from mfm.schema import IndexRow

CENTRE_COLS, CENTRE_ROWS = range(2, 7), range(1, 6)
DARK = 0.45


@dataclass(frozen=True)
class Sighting:
    """A tile read from a stored frame, placed in the world."""

    name: str
    cell: Cell
    episode: str
    step: int


class MemoryTools:
    """The agent's access to its run directory's memory, with a per-turn call log."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.dir: Path = writer.dir
        self.calls: list[dict] = []
        self.turn: int | None = None
        self.step = 0
        self.life = 0
        self._trace: dict[int, tuple[int, int]] = {}
        self._trace_offset = 0
        self.inspected_frames = 0

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

    def _load_trace(self) -> None:
        path = self.dir / "steps.jsonl"
        if not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(self._trace_offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            row = json.loads(line)
            self._trace[int(row["step"])] = (int(row["x"]), int(row["y"]))
        self._trace_offset += end

    def position_at(self, step: int) -> tuple[int, int] | None:
        """The player's position after env step ``step``, from the per-step trace."""
        if step not in self._trace:
            self._load_trace()
        return self._trace.get(step)

    def inspect(self, ref: IndexRow, want: Iterable[str], stride: int = 2) -> list[Sighting]:
        """Decode every ``stride``-th stored frame of an episode; return the wanted tiles seen."""
        wanted = set(want)
        found: dict[tuple[str, Cell], Sighting] = {}
        frames = list(range(ref.frames - 1, -1, -stride))
        looked = 0
        for i in frames:
            step = ref.first_step + 1 + i
            pos = self.position_at(step)
            if pos is None:
                continue
            try:
                frame = episode_frame(self.dir, ref, i)
            except FrameError:
                continue
            looked += 1
            light = estimate_daylight(frame)
            tiles = decode_frame(frame, light)
            for c, column in enumerate(tiles):
                for r, name in enumerate(column):
                    if name not in wanted:
                        continue
                    if light < DARK and (c not in CENTRE_COLS or r not in CENTRE_ROWS):
                        continue
                    cell = (pos[0] + c - 4, pos[1] + r - 3)
                    found.setdefault((name, cell), Sighting(name, cell, ref.id, step))
        self.inspected_frames += looked
        out = sorted(found.values(), key=lambda s: (s.name, s.cell))
        self.log("inspect", {"episode": ref.id, "frames": looked, "stride": stride, "want": sorted(wanted)},
                 {"found": [{"name": s.name, "x": s.cell[0], "y": s.cell[1], "step": s.step} for s in out]})
        return out

    # -- agent-written files -----------------------------------------------------------------
    def read(self, path: str) -> str | None:
        """Read a ``mine/`` file (logged)."""
        text = self.writer.memory.read(path)
        self.log("read", {"path": path}, {"chars": 0 if text is None else len(text)})
        return text

    def facts(self) -> dict[str, Fact]:
        """The facts of GUIDE.md (without logging; part of every turn's state block)."""
        return parse_guide(self.writer.memory.read(GUIDE) or "")

    def plan_targets(self) -> list[tuple[int, int, str]]:
        """The targets of working.md (without logging)."""
        return [(t.x, t.y, t.label) for t in parse_plan_targets(self.writer.memory.read(WORKING) or "")]

    def write(self, path: str, content: str, reason: str, sources: Iterable[str] = ()) -> bool:
        """Write a ``mine/`` file with provenance; True if it changed."""
        w = self.writer.memory.write(path, content, author="agent", reason=reason, sources=sources,
                                     step=self.step, life=self.life, turn=self.turn)
        self.log("write", {"path": path, "reason": reason, "sources": list(sources)},
                 {"changed": w is not None, "seq": None if w is None else w.seq})
        return w is not None

    def consolidate(self, facts: list[Fact], plan: WorkingPlan | None, reason: str) -> dict[str, Any]:
        """Merge facts into GUIDE.md and replace working.md (logged with what changed)."""
        rep = consolidate(self.writer.memory, facts, plan=plan, step=self.step, life=self.life, turn=self.turn,
                          reason=reason)
        result = {"added": rep.added, "revised": rep.revised, "removed": rep.removed,
                  "plan_changed": rep.plan_changed}
        if rep.changed:
            self.log("consolidate", {"reason": reason, "facts": len(facts)}, result)
        return result

    def query(self, **kw: Any) -> IndexQuery:
        """Build an IndexQuery (a convenience for the policy)."""
        return IndexQuery(**kw)
