"""What the scripted player keeps in its head between turns, shared by the parts of its policy.

Everything else the policy knows it reads back from memory each turn. A mode without a head
(``MemoryMode.in_head`` false: ``direct``) forgets the recent turns, the failed targets and
the current exploration target at the start of every turn (:meth:`Head.forget`).
"""
from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from mfm.agent.atoms import AtomResult
from mfm.agent.mapping import Cell
from mfm.agent.protocol import Decision
from mfm.envs import rules
from mfm.schema import IndexRow

HALF_COLS, HALF_ROWS = rules.LOCAL_VIEW[0] // 2, rules.LOCAL_VIEW[1] // 2
"""How far the 9x7 view reaches from the player: 4 columns and 3 rows each way."""

Recent = tuple[str, str, dict, str, str]
"""One recent decision: its kind, name, arguments (without ``stop_on``), outcome label and episode id."""


@dataclass
class Head:
    """The player's working state: ``recent`` decisions (the state block's [RECENT], the
    procedures learned from pairs of them), ``failed`` (times a target cell failed; two
    rule it out), the map's ``seen`` cells (in view from where the grid says it stood) and
    ``opened`` cells (cut or mined), the ``explore_target`` being walked to, ``idle`` (turns
    in a row without an env step) and ``rng``, the generator of every random choice."""

    rng: random.Random
    recent: deque[Recent] = field(default_factory=lambda: deque(maxlen=6))
    failed: Counter[Cell] = field(default_factory=Counter)
    seen: set[Cell] = field(default_factory=set)
    opened: set[Cell] = field(default_factory=set)
    explore_target: Cell | None = None
    idle: int = 0

    def forget(self) -> None:
        """Start a turn with nothing in mind (a mode without a head)."""
        self.recent.clear()
        self.failed.clear()
        self.explore_target = None

    def took(self, d: Decision, result: AtomResult, row: IndexRow) -> None:
        """Keep in mind how a decision went: the recent turns, turns without a step, failed
        targets, and whether the exploration target still stands."""
        self.recent.append((d.kind, d.name, _short(d.args), result.label, row.id))
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


def _short(args: dict[str, Any]) -> dict[str, Any]:
    """A decision's arguments without ``stop_on`` (as the recent turns show them)."""
    return {k: v for k, v in args.items() if k != "stop_on"}
