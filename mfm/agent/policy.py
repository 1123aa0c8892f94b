"""The MFM policy: a turn-based scripted player whose only long-term memory is MFM memory.

Each turn the policy sees the current :class:`~mfm.envs.Perception` and what the memory
tools return: the spatial grid, GUIDE.md facts, the working.md plan, index searches and
decoded stored frames. It keeps no global map in its head; a resource seen earlier is found
again by searching the index and inspecting that episode's frames. It returns one
:class:`Decision` (an atom or a stored procedure) per turn, and learns from the outcome.
"""
from __future__ import annotations

import functools
import random
from collections import Counter, deque
from dataclasses import replace
from typing import Any

from mfm.agent import events
from mfm.agent.atoms import CRAFT, HOSTILE, AtomResult, Atoms, visible
from mfm.agent.mapping import DIRS, MINE_TOOL, WALKABLE, Cell, NavMap, cheb, l1
from mfm.agent.modes import MFM, MemoryMode
from mfm.agent.protocol import Decision, PolicyGaveUp, Turn, TurnReport
from mfm.agent.tools import MemoryTools, Sighting
from mfm.envs import Perception, Task, rules
from mfm.memory import Fact, ProceduralMemory, Procedure, Target, WorkingPlan
from mfm.memory.consolidation import WORKING
from mfm.memory.inheritance import inherited_id
from mfm.schema import IndexRow

RESOURCE_CAP = {"tree": 6, "water": 4, "stone": 4, "coal": 6, "iron": 8, "diamond": 8, "cow": 2}
SEEK_BY_FRAMES = ("water", "tree", "stone", "coal", "iron", "diamond")
RECALL_CELLS = 2
"""Cells of each wanted thing a content search of the index looks up at once (nearest first)."""
RECALL_AGAIN = 100
"""Env steps before the same episode may be looked up again for the same thing at the same
cell: once its note is gone from GUIDE.md (evicted over the budget, or retracted), the frames
are the only record, so they are read again rather than never."""
RECALLED = frozenset({"diamond"})
"""Things whose recalls (memory sending the player to them) the run's summary lists."""
MAX_RECALLS = 200
"""At most this many recalls are listed (``run.json`` stays small)."""
MINERALS = frozenset({"stone", "coal", "iron", "diamond"})
RESOURCE_SECTION = "Resources"
ITEM_TILE = {"wood": "tree", "stone": "stone", "coal": "coal", "iron": "iron", "diamond": "diamond"}
STATIONS = ("table", "furnace")
HALF_COLS, HALF_ROWS = rules.LOCAL_VIEW[0] // 2, rules.LOCAL_VIEW[1] // 2
"""How far the 9x7 view reaches from the player: 4 columns and 3 rows each way."""
EDGE = 3
"""Explore targets keep this many cells from the world's edge (a lattice of this stride)."""
FALLBACK_MIN = rules.LOCAL_VIEW[0]
"""Once every explore point is seen, the fallback target is at least this far (L1) from the
player: never its own cell, never one step away."""
FACINGS = ("left", "up", "right", "down")
STUCK_REPEATS = 5
"""How many times in a row, at one env step, the stuck handler keeps its first choice of
direction (``step % 4``) before it turns further each time. Five keeps the shipped samples
byte-identical: ``diamond_direct_s2_2500steps`` stalls for 17 turns at step 701 (five
firings facing the way it already faced) and gets out by chance; a sixth would rotate."""


def res_key(name: str, cell: Cell) -> str:
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


