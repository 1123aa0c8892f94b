"""The MFM policy: a turn-based scripted player whose only long-term memory is MFM memory.

Each turn the policy sees the current :class:`~mfm.envs.Perception` and what the memory
tools return: the spatial grid, GUIDE.md facts, the working.md plan, index searches and
decoded stored frames. It keeps no global map in its head; a resource seen earlier is found
again by searching the index and inspecting that episode's frames. It returns one
:class:`Decision` (an atom or a stored procedure) per turn, and learns from the outcome.

:class:`MFMPolicy` puts together its parts, one module each:

- :mod:`mfm.agent.head`: what it keeps in mind between turns (recent turns, failed targets,
  the covered map, the explore target), shared by the others;
- :mod:`mfm.agent.notes`: reading and writing GUIDE.md, working.md and procedures, and
  consolidation;
- :mod:`mfm.agent.explore`: the covered map and where to explore;
- :mod:`mfm.agent.recall`: finding a wanted thing again (view, notes, stored frames, text);
- :mod:`mfm.agent.survival`: getting unstuck, fighting, drinking, eating, resting;
- :mod:`mfm.agent.targets`: the tech tree towards the task's milestones.
"""
from __future__ import annotations

import random
from collections import Counter, deque
from typing import Any

from mfm.agent.atoms import AtomResult
from mfm.agent.explore import Explorer
from mfm.agent.head import Head, Recent
from mfm.agent.mapping import WALKABLE, Cell
from mfm.agent.modes import MFM, MemoryMode
from mfm.agent.notes import Notes
from mfm.agent.protocol import Decision, PolicyGaveUp, Turn, TurnReport
from mfm.agent.recall import Recall
from mfm.agent.survival import Survival
from mfm.agent.targets import Targets
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception, Task
from mfm.memory import Fact, ProceduralMemory
from mfm.schema import IndexRow

__all__ = ["Decision", "MFMPolicy"]


