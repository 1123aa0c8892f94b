"""Closed-loop atoms: each runs env steps until it is done, fails or is interrupted.

Atoms see the world only through a :class:`Body` (``act`` returns the next Perception) and
route over the turn's :class:`~mfm.agent.mapping.NavMap`. They never see the harness. The
body raises :class:`Halt` subclasses (death, budget, stop) from ``act``; those end the atom
and the episode, and are handled by the runner.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from mfm.agent import events
from mfm.agent.mapping import (DIRS, MINE_TOOL, MOVE_OF, WALKABLE, Cell, NavMap, cheb, l1, neighbours,
                               path_to)
from mfm.envs import Perception
from mfm.envs.rules import LOCAL_VIEW, load_rules

ATOMS: tuple[str, ...] = ("go_to", "look_at", "face", "collect", "place", "craft", "drink", "eat", "sleep",
                          "shelter", "explore", "attack")
_RULES = load_rules()
PLACE_WHERE: dict[str, frozenset[str]] = {item: frozenset(r["where"]) for item, r in _RULES["place"].items()}
"""Item -> the cells it can be placed on."""
PLACE_COST: dict[str, dict[str, int]] = {item: dict(r["uses"]) for item, r in _RULES["place"].items()}
CRAFT: dict[str, tuple[dict[str, int], tuple[str, ...]]] = {
    tool: (dict(r["uses"]), tuple(r["nearby"])) for tool, r in _RULES["make"].items()}
"""Tool -> (materials used, stations that must be nearby)."""
COLLECT_GIVES: dict[str, str] = {material: item for material, r in _RULES["collect"].items()
                                 for item in r["receive"] if item not in _RULES["vitals"]}
"""Material -> the inventory item collecting it gives (drinking water, a vital, is not collecting)."""
PICKAXES: tuple[str, ...] = tuple(dict.fromkeys(MINE_TOOL.values()))
"""The tools that mining needs, weakest first."""
DRINK_MAX: int = _RULES["items"]["drink"]["max"]
"""The drink level past which drinking gives nothing."""
HOSTILE = frozenset({"zombie", "skeleton"})

LOOK_REACH = (LOCAL_VIEW[0] // 2 - 1, LOCAL_VIEW[1] // 2 - 1)
"""How far off (columns, rows) a cell may be for ``look_at`` to be done: inside the view, one
tile in from its edge."""


class Halt(Exception):
    """Raised by :meth:`Body.act` when the run cannot go on with this episode."""


class Died(Halt):
    """The player died on the step just taken (that step is recorded)."""


class BudgetExhausted(Halt):
    """The run's env step budget is used up."""


class RunStopped(Halt):
    """The caller asked the run to stop (a stop flag, like Ctrl-C)."""


class Body(Protocol):
    """The agent's body: what it perceives now, and one env step per action."""

    @property
    def perception(self) -> Perception: ...

    def act(self, action: str) -> Perception: ...


