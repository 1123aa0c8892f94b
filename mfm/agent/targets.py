"""What the scripted player works towards when it is safe: the task's milestones.

:meth:`Targets.progress` follows the tech tree (wood, table, pickaxes, furnace, iron, the
diamond), or, in a task that starts with a kit, goes straight for what the next milestone
collects (:meth:`Targets.kit_target`); after the diamond, or while a reach task's diamond is
sealed, it works on other achievements (:meth:`Targets.extras`). Getting a material is
:meth:`mfm.agent.recall.Recall.seek`'s job.
"""
from __future__ import annotations

from typing import Any

from mfm.agent.atoms import CRAFT, visible
from mfm.agent.explore import Explorer
from mfm.agent.mapping import MINE_TOOL, Cell, cheb, l1
from mfm.agent.modes import MemoryMode
from mfm.agent.notes import known
from mfm.agent.protocol import Decision
from mfm.agent.recall import Recall, collects
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception, Task
from mfm.memory import Fact, ProceduralMemory

Station = tuple[Cell, Cell | None]
"""A known table and, if one is close enough to use with it, a furnace."""


class Targets:
    """The tech tree of ``task`` (``procedures``: the stored ``table_tool`` where the mode
    has procedures), getting materials through ``recall``."""

    def __init__(self, task: Task, mode: MemoryMode, procedures: ProceduralMemory, recall: Recall,
                 explorer: Explorer) -> None:
        self.task = task
        self.mode = mode
        self.procedures = procedures
        self.recall = recall
        self.explorer = explorer

    def progress(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact], source: str | None) -> Decision:
        """The next step towards the task's milestones."""
        seek = self.recall.seek
        ore = self.kit_target(p)
        if ore is not None:
            return seek(p, [ore], tools, facts, source, f"find {ore}")
        inv = p.inventory
        has = lambda k: inv.get(k, 0) > 0  # noqa: E731
        near_table = self.station(p, facts, False, 12)
        if not has("wood_pickaxe"):
            if inv["wood"] < (3 if near_table else 5):
                return seek(p, ["tree"], tools, facts, source, "need wood for table and pickaxe")
            if near_table is None:
                return self.place_table("wood_pickaxe", "place a table")
            return self.craft("wood_pickaxe", near_table)
        if not has("wood_sword") and inv["wood"] >= 2 and near_table and l1(near_table[0], p.pos) <= 4:
            return self.craft("wood_sword", near_table)
        if not has("stone_pickaxe"):
            if inv["wood"] < 1 or (inv["wood"] < 6 and visible(p, {"tree"}) and l1(visible(p, {"tree"})[0][1], p.pos) <= 3):
                return seek(p, ["tree"], tools, facts, source, "need wood")
            if inv["stone"] < 1:
                return seek(p, ["stone"], tools, facts, source, "need stone for a stone pickaxe")
            if near_table:
                return self.craft("stone_pickaxe", near_table)
            if inv["wood"] >= 3:
                return self.place_table("stone_pickaxe", "place a table near the rock")
            return seek(p, ["tree"], tools, facts, source, "need wood for a table")
        if not has("iron_pickaxe"):
            station = self.station(p, facts, True, 14)
            if inv["stone"] >= 4 and near_table and station is None and "place_furnace" not in p.achievements:
                return Decision("atom", "place", {"item": "furnace", "near_x": near_table[0][0],
                                                  "near_y": near_table[0][1]}, "place a furnace by the table",
                                [("go_to", *near_table[0])])
            if inv["wood"] < 1 or (inv["wood"] < 4 and visible(p, {"tree"}) and l1(visible(p, {"tree"})[0][1], p.pos) <= 3):
                return seek(p, ["tree"], tools, facts, source, "need wood")
            if inv["coal"] < 1 or inv["iron"] < 1:
                want = [n for n in ("iron", "coal") if inv[n] < 1]
                if inv["stone"] < 2:
                    want.append("stone")
                return seek(p, want, tools, facts, source, "need " + " and ".join(want))
            if station:
                return self.craft("iron_pickaxe", station)
            if near_table and l1(near_table[0], p.pos) <= 14:
                if inv["stone"] >= 4:
                    return Decision("atom", "place", {"item": "furnace", "near_x": near_table[0][0],
                                                      "near_y": near_table[0][1]}, "place a furnace by the table",
                                    [("go_to", *near_table[0])])
                return seek(p, ["stone"], tools, facts, source, "need stone for a furnace")
            if inv["wood"] >= 3:
                return self.place_table(None, "place a table for the iron pickaxe")
            return seek(p, ["tree"], tools, facts, source, "need wood for a new table")
        if not has("diamond") or "collect_diamond" not in p.achievements:
            reach = self.task.reach
            if reach is not None and reach.material == "diamond" and p.step + 1 < reach.delay:
                return self.extras(p, tools, facts, source)
            return seek(p, ["diamond"], tools, facts, source, "find a diamond")
        return self.extras(p, tools, facts, source)

    def kit_target(self, p: Perception) -> str | None:
        """In a task that starts with a kit (past the tech tree): what the next milestone
        collects, once the tool it needs is in hand and the target is not sealed (else the tech
        tree is followed, then other work until the reach delay)."""
        nxt = next((m for m in self.task.milestones if m not in p.achievements), None)
        tile = collects(nxt) if self.task.kit and nxt else None
        if tile is None or (tile in MINE_TOOL and not p.inventory.get(MINE_TOOL[tile], 0)):
            return None
        reach = self.task.reach
        if reach is not None and reach.material == tile and p.step + 1 < reach.delay:
            return None
        return tile

    def extras(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact], source: str | None) -> Decision:
        """After the diamond (or, in a reach task, while the diamond is sealed): other
        achievements (for the ``all`` task) and staying alive."""
        inv = p.inventory
        station = self.station(p, facts, True, 14)
        for item in ("iron_sword", "stone_sword", "wood_sword"):
            uses, needs = CRAFT[item]
            if inv.get(item, 0) == 0 and all(inv.get(k, 0) >= n for k, n in uses.items()):
                st = station if "furnace" in needs else self.station(p, facts, False, 14)
                if st is not None:
                    return self.craft(item, st)
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
            return self.recall.seek(p, ["tree"], tools, facts, source, "stock wood")
        if inv["coal"] < 1 or inv["iron"] < 1:
            return self.recall.seek(p, [n for n in ("iron", "coal") if inv[n] < 1], tools, facts, source, "stock ore")
        target = self.explorer.target(p, {"cow", "zombie"}, facts)
        return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": ["cow", "diamond"]},
                        "wander", [("go_to", *target)])

    # -- stations ------------------------------------------------------------------------------
    def station(self, p: Perception, facts: dict[str, Fact], furnace: bool, radius: int) -> Station | None:
        """The nearest known table within ``radius`` (L1), with a furnace by it (required if
        ``furnace``)."""
        tables = [t for t in known(facts, "place", "table") if l1(t, p.pos) <= radius]
        furnaces = known(facts, "place", "furnace")
        best = None
        for t in sorted(tables, key=lambda t: l1(t, p.pos)):
            f = next((f for f in furnaces if cheb(f, t) <= 2), None)
            if furnace and f is None:
                continue
            best = (t, f)
            break
        return best

    def craft(self, item: str, st: Station) -> Decision:
        """Make ``item`` at the station ``st``."""
        t, f = st
        args: dict[str, Any] = {"item": item, "table_x": t[0], "table_y": t[1]}
        if CRAFT[item][1] == ("table", "furnace") and f is not None:
            args.update(furnace_x=f[0], furnace_y=f[1])
        return Decision("atom", "craft", args, f"make {item}", [("go_to", t[0], t[1])])

    def place_table(self, tool: str | None, why: str) -> Decision:
        """Place a table (with the stored ``table_tool`` procedure, when there is one for ``tool``)."""
        proc = self.procedures.load("table_tool") if self.mode.procedures else None
        if tool and proc is not None and not proc.disabled:
            return Decision("procedure", "table_tool", {"tool": tool}, why + " (stored procedure)")
        return Decision("atom", "place", {"item": "table"}, why)