class MFMPolicy:
    """Scripted competence (tech tree, survival, search) over the memory its mode allows.

    ``mode`` (:class:`~mfm.agent.modes.MemoryMode`) decides what memory the policy may
    consult and write; everything else (atoms, survival, tech tree) is the same for every
    method. ``seed`` seeds the exploration of the memoryless ``direct`` mode. The runner drives
    it as a :class:`~mfm.agent.protocol.Policy`. Its parts: ``head``, ``notes``, ``explorer``,
    ``recall``, ``survival``, ``targets`` (see the module's docstring)."""

    name = "mfm-scripted"

    def __init__(self, task: Task, procedures: ProceduralMemory, inspect_episodes: int = 16,
                 inspect_stride: int = 2, mode: MemoryMode = MFM, seed: int = 0) -> None:
        self.task = task
        self.procedures = procedures
        self.mode = mode
        self.head = Head(random.Random(seed))
        self.notes = Notes(task, mode, procedures, self.head)
        self.explorer = Explorer(mode, seed, self.head)
        self.recall = Recall(task, mode, self.head, self.notes, self.explorer, inspect_episodes, inspect_stride)
        self.survival = Survival(mode, procedures, self.head, self.recall, self.explorer)
        self.targets = Targets(task, mode, procedures, self.recall, self.explorer)
        self.state_block = ""

    @property
    def recent(self) -> deque[Recent]:
        """The recent decisions (the state block's [RECENT])."""
        return self.head.recent

    # -- a turn --------------------------------------------------------------------------------
    def play_turn(self, turn: Turn) -> TurnReport:
        """The turn's decision (:meth:`decide`; with an outside decision, only :meth:`observe`)
        and what it cost; a :class:`PolicyGaveUp` is reported, not raised."""
        try:
            if turn.decision is None:
                d: Decision | None = self.decide(turn.perception, turn.tools, turn.source)
            else:
                self.observe(turn.perception, turn.tools)
                d = turn.decision
        except PolicyGaveUp as e:
            return TurnReport(None, *self.turn_cost(), self.state_block, gave_up=e)
        return TurnReport(d, *self.turn_cost(), self.state_block)

    def turn_cost(self) -> tuple[dict[str, Any] | None, float | None]:
        """The model usage and latency (seconds) of this turn: none for the scripted policy."""
        return None, None

    def observe(self, p: Perception, tools: MemoryTools) -> dict[str, Fact]:
        """Take in the perception and memory at the start of a turn (the state block); the facts known."""
        if not self.mode.in_head:
            self.head.forget()
        self._update_seen(tools)
        facts = self.knowledge(p, tools)
        self.state_block = self.build_state(p, tools, facts)
        return facts

    def decide(self, p: Perception, tools: MemoryTools, source: str | None) -> Decision:
        """One decision from the perception and what memory returns: staying alive first,
        then the task."""
        facts = self.observe(p, tools)
        d = self.survival.decide(p, tools, facts, source)
        if d is not None:
            return d
        return self.targets.progress(p, tools, facts, source)

    # -- what memory says ---------------------------------------------------------------------
    def _update_seen(self, tools: MemoryTools) -> None:
        """The covered map from the spatial grid (:meth:`Explorer.update_seen`)."""
        self.explorer.update_seen(tools)

    def knowledge(self, p: Perception, tools: MemoryTools) -> dict[str, Fact]:
        """The facts this turn's state block holds (:meth:`Notes.knowledge`)."""
        return self.notes.knowledge(p, tools)

    def resources(self, tools: MemoryTools, p: Perception) -> list[tuple[str, Cell]]:
        """Resource and place facts as (tile name, cell), for routing."""
        return self.notes.resources(tools, p)

    def build_state(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact]) -> str:
        """The turn's state block (recorded as the turn's note)."""
        done = [m for m in self.task.milestones if m in p.achievements]
        nxt = next((m for m in self.task.milestones if m not in p.achievements), "-")
        inv = " ".join(f"{k}:{v}" for k, v in sorted(p.inventory.items()) if v)
        vit = " ".join(f"{k[0]}{v}" for k, v in p.vitals.items())
        view = Counter(n for _, _, n in p.local_cells() if n not in WALKABLE)
        lines = [
            f"step {p.step} life {p.life} pos {p.pos} | milestones {len(done)}/{len(self.task.milestones)} next {nxt}",
            f"vitals {vit} | daylight {p.daylight:.2f} | inv {inv or '-'}",
            "view: " + " ".join(f"{k}={v}" for k, v in sorted(view.items())),
        ]
        if self.mode.recent:
            recent = "; ".join(f"{n}({a})->{lab}" for _, n, a, lab, _ in list(self.recent)[-3:])
            lines.append(f"recent: {recent or '-'}")
        if self.mode.coverage is not None:
            lines.append(f"map: {len(self.head.seen)} cells seen")
        if self.mode.coverage == "grid":
            kinds = Counter(r.kind for r in tools.grid_rows())
            lines.append("grid: " + " ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
        if self.mode.notes:
            plan = tools.plan_targets()
            lines.append(f"guide: {len(facts)} facts; plan: " + ("; ".join(f"({x},{y}) {lab}" for x, y, lab in plan)
                                                                or "-"))
        elif facts:
            lines.append(f"known: {len(facts)} places")
        return "\n".join(lines)

    # -- the turn's end ------------------------------------------------------------------------
    def after(self, d: Decision, result: AtomResult, row: IndexRow, died: bool, p: Perception,
              tools: MemoryTools) -> None:
        """Update memory from what the episode showed: facts, stale facts, procedures."""
        facts = self.knowledge(p, tools)
        self.head.took(d, result, row)
        self.notes.after(d, result, row, p, tools, facts)
        if self.mode.procedures:
            self._learn_procedures(d, result, row, died, tools)

    def _learn_procedures(self, d: Decision, result: AtomResult, row: IndexRow, died: bool,
                          tools: MemoryTools) -> None:
        """Procedures from the episode (:meth:`Notes.learn_procedures`)."""
        self.notes.learn_procedures(d, result, row, died, tools)

    def consolidation(self, p: Perception, tools: MemoryTools, reason: str, death: tuple[str, Cell, str] | None,
                      last: Decision | None) -> None:
        """Revise GUIDE.md and rewrite working.md (:meth:`Notes.consolidation`)."""
        self.notes.consolidation(p, tools, reason, death, last)

    def update_plan(self, p: Perception, d: Decision, tools: MemoryTools) -> None:
        """Keep working.md's targets in step with the decision just taken."""
        self.notes.update_plan(p, d, tools)

    def summary(self) -> dict[str, Any]:
        """Counts for the run's record: resources found by frames vs by sight."""
        found = self.notes.found
        return {"found_by_inspection": dict(sorted(found["inspection"].items())),
                "found_by_sight": dict(sorted(found["sight"].items())),
                "inspection_targets_used": len(self.recall.used_inspection), "recalls": self.recall.recalls}