class MFMPolicy:
    """Scripted competence (tech tree, survival, search) over the memory its mode allows.

    ``mode`` (:class:`~mfm.agent.modes.MemoryMode`) decides what memory the policy may
    consult and write; everything else (atoms, survival, tech tree) is the same for every
    method. ``seed`` seeds the exploration of the memoryless ``direct`` mode. The runner drives
    it as a :class:`~mfm.agent.protocol.Policy`."""

    name = "mfm-scripted"

    def __init__(self, task: Task, procedures: ProceduralMemory, inspect_episodes: int = 16,
                 inspect_stride: int = 2, mode: MemoryMode = MFM, seed: int = 0) -> None:
        self.task = task
        self.procedures = procedures
        self.mode = mode
        self.seed = seed
        self.rng = random.Random(seed)
        self.sites: dict[str, dict[Cell, str]] = {}
        self.seen_sites: dict[str, dict[Cell, str]] = {}
        self.sites_until = -1
        self.scan_turn: int | None = None
        self._log_facts: dict[str, Fact] = {}
        self._log_facts_upto = 0
        self.inspect_episodes = inspect_episodes
        self.inspect_stride = inspect_stride
        self.recent: deque[tuple[str, str, dict, str, str]] = deque(maxlen=6)
        self.inspected_until = -1
        self.failed: Counter[Cell] = Counter()
        self.found = {"sight": Counter(), "inspection": Counter()}
        self.used_inspection: list[dict] = []
        self.inspect_sources: dict[Cell, tuple[str, ...]] = {}
        self.recalled: dict[tuple[str, Cell, str], int] = {}
        self.recalls: list[dict[str, Any]] = []
        self.recall_names = RECALLED | ({t for m in task.milestones if (t := _collects(m))} if task.kit else set())
        self.opened: set[Cell] = set()
        self.contradictions: deque[str] = deque(maxlen=4)
        self.seen: set[Cell] = set()
        self._grid_seen_upto = 0
        self.explore_target: Cell | None = None
        self.idle = 0
        self.spins = 0
        self.spin_step = -1
        self.goal = "start"
        self.state_block = ""

    # -- what memory says ---------------------------------------------------------------------
    def _update_seen(self, tools: MemoryTools) -> None:
        """Where I have been and which cells were cut or mined (the state block's map), from the
        spatial grid, for the modes with a map."""
        stood: list[Cell] = []
        if self.mode.coverage == "grid":
            rows = tools.grid_rows()
            new = rows[self._grid_seen_upto:]
            stood = [(r.cell[0], r.cell[1]) for r in new if r.kind in ("walked", "opened")]
            self.opened.update((r.cell[0], r.cell[1]) for r in new if r.kind == "opened")
            self._grid_seen_upto = len(rows)
        for x, y in stood:
            for dx in range(-HALF_COLS, HALF_COLS + 1):
                for dy in range(-HALF_ROWS, HALF_ROWS + 1):
                    self.seen.add((x + dx, y + dy))

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

    @staticmethod
    def known(facts: dict[str, Fact], kind: str, name: str) -> list[Cell]:
        out = []
        for key in facts:
            parsed = parse_cell_key(key)
            if parsed and parsed[0] == kind and parsed[1] == name:
                out.append(parsed[2])
        return out

    def resources(self, tools: MemoryTools, p: Perception) -> list[tuple[str, Cell]]:
        """Resource and place facts as (tile name, cell), for routing."""
        out = []
        for key in self.knowledge(p, tools):
            parsed = parse_cell_key(key)
            if parsed and parsed[0] in ("res", "place"):
                out.append((parsed[1], parsed[2]))
        return out

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
            lines.append(f"map: {len(self.seen)} cells seen")
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

    # -- finding things ----------------------------------------------------------------------
    def _sight(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact],
               source: str | None) -> list[tuple[str, Cell]]:
        """Wanted things in the current view; new ones are written as facts (direct sight)."""
        hits = [h for h in visible(p, names) if self.failed[h[1]] < 2]
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

    def _inspect(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact]) -> bool:
        """Find episodes to look at and decode their frames for ``names``: by what frames
        showed, over the whole history (``mfm``: :meth:`_recall`), by an index search of the
        episodes since the last inspection (``no-content``) or by turn id (``vista``,
        ``no-index``: :meth:`_by_turn`)."""
        if self.mode.frames is None or p.step <= self.inspected_until + 1:
            return False
        lo = self.inspected_until + 1
        stride = self.inspect_stride
        if self.mode.content:
            refs, by, stride = self._recall(p, names, tools, facts), "content", 1
        elif self.mode.frames == "index":
            refs, by = [r for r in tools.search(steps=(lo, p.step), near=p.pos, radius=40.0, kind="episode",
                                                limit=self.inspect_episodes) if r.frames], "search"
        else:
            refs, by = self._by_turn(lo, tools), "turn"
        self.inspected_until = p.step
        sightings: list[Sighting] = []
        for ref in refs:
            sightings += tools.inspect(ref, names | {"lava"}, stride, by=by)
        return self._note_sightings(p, sightings, tools, facts)

    def _by_turn(self, since_step: int, tools: MemoryTools) -> list[IndexRow]:
        """The episodes to reopen by turn id, without an index: those of the newest turns not
        looked at yet (ended at or after ``since_step``, at most ``inspect_episodes``), then
        ``inspect_episodes // 4`` older ones, walking back from where the last lookup's walk
        stopped and starting again from the newest once it passes turn 0, so that every
        earlier turn's frames come round again, however old."""
        new = tools.recent_episodes(since_step, self.inspect_episodes)
        newest = min((r.turn for r in new if r.turn is not None), default=tools.turn)
        below = newest if self.scan_turn is None or newest is None else min(self.scan_turn, newest)
        want = max(1, self.inspect_episodes // 4)
        older = tools.turn_episodes(below, want) if below is not None else []
        if len(older) < want and newest is not None:
            ids = {r.id for r in older}
            older += [r for r in tools.turn_episodes(newest, want - len(older)) if r.id not in ids]
        if older:
            self.scan_turn = older[-1].turn
        return new + older

    def _recall(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact]) -> list[IndexRow]:
        """The episodes whose frames showed a wanted thing at a cell not known, not failed, not
        opened since (the grid says it was cut or mined: trees become grass, rock path) and
        not looked up in the last :data:`RECALL_AGAIN` steps; nearest cells first,
        :data:`RECALL_CELLS` per thing, at most ``inspect_episodes // 4`` episodes: the index
        searched by content, every episode so far, however old.

        A content search names the latest episode that showed a cell, so a lookup barred for
        good would lose the place for good once its note was evicted."""
        refs: dict[str, IndexRow] = {}
        known = {parsed[2] for parsed in map(parse_cell_key, facts) if parsed}
        for name in sorted(names):
            hits = tools.find_seen(name, near=p.pos, limit=4 * RECALL_CELLS)
            fresh = [h for h in hits if h.cell not in known and h.cell not in self.opened and self.failed[h.cell] < 2
                     and p.step - self.recalled.get((name, h.cell, h.episode), -RECALL_AGAIN) >= RECALL_AGAIN
                     ][:RECALL_CELLS]
            for h in fresh:
                ref = tools.episode(h.episode)
                if ref is None or not ref.frames:
                    continue
                if ref.id in refs or len(refs) < max(1, self.inspect_episodes // 4):
                    self.recalled[(name, h.cell, h.episode)] = p.step
                    refs.setdefault(ref.id, ref)
        return list(refs.values())

    def _note_sightings(self, p: Perception, sightings: list[Sighting], tools: MemoryTools,
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
            if s.cell in self.opened:
                continue
            near = known_cells.setdefault(s.name, [])
            cap = 2 if s.name in ("water", "tree", "stone") else 4
            if any(l1(c, s.cell) <= 2 for c in near) or len([c for c in near]) >= cap + len(
                    [k for k in facts if k.startswith(f"res:{s.name}@")]):
                continue
            near.append(s.cell)
            key = (f"hazard:lava@{s.cell[0]},{s.cell[1]}" if s.name == "lava" else res_key(s.name, s.cell))
            if key in facts or key in new or self.failed[s.cell] >= 2:
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

    def _update_sites(self, p: Perception, tools: MemoryTools) -> None:
        """Places the text names, from episodes not yet searched: where a thing was got
        (collected X at, drank at), by a grep of the text log (``pro-long``) or a text search
        of the index (``no-frames``); and, in the log only, the cells its view showed
        (``[SEEN]`` lines, :func:`mfm.agent.events.seen`)."""
        if p.step <= self.sites_until:
            return
        lo = self.sites_until + 1
        texts: list[tuple[str, str]] = []
        if self.mode.search == "log":
            texts = [(ln.episode, ln.text) for ln in tools.grep(f"{events.SITE_GREP}|{events.SEEN_GREP}", lo)]
        elif self.mode.search == "index":
            for word in events.SITE_WORDS:
                texts += [(r.id, e) for r in tools.search(text=word, steps=(lo, p.step), kind="episode")
                          for e in r.events]
        self.sites_until = p.step
        for ep, text in texts:
            shown = events.parse_seen(text)
            if shown is not None:
                if shown[0] in SEEK_BY_FRAMES:
                    cells = self.seen_sites.setdefault(shown[0], {})
                    cells.update((c, ep) for c in shown[1])
                continue
            for ev in events.find(text):
                name = "water" if ev.kind == events.DRANK else ITEM_TILE.get(ev.item or "")
                if ev.kind in (events.COLLECTED, events.DRANK) and name and ev.cell is not None:
                    self.sites.setdefault(name, {})[ev.cell] = ep

    def _site(self, p: Perception, names: list[str], usable: set[str], tools: MemoryTools,
              why: str) -> Decision | None:
        """Go where the text says a wanted thing is: to a cell the log says the view showed
        (not cut or mined since, by the map), or where it says I drank, to get it there; or
        where it says I collected it, to look around the spot for more (a cut tree turns into
        grass and mined rock into path, so the cell itself is gone)."""
        if not self.mode.text_sites:
            return None
        self._update_sites(p, tools)
        shown = [(n, c, True) for n in names if n in usable for c in self.seen_sites.get(n, {})
                 if c not in self.opened and self.failed[c] < 2]
        got = [(n, c, False) for n in names if n in usable for c in self.sites.get(n, {}) if self.failed[c] < 2]
        if not shown and not got:
            return None
        name, cell, seen = min(shown + got, key=lambda h: (l1(h[1], p.pos) + 8 * names.index(h[0]), not h[2], h[1]))
        if seen:
            self._note_log_recall(p, name, cell, self.seen_sites[name][cell], tools)
            return self._get(name, cell, why + " (where the log says I saw it)")
        if name == "water":
            return self._get(name, cell, why + " (where the text says I got it)")
        self.failed[cell] += 1
        return Decision("atom", "explore", {"x": cell[0], "y": cell[1], "stop_on": sorted(usable)},
                        why + " (look where the text says I found it)", [("look_at", cell[0], cell[1])])

    def _note_log_recall(self, p: Perception, name: str, cell: Cell, episode: str, tools: MemoryTools) -> None:
        """Record a recall made from the text log's ``[SEEN]`` line of ``episode`` (``via``
        ``log``; see :meth:`_note_recall`)."""
        if name not in self.recall_names or len(self.recalls) >= MAX_RECALLS:
            return
        ref = tools.episode(episode)
        self.recalls.append({"name": name, "x": cell[0], "y": cell[1], "step": p.step, "via": "log",
                             "source": episode, "age": p.step - ref.last_step if ref else None})

    def _explore_target(self, p: Perception, names: set[str], facts: dict[str, Fact]) -> Cell:
        """The nearest unexplored point, pulled towards mountains when rock is wanted. Without
        a map (``direct``): a far point that changes every 150 steps, sometimes a random one."""
        if self.mode.coverage is None:
            leg = random.Random(self.seed * 1_000_003 + p.step // 150)
            pick = self.rng if self.rng.random() < 0.2 else leg
            return (pick.randrange(EDGE, p.area[0] - EDGE), pick.randrange(EDGE, p.area[1] - EDGE))
        if self.explore_target and self.explore_target not in self.seen and self.failed[self.explore_target] < 2:
            return self.explore_target
        rocky = []
        if names & MINERALS:
            for n in ("stone", "coal", "iron", "diamond"):
                rocky += self.known(facts, "res", n)
            rocky += self.known(facts, "hazard", "lava")
        best, best_score = None, float("inf")
        for c in _lattice(p.area):
            if c in self.seen or self.failed[c] >= 2:
                continue
            score = float(l1(c, p.pos))
            if rocky:
                score += 0.7 * min(l1(c, r) for r in rocky)
            if score < best_score:
                best, best_score = c, score
        if best is None:
            best = self._fallback_target(p)
        self.explore_target = best
        return best

    def _fallback_target(self, p: Perception) -> Cell:
        """Where to wander once every explore point has been seen: the point mirrored through
        the world's centre, unless that is near the player (at the centre it is the player's
        own cell, which took no step and livelocked the policy) or failed twice; then the
        lattice point farthest from the player that has not failed twice (any, if all have)."""
        x, y = p.pos
        w, h = p.area
        mirror = (max(EDGE, min(w - EDGE - 1, w - x)), max(EDGE, min(h - EDGE - 1, h - y)))
        if l1(mirror, p.pos) >= FALLBACK_MIN and self.failed[mirror] < 2:
            return mirror
        points = [c for c in _lattice(p.area) if self.failed[c] < 2] or list(_lattice(p.area))
        return max(points, key=lambda c: (l1(c, p.pos), -c[0], -c[1]))

    def seek(self, p: Perception, names: list[str], tools: MemoryTools, facts: dict[str, Fact],
             source: str | None, why: str) -> Decision:
        """Get the first wanted thing: in view, known in GUIDE.md, found in frames, or explore."""
        want = set(names)
        usable = {n for n in want if n not in MINE_TOOL or MINE_TOOL[n] in p.inventory and p.inventory[MINE_TOOL[n]]}
        hits = [h for h in self._sight(p, usable, tools, facts, source)]
        if hits:
            hits.sort(key=lambda h: (names.index(h[0]), l1(h[1], p.pos)))
            name, cell = hits[0]
            if not self.mode.in_head and len(hits) > 1 and self.rng.random() < 0.25:
                name, cell = self.rng.choice(hits)
            return self._get(name, cell, why + " (in view)")
        for attempt in range(2):
            facts = self.knowledge(p, tools)
            cands = [(n, c) for n in names if n in usable for c in self.known(facts, "res", n) if self.failed[c] < 2]
            if cands:
                name, cell = min(cands, key=lambda h: (l1(h[1], p.pos) + 8 * names.index(h[0]), h[1]))
                d = self._get(name, cell, why + " (from memory)")
                if cell in self.inspect_sources:
                    self.used_inspection.append({"name": name, "x": cell[0], "y": cell[1], "step": p.step,
                                                 "sources": list(self.inspect_sources[cell])})
                self._note_recall(p, name, cell, facts, tools)
                return d
            if attempt == 0 and not self._inspect(p, set(SEEK_BY_FRAMES) & (want | {"water", "iron", "diamond", "coal"}),
                                                  tools, facts):
                break
        site = self._site(p, names, usable, tools, why)
        if site is not None:
            return site
        target = self._explore_target(p, want, facts)
        return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": sorted(want)},
                        why + " (explore)", [("go_to", target[0], target[1])])

    def _note_recall(self, p: Perception, name: str, cell: Cell, facts: dict[str, Fact], tools: MemoryTools) -> None:
        """Record where a :data:`RECALLED` thing's place came from when memory sends the player
        there (the run's ``agent_summary.recalls``): the episode that showed it and its age in
        env steps (none for an episode of an inherited game, flagged ``inherited``), and
        ``via``, how the place was first learned: ``frames`` (read from a stored frame, now
        or earlier) or ``notes`` (written when seen). When and how its GUIDE.md line
        was last written is read from the turns (``loaders.paper_measures.recall_provenance``)."""
        if name not in self.recall_names or len(self.recalls) >= MAX_RECALLS:
            return
        fact = facts.get(res_key(name, cell))
        source = self.inspect_sources.get(cell, ()) or (fact.sources if fact else ())
        ref = tools.episode(source[0]) if source else None
        earlier = ref is not None and inherited_id(ref.id) is not None
        recall = {"name": name, "x": cell[0], "y": cell[1], "step": p.step,
                  "via": "frames" if cell in self.inspect_sources else "notes",
                  "source": ref.id if ref else None, "age": p.step - ref.last_step if ref and not earlier else None}
        if earlier:
            recall["inherited"] = True
        self.recalls.append(recall)

    def _get(self, name: str, cell: Cell, why: str) -> Decision:
        if name == "water":
            return Decision("atom", "drink", {"x": cell[0], "y": cell[1]}, why, [("go_to", cell[0], cell[1])])
        if name == "cow":
            return Decision("atom", "eat", {}, why, [("go_to", cell[0], cell[1])])
        return Decision("atom", "collect", {"material": name, "x": cell[0], "y": cell[1]}, why,
                        [("go_to", cell[0], cell[1])])

    # -- deciding ----------------------------------------------------------------------------
    def _station(self, p: Perception, facts: dict[str, Fact], furnace: bool, radius: int) -> tuple[Cell, Cell | None] | None:
        tables = [t for t in self.known(facts, "place", "table") if l1(t, p.pos) <= radius]
        furnaces = self.known(facts, "place", "furnace")
        best = None
        for t in sorted(tables, key=lambda t: l1(t, p.pos)):
            f = next((f for f in furnaces if cheb(f, t) <= 2), None)
            if furnace and f is None:
                continue
            best = (t, f)
            break
        return best

    def _craft(self, item: str, st: tuple[Cell, Cell | None]) -> Decision:
        t, f = st
        args: dict[str, Any] = {"item": item, "table_x": t[0], "table_y": t[1]}
        if CRAFT[item][1] == ("table", "furnace") and f is not None:
            args.update(furnace_x=f[0], furnace_y=f[1])
        return Decision("atom", "craft", args, f"make {item}", [("go_to", t[0], t[1])])

    def _place_table(self, tool: str | None, why: str) -> Decision:
        proc = self.procedures.load("table_tool") if self.mode.procedures else None
        if tool and proc is not None and not proc.disabled:
            return Decision("procedure", "table_tool", {"tool": tool}, why + " (stored procedure)")
        return Decision("atom", "place", {"item": "table"}, why)

    def _sealed(self, p: Perception) -> bool:
        """Whether the walkable cells reachable from the player (in view) form a closed pocket."""
        region, todo = {p.pos}, [p.pos]
        while todo:
            c = todo.pop()
            for dx, dy in DIRS.values():
                n = (c[0] + dx, c[1] + dy)
                ox, oy = n[0] - p.pos[0], n[1] - p.pos[1]
                if abs(ox) > HALF_COLS or abs(oy) > HALF_ROWS:
                    return False
                name = p.tile(ox, oy)
                if n in region or name not in WALKABLE | HOSTILE | {"cow", "arrow"}:
                    continue
                if name in HOSTILE or name == "arrow" or len(region) >= 4:
                    return False
                region.add(n)
                todo.append(n)
        return True

    def observe(self, p: Perception, tools: MemoryTools) -> dict[str, Fact]:
        """Take in the perception and memory at the start of a turn (the state block); the facts known."""
        if not self.mode.in_head:
            self.recent.clear()
            self.failed.clear()
            self.explore_target = None
        self._update_seen(tools)
        facts = self.knowledge(p, tools)
        self.state_block = self.build_state(p, tools, facts)
        return facts

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

    def decide(self, p: Perception, tools: MemoryTools, source: str | None) -> Decision:
        """One decision from the perception and what memory returns."""
        facts = self.observe(p, tools)
        v = p.vitals
        if self.idle >= 3:
            self.idle = 0
            self.spins = self.spins + 1 if p.step == self.spin_step else 0
            self.spin_step = p.step
            turn = max(0, self.spins - STUCK_REPEATS + 1)
            direction = FACINGS[(p.step + turn) % len(FACINGS)]
            return Decision("atom", "face", {"direction": direction}, "stuck: turn around")
        if self.idle >= 2:
            target = self._explore_target(p, {"tree"}, facts)
            return Decision("atom", "explore", {"x": target[0], "y": target[1]}, "stuck: move on",
                            [("go_to", *target)])
        night = p.daylight < 0.4
        dusk = p.daylight < 0.6 and 90 <= p.step % 300 <= 200
        if self._sealed(p) and (night or v["energy"] < 7) and min(v["food"], v["drink"]) >= 1:
            return Decision("atom", "sleep", {"until_day": True}, "rest in the shelter")
        foes = [f for f in visible(p, HOSTILE) if l1(f[1], p.pos) <= (1 if f[0] == "zombie" else 3)]
        if foes and not p.sleeping:
            return Decision("atom", "attack", {}, f"fight the {foes[0][0]} next to me")
        if v["drink"] <= 3 or (v["drink"] <= 6 and visible(p, {"water"}) and l1(visible(p, {"water"})[0][1], p.pos) <= 4):
            return self.seek(p, ["water"], tools, facts, source, "thirsty")
        if v["food"] <= 3 or (v["food"] <= 6 and visible(p, {"cow"}) and l1(visible(p, {"cow"})[0][1], p.pos) <= 4):
            cows = visible(p, {"cow"})
            if cows:
                return Decision("atom", "eat", {}, "hungry: cow in view", [("go_to", *cows[0][1])])
            if v["food"] <= 3:
                target = self._explore_target(p, {"cow", "tree"}, facts)
                return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": ["cow"]},
                                "hungry: look for cows", [("go_to", *target)])
        if v["energy"] <= 2 or night or dusk or (p.sleeping and v["energy"] < 9):
            d = self._rest(p, tools, facts)
            if d is not None:
                return d
        return self._progress(p, tools, facts, source)

    def _rest(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact]) -> Decision | None:
        if self._sealed(p):
            return Decision("atom", "sleep", {"until_day": True}, "rest in the shelter")
        has_pick = p.inventory.get("wood_pickaxe", 0) > 0
        if has_pick and p.inventory.get("stone", 0) >= 1:
            probe = Atoms(_StillBody(p), _view_nav(p))
            sites = [c for c in probe.pocket_sites() if self.failed[c] < 2]
            if sites and sites[0] != p.pos:
                return Decision("atom", "go_to", {"x": sites[0][0], "y": sites[0][1]},
                                "night: go where I can dig in", [("go_to", *sites[0])])
            if sites:
                proc = self.procedures.load("safe_sleep") if self.mode.procedures else None
                if proc is not None and not proc.disabled:
                    return Decision("procedure", "safe_sleep", {}, "night: dig in and sleep (stored procedure)")
                return Decision("atom", "shelter", {}, "night: dig a pocket to sleep in")
            rock = [c for _, c in visible(p, {"stone"}) if l1(c, p.pos) > 2]
            if not rock:
                rock = sorted(self.known(facts, "res", "stone"), key=lambda c: l1(c, p.pos))[:1]
            if rock and l1(rock[0], p.pos) <= 20 and self.failed[rock[0]] < 2:
                return Decision("atom", "go_to", {"x": rock[0][0], "y": rock[0][1], "adjacent": True},
                                "night: go to rock for a shelter", [("go_to", *rock[0])])
        if p.vitals["energy"] <= 1:
            return Decision("atom", "sleep", {}, "exhausted: sleep where I stand")
        return None

    def _progress(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact], source: str | None) -> Decision:
        ore = self._kit_target(p)
        if ore is not None:
            return self.seek(p, [ore], tools, facts, source, f"find {ore}")
        inv = p.inventory
        has = lambda k: inv.get(k, 0) > 0  # noqa: E731
        near_table = self._station(p, facts, False, 12)
        if not has("wood_pickaxe"):
            if inv["wood"] < (3 if near_table else 5):
                return self.seek(p, ["tree"], tools, facts, source, "need wood for table and pickaxe")
            if near_table is None:
                return self._place_table("wood_pickaxe", "place a table")
            return self._craft("wood_pickaxe", near_table)
        if not has("wood_sword") and inv["wood"] >= 2 and near_table and l1(near_table[0], p.pos) <= 4:
            return self._craft("wood_sword", near_table)
        if not has("stone_pickaxe"):
            if inv["wood"] < 1 or (inv["wood"] < 6 and visible(p, {"tree"}) and l1(visible(p, {"tree"})[0][1], p.pos) <= 3):
                return self.seek(p, ["tree"], tools, facts, source, "need wood")
            if inv["stone"] < 1:
                return self.seek(p, ["stone"], tools, facts, source, "need stone for a stone pickaxe")
            if near_table:
                return self._craft("stone_pickaxe", near_table)
            if inv["wood"] >= 3:
                return self._place_table("stone_pickaxe", "place a table near the rock")
            return self.seek(p, ["tree"], tools, facts, source, "need wood for a table")
        if not has("iron_pickaxe"):
            station = self._station(p, facts, True, 14)
            if inv["stone"] >= 4 and near_table and station is None and "place_furnace" not in p.achievements:
                return Decision("atom", "place", {"item": "furnace", "near_x": near_table[0][0],
                                                  "near_y": near_table[0][1]}, "place a furnace by the table",
                                [("go_to", *near_table[0])])
            if inv["wood"] < 1 or (inv["wood"] < 4 and visible(p, {"tree"}) and l1(visible(p, {"tree"})[0][1], p.pos) <= 3):
                return self.seek(p, ["tree"], tools, facts, source, "need wood")
            if inv["coal"] < 1 or inv["iron"] < 1:
                want = [n for n in ("iron", "coal") if inv[n] < 1]
                if inv["stone"] < 2:
                    want.append("stone")
                return self.seek(p, want, tools, facts, source, "need " + " and ".join(want))
            if station:
                return self._craft("iron_pickaxe", station)
            if near_table and l1(near_table[0], p.pos) <= 14:
                if inv["stone"] >= 4:
                    return Decision("atom", "place", {"item": "furnace", "near_x": near_table[0][0],
                                                      "near_y": near_table[0][1]}, "place a furnace by the table",
                                    [("go_to", *near_table[0])])
                return self.seek(p, ["stone"], tools, facts, source, "need stone for a furnace")
            if inv["wood"] >= 3:
                return self._place_table(None, "place a table for the iron pickaxe")
            return self.seek(p, ["tree"], tools, facts, source, "need wood for a new table")
        if not has("diamond") or "collect_diamond" not in p.achievements:
            reach = self.task.reach
            if reach is not None and reach.material == "diamond" and p.step + 1 < reach.delay:
                return self._extras(p, tools, facts, source)
            return self.seek(p, ["diamond"], tools, facts, source, "find a diamond")
        return self._extras(p, tools, facts, source)

    def _kit_target(self, p: Perception) -> str | None:
        """In a task that starts with a kit (past the tech tree): what the next milestone
        collects, once the tool it needs is in hand and the target is not sealed (else the tech
        tree is followed, then other work until the reach delay)."""
        nxt = next((m for m in self.task.milestones if m not in p.achievements), None)
        tile = _collects(nxt) if self.task.kit and nxt else None
        if tile is None or (tile in MINE_TOOL and not p.inventory.get(MINE_TOOL[tile], 0)):
            return None
        reach = self.task.reach
        if reach is not None and reach.material == tile and p.step + 1 < reach.delay:
            return None
        return tile

    def _extras(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact], source: str | None) -> Decision:
        """After the diamond (or, in a reach task, while the diamond is sealed): other
        achievements (for the ``all`` task) and staying alive."""
        inv = p.inventory
        station = self._station(p, facts, True, 14)
        for item in ("iron_sword", "stone_sword", "wood_sword"):
            uses, needs = CRAFT[item]
            if inv.get(item, 0) == 0 and all(inv.get(k, 0) >= n for k, n in uses.items()):
                st = station if "furnace" in needs else self._station(p, facts, False, 14)
                if st is not None:
                    return self._craft(item, st)
        if "place_stone" not in p.achievements and inv["stone"] >= 1:
            return Decision("atom", "place", {"item": "stone"}, "place a stone")
        if "collect_sapling" not in p.achievements:
            grass = [c for _, c in visible(p, {"grass"}) if l1(c, p.pos) == 1]
            if grass:
                return Decision("atom", "collect", {"material": "grass", "x": grass[0][0], "y": grass[0][1]},
                                "collect a sapling")
        if "place_plant" not in p.achievements and inv["sapling"] >= 1:
            return Decision("atom", "place", {"item": "plant"}, "plant a sapling")
        if inv["wood"] < 2:
            return self.seek(p, ["tree"], tools, facts, source, "stock wood")
        if inv["coal"] < 1 or inv["iron"] < 1:
            return self.seek(p, [n for n in ("iron", "coal") if inv[n] < 1], tools, facts, source, "stock ore")
        target = self._explore_target(p, {"cow", "zombie"}, facts)
        return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": ["cow", "diamond"]},
                        "wander", [("go_to", *target)])

    # -- learning from the outcome ------------------------------------------------------------
    def after(self, d: Decision, result: AtomResult, row: IndexRow, died: bool, p: Perception,
              tools: MemoryTools) -> None:
        """Update memory from what the episode showed: facts, stale facts, procedures."""
        facts = self.knowledge(p, tools)
        self.recent.append((d.kind, d.name, _short(d.args), result.label, row.id))
        revise: list[Fact] = []
        target = next(((x, y) for _, x, y in d.targets), None)
        if row.last_step == row.first_step:
            self.idle += 1
            if target is not None:
                self.failed[target] += 1
        else:
            self.idle = 0
        if result.label == "failed" and target is not None:
            self.failed[target] += 1
            if target == self.explore_target:
                self.explore_target = None
        if d.name == "explore" and result.label != "interrupted":
            self.explore_target = None
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
        if self.mode.procedures:
            self._learn_procedures(d, result, row, died, tools)

    def _learn_procedures(self, d: Decision, result: AtomResult, row: IndexRow, died: bool,
                          tools: MemoryTools) -> None:
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
        if len(self.recent) < 2 or not result.ok:
            return
        (_, n1, a1, l1_, e1), (_, n2, _, l2, e2) = list(self.recent)[-2:]
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
        plan = self._plan(p, facts, last.targets if last is not None else (), last.goal if last else "start")
        tools.consolidate(new, plan, reason)

    def _plan(self, p: Perception, facts: dict[str, Fact], targets, goal: str) -> WorkingPlan:
        """working.md: the decision's targets, then the nearest known diamond, iron, coal, water."""
        plan_targets = [Target(x, y, goal) for _, x, y in targets]
        for name in ("diamond", "iron", "coal", "water"):
            for c in sorted(self.known(facts, "res", name), key=lambda c: l1(c, p.pos))[:1]:
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
        plan = self._plan(p, tools.facts(), d.targets, d.goal)
        if tools.peek(WORKING) != plan.render():
            tools.write(WORKING, plan.render(), reason=f"plan: {d.goal}")

    def summary(self) -> dict[str, Any]:
        """Counts for the run's record: resources found by frames vs by sight."""
        return {"found_by_inspection": dict(sorted(self.found["inspection"].items())),
                "found_by_sight": dict(sorted(self.found["sight"].items())),
                "inspection_targets_used": len(self.used_inspection), "recalls": self.recalls}


def _collects(milestone: str) -> str | None:
    """The tile a ``collect_*`` milestone takes (``collect_iron`` -> ``iron``), else None."""
    item = milestone[len("collect_"):] if milestone.startswith("collect_") else ""
    return ITEM_TILE.get(item)


@functools.lru_cache(maxsize=4)
def _lattice(area: Cell) -> tuple[Cell, ...]:
    """The explore points of a world of ``area`` tiles: every ``EDGE``-th cell, ``EDGE`` cells
    in from its edge."""
    return tuple((x, y) for x in range(EDGE, area[0] - EDGE, EDGE) for y in range(EDGE, area[1] - EDGE, EDGE))


def _short(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k != "stop_on"}


class _StillBody:
    """A body that only shows the current perception (for a dry look at the view)."""

    def __init__(self, p: Perception) -> None:
        self.perception = p

    def act(self, action: str) -> Perception:
        raise RuntimeError("a dry look takes no steps")


def _view_nav(p: Perception) -> NavMap:
    """Routing knowledge of the current view only."""
    nav = NavMap(area=p.area)
    nav.observe(p)
    return nav

