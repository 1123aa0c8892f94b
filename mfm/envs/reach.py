"""The temporal-reach world: one target seen once, early, and needed only much later.

:class:`ReachHarness` is the Crafter harness with one job added. At reset it arranges the
seed's world so that the task's target material (a diamond) exists in exactly one cell, in
view of the player's first frame, and puts the player's start away from the world's centre
(where every respawn goes), so that the cell is not seen again by coming back to life. Until
env step ``delay`` the cell is sealed: ``do`` on it does nothing, so the agent must do other
work and come back to it after at least ``delay`` steps. The arrangement is a pure function
of the seed (its own random generator; crafter's world generator draws nothing more), so
every method meets the same world.
"""
from __future__ import annotations

import json
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from crafter import constants

from mfm.envs.crafter_env import CrafterHarness, Perception, StepResult, action_index, centre, nearest_cell
from mfm.envs.rules import AREA, DATA_DIR, Reach

NOOP = constants.actions.index("noop")
DO = constants.actions.index("do")
OFFSETS: tuple[tuple[int, int], ...] = ((2, 0), (-2, 0), (0, 2), (0, -2), (3, 1), (-3, -1))
"""Where the target goes relative to the start, in order of preference: inside the first
frame's 9x7 view, never on the player's own cell or the one it faces."""


@dataclass(frozen=True)
class ReachSite:
    """Where a reach world put things: the target cell and the player's start."""

    target: tuple[int, int]
    start: tuple[int, int]
    removed: int
    """Cells of the target material the world generator made that were turned to stone."""


def arrange(world: Any, player: Any, seed: int, reach: Reach) -> ReachSite:
    """Rearrange a freshly generated world for the reach task (see the module docstring).

    The start is a free grass cell at an L1 distance of ``reach.distance`` from the world's
    centre, with a free grass cell at one of :data:`OFFSETS` for the target; among those,
    one is drawn with a generator seeded by ``seed``. Raises RuntimeError if the world has
    no such place."""
    mat = world._mat_map
    ids = world._mat_ids
    target_id, stone_id, grass_id = ids[reach.material], ids["stone"], ids["grass"]
    removed = int((mat == target_id).sum())
    mat[mat == target_id] = stone_id
    width, height = world.area
    cx, cy = centre((width, height))
    lo, hi = reach.distance
    free = (mat == grass_id) & (world._obj_map == 0)
    sites: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for x in range(4, width - 4):
        for y in range(4, height - 4):
            if not free[x, y] or not lo <= abs(x - cx) + abs(y - cy) <= hi:
                continue
            for dx, dy in OFFSETS:
                tx, ty = x + dx, y + dy
                if free[tx, ty]:
                    sites.append(((x, y), (tx, ty)))
                    break
    if not sites:
        raise RuntimeError(f"seed {seed}: no free grass {lo}-{hi} cells from the centre for the reach target")
    start, target = random.Random(f"reach:{seed}").choice(sites)
    world[target] = reach.material
    world.move(player, start)
    return ReachSite(target=target, start=start, removed=removed)


class ReachHarness(CrafterHarness):
    """A :class:`CrafterHarness` whose world is arranged by :func:`arrange` at reset and whose
    target cell is sealed until env step ``reach.delay``."""

    def __init__(self, seed: int, reach: Reach, size: int = 64, perception: str = "map",
                 area: tuple[int, int] = AREA, kit: tuple[tuple[str, int], ...] = ()) -> None:
        super().__init__(seed, size=size, perception=perception, area=area, kit=kit)
        self.reach = reach
        self.site: ReachSite | None = None

    def reset(self) -> Perception:
        """The seed's pristine world, arranged; the first frame shows the target."""
        super().reset()
        env = self._env
        self.site = arrange(env._world, env._player, self.seed, self.reach)
        return self._perceive(env.render())

    def sealed(self, step: int) -> bool:
        """Whether collecting the target at env step ``step`` (the step an action makes) does nothing."""
        return step < self.reach.delay

    def step(self, action: int | str) -> StepResult:
        """One step; ``do`` facing the sealed target becomes ``noop`` (the cell stays)."""
        index = action_index(action)
        if index == DO and self.site is not None and not self.dead:
            player = self._env._player
            front = (int(player.pos[0] + player.facing[0]), int(player.pos[1] + player.facing[1]))
            if front == self.site.target and self.sealed(self.step_count + 1):
                index = NOOP
        return super().step(index)


NEEDS: tuple[str, ...] = ("tree", "stone", "coal", "iron")
"""What the tech tree to an iron pickaxe takes from the world (the screen looks for each)."""
BARRIERS: tuple[str, ...] = ("water", "lava")
"""Cells the screen's walk does not cross (water can be bridged with stone, lava kills)."""


SCREEN = json.loads((DATA_DIR / "screen.json").read_text(encoding="utf-8"))
"""The screen's measured constants (``data/screen.json``): iron collected per 1,000 env steps."""


def iron_needed(reach: Reach, kit: tuple[tuple[str, int], ...] = ()) -> int:
    """Iron cells a reach world must hold for the run to still have iron for a pickaxe when the
    seal opens: one for that pickaxe, plus what a run mines before ``reach.delay`` (every death
    loses the pickaxe and the iron in hand, and the world never grows iron again) at the rate
    measured on development seeds (:data:`SCREEN`); none when the kit gives an iron pickaxe at
    every life."""
    if any(name == "iron_pickaxe" and n > 0 for name, n in kit):
        return 0
    return 1 + math.ceil(SCREEN["iron_per_1000_steps"] * reach.delay / 1000)


def screen(seed: int, reach: Reach, area: tuple[int, int] = AREA, iron: int = 0) -> str | None:
    """Why the seed's reach world is dropped from a sweep, or None to keep it: the world
    must hold every one of :data:`NEEDS` where the player can get from the centre (where
    lives start again) without crossing :data:`BARRIERS` (rock and trees count as passable:
    they can be mined or cut), at least ``iron`` cells of iron among them
    (:func:`iron_needed`), and the target must be reachable from there too."""
    h = ReachHarness(seed, reach, area=area)
    h.reset()
    world = h._env._world
    assert h.site is not None
    names = np.array([world._mat_names.get(i) for i in range(max(world._mat_names) + 1)], dtype=object)
    mats = names[world._mat_map]
    open_ = ~np.isin(mats, BARRIERS)
    width, height = world.area
    reached = np.zeros_like(open_)
    start = nearest_cell(open_, centre((width, height)))
    if start is None:
        return "no open cell in the world"
    reached[start] = True
    todo = deque([start])
    while todo:
        x, y = todo.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if 0 <= nx < width and 0 <= ny < height and open_[nx, ny] and not reached[nx, ny]:
                reached[nx, ny] = True
                todo.append((nx, ny))
    missing = [n for n in NEEDS if not (reached & (mats == n)).any()]
    if missing:
        return f"no {', '.join(missing)} reachable from the centre"
    cells = int((reached & (mats == "iron")).sum())
    if cells < iron:
        return f"{cells} iron cells reachable from the centre, fewer than the {iron} a run needs by the delay"
    if not reached[h.site.target]:
        return "the target cannot be reached from the centre"
    return None

