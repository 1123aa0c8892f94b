"""The Echo learner: a Crafter player that learns the game's recipes from its own attempts.

It knows the action names and the achievement names (its goals), and it perceives what an
honest player perceives (inventory, vitals, the 9x7 view). It is *not* given Crafter's
recipes or requirements (it never reads ``mfm.envs.rules``, the atoms' recipe tables or
the scripted policy). It moves with the same closed-loop atoms as the MFM agent (A* routing
without digging, facing a cell, exploring), and acts with the raw game actions.

An **Echo episode** is one attempt at one goal (an achievement): the learner chooses the
goal, prepares (gathers, walks to stations, places them) and tries, up to three times
(each try with what the previous failure taught), within a step allowance; the attempt
succeeds when the goal is unlocked. It spans several MFM episodes (one per gather, walk, try), all
recorded in an ordinary run directory. Every try (a ``do`` on a tile, a ``place_*``, a
``make_*``) is described as an :class:`~mfm.echo.ical.Attempt` and folded into the run's
CSD library (``csd.jsonl``); each Echo episode gets a line in ``echo.jsonl``.

Configurations:

- ``passive``: retrieval only. A goal it has done before is replayed from its descriptor;
  an unknown goal is tried with the requirements of the most similar verified task as they
  are (few-shot reuse), then with a random context.
- ``ical``: in addition, after every newly verified task the learner induces candidate new
  tasks by analogy (:func:`~mfm.echo.ical.induce` on the top-K exemplars), pre-checks them,
  carries out the ordered plan on their proc axis (:meth:`Learner._follow`), gathers a
  predicted material it has only seen as a tile (:meth:`Learner._gather_by_sight`), prepares
  what else they are predicted to need, tries them and records the outcome. After a
  failure it adds the representative's own requirements, then everything it knows how to
  get (error recovery).

Survival behaviours that are not recipes are hand-coded (:meth:`Learner._reflexes`): shelter
at night, run from foes when hurt, fight back a zombie, drink and eat with learned tasks.
- ``ical-no-<axis>``: ICAL with one axis removed from retrieval and induction.
"""
from __future__ import annotations

import json
import random
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from mfm import __version__
from mfm.agent.atoms import Atoms, BudgetExhausted, Died, Halt
from mfm.agent.mapping import MOVE_OF, WALKABLE, NavMap, l1, neighbours
from mfm.agent.runner import Recorder, StepClock, start_run
from mfm.echo.csd import ATTEMPTS_FILE, CONFIGS, CSD
from mfm.echo.ical import Attempt, describe, induce, precheck, refine, slots, task_name
from mfm.echo.library import CSDLibrary, Match
from mfm.echo.vectorize import HashingVectorizer, Vectorizer
from mfm.envs import CrafterHarness, Perception
from mfm.envs.crafter_env import ACHIEVEMENTS, ACTIONS, HALF_COLS, HALF_ROWS, VITALS
from mfm.memory import RunWriter
from mfm.memory.appendlog import WriteError, append_bytes
from mfm.memory.episode_recorder import Call, Ending
from mfm.progress import counted
from mfm.schema import SCHEMA_VERSION, RunManifest, TurnRow

GOALS: tuple[str, ...] = tuple(a for a in ACHIEVEMENTS if a != "wake_up")
VOCABULARY: frozenset[str] = frozenset(ACTIONS) | frozenset(ACHIEVEMENTS)
CREATURES = frozenset({"cow", "zombie", "skeleton"})
AVOID = frozenset({"player", "sand", "path", "lava", "outside", "arrow", "unknown"})
"""Tiles never chosen out of curiosity (lava: an instinct; the rest cannot be acted on)."""
POLICY = "echo-learner"
GAINS = ("food", "drink")
"""Vitals whose rise counts as what a ``do`` gave (health and energy change by themselves)."""
TRIES = 3
"""Tries of the goal within one Echo episode (each with what the last failure taught)."""
NIGHT = 0.4
"""Below this daylight the learner shelters and waits for the morning (an instinct)."""
LOW_HEALTH = 4
"""At or below this health the learner runs from foes instead of fighting (in daylight)."""
THIRSTY = 3
"""At or below this drink or food the learner interrupts what it does to restore it."""
FOES = frozenset({"zombie", "skeleton", "arrow"})
REFLEXES = frozenset({"defend", "flee", "shelter", "wait"})
"""MFM episodes that are reflexes themselves (no reflex check before them)."""


class AttemptOver(Exception):
    """The Echo episode used its step allowance (or the player died)."""


@dataclass
class Plan:
    """What a try needs: items (counts), tools, stations in reach; and the action itself."""

    action: str
    target: str | None
    consumes: dict[str, int] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    near: list[str] = field(default_factory=list)


