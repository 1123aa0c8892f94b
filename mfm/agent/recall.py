"""Finding a wanted thing again: in view, in the notes, in stored frames, in the text.

:meth:`Recall.seek` tries each in turn: the current view; the facts of GUIDE.md; the stored
frames of episodes found by what frames showed (``mfm``: :meth:`Recall.by_content`), by an
index search (``no-content``) or by turn id (``vista``, ``no-index``: :meth:`Recall.by_turn`),
decoded and written as facts; the places the text names (``pro-long``, ``no-frames``:
:meth:`Recall.site`); else a point to explore. When memory sends the player to a
:data:`RECALLED` thing, where the place came from is kept for the run's summary
(``recalls``). Not to be confused with :mod:`mfm.memory.retrieval`, which reads stored
episodes for everyone; this is the scripted player's use of it.
"""
from __future__ import annotations

from typing import Any

from mfm.agent import events
from mfm.agent.explore import Explorer
from mfm.agent.head import Head
from mfm.agent.mapping import MINE_TOOL, Cell, l1
from mfm.agent.modes import MemoryMode
from mfm.agent.notes import Notes, known, parse_cell_key, res_key
from mfm.agent.protocol import Decision
from mfm.agent.tools import MemoryTools, Sighting
from mfm.envs import Perception, Task
from mfm.memory import Fact
from mfm.memory.inheritance import inherited_id
from mfm.schema import IndexRow

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
ITEM_TILE = {"wood": "tree", "stone": "stone", "coal": "coal", "iron": "iron", "diamond": "diamond"}
"""Inventory item -> the tile it is collected from."""


def collects(milestone: str) -> str | None:
    """The tile a ``collect_*`` milestone takes (``collect_iron`` -> ``iron``), else None."""
    item = milestone[len("collect_"):] if milestone.startswith("collect_") else ""
    return ITEM_TILE.get(item)


def get(name: str, cell: Cell, why: str) -> Decision:
    """The decision that gets ``name`` at ``cell``: drink water, eat a cow, collect the rest."""
    if name == "water":
        return Decision("atom", "drink", {"x": cell[0], "y": cell[1]}, why, [("go_to", cell[0], cell[1])])
    if name == "cow":
        return Decision("atom", "eat", {}, why, [("go_to", cell[0], cell[1])])
    return Decision("atom", "collect", {"material": name, "x": cell[0], "y": cell[1]}, why,
                    [("go_to", cell[0], cell[1])])