@dataclass
class AtomResult:
    """How an atom ended: ``label`` is done|failed|interrupted, ``reason`` says why."""

    label: str
    reason: str
    events: list[str] = field(default_factory=list)
    found: list[tuple[str, Cell]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.label == "done"


def tools_of(p: Perception) -> set[str]:
    """The pickaxes the player holds."""
    return {k for k in PICKAXES if p.inventory.get(k, 0) > 0}


def visible(p: Perception, names: set[str] | frozenset[str]) -> list[tuple[str, Cell]]:
    """Cells of the current view holding one of ``names``, nearest first."""
    hits = [(n, (x, y)) for x, y, n in p.local_cells() if n in names]
    return sorted(hits, key=lambda h: (l1(h[1], p.pos), h[1]))


def threat(p: Perception) -> str | None:
    """A reason to interrupt: a hostile creature next to the player, or failing health."""
    for dx, dy in DIRS.values():
        if p.tile(dx, dy) in HOSTILE:
            return f"{p.tile(dx, dy)} adjacent"
    if p.vitals["health"] <= 2:
        return "low health"
    return None


class Atoms:
    """The atom implementations, bound to one body and the turn's routing knowledge."""

    def __init__(self, body: Body, nav: NavMap, max_steps: int = 60,
                 on_view: Callable[[Perception], None] | None = None) -> None:
        self.body = body
        self.nav = nav
        self.max_steps = max_steps
        self.on_view = on_view
        self.nav.observe(body.perception)
        self.steps = 0

    @property
    def p(self) -> Perception:
        return self.body.perception

    def act(self, action: str) -> Perception:
        """One env step; the view updates the turn's routing knowledge."""
        p = self.body.act(action)
        self.steps += 1
        self.nav.observe(p)
        if self.on_view:
            self.on_view(p)
        return p

    def run(self, name: str, args: dict[str, Any]) -> AtomResult:
        """Run the atom ``name`` with keyword ``args``."""
        if name not in ATOMS:
            return AtomResult("failed", f"unknown atom {name}")
        return getattr(self, f"atom_{name}")(**args)

    # -- movement -------------------------------------------------------------------------
    def _step_towards(self, nxt: Cell, fight: bool = False) -> bool:
        """Take one step of a route (digging through minable rock); False if it failed."""
        p = self.p
        d = (nxt[0] - p.pos[0], nxt[1] - p.pos[1])
        name = self.nav.name(nxt)
        move = MOVE_OF[d]
        if name in WALKABLE:
            before = p.pos
            p = self.act(move)
            return p.pos != before
        if name in MINE_TOOL:
            if p.facing != d:
                self.act(move)
            self.act("do")
            return True
        if name in ("cow",) or (fight and name in HOSTILE):
            if p.facing != d:
                self.act(move)
            self.act("do")
            return True
        self.act("noop")
        return False

    def _interrupt(self, start_health: int, danger: bool) -> str | None:
        if not danger:
            return None
        p = self.p
        why = threat(p)
        if why == "low health" and p.vitals["health"] >= start_health:
            return None
        return why

    def atom_go_to(self, x: int, y: int, dig: bool = True, adjacent: bool = False, stop_on: list[str] | None = None,
                   max_steps: int | None = None, danger: bool = True) -> AtomResult:
        """Walk (and dig, with a pickaxe) to ``(x, y)`` or next to it; replan every step."""
        target = (int(x), int(y))
        limit = max_steps or self.max_steps
        start_health = self.p.vitals["health"]
        fails = 0
        start = self.steps
        want = set(stop_on or ())
        while True:
            p = self.p
            if (l1(p.pos, target) == 1) if adjacent else (p.pos == target):
                return AtomResult("done", "arrived")
            if want and self.steps > start:
                seen = visible(p, want)
                if seen:
                    return AtomResult("done", f"saw {seen[0][0]} at {seen[0][1]}", found=seen)
            if self.steps - start >= limit:
                return AtomResult("interrupted", "step limit")
            route = path_to(self.nav, p.pos, target, tools_of(p), dig, adjacent)
            if route is None:
                return AtomResult("failed", "no route")
            if not self._step_towards(route[0]):
                fails += 1
                if fails >= 4:
                    return AtomResult("failed", "blocked")
            why = self._interrupt(start_health, danger)
            if why:
                return AtomResult("interrupted", why)

    def atom_look_at(self, x: int, y: int, max_steps: int | None = None) -> AtomResult:
        """Walk until ``(x, y)`` is inside the view; report what is there."""
        target = (int(x), int(y))
        start = self.steps
        limit = max_steps or self.max_steps
        while True:
            p = self.p
            dx, dy = target[0] - p.pos[0], target[1] - p.pos[1]
            if abs(dx) <= LOOK_REACH[0] and abs(dy) <= LOOK_REACH[1]:
                return AtomResult("done", f"{p.tile(dx, dy)} at {target}", found=[(p.tile(dx, dy), target)])
            if self.steps - start >= limit:
                return AtomResult("interrupted", "step limit")
            route = path_to(self.nav, p.pos, target, tools_of(p), True, adjacent=True)
            if route is None:
                return AtomResult("failed", "no route")
            self._step_towards(route[0])
            why = threat(self.p)
            if why:
                return AtomResult("interrupted", why)

    def atom_explore(self, x: int, y: int, stop_on: list[str] | None = None, max_steps: int = 30) -> AtomResult:
        """Head for an unexplored point, stopping as soon as something wanted comes into view."""
        r = self.atom_go_to(x, y, dig=True, stop_on=stop_on, max_steps=max_steps)
        if r.label == "interrupted" and r.reason == "step limit":
            return AtomResult("done", "explored", found=r.found)
        return r

    def face_cell(self, target: Cell) -> bool:
        """Face an adjacent cell: bump into it if it is not free, else step back and forth."""
        p = self.p
        d = (target[0] - p.pos[0], target[1] - p.pos[1])
        if l1(p.pos, target) != 1:
            return False
        if p.facing == d:
            return True
        name = self.nav.name(target)
        if name not in WALKABLE:
            self.act(MOVE_OF[d])
            return self.p.facing == d
        back = (p.pos[0] - d[0], p.pos[1] - d[1])
        if self.nav.name(back) in WALKABLE:
            here = p.pos
            self.act(MOVE_OF[(-d[0], -d[1])])
            if self.p.pos != back:
                return False
            self.act(MOVE_OF[d])
            return self.p.pos == here and self.p.facing == d
        return False

    def atom_face(self, direction: str) -> AtomResult:
        """Face ``left``/``right``/``up``/``down`` without leaving the cell if possible."""
        d = DIRS[direction]
        ok = self.face_cell((self.p.pos[0] + d[0], self.p.pos[1] + d[1]))
        return AtomResult("done" if ok else "failed", f"facing {direction}" if ok else "cannot face")

    # -- interaction ------------------------------------------------------------------------
    def atom_collect(self, material: str, x: int, y: int) -> AtomResult:
        """Go next to ``(x, y)``, face it and collect ``material`` there."""
        target = (int(x), int(y))
        item = COLLECT_GIVES.get(material)
        if item is None:
            return AtomResult("failed", f"cannot collect {material}")
        if l1(self.p.pos, target) != 1:
            r = self.atom_go_to(target[0], target[1], adjacent=True)
            if not r.ok:
                return r
        here = self.nav.name(target)
        if here != material:
            return AtomResult("failed", f"no {material} at {target} ({here})", found=[(here or "unknown", target)])
        if not self.face_cell(target):
            return AtomResult("failed", "cannot face target")
        before = self.p.inventory.get(item, 0)
        for _ in range(12 if material == "grass" else 3):
            p = self.act("do")
            if p.inventory.get(item, 0) > before:
                return AtomResult("done", f"got {item}", events=[events.collected(item, target)])
            if self.nav.name(target) != material:
                break
        return AtomResult("failed", f"{material} at {target} gave nothing")

    def atom_drink(self, x: int, y: int) -> AtomResult:
        """Go next to the water at ``(x, y)`` and drink until full."""
        target = (int(x), int(y))
        if l1(self.p.pos, target) != 1:
            r = self.atom_go_to(target[0], target[1], adjacent=True)
            if not r.ok:
                return r
        if self.nav.name(target) != "water":
            return AtomResult("failed", f"no water at {target}", found=[(self.nav.name(target) or "unknown", target)])
        if not self.face_cell(target):
            return AtomResult("failed", "cannot face water")
        start = self.p.vitals["drink"]
        for _ in range(12):
            if self.p.vitals["drink"] >= DRINK_MAX:
                break
            self.act("do")
            if threat(self.p):
                break
        got = self.p.vitals["drink"] - start
        return AtomResult("done" if got > 0 else "failed", f"drank {got}", events=[events.drank(target)] if got else [])

    def atom_eat(self, max_steps: int = 40) -> AtomResult:
        """Hunt the nearest visible cow and eat it."""
        start = self.steps
        food = self.p.vitals["food"]
        while self.steps - start < max_steps:
            p = self.p
            if p.vitals["food"] > food:
                return AtomResult("done", "ate a cow", events=[events.ate("cow")])
            cows = visible(p, {"cow"})
            if not cows:
                return AtomResult("failed", "no cow in view")
            cow = cows[0][1]
            if l1(p.pos, cow) == 1:
                d = (cow[0] - p.pos[0], cow[1] - p.pos[1])
                if p.facing != d:
                    self.act(MOVE_OF[d])
                else:
                    self.act("do")
                continue
            route = path_to(self.nav, p.pos, cow, tools_of(p), False, adjacent=True)
            if route is None:
                return AtomResult("failed", "cow out of reach")
            self._step_towards(route[0])
            why = threat(self.p)
            if why:
                return AtomResult("interrupted", why)
        return AtomResult("interrupted", "step limit")

    def atom_attack(self, max_steps: int = 25) -> AtomResult:
        """Fight the nearest zombie (within 2) or skeleton (within 4) until it is gone."""
        start = self.steps
        while self.steps - start < max_steps:
            p = self.p
            foes = [f for f in visible(p, HOSTILE) if l1(f[1], p.pos) <= (4 if f[0] == "skeleton" else 2)]
            if not foes:
                return AtomResult("done" if self.steps > start else "failed", "no foe near")
            name, foe = foes[0]
            if l1(foe, p.pos) == 1:
                d = (foe[0] - p.pos[0], foe[1] - p.pos[1])
                self.act(MOVE_OF[d] if p.facing != d else "do")
            elif name == "skeleton":
                route = path_to(self.nav, p.pos, foe, tools_of(p), False, adjacent=True)
                if route is None:
                    return AtomResult("failed", "skeleton out of reach")
                self._step_towards(route[0])
            else:
                self.act("noop")
        return AtomResult("interrupted", "step limit")

    def _placeable(self, c: Cell, item: str) -> bool:
        return self.nav.name(c) in PLACE_WHERE[item]

    def atom_place(self, item: str, near_x: int | None = None, near_y: int | None = None,
                   x: int | None = None, y: int | None = None) -> AtomResult:
        """Place ``item`` on a facing cell; with ``near`` the player stays within 1 of that cell."""
        need = PLACE_COST[item]
        if any(self.p.inventory.get(k, 0) < v for k, v in need.items()):
            return AtomResult("failed", f"not enough for {item}")
        near = (int(near_x), int(near_y)) if near_x is not None and near_y is not None else None
        spot = (int(x), int(y)) if x is not None and y is not None else None
        for _ in range(4):
            p = self.p
            if near is not None and cheb(p.pos, near) > 1:
                stand = [c for c in self._ring(near) if self.nav.name(c) in WALKABLE]
                if not stand:
                    return AtomResult("failed", f"no place to stand near {near}")
                stand.sort(key=lambda c: (l1(c, p.pos), c))
                r = self.atom_go_to(*stand[0])
                if not r.ok:
                    return r
                continue
            cands = [c for c in neighbours(p.pos) if self._placeable(c, item) and (spot is None or c == spot)]
            front = (p.pos[0] + p.facing[0], p.pos[1] + p.facing[1])
            cands.sort(key=lambda c: (c != front, c))
            for c in cands:
                if self.face_cell(c) and self._placeable(c, item):
                    inv = self.p.inventory.get(next(iter(need)), 0)
                    self.act(f"place_{item}")
                    if self.p.inventory.get(next(iter(need)), 0) < inv:
                        return AtomResult("done", events.placed(item, c), events=[events.placed(item, c)],
                                          found=[(item, c)])
                if self.p.pos != p.pos:
                    break
            else:
                free = [c for c in neighbours(self.p.pos) if self.nav.name(c) in WALKABLE
                        and (near is None or cheb(c, near) <= 1)]
                if not free or spot is not None:
                    return AtomResult("failed", f"no free cell to place {item}")
                self.act(MOVE_OF[(free[0][0] - self.p.pos[0], free[0][1] - self.p.pos[1])])
        return AtomResult("failed", f"could not place {item}")

    @staticmethod
    def _ring(c: Cell) -> list[Cell]:
        return [(c[0] + dx, c[1] + dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]

    def atom_craft(self, item: str, table_x: int, table_y: int, furnace_x: int | None = None,
                   furnace_y: int | None = None) -> AtomResult:
        """Stand within reach of the table (and furnace) and make ``item``."""
        uses, _ = CRAFT[item]
        if any(self.p.inventory.get(k, 0) < v for k, v in uses.items()):
            return AtomResult("failed", f"not enough materials for {item}")
        stations = [(int(table_x), int(table_y))]
        if furnace_x is not None and furnace_y is not None:
            stations.append((int(furnace_x), int(furnace_y)))
        p = self.p
        if not all(cheb(p.pos, s) <= 1 for s in stations):
            spots = [c for c in self._ring(stations[0]) if all(cheb(c, s) <= 1 for s in stations)
                     and (self.nav.name(c) in WALKABLE or self.nav.name(c) is None)]
            spots.sort(key=lambda c: (l1(c, p.pos), c))
            for spot in spots[:3]:
                r = self.atom_go_to(*spot)
                if r.ok:
                    break
                if r.label == "interrupted":
                    return r
            else:
                return AtomResult("failed", "cannot reach the station")
        for s, name in zip(stations, ("table", "furnace")):
            if self.nav.name(s) != name:
                return AtomResult("failed", f"no {name} at {s}", found=[(self.nav.name(s) or "unknown", s)])
        before = self.p.inventory.get(item, 0)
        self.act(f"make_{item}")
        if self.p.inventory.get(item, 0) > before:
            return AtomResult("done", f"made {item}", events=[events.made(item)])
        return AtomResult("failed", f"make_{item} did nothing")

    # -- rest -----------------------------------------------------------------------------
    def pocket(self, at: Cell | None = None) -> tuple[Cell, tuple[int, int]] | None:
        """A direction to dig a 2-cell pocket from ``at`` whose walls are all solid (from the view)."""
        p = self.p
        pos = at or p.pos
        best = None
        for d in DIRS.values():
            perp = (d[1], d[0])
            s = (pos[0] + d[0], pos[1] + d[1])
            t = (s[0] + d[0], s[1] + d[1])
            inner = [s, t]
            walls = [(c[0] + k * perp[0], c[1] + k * perp[1]) for c in inner for k in (1, -1)]
            walls.append((t[0] + d[0], t[1] + d[1]))
            names = [self.nav.name(c) for c in inner]
            wall_names = [self.nav.name(c) for c in walls]
            if any(n is None or (n not in WALKABLE and n not in MINE_TOOL) for n in names):
                continue
            if any(n is None or n in WALKABLE or n in {"cow", "zombie", "skeleton", "arrow", "lava"}
                   for n in wall_names):
                continue
            if any(n in MINE_TOOL and MINE_TOOL[n] not in tools_of(p) for n in names):
                continue
            cost = sum(n in MINE_TOOL for n in names)
            if best is None or cost < best[0]:
                best = (cost, s, d)
        return None if best is None else (best[1], best[2])

    def pocket_sites(self) -> list[Cell]:
        """Walkable cells of the view from which a pocket can be dug, nearest first."""
        p = self.p
        sites = [(x, y) for x, y, n in p.local_cells() if (n in WALKABLE or (x, y) == p.pos)
                 and self.pocket((x, y)) is not None]
        return sorted(sites, key=lambda c: (l1(c, p.pos), c))

    def atom_shelter(self) -> AtomResult:
        """Dig a two-cell pocket into rock and seal its entrance with a stone."""
        found = self.pocket()
        if found is None:
            return AtomResult("failed", "no solid rock for a pocket here")
        if self.p.inventory.get("stone", 0) < 1 and self.nav.name(found[0]) != "stone":
            return AtomResult("failed", "no stone to seal")
        s, d = found
        entry = self.p.pos
        t = (s[0] + d[0], s[1] + d[1])
        for c in (s, t):
            if self.nav.name(c) in MINE_TOOL:
                if self.p.facing != d:
                    self.act(MOVE_OF[d])
                self.act("do")
            before = self.p.pos
            self.act(MOVE_OF[d])
            if self.p.pos == before:
                return AtomResult("failed", "could not enter the pocket")
        self.act(MOVE_OF[(-d[0], -d[1])])
        if self.p.pos != s or self.nav.name(entry) not in PLACE_WHERE["stone"]:
            return AtomResult("failed", "could not turn to the entrance")
        self.act("place_stone")
        if self.nav.name(entry) != "stone":
            return AtomResult("failed", "entrance not sealed")
        return AtomResult("done", f"sealed in at {s}", events=[events.shelter(s)], found=[("stone", entry)])

    def atom_sleep(self, until_day: bool = False, max_steps: int = 300) -> AtomResult:
        """Sleep until rested (the game wakes the player when energy is full or when hurt);
        with ``until_day`` stay (asleep or resting) until the daylight is back."""
        start = self.steps
        health = self.p.vitals["health"]
        self.act("sleep")
        while self.steps - start < max_steps:
            p = self.p
            if p.vitals["health"] < health and not p.sleeping:
                return AtomResult("interrupted", "woken by damage")
            health = min(health, p.vitals["health"]) if p.sleeping else p.vitals["health"]
            if not p.sleeping and self.steps - start > 1 and (not until_day or p.daylight >= 0.5):
                return AtomResult("done", f"slept, energy {p.vitals['energy']}", events=[events.woke_up()])
            if until_day and (p.vitals["food"] == 0 or p.vitals["drink"] == 0) and not p.sleeping:
                return AtomResult("interrupted", "hungry or thirsty")
            self.act("sleep" if p.vitals["energy"] < 9 else "noop")
        return AtomResult("interrupted", "step limit")