def action_of(task: str, csd: CSD | None = None) -> tuple[str, str | None]:
    """The game action (and ``do`` target) that performs ``task``: what its descriptor's
    interaction axis says, else the task name itself when it is an action, else ``do`` on
    the tile the name mentions (``collect_stone`` -> do on stone)."""
    if csd is not None and csd.inter.get("action"):
        return csd.inter["action"], csd.inter.get("target")
    if task in ACTIONS:
        return task, None
    _, _, form = slots(task)
    return "do", form


class Learner:
    """One from-scratch learner run in one real Crafter world."""

    def __init__(self, config: str, seed: int, out: Path, episodes: int = 30, step_cap: int = 120, k: int = 6,
                 vectorizer: Vectorizer | None = None, frame_size: int = 64, command: str | None = None) -> None:
        if config not in CONFIGS:
            raise ValueError(f"unknown Echo configuration {config!r}; expected one of {', '.join(CONFIGS)}")
        if episodes < 1 or step_cap < 10:
            raise ValueError("episodes must be at least 1 and step_cap at least 10")
        self.config, self.seed, self.episodes, self.step_cap, self.k = config, seed, episodes, step_cap, k
        self.axes = CONFIGS[config]
        self.rng = random.Random(seed)
        self.clock = StepClock()
        budget = episodes * step_cap * 2
        manifest = RunManifest(
            schema_version=SCHEMA_VERSION, run_id=f"echo_{config}_s{seed}", env="crafter", task="echo",
            method=config, seed=seed, step_budget=budget, milestone_order=GOALS, status="running",
            started_at=self.clock(), policy=POLICY, package_version=__version__, command=command,
            config={"echo": {"config": config, "axes": list(self.axes) if self.axes else None, "episodes": episodes,
                             "step_cap": step_cap, "k": k}})
        self.writer = RunWriter(Path(out), manifest, clock=self.clock, background_commit=True)
        self.harness = CrafterHarness(seed, size=frame_size)
        self.library, _ = CSDLibrary.open(self.writer.dir, vectorizer or HashingVectorizer(), writable=True)
        self.nav = NavMap(area=self.harness.area)
        self.body: Recorder | None = None
        self.turn = 0
        self.tried: dict[str, int] = {}
        self.tried_at: dict[str, int] = {}
        self.attempt_episodes: list[str] = []
        self.attempt_start = 0
        self.deaths = 0
        self.acted_on: set[str] = set()
        self.reflexing = False
        self.followed: list[str] = []

    # -- recording -----------------------------------------------------------------------------
    @property
    def p(self) -> Perception:
        assert self.body is not None
        return self.body.perception

    def _start(self) -> None:
        self.body = start_run(self.harness, self.writer, self.writer.manifest.step_budget, GOALS, clock=self.clock)
        self.nav.observe(self.body.perception)

    def _episode(self, name: str, args: dict[str, Any], goal: str, body: Callable[[Atoms], tuple[bool, str]]) -> bool:
        """Run ``body`` as one MFM episode, recorded by the body's episode recorder (as the
        agent's are); raise AttemptOver on death or when the Echo episode's step allowance is
        used. A run that must stop (budget, stop request) commits the episode as interrupted
        and raises."""
        assert self.body is not None
        if name not in REFLEXES and not self.reflexing:
            self._reflexes()
        if self.p.step - self.attempt_start >= self.step_cap:
            raise AttemptOver("step allowance used")
        call = Call(name, args, goal)
        self.body.open(call, self.turn)
        atoms = Atoms(self.body, self.nav, max_steps=min(60, self.step_cap))
        self._pending = []
        died = False
        try:
            ok, reason = body(atoms)
        except Died as e:
            ok, reason, died = False, f"died ({e})", True
            self.body.record_death()
            self.deaths += 1
        except Halt as e:
            stopped = "budget" if isinstance(e, BudgetExhausted) else "stopped"
            self.body.commit(call, Ending("interrupted", stopped, (("interrupted", stopped),)))
            raise
        label = "done" if ok else ("interrupted" if died else "failed")
        row = self.body.commit(call, Ending(label, reason, ((label, reason),)))
        self.writer.record_turn(TurnRow(
            turn=self.turn, life=row.life, first_step=row.first_step, last_step=row.last_step, policy=POLICY,
            calls=(), targets=(), plan_before=(), plan_after=(), episodes=(row.id,), note=f"echo goal: {goal}"))
        self.turn += 1
        self.attempt_episodes.append(row.id)
        self._commit_learning(row.id)
        if died:
            self.body.respawn()
            raise AttemptOver("died")
        return ok

    # -- perception helpers --------------------------------------------------------------------
    def nearby(self, p: Perception | None = None) -> tuple[str, ...]:
        """Tile names in the 3x3 around the player (the learner's notion of 'within reach')."""
        p = p or self.p
        return tuple(sorted({p.tile(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)} - {"player"}))

    def have(self, item: str) -> int:
        return self.p.inventory.get(item, 0)

    def cells_of(self, tile: str) -> list[tuple[int, int]]:
        """Remembered cells holding ``tile``, nearest first."""
        pos = self.p.pos
        return sorted((c for c, n in self.nav.cells.items() if n == tile), key=lambda c: (l1(c, pos), c))

    def _snapshot(self, p: Perception) -> dict[str, int]:
        return {**{k: v for k, v in p.inventory.items() if v}, **{v: p.vitals[v] for v in GAINS}}

    # -- learning ------------------------------------------------------------------------------
    def _learn(self, action: str, target: str | None, before: Perception, near: tuple[str, ...]) -> bool:
        """Fold one try into the library; True if it did something (unlock or gain)."""
        after = self.p
        inv_b = self._snapshot(before)
        inv_a = self._snapshot(after)
        for v in GAINS:
            if inv_a[v] <= inv_b[v] or action != "do":
                inv_a.pop(v)
                inv_b.pop(v)
        unlocked = tuple(sorted(after.achievements - before.achievements))
        a = Attempt(action=action, target=target, inventory_before=inv_b, inventory_after=inv_a, nearby=near,
                    unlocked=unlocked, chain=self._prerequisites(inv_b, inv_a, near), episodes=(), step=after.step)
        success = bool(unlocked) or any(inv_a.get(k, 0) > inv_b.get(k, 0) for k in inv_a)
        self._pending.append((a, success))
        return success

    def _prerequisites(self, before: dict[str, int], after: dict[str, int], near: tuple[str, ...]) -> tuple[str, ...]:
        """The ordered plan behind a try, from the learner's own library: the verified tasks
        that give what it used up, then those that give the tools it held, then those that
        placed the stations within reach."""
        used = [k for k in sorted(before) if after.get(k, 0) < before[k] and k not in VITALS]
        tools = [k for k in sorted(before) if before[k] > 0 and k in self._makeable() and k not in used]
        steps = [src.task for k in used + tools if (src := self.source_of(k, set())) is not None]
        steps += [c.task for c in self._placers() if c.func.get("product") in near]
        return tuple(dict.fromkeys(steps))

    def _placers(self) -> list[CSD]:
        """Verified tasks that place a station."""
        return [c for c in self.library if c.status == "verified" and c.inter.get("verb") == "place"
                and c.func.get("product") in ("table", "furnace")]

    def _commit_learning(self, episode_id: str) -> None:
        """Write the tries of the episode just committed, linked to it."""
        for a, success in self._pending:
            a = replace(a, episodes=(episode_id,))
            known = self.library.get(f"task:{task_name(a)}")
            new = describe(a, success, run_id=self.writer.manifest.run_id, time=self.clock())
            csd = refine(known, a, success) if known is not None else new
            was = known.status if known is not None else None
            self.library.put(csd)
            if success and was != "verified":
                self.fresh.append(csd.id)
        self._pending = []

    # -- acting --------------------------------------------------------------------------------
    def _try(self, action: str, target: str | None, goal: str) -> bool:
        """One recorded try of ``action`` (``do`` on the nearest known ``target``)."""
        if action == "do":
            return self._episode("do", {"target": target}, goal, lambda atoms: self._do_on(atoms, target))
        return self._episode("try", {"action": action}, goal, lambda atoms: self._act(atoms, action))

    def _act(self, atoms: Atoms, action: str) -> tuple[bool, str]:
        if action.startswith("place_"):
            free = [c for c in neighbours(self.p.pos) if self.nav.name(c) in WALKABLE]
            free.sort(key=lambda c: (self.nav.name(c) != "grass", c))
            for c in free[:2]:
                if atoms.face_cell(c):
                    break
        before, near = self.p, self.nearby()
        atoms.act(action)
        ok = self._learn(action, before.facing_tile() if action.startswith("place_") else None, before, near)
        return ok, f"{action} {'worked' if ok else 'did nothing'}"

    def _do_on(self, atoms: Atoms, target: str | None) -> tuple[bool, str]:
        if target is None:
            return False, "nothing to act on"
        self.acted_on.add(target)
        if not self._reach(atoms, target):
            return False, f"no {target} within reach"
        tries = 12 if target in CREATURES else 3
        for _ in range(tries):
            p = self.p
            spots = [c for c in neighbours(p.pos) if self.nav.name(c) == target]
            if not spots:
                if target in CREATURES and self._reach(atoms, target):
                    continue
                return False, f"{target} gone"
            c = spots[0]
            if not atoms.face_cell(c) and l1(c, self.p.pos) == 1 and \
                    self.p.facing != (c[0] - self.p.pos[0], c[1] - self.p.pos[1]):
                atoms.act(MOVE_OF[(c[0] - self.p.pos[0], c[1] - self.p.pos[1])])
            if l1(c, self.p.pos) != 1:
                continue
            before, near = self.p, self.nearby()
            atoms.act("do")
            if self._learn("do", target, before, near):
                return True, f"do on {target} worked"
        return False, f"do on {target} did nothing"

    def _defend(self, atoms: Atoms) -> tuple[bool, str]:
        """A reflex: hit the zombie next to the player until none is (no chase)."""
        for _ in range(12):
            p = self.p
            foe = next((c for c in neighbours(p.pos) if self.nav.name(c) == "zombie"), None)
            if foe is None:
                return True, "no zombie next to me"
            d = (foe[0] - p.pos[0], foe[1] - p.pos[1])
            if p.facing != d:
                atoms.act(MOVE_OF[d])
                continue
            before, near = self.p, self.nearby()
            atoms.act("do")
            self._learn("do", "zombie", before, near)
        return False, "still fighting"

    def _reach(self, atoms: Atoms, tile: str) -> bool:
        """Walk next to the nearest known ``tile`` (exploring for it if none is known)."""
        for _ in range(3):
            p = self.p
            if any(self.nav.name(c) == tile for c in neighbours(p.pos)):
                return True
            cells = [c for c in self.cells_of(tile) if l1(c, p.pos) <= 30][:3]
            if not cells:
                self._explore(atoms, [tile])
                continue
            for c in cells:
                r = atoms.atom_go_to(c[0], c[1], dig=False, adjacent=True, max_steps=40)
                if r.ok or r.label == "interrupted":
                    break
                self.nav.cells.pop(c, None)
        return any(self.nav.name(c) == tile for c in neighbours(self.p.pos))

    def _explore(self, atoms: Atoms, want: list[str]) -> None:
        p = self.p
        x = min(p.area[0] - 1, max(0, p.pos[0] + self.rng.randint(-15, 15)))
        y = min(p.area[1] - 1, max(0, p.pos[1] + self.rng.randint(-15, 15)))
        atoms.atom_explore(x, y, stop_on=want, max_steps=30)

    def _go_near(self, tile: str, goal: str, depth: int) -> bool:
        """Stand with ``tile`` in the 3x3 around the player (walk to a known one, else place one
        if a verified task places it)."""
        if tile in self.nearby():
            return True
        cells = [c for c in self.cells_of(tile) if l1(c, self.p.pos) <= 20]
        if cells:
            c = cells[0]
            self._episode("go_to", {"x": c[0], "y": c[1], "near": tile}, goal,
                          lambda atoms: (atoms.atom_go_to(c[0], c[1], dig=False, adjacent=True).ok,
                                         f"walked to {tile}"))
            if tile in self.nearby():
                return True
        placer = next((c for c in self._placers() if c.func.get("product") == tile), None)
        if placer is not None and depth < 3 and self.execute(self._plan(placer), goal, depth + 1):
            return tile in self.nearby()
        return False

    # -- planning ------------------------------------------------------------------------------
    def _plan(self, csd: CSD, extra: Plan | None = None) -> Plan:
        action, target = (extra.action, extra.target) if extra is not None else action_of(csd.task, csd)
        plan = Plan(action, target, dict(csd.attr.get("consumes", {})), list(csd.attr.get("tools", [])),
                    [n for n in csd.struct.get("near", []) if n not in WALKABLE])
        if extra is not None:
            for k, v in extra.consumes.items():
                plan.consumes[k] = max(plan.consumes.get(k, 0), v)
            plan.tools = list(dict.fromkeys(plan.tools + extra.tools))
            plan.near = list(dict.fromkeys(plan.near + extra.near))
        return plan

    def source_of(self, item: str, avoid: set[str]) -> CSD | None:
        """The verified task that yields ``item`` with the fewest requirements."""
        found = [c for c in self.library if c.status == "verified" and c.proc.get("gives", {}).get(item, 0) > 0
                 and c.id not in avoid]
        return min(found, key=lambda c: (len(c.attr.get("consumes", {})) + len(c.attr.get("tools", [])), c.id),
                   default=None)

    def ensure(self, item: str, count: int, goal: str, depth: int, avoid: set[str]) -> bool:
        """Hold ``count`` of ``item``, replaying the verified tasks that yield it."""
        for _ in range(count + 2):
            if self.have(item) >= count:
                return True
            src = self.source_of(item, avoid)
            if src is None or depth > 4:
                return False
            if not self.execute(self._plan(src), goal, depth + 1, avoid | {src.id}):
                return False
        return self.have(item) >= count

    def execute(self, plan: Plan, goal: str, depth: int = 0, avoid: set[str] = frozenset()) -> bool:
        """Meet the plan's requirements as far as known, then try its action."""
        for _ in range(2):
            for t in plan.tools:
                self.ensure(t, 1, goal, depth, set(avoid))
            for k, v in plan.consumes.items():
                if k not in VITALS:
                    self.ensure(k, v, goal, depth, set(avoid))
            if all(self.have(k) >= v for k, v in plan.consumes.items() if k not in VITALS) and \
                    all(self.have(t) >= 1 for t in plan.tools):
                break
        for s in plan.near:
            self._go_near(s, goal, depth)
        return self._try(plan.action, plan.target, goal)

    # -- choosing --------------------------------------------------------------------------------
    def _induce(self) -> list[dict]:
        """ICAL after new verified tasks: representative -> top-K -> induced candidates."""
        records = []
        reps = [self.library.get(i) for i in dict.fromkeys(self.fresh)]
        self.fresh = []
        if not reps:
            rep = self.library.representative(exclude=self.generalised)
            reps = [rep] if rep is not None else []
        for rep in reps:
            if rep is None or rep.status != "verified":
                continue
            self.generalised.add(rep.id)
            matches = self.library.similar(rep, k=self.k, axes=self.axes, statuses=("verified", "failed"))
            cands = induce(rep, matches, self.library, VOCABULARY, axes=self.axes)
            added = []
            for c in cands:
                have = self.library.get(c.id)
                if c.task not in GOALS or (have is not None and (have.induced_from or have.status == "verified")):
                    continue
                if have is not None:
                    c = replace(c, inter={**c.inter, "failed_contexts": have.inter.get("failed_contexts", [])},
                                episodes=have.episodes)
                self.library.put(c)
                added.append(c.task)
            records.append({"representative": rep.task, "exemplars": _evidence(matches), "induced": added})
        return records

    def _choose(self) -> tuple[str, str, CSD | None]:
        """The goal of the next Echo episode, how it will be tried, and the candidate used.

        ICAL configurations take the best feasible induced candidate first (a failed one only
        once something new has been verified since it was last tried). Otherwise the
        goal is an open achievement not tried since the learner last verified something new,
        tried least often, preferring names that mention a material or form it has already
        met (a tile seen, a task done)."""
        open_goals = [g for g in GOALS if g not in self.p.achievements]
        verified = sum(c.status == "verified" for c in self.library)

        def stale(g: str) -> bool:
            return g in self.tried_at and self.tried_at[g] >= verified
        if self.axes is not None:
            cands = [c for c in self.library if c.induced_from and c.status in ("candidate", "failed")
                     and c.task in open_goals and c.failures < 2 * TRIES and not stale(c.task) and self._feasible(c)]
            if cands:
                best = max(cands, key=lambda c: (precheck(c, self.p.inventory, self.nearby())[0], -c.failures,
                                                 sum(e["score"] for e in c.induced_from), c.id))
                self.tried_at[best.task] = verified
                return best.task, "induced", best
        known = {part for c in self.library if c.status == "verified" for part in slots(c.task)[1:] if part}
        known |= set(self.nav.cells.values())

        def related(g: str) -> int:
            return sum(1 for part in slots(g)[1:] if part in known)
        goal = min(open_goals, key=lambda g: (stale(g), self.tried.get(g, 0), -related(g), self.rng.random()))
        self.tried_at[goal] = verified
        return goal, "explore", None

    def _attempt_unknown(self, goal: str) -> tuple[list[dict], bool]:
        """Try a goal with no descriptor of its own: reuse the most similar verified task's
        requirements as they are (first try), then a random context."""
        action, target = action_of(goal)
        probe = describe(Attempt(action=action, target=target, inventory_before={}, inventory_after={},
                                 nearby=()), False)
        probe = CSD(**{**probe.__dict__, "id": f"probe:{goal}", "task": goal})
        verb = slots(goal)[0]
        matches = [m for m in self.library.similar(probe, k=self.k) if slots(m.csd.task)[0] == verb]
        known = self.library.get(f"task:{goal}")
        if action == "do":
            if target not in {n for n in self.nav.cells.values()} or (known and known.failures >= 2):
                untried = self._untried()
                if untried and (target not in self.nav.cells.values() or self.rng.random() < 0.5):
                    target = self.rng.choice(untried)
            extra = Plan(action, target)
            if known is not None and known.failures:
                extra.tools = [t for t in self._makeable() if self.rng.random() < 0.5]
            return _evidence(matches), self.execute(extra, goal)
        if matches and (known is None or known.failures == 0):
            return _evidence(matches), self.execute(self._plan(matches[0].csd, Plan(action, None)), goal)
        plan = Plan(action, None)
        items = self._collectable()
        for item in self.rng.sample(items, k=min(len(items), self.rng.randint(1, 2))):
            plan.consumes[item] = self.rng.randint(1, 4)
        stations = self._placeable()
        if stations and self.rng.random() < 0.6:
            plan.near = [self.rng.choice(stations)]
        return _evidence(matches), self.execute(plan, goal)

    def _feasible(self, cand: CSD) -> bool:
        """The pre-check of a candidate: everything it lacks now is something the learner
        knows how to get (a verified task yields it, or a station is remembered or placeable)."""
        ok, _ = precheck(cand, self.p.inventory, self.nearby())
        if ok:
            return True
        items = list(cand.attr.get("consumes", {})) + list(cand.attr.get("tools", []))
        for item in items:
            if self.have(item) < max(1, cand.attr.get("consumes", {}).get(item, 1)) and \
                    self.source_of(item, set()) is None and not self._seen(item):
                return False
        for s in cand.struct.get("near", []):
            if s not in WALKABLE and not self.cells_of(s) and s not in self._placeable():
                return False
        return True

    def _untried(self) -> list[str]:
        """Tile types seen but never acted on."""
        return sorted({n for n in self.nav.cells.values()} - AVOID - self.acted_on)

    def _upkeep(self) -> None:
        """Before a goal: the reflexes (at a lower threshold for drink and food), and sleep
        (an instinct) when energy is low."""
        self._reflexes(hungry=4)
        if self.p.vitals["energy"] <= 2:
            self._episode("sleep", {}, "rest", lambda atoms: (atoms.atom_sleep(max_steps=100).ok, "slept"))

    def _reflexes(self, hungry: int = THIRSTY) -> None:
        """Hand-coded survival behaviours (not recipes), checked before every MFM episode that
        is not itself a reflex; their steps do not count against the Echo episode's allowance.

        - In the dark: shelter away from grass and wait for the morning (:meth:`_wait_out_night`).
        - A foe (zombie, skeleton, arrow) within reach: fight back a zombie next to the player,
          or run from the foes when health is at or below :data:`LOW_HEALTH`.
        - Drink or food at or below ``hungry``: replay the learned task that gives it (the
          learner knows where water and cows are only from what it has seen)."""
        start = self.p.step
        self.reflexing = True
        try:
            if self.p.daylight < NIGHT:
                self._wait_out_night()
            foes = self._foes(4)
            if foes and self.p.vitals["health"] <= LOW_HEALTH:
                self._episode("flee", {}, "survive", self._flee)
            elif any(self.nav.name(c) == "zombie" for c in neighbours(self.p.pos)):
                self._episode("defend", {}, "defend", self._defend)
            for vital in GAINS:
                if self.p.vitals[vital] <= hungry:
                    src = self.source_of(vital, set())
                    if src is not None:
                        self.execute(self._plan(src), f"restore {vital}", depth=3)
        finally:
            self.reflexing = False
            self.attempt_start += self.p.step - start

    def _foes(self, radius: int) -> list[tuple[int, int]]:
        """Cells in view within ``radius`` (L1) holding a zombie, skeleton or arrow."""
        p = self.p
        return [(p.pos[0] + dx, p.pos[1] + dy) for dx in range(-HALF_COLS, HALF_COLS + 1)
                for dy in range(-HALF_ROWS, HALF_ROWS + 1)
                if abs(dx) + abs(dy) <= radius and p.tile(dx, dy) in FOES]

    def _flee(self, atoms: Atoms) -> tuple[bool, str]:
        """A reflex: step to the free neighbour farthest from the foes in view, preferring
        non-grass, until none is within four cells."""
        for _ in range(12):
            foes = self._foes(4)
            if not foes:
                return True, "no foe near"
            p = self.p
            free = [c for c in neighbours(p.pos) if self.nav.name(c) in WALKABLE]
            if not free:
                return False, "cornered"
            best = max(free, key=lambda c: (min(l1(c, f) for f in foes), self.nav.name(c) != "grass", c))
            atoms.act(MOVE_OF[(best[0] - p.pos[0], best[1] - p.pos[1])])
        return False, "still chased"

    def _shelter_cost(self, c: tuple[int, int], shooters: list[tuple[int, int]]) -> tuple[int, int]:
        """How exposed a cell is at night (then how far): grass within 8 cells (zombies spawn
        on grass in the dark and chase from 8 cells; an unseen cell counts half), its open sides (zombies come at the player
        through them) and ``shooters`` (remembered skeletons and arrows: tunnels) within 8."""
        names = [self.nav.name((c[0] + dx, c[1] + dy)) for dx in range(-8, 9) for dy in range(-8, 9)]
        grass = sum(n == "grass" for n in names) + sum(n is None for n in names) // 2
        near_shooters = sum(l1(q, c) <= 8 for q in shooters)
        open_sides = sum(self.nav.name(q) in WALKABLE for q in neighbours(c))
        return grass // 15 + 2 * open_sides + 40 * near_shooters, l1(c, self.p.pos)

    def _wait_out_night(self) -> None:
        """An instinct: in the dark, go to the remembered grass or sand cell within 20 steps
        (path is where skeletons live) that is least exposed (:meth:`_shelter_cost`) and stand there until it is light again,
        hitting a zombie that comes next to the player and drinking from water next to it."""
        shooters = [q for q, n in self.nav.cells.items() if n in ("skeleton", "arrow")]
        spots = [c for c, n in self.nav.cells.items() if n in ("grass", "sand") and l1(c, self.p.pos) <= 20]
        here = self._shelter_cost(self.p.pos, shooters)
        if spots:
            best = min(spots, key=lambda c: (self._shelter_cost(c, shooters), c))
            if self._shelter_cost(best, shooters)[0] < here[0]:
                self._episode("shelter", {"x": best[0], "y": best[1]}, "night",
                              lambda atoms: (atoms.atom_go_to(best[0], best[1], dig=False, max_steps=40, danger=False).ok,
                                             "sheltering"))

        def wait(atoms: Atoms) -> tuple[bool, str]:
            for _ in range(150):
                p = self.p
                if p.daylight >= NIGHT + 0.1:
                    return True, "morning"
                water = next((c for c in neighbours(p.pos) if self.nav.name(c) == "water"), None)
                foe = next((c for c in neighbours(p.pos) if self.nav.name(c) == "zombie"), None)
                if foe is not None:
                    d = (foe[0] - p.pos[0], foe[1] - p.pos[1])
                    atoms.act(MOVE_OF[d] if p.facing != d else "do")
                elif water is not None and p.vitals["drink"] < 9:
                    d = (water[0] - p.pos[0], water[1] - p.pos[1])
                    atoms.act(MOVE_OF[d] if p.facing != d else "do")
                else:
                    atoms.act("noop")
            return False, "still dark"
        self._episode("wait", {"until": "light"}, "night", wait)

    def _curious(self) -> None:
        """After the goal's try: act once on a tile type never tried (else explore)."""
        untried = self._untried()
        if untried:
            self._try("do", self.rng.choice(untried), "curiosity")
        else:
            self._episode("explore", {}, "curiosity", lambda atoms: (self._explore(atoms, []) or True, "explored"))

    def _collectable(self) -> list[str]:
        return sorted({k for c in self.library if c.status == "verified" and c.inter.get("action") == "do"
                       for k in c.proc.get("gives", {}) if k not in VITALS and k != "diamond"})

    def _placeable(self) -> list[str]:
        return sorted({c.func.get("product") for c in self._placers()})

    def _makeable(self) -> list[str]:
        return sorted({k for c in self.library if c.status == "verified" and c.inter.get("verb") == "make"
                       for k in c.proc.get("gives", {})})

    def _attempt_candidate(self, cand: CSD) -> bool:
        """Pre-check an induced task, prepare what it lacks, try it; after failures, add the
        representative's requirements (1st) and everything the learner can get (2nd)."""
        extra = Plan(*action_of(cand.task, cand))
        form = slots(cand.task)[2]
        if extra.action == "do" and form in self.nav.cells.values():
            extra.target = form
        if cand.failures >= 1:
            rep = self.library.get(cand.induced_from[0]["id"])
            if rep is not None:
                extra = self._plan(rep, extra)
        if cand.failures >= 2:
            extra.consumes.update({i: max(1, 2 * extra.consumes.get(i, 0)) for i in self._collectable()})
            extra.tools = list(dict.fromkeys(extra.tools + self._makeable()))
            extra.near = list(dict.fromkeys(extra.near + self._placeable()))
        if self.axes is not None and "proc" in self.axes:
            self._follow(cand)
        self._gather_by_sight(cand)
        return self.execute(self._plan(cand, extra), cand.task)

    def _follow(self, cand: CSD) -> None:
        """Carry out the ordered plan an induced candidate holds on its proc axis (the
        exemplars' prerequisite chain with the material substituted), skipping steps whose
        product the learner already has: a verified step is replayed (a station is walked to
        or placed); an unverified ``collect_X`` whose X is a tile seen is tried on that tile."""
        for step in cand.proc.get("chain", []):
            if step == cand.task:
                continue
            known = self.library.get(f"task:{step}")
            if known is not None and known.status == "verified":
                product = known.func.get("product")
                if known.inter.get("verb") == "place" and product not in self.nearby():
                    self.followed.append(step)
                    self._go_near(product, cand.task, 1)
                elif known.inter.get("verb") != "place" and \
                        not all(self.have(k) >= 1 for k in known.proc.get("gives", {}) if k not in VITALS):
                    self.followed.append(step)
                    self.execute(self._plan(known), cand.task, depth=1)
                continue
            verb, _, form = slots(step)
            if verb == "collect" and self._seen(form) and not self.have(form):
                self.followed.append(step)
                self._try("do", form, cand.task)

    def _seen(self, item: str) -> bool:
        """Is ``item`` the name of a tile the learner has seen?"""
        return item in set(self.nav.cells.values()) - AVOID

    def _gather_by_sight(self, cand: CSD) -> None:
        """The pre-check's direction: for each item the candidate is predicted to consume that
        the learner lacks and has no verified way to get, but has seen as a tile, act on that
        tile first (a guess from the name: stone is got from stone)."""
        for item, n in cand.attr.get("consumes", {}).items():
            if item in VITALS or self.source_of(item, set()) is not None or not self._seen(item):
                continue
            for _ in range(max(1, n)):
                if self.have(item) >= n or not self._try("do", item, cand.task):
                    break

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Path:
        """Play ``episodes`` Echo episodes; write csd.jsonl and echo.jsonl; close the run."""
        self._pending = []
        self.fresh: list[str] = []
        self.generalised: set[str] = set()
        status, reason = "finished", f"{self.episodes} Echo episodes"
        try:
            self._start()
            unlocked_before: set[str] = set()
            for n in range(self.episodes):
                inductions = self._induce() if self.axes is not None else []
                goal, how, cand = self._choose()
                self.tried[goal] = self.tried.get(goal, 0) + 1
                self.attempt_episodes, self.attempt_start = [], self.p.step
                try:
                    self._upkeep()
                except AttemptOver:
                    pass
                self.attempt_episodes, self.attempt_start, self.followed = [], self.p.step, []
                first = self.p.step
                evidence: list[dict] = []
                pre: tuple[bool, list[str]] | None = None
                try:
                    if cand is not None:
                        pre = precheck(cand, self.p.inventory, self.nearby())
                    for _ in range(TRIES):
                        if cand is not None:
                            self._attempt_candidate(self.library.get(cand.id) or cand)
                        else:
                            evidence, _ = self._attempt_unknown(goal)
                        if goal in self.p.achievements:
                            break
                    if goal not in self.p.achievements:
                        self._curious()
                except AttemptOver:
                    pass
                success = goal in self.p.achievements
                if cand is not None:
                    now = self.library.get(cand.id)
                    if now is not None and now.status == "candidate":
                        self.library.put(now.with_outcome(success, tuple(self.attempt_episodes)))
                unlocked = set(self.p.achievements)
                self._write_attempt({
                    "episode": n, "goal": goal, "how": how, "candidate": cand.id if cand is not None else None,
                    "precheck": {"ok": pre[0], "missing": pre[1]} if pre else None, "success": success,
                    "mfm_episodes": list(self.attempt_episodes), "first_step": first, "last_step": self.p.step,
                    "unlocked": sorted(unlocked), "new": sorted(unlocked - unlocked_before),
                    "retrieved": evidence, "induction": inductions, "followed": list(self.followed),
                    "life": self.p.life})
                unlocked_before = unlocked
        except Halt as e:
            status, reason = "interrupted", f"{type(e).__name__}: {e}"
        except BaseException as e:
            reason = e.describe(self.writer.dir) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}"
            with suppress(WriteError):
                self.writer.close("crashed", reason)
            raise
        self.clock.step = self.p.step
        cfg = dict(self.writer.manifest.config)
        cfg["agent_summary"] = {"turns": self.turn, "deaths": self.deaths, "steps": self.p.step,
                                "descriptors": len(self.library)}
        self.writer.close(status, reason, config=cfg)
        return self.writer.dir

    def _write_attempt(self, record: dict) -> None:
        line = json.dumps({"config": self.config, "seed": self.seed, **record}, separators=(",", ":")) + "\n"
        append_bytes(self.writer.dir / ATTEMPTS_FILE, line.encode("utf-8"))


