"""Where the scripted player goes when memory names no place: the map it has covered, and the
next point to explore.

The world is covered by a lattice of explore points (:func:`lattice`); the nearest one not yet
in view from where the spatial grid says the player stood is the next target, pulled towards
rock when minerals are wanted. Without a map (``direct``) the target is a far point that
changes every 150 steps, sometimes a random one.
"""
from __future__ import annotations

import functools
import random

from mfm.agent.head import HALF_COLS, HALF_ROWS, Head
from mfm.agent.mapping import Cell, l1
from mfm.agent.modes import MemoryMode
from mfm.agent.notes import known
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception, rules
from mfm.memory import Fact

MINERALS = frozenset({"stone", "coal", "iron", "diamond"})
EDGE = 3
"""Explore targets keep this many cells from the world's edge (a lattice of this stride)."""
FALLBACK_MIN = rules.LOCAL_VIEW[0]
"""Once every explore point is seen, the fallback target is at least this far (L1) from the
player: never its own cell, never one step away."""


@functools.lru_cache(maxsize=4)
def lattice(area: Cell) -> tuple[Cell, ...]:
    """The explore points of a world of ``area`` tiles: every ``EDGE``-th cell, ``EDGE`` cells
    in from its edge."""
    return tuple((x, y) for x in range(EDGE, area[0] - EDGE, EDGE) for y in range(EDGE, area[1] - EDGE, EDGE))


class Explorer:
    """The covered map (``head.seen``, ``head.opened``, for the modes with a map) and the
    explore target (``head.explore_target``); ``seed`` seeds the exploration without a map."""

    def __init__(self, mode: MemoryMode, seed: int, head: Head) -> None:
        self.mode = mode
        self.seed = seed
        self.head = head
        self._grid_seen_upto = 0

    def update_seen(self, tools: MemoryTools) -> None:
        """Where I have been and which cells were cut or mined (the state block's map), from the
        spatial grid, for the modes with a map."""
        stood: list[Cell] = []
        if self.mode.coverage == "grid":
            rows = tools.grid_rows()
            new = rows[self._grid_seen_upto:]
            stood = [(r.cell[0], r.cell[1]) for r in new if r.kind in ("walked", "opened")]
            self.head.opened.update((r.cell[0], r.cell[1]) for r in new if r.kind == "opened")
            self._grid_seen_upto = len(rows)
        for x, y in stood:
            for dx in range(-HALF_COLS, HALF_COLS + 1):
                for dy in range(-HALF_ROWS, HALF_ROWS + 1):
                    self.head.seen.add((x + dx, y + dy))

    def target(self, p: Perception, names: set[str], facts: dict[str, Fact]) -> Cell:
        """The nearest unexplored point, pulled towards mountains when rock is wanted. Without
        a map (``direct``): a far point that changes every 150 steps, sometimes a random one."""
        head = self.head
        if self.mode.coverage is None:
            leg = random.Random(self.seed * 1_000_003 + p.step // 150)
            pick = head.rng if head.rng.random() < 0.2 else leg
            return (pick.randrange(EDGE, p.area[0] - EDGE), pick.randrange(EDGE, p.area[1] - EDGE))
        if head.explore_target and head.explore_target not in head.seen and head.failed[head.explore_target] < 2:
            return head.explore_target
        rocky = []
        if names & MINERALS:
            for n in ("stone", "coal", "iron", "diamond"):
                rocky += known(facts, "res", n)
            rocky += known(facts, "hazard", "lava")
        best, best_score = None, float("inf")
        for c in lattice(p.area):
            if c in head.seen or head.failed[c] >= 2:
                continue
            score = float(l1(c, p.pos))
            if rocky:
                score += 0.7 * min(l1(c, r) for r in rocky)
            if score < best_score:
                best, best_score = c, score
        if best is None:
            best = self.fallback(p)
        head.explore_target = best
        return best

    def fallback(self, p: Perception) -> Cell:
        """Where to wander once every explore point has been seen: the point mirrored through
        the world's centre, unless that is near the player (at the centre it is the player's
        own cell, which took no step and livelocked the policy) or failed twice; then the
        lattice point farthest from the player that has not failed twice (any, if all have)."""
        x, y = p.pos
        w, h = p.area
        failed = self.head.failed
        mirror = (max(EDGE, min(w - EDGE - 1, w - x)), max(EDGE, min(h - EDGE - 1, h - y)))
        if l1(mirror, p.pos) >= FALLBACK_MIN and failed[mirror] < 2:
            return mirror
        points = [c for c in lattice(p.area) if failed[c] < 2] or list(lattice(p.area))
        return max(points, key=lambda c: (l1(c, p.pos), -c[0], -c[1]))