class Recall:
    """What the mode lets the player search and reopen (``mode.search``, ``mode.frames``,
    ``mode.content``, ``mode.text_sites``): at most ``inspect_episodes`` episodes per
    lookup, every ``inspect_stride``-th frame of each (every frame for a content search)."""

    def __init__(self, task: Task, mode: MemoryMode, head: Head, notes: Notes, explorer: Explorer,
                 inspect_episodes: int = 16, inspect_stride: int = 2) -> None:
        self.mode = mode
        self.head = head
        self.notes = notes
        self.explorer = explorer
        self.inspect_episodes = inspect_episodes
        self.inspect_stride = inspect_stride
        self.inspected_until = -1
        self.scan_turn: int | None = None
        self.sites: dict[str, dict[Cell, str]] = {}
        self.seen_sites: dict[str, dict[Cell, str]] = {}
        self.sites_until = -1
        self.recalled: dict[tuple[str, Cell, str], int] = {}
        self.recalls: list[dict[str, Any]] = []
        self.recall_names = RECALLED | ({t for m in task.milestones if (t := collects(m))} if task.kit else set())
        self.used_inspection: list[dict] = []

    def seek(self, p: Perception, names: list[str], tools: MemoryTools, facts: dict[str, Fact],
             source: str | None, why: str) -> Decision:
        """Get the first wanted thing: in view, known in GUIDE.md, found in frames, or explore."""
        head = self.head
        want = set(names)
        usable = {n for n in want if n not in MINE_TOOL or MINE_TOOL[n] in p.inventory and p.inventory[MINE_TOOL[n]]}
        hits = [h for h in self.notes.sight(p, usable, tools, facts, source)]
        if hits:
            hits.sort(key=lambda h: (names.index(h[0]), l1(h[1], p.pos)))
            name, cell = hits[0]
            if not self.mode.in_head and len(hits) > 1 and head.rng.random() < 0.25:
                name, cell = head.rng.choice(hits)
            return get(name, cell, why + " (in view)")
        for attempt in range(2):
            facts = self.notes.knowledge(p, tools)
            cands = [(n, c) for n in names if n in usable for c in known(facts, "res", n) if head.failed[c] < 2]
            if cands:
                name, cell = min(cands, key=lambda h: (l1(h[1], p.pos) + 8 * names.index(h[0]), h[1]))
                d = get(name, cell, why + " (from memory)")
                if cell in self.notes.inspect_sources:
                    self.used_inspection.append({"name": name, "x": cell[0], "y": cell[1], "step": p.step,
                                                 "sources": list(self.notes.inspect_sources[cell])})
                self.note_recall(p, name, cell, facts, tools)
                return d
            if attempt == 0 and not self.inspect(p, set(SEEK_BY_FRAMES) & (want | {"water", "iron", "diamond", "coal"}),
                                                 tools, facts):
                break
        site = self.site(p, names, usable, tools, why)
        if site is not None:
            return site
        target = self.explorer.target(p, want, facts)
        return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": sorted(want)},
                        why + " (explore)", [("go_to", target[0], target[1])])

    # -- stored frames -------------------------------------------------------------------------
    def inspect(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact]) -> bool:
        """Find episodes to look at and decode their frames for ``names``: by what frames
        showed, over the whole history (``mfm``: :meth:`by_content`), by an index search of the
        episodes since the last inspection (``no-content``) or by turn id (``vista``,
        ``no-index``: :meth:`by_turn`); what they showed is written as facts (True if a
        resource was)."""
        if self.mode.frames is None or p.step <= self.inspected_until + 1:
            return False
        lo = self.inspected_until + 1
        stride = self.inspect_stride
        if self.mode.content:
            refs, by, stride = self.by_content(p, names, tools, facts), "content", 1
        elif self.mode.frames == "index":
            refs, by = [r for r in tools.search(steps=(lo, p.step), near=p.pos, radius=40.0, kind="episode",
                                                limit=self.inspect_episodes) if r.frames], "search"
        else:
            refs, by = self.by_turn(lo, tools), "turn"
        self.inspected_until = p.step
        sightings: list[Sighting] = []
        for ref in refs:
            sightings += tools.inspect(ref, names | {"lava"}, stride, by=by)
        return self.notes.note_sightings(p, sightings, tools, facts)

    def by_turn(self, since_step: int, tools: MemoryTools) -> list[IndexRow]:
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

    def by_content(self, p: Perception, names: set[str], tools: MemoryTools, facts: dict[str, Fact]) -> list[IndexRow]:
        """The episodes whose frames showed a wanted thing at a cell not known, not failed, not
        opened since (the grid says it was cut or mined: trees become grass, rock path) and
        not looked up in the last :data:`RECALL_AGAIN` steps; nearest cells first,
        :data:`RECALL_CELLS` per thing, at most ``inspect_episodes // 4`` episodes: the index
        searched by content, every episode so far, however old.

        A content search names the latest episode that showed a cell, so a lookup barred for
        good would lose the place for good once its note was evicted."""
        head = self.head
        refs: dict[str, IndexRow] = {}
        known_cells = {parsed[2] for parsed in map(parse_cell_key, facts) if parsed}
        for name in sorted(names):
            hits = tools.find_seen(name, near=p.pos, limit=4 * RECALL_CELLS)
            fresh = [h for h in hits if h.cell not in known_cells and h.cell not in head.opened
                     and head.failed[h.cell] < 2
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

    # -- places the text names -----------------------------------------------------------------
    def update_sites(self, p: Perception, tools: MemoryTools) -> None:
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

    def site(self, p: Perception, names: list[str], usable: set[str], tools: MemoryTools,
             why: str) -> Decision | None:
        """Go where the text says a wanted thing is: to a cell the log says the view showed
        (not cut or mined since, by the map), or where it says I drank, to get it there; or
        where it says I collected it, to look around the spot for more (a cut tree turns into
        grass and mined rock into path, so the cell itself is gone)."""
        if not self.mode.text_sites:
            return None
        self.update_sites(p, tools)
        failed = self.head.failed
        shown = [(n, c, True) for n in names if n in usable for c in self.seen_sites.get(n, {})
                 if c not in self.head.opened and failed[c] < 2]
        got = [(n, c, False) for n in names if n in usable for c in self.sites.get(n, {}) if failed[c] < 2]
        if not shown and not got:
            return None
        name, cell, seen = min(shown + got, key=lambda h: (l1(h[1], p.pos) + 8 * names.index(h[0]), not h[2], h[1]))
        if seen:
            self.note_log_recall(p, name, cell, self.seen_sites[name][cell], tools)
            return get(name, cell, why + " (where the log says I saw it)")
        if name == "water":
            return get(name, cell, why + " (where the text says I got it)")
        failed[cell] += 1
        return Decision("atom", "explore", {"x": cell[0], "y": cell[1], "stop_on": sorted(usable)},
                        why + " (look where the text says I found it)", [("look_at", cell[0], cell[1])])

    # -- the run's record of recalls -----------------------------------------------------------
    def note_log_recall(self, p: Perception, name: str, cell: Cell, episode: str, tools: MemoryTools) -> None:
        """Record a recall made from the text log's ``[SEEN]`` line of ``episode`` (``via``
        ``log``; see :meth:`note_recall`)."""
        if name not in self.recall_names or len(self.recalls) >= MAX_RECALLS:
            return
        ref = tools.episode(episode)
        self.recalls.append({"name": name, "x": cell[0], "y": cell[1], "step": p.step, "via": "log",
                             "source": episode, "age": p.step - ref.last_step if ref else None})

    def note_recall(self, p: Perception, name: str, cell: Cell, facts: dict[str, Fact], tools: MemoryTools) -> None:
        """Record where a :data:`RECALLED` thing's place came from when memory sends the player
        there (the run's ``agent_summary.recalls``): the episode that showed it and its age in
        env steps (none for an episode of an inherited game, flagged ``inherited``), and
        ``via``, how the place was first learned: ``frames`` (read from a stored frame, now
        or earlier) or ``notes`` (written when seen). When and how its GUIDE.md line
        was last written is read from the turns (``loaders.paper_measures.recall_provenance``)."""
        if name not in self.recall_names or len(self.recalls) >= MAX_RECALLS:
            return
        inspect_sources = self.notes.inspect_sources
        fact = facts.get(res_key(name, cell))
        source = inspect_sources.get(cell, ()) or (fact.sources if fact else ())
        ref = tools.episode(source[0]) if source else None
        earlier = ref is not None and inherited_id(ref.id) is not None
        recall = {"name": name, "x": cell[0], "y": cell[1], "step": p.step,
                  "via": "frames" if cell in inspect_sources else "notes",
                  "source": ref.id if ref else None, "age": p.step - ref.last_step if ref and not earlier else None}
        if earlier:
            recall["inherited"] = True
        self.recalls.append(recall)