def _evidence(matches: list[Match]) -> list[dict]:
    return [{"id": m.csd.id, "score": round(m.score, 4), "axes": {a: round(v, 4) for a, v in m.per_axis.items()}}
            for m in matches]


def iter_configs(names: str) -> Iterator[str]:
    """``all`` or a comma-separated list of configuration names, checked."""
    chosen = list(CONFIGS) if names.strip() == "all" else [s.strip() for s in names.split(",") if s.strip()]
    for c in chosen:
        if c not in CONFIGS:
            raise ValueError(f"unknown Echo configuration {c!r}; expected one of {', '.join(CONFIGS)} or all")
    yield from chosen


def run_learner(config: str, seed: int, out: Path, episodes: int = 30, step_cap: int = 120,
                command: str | None = None) -> Path:
    """One learner run; returns its run directory."""
    return Learner(config, seed, out, episodes=episodes, step_cap=step_cap, command=command).run()


def _one(job: tuple[str, int, str, int, int, str]) -> tuple[str, str]:
    config, seed, out, episodes, step_cap, command = job
    d = Path(out) / f"{config}_s{seed}"
    if (d / "run.json").is_file():
        status = json.loads((d / "run.json").read_text(encoding="utf-8")).get("status")
        if status == "finished" and (d / ATTEMPTS_FILE).is_file():
            return str(d), "kept (already finished)"
        return str(d), f"exists with status {status}; remove it to run again"
    run_learner(config, seed, d, episodes=episodes, step_cap=step_cap, command=command)
    return str(d), "finished"


def run_many(configs: list[str], seeds: list[int], out: Path, episodes: int = 30, step_cap: int = 120,
             jobs: int = 2, command: str | None = None) -> list[tuple[str, str]]:
    """Every (configuration, seed) learner run under ``out/CONFIG_sSEED`` (finished ones are
    kept), ``jobs`` processes at a time; returns (run directory, what happened)."""
    from concurrent.futures import ProcessPoolExecutor

    work = [(c, s, str(out), episodes, step_cap, command or "") for c in configs for s in seeds]
    if jobs <= 1:
        return [_one(w) for w in counted(work, "learner runs", detail=lambda w: f"{w[0]}_s{w[1]}")]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(counted(pool.map(_one, work), "learner runs", len(work)))
