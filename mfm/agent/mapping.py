"""What the agent knows of the cells for routing, and path planning over it.

A :class:`NavMap` is built at the start of each turn from memory only (the spatial grid and
the resource facts of GUIDE.md) and then updated with each view the agent gets during the
turn: the short-term buffer of the present turn. Unknown cells are assumed walkable at a
higher cost, so routes through unexplored land are replanned as the view reveals it.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mfm.envs import Perception, rules
from mfm.memory import SpatialGrid

WORLD = rules.AREA
WALKABLE = frozenset(rules.WALKABLE)
OBJECTS = frozenset({"cow", "zombie", "skeleton", "arrow", "plant", "player"})
MINE_TOOL = rules.MINE_TOOL
"""Material -> the pickaxe that mining it needs (from the game rules)."""
DIRS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
MOVE_OF = {v: f"move_{k}" for k, v in DIRS.items()}

Cell = tuple[int, int]


def l1(a: Cell, b: Cell) -> int:
    """Manhattan distance (crafter's own distance)."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def cheb(a: Cell, b: Cell) -> int:
    """Chebyshev distance (the 3x3 'nearby' of crafting is cheb <= 1)."""
    return max(abs(a[0] - b[0]), abs(a[1] - b[1]))


def in_world(c: Cell, area: Cell = WORLD) -> bool:
    """Whether ``c`` lies in a world of ``area`` tiles."""
    return 0 <= c[0] < area[0] and 0 <= c[1] < area[1]


def neighbours(c: Cell) -> list[Cell]:
    return [(c[0] + dx, c[1] + dy) for dx, dy in DIRS.values()]


@dataclass
class NavMap:
    """Cell names known this turn (memory + views of this turn), hazards and extra costs."""

    cells: dict[Cell, str] = field(default_factory=dict)
    hazards: set[Cell] = field(default_factory=set)
    danger: dict[Cell, float] = field(default_factory=dict)
    seen_now: set[Cell] = field(default_factory=set)
    area: Cell = WORLD

    @classmethod
    def from_memory(cls, grid: SpatialGrid, resources: Iterable[tuple[str, Cell]], area: Cell = WORLD) -> "NavMap":
        """The routing knowledge memory holds: grid rows (latest per cell) and resource facts."""
        nav = cls(area=area)
        for name, cell in resources:
            nav.cells[cell] = name
        for row in grid.rows:
            c = (row.cell[0], row.cell[1])
            if row.kind in ("walked", "opened"):
                nav.cells[c] = "path" if row.kind == "opened" else nav.cells.get(c, "grass")
                if nav.cells[c] not in WALKABLE:
                    nav.cells[c] = "grass"
            elif row.kind == "placed":
                nav.cells[c] = row.item or "blocked"
            elif row.kind == "blocked":
                nav.cells[c] = "blocked"
            elif row.kind == "water":
                nav.cells[c] = "water"
            elif row.kind == "hazard":
                if row.cause == "lava":
                    nav.hazards.add(c)
                    nav.cells[c] = "lava"
                else:
                    for dx in range(-1, 2):
                        for dy in range(-1, 2):
                            n = (c[0] + dx, c[1] + dy)
                            nav.danger[n] = nav.danger.get(n, 0.0) + 1.0
        return nav

    def observe(self, p: Perception) -> None:
        """Overwrite the cells of the current view (objects are kept as objects)."""
        self.seen_now = set()
        for x, y, name in p.local_cells():
            self.cells[(x, y)] = name
            self.seen_now.add((x, y))
            if name == "lava":
                self.hazards.add((x, y))
        self.cells[p.pos] = "player"

    def name(self, c: Cell) -> str | None:
        return self.cells.get(c)

    def walkable(self, c: Cell) -> bool:
        return self.cells.get(c) in WALKABLE


def step_cost(nav: NavMap, c: Cell, tools: set[str], dig: bool) -> float | None:
    """Cost of entering ``c`` (None: not passable). Digging counts the extra ``do``."""
    if not in_world(c, nav.area) or c in nav.hazards:
        return None
    name = nav.cells.get(c)
    extra = min(nav.danger.get(c, 0.0), 4.0)
    if name is None:
        return 2.0 + extra
    if name in WALKABLE or name == "player":
        return 1.0 + extra
    if name in OBJECTS:
        return 4.0 + extra
    if dig and name in MINE_TOOL and MINE_TOOL[name] in tools:
        return 3.0 + extra
    return None


def plan(nav: NavMap, start: Cell, goal: Callable[[Cell], bool], heuristic: Callable[[Cell], float],
         tools: set[str], dig: bool, max_nodes: int = 6000) -> list[Cell] | None:
    """A* from ``start`` to the first cell satisfying ``goal``; the path excludes ``start``."""
    if goal(start):
        return []
    frontier: list[tuple[float, float, Cell]] = [(heuristic(start), 0.0, start)]
    came: dict[Cell, Cell | None] = {start: None}
    cost: dict[Cell, float] = {start: 0.0}
    expanded = 0
    while frontier and expanded < max_nodes:
        _, g, c = heapq.heappop(frontier)
        if g > cost.get(c, float("inf")):
            continue
        if goal(c):
            path = []
            while c != start:
                path.append(c)
                c = came[c]  # type: ignore[assignment]
            return path[::-1]
        expanded += 1
        for n in neighbours(c):
            sc = step_cost(nav, n, tools, dig)
            if sc is None:
                continue
            ng = g + sc
            if ng < cost.get(n, float("inf")):
                cost[n] = ng
                came[n] = c
                heapq.heappush(frontier, (ng + heuristic(n), ng, n))
    return None


def path_to(nav: NavMap, start: Cell, target: Cell, tools: set[str], dig: bool,
            adjacent: bool = False) -> list[Cell] | None:
    """A route to ``target`` (or to a cell next to it when ``adjacent``)."""
    if adjacent:
        def goal(c: Cell) -> bool:
            return l1(c, target) == 1

        def h(c: Cell) -> float:
            return max(l1(c, target) - 1, 0)
    else:
        def goal(c: Cell) -> bool:
            return c == target

        def h(c: Cell) -> float:
            return l1(c, target)
    return plan(nav, start, goal, h, tools, dig)

