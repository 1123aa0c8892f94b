"""What the scripted policy reads from and writes to its notes: GUIDE.md facts, the working.md
plan and stored procedures.

A fact's key names a thing at a cell (``res:iron@40,12``, ``place:table@3,4``,
``hazard:lava@5,6``, :func:`res_key`, :func:`parse_cell_key`). Facts are written when the
player sees a wanted thing (:meth:`Notes.sight`) or a stored frame shows one
(:meth:`Notes.note_sightings`), revised after each episode (:meth:`Notes.after`) and at
consolidations (:meth:`Notes.consolidation`: at the start, after a death, every few episodes).
"Notes" is the memory modes' word for these files (``MemoryMode.notes``, a task's
``notes_tokens``); a researcher's notes on a run are another thing (``loaders.notes``).
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import replace
from typing import Iterable

from mfm.agent import events
from mfm.agent.atoms import AtomResult, visible
from mfm.agent.head import HALF_COLS, HALF_ROWS, Head
from mfm.agent.mapping import Cell, l1
from mfm.agent.modes import MemoryMode
from mfm.agent.protocol import Decision
from mfm.agent.tools import MemoryTools, Sighting
from mfm.envs import Perception, Task
from mfm.memory import Fact, ProceduralMemory, Procedure, Target, WorkingPlan
from mfm.memory.consolidation import WORKING
from mfm.schema import IndexRow

RESOURCE_CAP = {"tree": 6, "water": 4, "stone": 4, "coal": 6, "iron": 8, "diamond": 8, "cow": 2}
"""At most this many facts of each resource stay in GUIDE.md after a consolidation (nearest kept)."""
RESOURCE_SECTION = "Resources"
STATIONS = ("table", "furnace")


def res_key(name: str, cell: Cell) -> str:
    """The key of a resource fact: ``res:iron@40,12``."""
    return f"res:{name}@{cell[0]},{cell[1]}"


def parse_cell_key(key: str) -> tuple[str, str, Cell] | None:
    """``res:iron@40,12`` -> ("res", "iron", (40, 12))."""
    if ":" not in key or "@" not in key:
        return None
    kind, rest = key.split(":", 1)
    name, at = rest.split("@", 1)
    try:
        x, y = (int(v) for v in at.split(","))
    except ValueError:
        return None
    return kind, name, (x, y)


def known(facts: dict[str, Fact], kind: str, name: str) -> list[Cell]:
    """The cells of the facts of ``kind`` about ``name`` (``known(facts, "res", "iron")``)."""
    out = []
    for key in facts:
        parsed = parse_cell_key(key)
        if parsed and parsed[0] == kind and parsed[1] == name:
            out.append(parsed[2])
    return out


class Notes:
    """The policy's notes, as far as its mode has them (``mode.notes``, ``mode.procedures``,
    ``mode.consolidation``); ``found`` counts the resources written by sight and by
    inspection, ``inspect_sources`` the episodes whose frames showed each cell written."""

    def __init__(self, task: Task, mode: MemoryMode, procedures: ProceduralMemory, head: Head) -> None:
        self.task = task
        self.mode = mode
        self.procedures = procedures
        self.head = head
        self._log_facts: dict[str, Fact] = {}
        self._log_facts_upto = 0
        self.found = {"sight": Counter(), "inspection": Counter()}
        self.inspect_sources: dict[Cell, tuple[str, ...]] = {}
        self.contradictions: deque[str] = deque(maxlen=4)

    # -- reading -------------------------------------------------------------------------------
    def knowledge(self, p: Perception, tools: MemoryTools) -> dict[str, Fact]:
        """The facts this turn's state block holds: GUIDE.md for modes with notes; for
        ``pro-long`` also the places and hazards its text log names that GUIDE.md does not (the
        log is append-only, so each line is read once and what it named kept); for ``direct``
        the table and furnace in view."""
        facts: dict[str, Fact] = tools.facts() if self.mode.notes else {}
        if self.mode.search == "log":
            tools.text_log.refresh()
            lines = tools.text_log.lines
            for ln in lines[self._log_facts_upto:]:
                found = events.find(ln.text)
                place = next((e for e in found if e.kind == events.PLACED and e.item in STATIONS), None)
                lava = next((e for e in found if e.kind == events.LAVA), None)
                for kind, ev in (("place", place), ("hazard", lava)):
                    if ev is not None and ev.cell is not None:
                        key = f"{kind}:{ev.item or 'lava'}@{ev.cell[0]},{ev.cell[1]}"
                        self._log_facts[key] = Fact(key, ln.text, "Log", (ln.episode,))
            self._log_facts_upto = len(lines)
            return {**self._log_facts, **facts}
        if self.mode.notes:
            return facts
        for name, cell in visible(p, {"table", "furnace"}):
            key = f"place:{name}@{cell[0]},{cell[1]}"
            facts[key] = Fact(key, f"{name} in view", "View")
        return facts

    def resources(self, tools: MemoryTools, p: Perception) -> list[tuple[str, Cell]]:
        """Resource and place facts as (tile name, cell), for routing."""
        out = []
        for key in self.knowledge(p, tools):
            parsed = parse_cell_key(key)
            if parsed and parsed[0] in ("res", "place"):
                out.append((parsed[1], parsed[2]))
        return out

    # -- writing what was found ---------------------------------------------------------------
    def sight(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact],
              source: str | None) -> list[tuple[str, Cell]]:
        """Wanted things in the current view; new ones are written as facts (direct sight)."""
        hits = [h for h in visible(p, names) if self.head.failed[h[1]] < 2]
        new, names_done = [], set()
        for h in hits:
            if h[0] in names_done or h[0] == "cow":
                continue
            names_done.add(h[0])
            if res_key(*h) not in facts:
                new.append(h)
        if new and self.mode.notes:
            for name, _ in new:
                self.found["sight"][name] += 1
            srcs = (source,) if source else ()
            tools.consolidate([Fact(res_key(n, c), f"{n} at ({c[0]}, {c[1]}), seen directly", RESOURCE_SECTION, srcs)
                               for n, c in new[:6]], None, "direct sight", tool="write")
        return hits

    def note_sightings(self, p: Perception, sightings: list[Sighting], tools: MemoryTools,
                       facts: dict[str, Fact]) -> bool:
        """Write what stored frames showed as GUIDE.md facts (a few per thing, none near a
        known one, none where the grid says the thing was taken since); True if a resource
        (not a hazard) was added."""
        new: dict[str, Fact] = {}
        known_cells: dict[str, list[Cell]] = {}
        for key in facts:
            parsed = parse_cell_key(key)
            if parsed:
                known_cells.setdefault(parsed[1], []).append(parsed[2])
        sightings.sort(key=lambda s: (l1(s.cell, p.pos), s.name, s.cell))
        for s in sightings:
            if s.cell in self.head.opened:
                continue
            near = known_cells.setdefault(s.name, [])
            cap = 2 if s.name in ("water", "tree", "stone") else 4
            if any(l1(c, s.cell) <= 2 for c in near) or len([c for c in near]) >= cap + len(
                    [k for k in facts if k.startswith(f"res:{s.name}@")]):
                continue
            near.append(s.cell)
            key = (f"hazard:lava@{s.cell[0]},{s.cell[1]}" if s.name == "lava" else res_key(s.name, s.cell))
            if key in facts or key in new or self.head.failed[s.cell] >= 2:
                continue
            if s.name == "lava":
                new[key] = Fact(key, f"lava at ({s.cell[0]}, {s.cell[1]}), from a stored frame", "Hazards",
                                (s.episode,))
                continue
            self.found["inspection"][s.name] += 1
            self.inspect_sources[s.cell] = (s.episode,)
            new[key] = Fact(key, f"{s.name} at ({s.cell[0]}, {s.cell[1]}), read from frame of step {s.step}",
                            RESOURCE_SECTION, (s.episode,))
        if new:
            tools.consolidate(list(new.values()), None, "frame inspection", tool="write")
        return any(not k.startswith("hazard:") for k in new)

    # -- learning from the outcome ------------------------------------------------------------
    def after(self, d: Decision, result: AtomResult, row: IndexRow, p: Perception, tools: MemoryTools,
              facts: dict[str, Fact]) -> None:
        """Revise the facts by what the episode showed: the table or furnace it placed, and
        the known things in view that are gone (retracted; a contradiction for the plan unless
        the episode collected it)."""
        revise: list[Fact] = []
        for name, cell in result.found:
            if name in ("table", "furnace") and d.name in ("place", "table_tool"):
                revise.append(Fact(f"place:{name}@{cell[0]},{cell[1]}", f"my {name} at ({cell[0]}, {cell[1]})",
                                   "Places", (row.id,)))
        for key, fact in facts.items():
            parsed = parse_cell_key(key)
            if parsed is None or parsed[0] not in ("res", "place"):
                continue
            _, name, cell = parsed
            dx, dy = cell[0] - p.pos[0], cell[1] - p.pos[1]
            if abs(dx) <= HALF_COLS and abs(dy) <= HALF_ROWS:
                now = p.tile(dx, dy)
                if now != name and now not in ("cow", "zombie", "skeleton", "arrow", "player", "outside"):
                    why = f"{name} at {cell} is gone (now {now})"
                    revise.append(Fact(key, fact.text, fact.section, (row.id,), retract=True))
                    if parsed[0] == "place" or name not in ("tree", "stone", "coal", "iron", "diamond") or \
                            row.action_kind not in ("collect",):
                        self.contradictions.append(why)
        if revise and self.mode.notes:
            tools.consolidate(revise, None, "what the episode showed", tool="write")

    def learn_procedures(self, d: Decision, result: AtomResult, row: IndexRow, died: bool,
                         tools: MemoryTools) -> None:
        """Count a stored procedure's use (disabled after a death or repeated failures), or
        store one that two decisions in a row just showed (``table_tool``, ``safe_sleep``)."""
        pm = self.procedures
        if d.kind == "procedure":
            proc = pm.load(d.name)
            if proc is None:
                return
            ok = result.ok and not died
            proc = replace(proc, uses=proc.uses + 1, failures=proc.failures + (0 if ok else 1),
                           extra={**proc.extra, "last_episodes": (proc.extra.get("last_episodes", []) + [row.id])[-6:],
                                  "failed_episodes": (proc.extra.get("failed_episodes", [])
                                                      + ([] if ok else [row.id]))[-6:]})
            pm.save(proc, author="agent", reason=f"used in {row.id}: {result.label}", sources=(row.id,),
                    step=tools.step, life=tools.life, turn=tools.turn)
            tools.log("write", {"path": pm.path(d.name), "reason": "procedure use"}, {"uses": proc.uses,
                                                                                     "failures": proc.failures})
            if died:
                pm.disable(d.name, reason=f"the player died while running it ({row.id})",
                           sources=(row.id,) + proc.sources, step=tools.step, life=tools.life, turn=tools.turn,
                           author="agent")
                tools.log("write", {"path": pm.path(d.name), "op": "disable"}, {"reason": "death"})
            elif proc.failures >= 3 and proc.failures * 2 > proc.uses:
                pm.disable(d.name, reason=f"failed {proc.failures} of {proc.uses} uses",
                           sources=tuple(proc.extra.get("failed_episodes", ())), step=tools.step, life=tools.life,
                           turn=tools.turn, author="agent")
                tools.log("write", {"path": pm.path(d.name), "op": "disable"}, {"reason": "repeated failures"})
            return
        recent = self.head.recent
        if len(recent) < 2 or not result.ok:
            return
        (_, n1, a1, l1_, e1), (_, n2, _, l2, e2) = list(recent)[-2:]
        if l1_ != "done" or l2 != "done":
            return
        if n1 == "place" and a1.get("item") == "table" and n2 == "craft" and pm.load("table_tool") is None:
            proc = Procedure("table_tool", "place a table where I stand, then make a tool at it",
                             ({"atom": "place", "args": {"item": "table"}},
                              {"atom": "craft", "args": {"item": "$tool"}}),
                             params=("tool",), preconditions=({"have": {"wood": 3}},), sources=(e1, e2))
            pm.save(proc, author="agent", reason="a table then a tool worked", sources=(e1, e2), step=tools.step,
                    life=tools.life, turn=tools.turn)
            tools.log("write", {"path": pm.path("table_tool"), "op": "create"}, {"sources": [e1, e2]})
        if n1 == "shelter" and n2 == "sleep" and pm.load("safe_sleep") is None:
            proc = Procedure("safe_sleep", "dig a two-cell pocket into rock, seal it with a stone, sleep",
                             ({"atom": "shelter", "args": {}}, {"atom": "sleep", "args": {}}),
                             preconditions=({"have": {"stone": 1, "wood_pickaxe": 1}},), sources=(e1, e2))
            pm.save(proc, author="agent", reason="a shelter then sleep kept me safe", sources=(e1, e2),
                    step=tools.step, life=tools.life, turn=tools.turn)
            tools.log("write", {"path": pm.path("safe_sleep"), "op": "create"}, {"sources": [e1, e2]})

    # -- consolidation -------------------------------------------------------------------------
    def consolidation(self, p: Perception, tools: MemoryTools, reason: str, death: tuple[str, Cell, str] | None,
                      last: Decision | None) -> None:
        """Revise GUIDE.md (hazards, rules, caps, stale facts) and rewrite working.md; the
        grid's evidence only where the mode has the grid, none of it without consolidation."""
        if not self.mode.consolidation or not self.mode.notes:
            return
        facts = tools.facts()
        new: list[Fact] = []
        if death is not None:
            cause, cell, ep = death
            new.append(Fact(f"hazard:death@{cell[0]},{cell[1]}", events.died_of(cause, cell),
                            "Hazards", (ep,)))
        for r in tools.grid_rows() if self.mode.coverage == "grid" else ():
            if r.kind == "opened":
                for name in ("tree", "stone", "coal", "iron", "diamond"):
                    key = res_key(name, (r.cell[0], r.cell[1]))
                    if key in facts:
                        ref = tools.episode_at(r.step)
                        new.append(Fact(key, facts[key].text, sources=(ref.id,) if ref else (), retract=True))
        for m in tools.milestones():
            key = f"rule:{m}"
            if key not in facts:
                ep = next((r.id for r in tools.tagged("milestone") if m in " ".join(r.events)),
                          None) if self.mode.search == "index" else None
                new.append(Fact(key, f"{m} works as the rules say (confirmed)", "Rules", (ep,) if ep else ()))
        by_name: dict[str, list[tuple[int, str]]] = {}
        for key in facts:
            parsed = parse_cell_key(key)
            if parsed and parsed[0] == "res":
                by_name.setdefault(parsed[1], []).append((l1(parsed[2], p.pos), key))
        for name, items in by_name.items():
            for _, key in sorted(items)[RESOURCE_CAP.get(name, 8):]:
                new.append(Fact(key, facts[key].text, retract=True))
        plan = self.plan(p, facts, last.targets if last is not None else (), last.goal if last else "start")
        tools.consolidate(new, plan, reason)

    def plan(self, p: Perception, facts: dict[str, Fact], targets: Iterable[tuple[str, int, int]], goal: str) -> WorkingPlan:
        """working.md: the decision's targets, then the nearest known diamond, iron, coal, water."""
        plan_targets = [Target(x, y, goal) for _, x, y in targets]
        for name in ("diamond", "iron", "coal", "water"):
            for c in sorted(known(facts, "res", name), key=lambda c: l1(c, p.pos))[:1]:
                plan_targets.append(Target(c[0], c[1], f"{name} known"))
        nxt = next((m for m in self.task.milestones if m not in p.achievements), None)
        return WorkingPlan(goal=f"{self.task.name}: next milestone {nxt or 'none (all reached)'}",
                           targets=tuple(dict.fromkeys(plan_targets))[:6],
                           prediction=f"{goal}; expect {nxt or 'nothing new'} next",
                           contradictions=tuple(self.contradictions))

    def update_plan(self, p: Perception, d: Decision, tools: MemoryTools) -> None:
        """Keep working.md's targets in step with the decision just taken."""
        if not self.mode.notes:
            return
        plan = self.plan(p, tools.facts(), d.targets, d.goal)
        if tools.peek(WORKING) != plan.render():
            tools.write(WORKING, plan.render(), reason=f"plan: {d.goal}")
