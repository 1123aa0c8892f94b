"""What the scripted player does before any work: get unstuck, fight, drink, eat, rest.

:meth:`Survival.decide` returns the decision that staying alive (or moving at all) asks for
this turn, or None when the player is free to work towards the task.
"""
from __future__ import annotations

from mfm.agent.atoms import HOSTILE, Atoms, visible
from mfm.agent.explore import Explorer
from mfm.agent.head import HALF_COLS, HALF_ROWS, Head
from mfm.agent.mapping import DIRS, WALKABLE, NavMap, l1
from mfm.agent.modes import MemoryMode
from mfm.agent.notes import known
from mfm.agent.protocol import Decision
from mfm.agent.recall import Recall
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception
from mfm.memory import Fact, ProceduralMemory

FACINGS = ("left", "up", "right", "down")
STUCK_REPEATS = 5
"""How many times in a row, at one env step, the stuck handler keeps its first choice of
direction (``step % 4``) before it turns further each time. Five keeps the shipped samples
byte-identical: ``diamond_direct_s2_2500steps`` stalls for 17 turns at step 701 (five
firings facing the way it already faced) and gets out by chance; a sixth would rotate."""


class Survival:
    """Staying alive and moving (``procedures``: the stored ``safe_sleep`` where the mode has
    procedures); water is found through ``recall``, cows by exploring."""

    def __init__(self, mode: MemoryMode, procedures: ProceduralMemory, head: Head, recall: Recall,
                 explorer: Explorer) -> None:
        self.mode = mode
        self.procedures = procedures
        self.head = head
        self.recall = recall
        self.explorer = explorer
        self.spins = 0
        self.spin_step = -1

    def decide(self, p: Perception, tools: MemoryTools, facts: dict[str, Fact], source: str | None) -> Decision | None:
        """Turn around or move on when stuck; sleep in a shelter; fight a foe next to me; drink
        or eat when low; rest at night or when tired; else None."""
        v = p.vitals
        head = self.head
        if head.idle >= 3:
            head.idle = 0
            self.spins = self.spins + 1 if p.step == self.spin_step else 0
            self.spin_step = p.step
            turn = max(0, self.spins - STUCK_REPEATS + 1)
            direction = FACINGS[(p.step + turn) % len(FACINGS)]
            return Decision("atom", "face", {"direction": direction}, "stuck: turn around")
        if head.idle >= 2:
            target = self.explorer.target(p, {"tree"}, facts)
            return Decision("atom", "explore", {"x": target[0], "y": target[1]}, "stuck: move on",
                            [("go_to", *target)])
        night = p.daylight < 0.4
        dusk = p.daylight < 0.6 and 90 <= p.step % 300 <= 200
        if sealed(p) and (night or v["energy"] < 7) and min(v["food"], v["drink"]) >= 1:
            return Decision("atom", "sleep", {"until_day": True}, "rest in the shelter")
        foes = [f for f in visible(p, HOSTILE) if l1(f[1], p.pos) <= (1 if f[0] == "zombie" else 3)]
        if foes and not p.sleeping:
            return Decision("atom", "attack", {}, f"fight the {foes[0][0]} next to me")
        if v["drink"] <= 3 or (v["drink"] <= 6 and visible(p, {"water"}) and l1(visible(p, {"water"})[0][1], p.pos) <= 4):
            return self.recall.seek(p, ["water"], tools, facts, source, "thirsty")
        if v["food"] <= 3 or (v["food"] <= 6 and visible(p, {"cow"}) and l1(visible(p, {"cow"})[0][1], p.pos) <= 4):
            cows = visible(p, {"cow"})
            if cows:
                return Decision("atom", "eat", {}, "hungry: cow in view", [("go_to", *cows[0][1])])
            if v["food"] <= 3:
                target = self.explorer.target(p, {"cow", "tree"}, facts)
                return Decision("atom", "explore", {"x": target[0], "y": target[1], "stop_on": ["cow"]},
                                "hungry: look for cows", [("go_to", *target)])
        if v["energy"] <= 2 or night or dusk or (p.sleeping and v["energy"] < 9):
            return self.rest(p, facts)
        return None

    def rest(self, p: Perception, facts: dict[str, Fact]) -> Decision | None:
        """Sleep in a shelter: dig one in rock in view, or go to rock to dig one; sleep where I
        stand only when exhausted; else None."""
        failed = self.head.failed
        if sealed(p):
            return Decision("atom", "sleep", {"until_day": True}, "rest in the shelter")
        has_pick = p.inventory.get("wood_pickaxe", 0) > 0
        if has_pick and p.inventory.get("stone", 0) >= 1:
            probe = Atoms(_StillBody(p), _view_nav(p))
            sites = [c for c in probe.pocket_sites() if failed[c] < 2]
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
                rock = sorted(known(facts, "res", "stone"), key=lambda c: l1(c, p.pos))[:1]
            if rock and l1(rock[0], p.pos) <= 20 and failed[rock[0]] < 2:
                return Decision("atom", "go_to", {"x": rock[0][0], "y": rock[0][1], "adjacent": True},
                                "night: go to rock for a shelter", [("go_to", *rock[0])])
        if p.vitals["energy"] <= 1:
            return Decision("atom", "sleep", {}, "exhausted: sleep where I stand")
        return None


def sealed(p: Perception) -> bool:
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
