"""The agent loop: drive the harness with the policy and record everything with RunWriter.

One turn = one decision = one episode: the policy reads memory and decides, the atom (or
stored procedure) runs env steps through a :class:`Recorder` (the agent's body), and the
episode is committed with its frames, trace, grid rows, milestones and life events by the
episode recorder (:mod:`mfm.memory.episode_recorder`), the one path every player of the game
records through (the Echo learner shares the body).
"""
from __future__ import annotations

import shlex
import time
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from mfm import __version__
from mfm.agent import events
from mfm.agent.atoms import ATOMS, COLLECT_GIVES, AtomResult, Atoms, BudgetExhausted, Died, RunStopped
from mfm.agent.config import RunConfig
from mfm.agent.mapping import DIRS, NavMap
from mfm.agent.policy import MFMPolicy
from mfm.agent.protocol import Decision, Policy, PolicyGaveUp, Turn
from mfm.agent.tools import FrameReader, MemoryTools, Seen, note_seen
from mfm.envs import CrafterHarness, Perception, load_task, make_harness
from mfm.memory import ProceduralMemory, RunWriter, SpatialGrid
from mfm.memory.appendlog import Clock, WriteError
from mfm.memory.episode_recorder import Call, Ending, EpisodeRecorder
from mfm.memory.episode_store import EpisodeRecording
from mfm.memory.inheritance import (InheritedMemory, InheritError, InheritFailed, Source, check_source, copy_run,
                                    read_manifest, seed_memory)
from mfm.memory.retrieval import episode_frame
from mfm.progress import Progress
from mfm.schema import SCHEMA_VERSION, GridRow, IndexRow, MilestoneRow, RunManifest, StepRow, TurnRow

FIXED_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
MOVES = {f"move_{k}": v for k, v in DIRS.items()}
WALLS = frozenset({"water", "tree", "table", "furnace", "outside"})
WriterFactory = Callable[[Path, RunManifest, Clock], RunWriter]
"""Makes a run's writer from its directory, manifest and clock."""
MAX_TURNS_WITHOUT_STEP = 100
"""Turns in a row that took no env step after which the run stops as ``interrupted`` (a
policy that keeps choosing what takes no step would otherwise turn forever at one step)."""


class RunStalled(RuntimeError):
    """Too many turns in a row took no env step: the run stops with this message as its end reason."""


def stalled_reason(turns: int) -> str:
    """The ``end_reason`` of a run stopped by :data:`MAX_TURNS_WITHOUT_STEP`."""
    return f"stalled: {turns} turns in a row took no env step"


def record_run(run_dir: Path, manifest: RunManifest, clock: Clock) -> RunWriter:
    """The writer of ``mfm run``: the run recorded to disk, each episode committed in the background."""
    return RunWriter(run_dir, manifest, clock=clock, background_commit=True)


class StepClock:
    """A deterministic clock: a fixed epoch plus one second per env step."""

    def __init__(self) -> None:
        self.step = 0

    def __call__(self) -> str:
        return (FIXED_EPOCH + timedelta(seconds=self.step)).isoformat(timespec="seconds")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Recorder:
    """The player's body: steps the harness, records each step into the open episode, and
    opens and commits episodes through the run's :class:`EpisodeRecorder` (:meth:`open`,
    :meth:`commit`, :meth:`record_death`, :meth:`respawn`). The agent's runner and the Echo
    learner both play through it."""

    def __init__(self, harness: CrafterHarness, writer: RunWriter, budget: int, milestones: tuple[str, ...],
                 stop: Callable[[], bool] | None, clock: StepClock | None) -> None:
        self._harness = harness
        self.writer = writer
        self.episodes = EpisodeRecorder(writer, events.seen)
        self.budget = budget
        self.milestones = milestones
        self.stop = stop
        self.clock = clock
        self.perception: Perception = harness.perception
        self.rec: Any = None
        self.turn: int | None = None
        self.grid: list[GridRow] = []
        self.events: list[str] = []
        self.tags: set[str] = set()
        self.walked: set[tuple[int, int]] = {(r.cell[0], r.cell[1]) for r in writer.grid.rows if r.kind == "walked"}
        self.noted: set[tuple[str, tuple[int, int]]] = set()
        self.death: tuple[str, tuple[int, int]] | None = None
        self.damage = 0
        self.seen: Seen = {}

    def begin(self, rec: Any, turn: int | None) -> None:
        """Start recording into a new episode."""
        self.rec, self.turn = rec, turn
        self.grid, self.events, self.tags = [], [], set()
        self.death = None
        self.damage = 0
        self.seen = {}

    def record_initial(self) -> IndexRow:
        """Record the state the player is in as an ``initial`` episode (the run's reset)."""
        p = self.perception
        seen: Seen = {}
        note_seen(p, seen)
        return self.episodes.initial(life=p.life, step=p.step, observation=p.frame, state=episode_state(p),
                                     position=p.pos, seen=seen, state_line=state_line(p))

    def open(self, call: Call, turn: int | None) -> EpisodeRecording:
        """Open an episode running ``call`` from where the player is, and record into it."""
        p = self.perception
        rec = self.episodes.begin(call, life=p.life, turn=turn, first_step=p.step)
        self.begin(rec, turn)
        return rec

    def commit(self, call: Call, ending: Ending, more_events: list[str] | None = None) -> IndexRow:
        """Commit the open episode (opened by :meth:`open` with ``call``) with what the steps
        recorded and how it ended; ``more_events``: event lines of its atoms' results."""
        p = self.perception
        lines = list(dict.fromkeys(self.events + list(more_events or ())))
        highlights = [e for e in self.events if (ev := events.parse(e)) is not None and ev.kind in events.SUMMARY_KINDS]
        return self.episodes.end(self.rec, call, ending, observation=p.frame, state=episode_state(p), position=p.pos,
                                 grid=self.grid, events=lines, tags=self.tags, seen=self.seen, damage=self.damage,
                                 state_line=state_line(p), highlights=highlights)

    def record_death(self) -> tuple[str, tuple[int, int]]:
        """Queue the death that ended the open episode (committed with it); its (cause, cell)."""
        cause, cell = self.death or ("unknown", self.perception.pos)
        self.episodes.death(life=self.perception.life, step=self.rec.last_step, cell=cell, cause=cause,
                            episode=self.rec.id)
        return cause, cell

    def respawn(self) -> Perception:
        """Respawn in the same world after a death and record it."""
        p = self._harness.respawn()
        self.perception = p
        self.episodes.respawn(life=p.life, step=p.step, position=p.pos)
        return p

    def act(self, action: str) -> Perception:
        """One env step, recorded; raises Died / BudgetExhausted / RunStopped."""
        if self.stop is not None and self.stop():
            raise RunStopped("stop requested")
        if self.perception.step >= self.budget:
            raise BudgetExhausted(f"budget of {self.budget} steps used")
        before = self.perception
        res = self._harness.step(action)
        p = res.perception
        self.perception = p
        if self.clock is not None:
            self.clock.step = p.step
        self.rec.add_step(p.frame, StepRow(
            step=p.step, life=p.life, episode=self.rec.id, action=action, x=p.pos[0], y=p.pos[1],
            facing=p.facing, health=p.vitals["health"], food=p.vitals["food"], drink=p.vitals["drink"],
            energy=p.vitals["energy"], inventory={k: v for k, v in p.inventory.items() if v}, reward=res.reward,
            unlocked=res.achievements_unlocked))
        self._grid(before, p, action, res.death_cause if res.died else None)
        note_seen(p, self.seen)
        if p.inventory != before.inventory:
            self.tags.add("inventory_changed")
        for name in res.achievements_unlocked:
            self.events.append(events.unlocked(name))
            if name in self.milestones:
                self.tags.add("milestone")
                self.writer.record_milestone(MilestoneRow(name=name, step=p.step, life=p.life, episode=self.rec.id,
                                                          turn=self.turn))
        if res.died:
            self.tags.add("died")
            self.death = (res.death_cause or "unknown", p.pos)
            self.events.append(events.died(res.death_cause, p.pos))
            raise Died(res.death_cause or "unknown")
        return p

    def _row(self, cell: tuple[int, int], kind: str, step: int, life: int, **kw: Any) -> None:
        self.grid.append(GridRow(cell=cell, kind=kind, step=step, life=life, **kw))

    def _grid(self, b: Perception, p: Perception, action: str, death_cause: str | None) -> None:
        step, life = p.step, p.life
        front = (b.pos[0] + b.facing[0], b.pos[1] + b.facing[1])
        front_name = b.tile(*b.facing)
        if p.pos != b.pos and p.pos not in self.walked and p.life == b.life:
            self.walked.add(p.pos)
            self._row(p.pos, "walked", step, life)
        if action in MOVES and p.pos == b.pos:
            d = MOVES[action]
            name = b.tile(*d)
            cell = (b.pos[0] + d[0], b.pos[1] + d[1])
            if name in WALLS and ("blocked", cell) not in self.noted:
                self.noted.add(("blocked", cell))
                self._row(cell, "blocked", step, life, item=name)
        if action == "do" and front_name in COLLECT_GIVES and front_name != "grass":
            item = COLLECT_GIVES[front_name]
            if p.inventory.get(item, 0) > b.inventory.get(item, 0) or p.tile(front[0] - p.pos[0], front[1] - p.pos[1]) != front_name:
                self._row(front, "opened", step, life, item=item)
                self.events.append(events.collected(item, front))
        if action == "do" and front_name == "water" and p.vitals["drink"] > b.vitals["drink"]:
            if ("water", front) not in self.noted:
                self.noted.add(("water", front))
                self._row(front, "water", step, life)
        if action.startswith("place_") and p.pos == b.pos:
            item = action[len("place_"):]
            now = p.tile(front[0] - p.pos[0], front[1] - p.pos[1])
            if now == item or (item == "plant" and now == "plant"):
                self._row(front, "placed", step, life, item=item,
                          pose={"x": b.pos[0], "y": b.pos[1], "facing": list(b.facing)})
                self.events.append(events.placed(item, front))
        lost = b.vitals["health"] - p.vitals["health"]
        if death_cause is not None:
            self._row(p.pos, "hazard", step, life, damage=float(max(lost, 1)), cause=death_cause)
        elif lost > 0 and p.life == b.life:
            self.damage += lost
            self.tags.add("damage")
            self._row(p.pos, "hazard", step, life, damage=float(lost), cause=_damage_cause(b, p))
        if p.life == b.life:
            for dx, dy in DIRS.values():
                if p.tile(dx, dy) == "lava":
                    cell = (p.pos[0] + dx, p.pos[1] + dy)
                    if ("lava", cell) not in self.noted:
                        self.noted.add(("lava", cell))
                        self._row(cell, "hazard", step, life, cause="lava")
                        self.events.append(events.lava(cell))


def _damage_cause(b: Perception, p: Perception) -> str:
    """A guess of what hurt the player, from what it could see."""
    near = [n for x, y, n in p.local_cells() + b.local_cells() if abs(x - p.pos[0]) + abs(y - p.pos[1]) <= 1]
    if "zombie" in near:
        return "zombie"
    if "arrow" in near or any(n == "skeleton" for _, _, n in p.local_cells()):
        return "arrow"
    for vital, cause in (("food", "starvation"), ("drink", "thirst"), ("energy", "exhaustion")):
        if p.vitals[vital] == 0:
            return cause
    return "unknown"


class Runner:
    """One run: harness, memory, policy, and the turn loop.

    ``writer`` makes the run's writer, ``harness`` is the game (by default a new harness of
    the config's seed, task and frame size: :func:`~mfm.envs.make_harness`) and ``frames`` reads the
    stored frames the policy inspects; the defaults are those of ``mfm run``.
    ``max_idle_turns`` turns in a row without an env step stop the run (:class:`RunStalled`)."""

    def __init__(self, config: RunConfig, stop: Callable[[], bool] | None = None, command: str | None = None,
                 progress: bool = False, *, writer: WriterFactory = record_run, harness: CrafterHarness | None = None,
                 frames: FrameReader = episode_frame, max_idle_turns: int = MAX_TURNS_WITHOUT_STEP) -> None:
        if max_idle_turns < 1:
            raise ValueError("max_idle_turns must be at least 1")
        self.config = config
        self.max_idle_turns = max_idle_turns
        self.idle_turns = 0
        self.task = load_task(config.task)
        self.stop = stop
        self.progress = progress
        self.clock = StepClock() if config.fixed_clock else None
        client = None
        if config.llm is not None:
            from mfm.agent.llm import make_client

            client = make_client(config.llm)
        started = self.clock() if self.clock else now_iso()
        recorded = config.to_manifest()
        source = None
        if config.inherit is not None:
            check_same_world(read_manifest(Path(config.inherit)), config)
            source = check_source(Path(config.inherit))
            earlier = source.manifest
            recorded["inherited"] = {"run": earlier.run_id, "task": earlier.task, "method": earlier.method,
                                     "steps": earlier.last_step, "status": earlier.status,
                                     "milestones": dict(earlier.milestones)}
        manifest = RunManifest(
            schema_version=SCHEMA_VERSION, run_id=config.run_name, env="crafter", task=config.task,
            method=config.method, seed=config.seed, step_budget=config.budget,
            milestone_order=self.task.milestones, status="running", started_at=started,
            ablations=tuple(config.ablations), policy=policy_name(config), package_version=__version__,
            command=command, config=recorded)
        self.writer = writer(Path(config.out), manifest, self.clock or now_iso)
        self.harness = harness if harness is not None else make_harness(
            config.seed, self.task, size=config.frame_size, perception=config.perception, area=config.world)
        self.past: InheritedMemory | None = None
        if source is not None:
            self._inherit(source)
        self.tools = MemoryTools(self.writer, frames, notes_tokens=config.notes_tokens, past=self.past)
        self.procedures = ProceduralMemory(self.writer.memory, ATOMS)
        self.policy: Policy
        if config.llm is not None:
            from mfm.agent.llm import LLMPolicy

            self.policy = LLMPolicy(self.task, self.procedures, config.llm, client, mode=config.mode,
                                    seed=config.seed, consolidate_every=config.consolidate_every)
        else:
            self.policy = MFMPolicy(self.task, self.procedures, config.inspect_episodes, config.inspect_stride,
                                    mode=config.mode, seed=config.seed)
        self.body: Recorder | None = None
        self.turn = 0
        self.deaths = 0
        self.started = time.monotonic()
        self.episodes_since_consolidation = 0
        self.status: str | None = None
        self.end_reason: str | None = None
        self._last_progress = 0.0
        self._bar: Progress | None = None

    def _inherit(self, source: Source) -> None:
        """Copy the checked run ``source`` into this run and start the memory from it. Any
        failure closes this run as crashed, with the failure as ``end_reason``, and raises
        :class:`InheritFailed` naming both runs."""
        try:
            copy_run(source, self.writer.dir)
            self.past = InheritedMemory(self.writer.dir)
            seed_memory(self.writer.memory, self.past.dir, source.manifest.run_id)
        except Exception as e:
            why = str(e) if isinstance(e, InheritError) else f"{type(e).__name__}: {e}"
            reason = f"inheriting {source.path} failed: {why}"
            with suppress(WriteError):
                self.writer.close("crashed", reason)
            closed = ("closed as crashed" if self.writer.status_on_disk == "crashed" else
                      f"left {self.writer.status_on_disk} (run.json could not be updated)")
            raise InheritFailed(f"{reason}; the new run {self.writer.dir} was {closed}") from None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Reset the world and record the initial state as episode 0."""
        self.body = start_run(self.harness, self.writer, self.config.budget, self.task.milestones, self.stop,
                              self.clock)
        p = self.body.perception
        self.tools.step = p.step
        self.policy.consolidation(p, self.tools, "start", None, None)

    @property
    def done(self) -> bool:
        p = self.harness.perception
        if p.step >= self.config.budget:
            self.end_reason = self.end_reason or "budget"
            return True
        if self.config.stop_when_done and all(m in p.achievements for m in self.task.milestones):
            self.end_reason = "task complete"
            return True
        return False

    def run(self) -> Path:
        """Run until the budget, task completion, a stop request or an error.

        An error closes the run as crashed and is raised again; a write that fails (disk full,
        :class:`WriteError`) is the ``end_reason``, and a second one while closing is not raised
        over it (``writer.status_on_disk`` tells whether run.json says crashed)."""
        status, reason = "finished", None
        try:
            self.start()
            while not self.done:
                self.run_turn()
                if self.idle_turns >= self.max_idle_turns:
                    raise RunStalled(stalled_reason(self.idle_turns))
            reason = self.end_reason
        except (KeyboardInterrupt, RunStopped):
            status, reason = "interrupted", "stopped by the user"
        except (PolicyGaveUp, RunStalled) as e:
            status, reason = "interrupted", str(e)
        except BaseException as e:
            reason = e.describe(self.writer.dir) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}"
            with suppress(WriteError):
                self.finish("crashed", reason)
            raise
        self.finish(status, reason)
        return self.writer.dir

    def finish(self, status: str, reason: str | None) -> None:
        """Close the run with a status; record the agent's summary in run.json. A write that
        fails closes it as crashed instead and is raised (:meth:`RunWriter.close`)."""
        if self.clock is not None and self.body is not None:
            self.clock.step = self.body.perception.step
        cfg = dict(self.writer.manifest.config)
        cfg["agent_summary"] = self.summary()
        try:
            self.writer.close(status, reason, config=cfg)
        finally:
            self.status, self.end_reason = self.writer.manifest.status, self.writer.manifest.end_reason
            if self.progress:
                self._progress(force=True)
                if self._bar is not None:
                    self._bar.close()

    def summary(self) -> dict[str, Any]:
        """Deaths, turns, steps per turn and how resources were found."""
        p = self.harness.perception if self.body is not None else None
        steps = p.step if p else 0
        return {"turns": self.turn, "deaths": self.deaths, "steps": steps,
                "steps_per_turn": round(steps / self.turn, 2) if self.turn else 0.0,
                "inspected_frames": self.tools.inspected_frames, **self.policy.summary()}

    # -- one turn ------------------------------------------------------------------------------
    def run_turn(self, decision: Decision | None = None) -> IndexRow:
        """Decide, act (one episode), record, learn, consolidate when due.

        ``decision`` replaces the policy's own choice for this turn (an outside controller)."""
        assert self.body is not None
        p = self.body.perception
        turn = self.turn
        self.tools.begin_turn(turn, p.step, p.life)
        plan_before = [{"x": x, "y": y, "label": lab} for x, y, lab in self.tools.plan_targets()]
        last_id = self.writer.index.rows[-1].id if self.writer.index.rows else None
        report = self.policy.play_turn(Turn(p, self.tools, last_id, decision))
        if report.gave_up is not None:
            self.writer.record_turn(TurnRow(
                turn=turn, life=p.life, first_step=p.step, last_step=p.step, policy=self.policy.name,
                calls=tuple(self.tools.calls), targets=(), plan_before=tuple(plan_before),
                plan_after=tuple(plan_before), episodes=(), usage=report.usage,
                latency_s=_rounded(report.latency_s), note=report.state + f"\nno decision: {report.gave_up}"))
            self.turn += 1
            raise report.gave_up
        d = report.decision
        assert d is not None
        planned = {(t["x"], t["y"]) for t in plan_before}
        targets = [{"kind": k, "x": x, "y": y, "in_plan": (x, y) in planned} for k, x, y in d.targets]
        row, result, died = self._execute(d, turn)
        self.idle_turns = self.idle_turns + 1 if row.last_step == row.first_step else 0
        p = self.body.perception
        self.tools.step = p.step
        if died:
            self._handle_death(row)
            p = self.body.perception
        self.policy.after(d, result, row, died, p, self.tools)
        self.episodes_since_consolidation += 1
        if died or self.episodes_since_consolidation >= self.config.consolidate_every:
            death = None
            if died and self._last_death is not None:
                death = self._last_death
            self.policy.consolidation(p, self.tools, "death" if died else f"every {self.config.consolidate_every} episodes",
                                      death, d)
            self.episodes_since_consolidation = 0
        self.policy.update_plan(p, d, self.tools)
        plan_after = [{"x": x, "y": y, "label": lab} for x, y, lab in self.tools.plan_targets()]
        self.writer.record_turn(TurnRow(
            turn=turn, life=row.life, first_step=row.first_step, last_step=row.last_step, policy=self.policy.name,
            calls=tuple(self.tools.calls), targets=tuple(targets), plan_before=tuple(plan_before),
            plan_after=tuple(plan_after), episodes=(row.id,), usage=report.usage,
            latency_s=_rounded(report.latency_s), note=report.state + f"\ndecision: {d.goal}"))
        self.turn += 1
        if self.progress:
            self._progress()
        return row

    _last_death: tuple[str, tuple[int, int], str] | None = None

    def _execute(self, d: Decision, turn: int) -> tuple[IndexRow, AtomResult, bool]:
        assert self.body is not None
        p = self.body.perception
        if d.kind == "procedure":
            proc = self.procedures.load(d.name)
            assert proc is not None
            steps = proc.bind(d.args)
            call = Call(d.name, d.args, d.goal, version=proc.version, atoms=steps)
        else:
            steps = [{"atom": d.name, "args": d.args}]
            call = Call(d.name, d.args, d.goal)
        rec = self.body.open(call, turn)
        atoms = Atoms(self.body, self.nav_map(p), self.config.max_atom_steps)
        results: list[AtomResult] = []
        died = False
        try:
            placed_table = None
            for s in steps:
                args = dict(s["args"])
                if s["atom"] == "craft" and "table_x" not in args and placed_table is not None:
                    args.update(table_x=placed_table[0], table_y=placed_table[1])
                r = atoms.run(s["atom"], args)
                results.append(r)
                placed_table = next((c for n, c in r.found if n == "table"), placed_table)
                if not r.ok:
                    break
        except Died as e:
            died = True
            results.append(AtomResult("interrupted", f"died ({e})"))
            self._record_death(rec.id)
        except (BudgetExhausted, RunStopped, KeyboardInterrupt) as e:
            results.append(AtomResult("interrupted", "stopped" if not isinstance(e, BudgetExhausted) else "budget"))
            row = self._commit(call, d, results)
            if isinstance(e, BudgetExhausted):
                self.end_reason = "budget"
                return row, results[-1], False
            raise
        row = self._commit(call, d, results)
        result = results[-1] if results else AtomResult("failed", "nothing to do")
        if d.kind == "procedure" and all(r.ok for r in results) and len(results) == len(steps):
            result = AtomResult("done", "procedure completed", found=[f for r in results for f in r.found])
        elif len(results) > 1:
            result = AtomResult(result.label, result.reason, found=[f for r in results for f in r.found])
        return row, result, died

    def nav_map(self, p: Perception) -> NavMap:
        """What the atoms of a turn route over: the spatial grid where the mode has the map
        ([MAP]), else an empty one, with the places the policy knows."""
        grid = self.writer.grid if self.config.mode.grid_routing else SpatialGrid()
        return NavMap.from_memory(grid, self.policy.resources(self.tools, p), area=p.area)

    def _commit(self, call: Call, d: Decision, results: list[AtomResult]) -> IndexRow:
        """Commit the turn's episode: it ends as its last atom did (a procedure that stopped
        before its last step failed)."""
        assert self.body is not None
        last = results[-1] if results else AtomResult("failed", "nothing to do")
        label = last.label
        if d.kind == "procedure" and label == "done" and len(results) < len(self.procedures.load(d.name).steps):
            label = "failed"
        ending = Ending(label, last.reason, tuple((r.label, r.reason) for r in results))
        return self.body.commit(call, ending, [e for r in results for e in r.events])

    def _record_death(self, episode: str) -> None:
        """Queue the death event so that it is committed with the episode it ended."""
        assert self.body is not None
        cause, cell = self.body.record_death()
        self.deaths += 1
        self._last_death = (cause, cell, episode)

    def _handle_death(self, row: IndexRow) -> None:
        """Respawn in the same world; the respawn event goes with the next episode."""
        assert self.body is not None
        self.body.respawn()

    def _progress(self, force: bool = False) -> None:
        """The progress line (:class:`mfm.progress.Progress`): steps of the budget, then the
        life, the milestones and the turn, in words."""
        now = time.monotonic()
        if not force and now - self._last_progress < 0.5:
            return
        self._last_progress = now
        if self._bar is None:
            self._bar = Progress("run", self.config.budget, "steps")
        p = self.harness.perception
        reached = sum(m in p.achievements for m in self.task.milestones)
        self._bar.update(p.step - self._bar.count, f"life {p.life + 1}, {reached}/{len(self.task.milestones)} "
                                                   f"milestones, turn {self.turn}")


def check_same_world(earlier: RunManifest, config: RunConfig) -> None:
    """Raise InheritError unless the earlier run played the world ``config`` plays: the
    same game, seed, world size and arrangement (a reach world's target and start)."""
    def arrangement(task: str) -> tuple[str, tuple[int, int]] | None:
        reach = load_task(task).reach
        return None if reach is None else (reach.material, reach.distance)

    name = earlier.run_id
    if earlier.env != "crafter":
        raise InheritError(f"run {name!r} was played in {earlier.env!r}, not crafter")
    if earlier.seed != config.seed:
        raise InheritError(f"run {name!r} played seed {earlier.seed}, this run seed {config.seed}: another world")
    if earlier.config.get("area") != config.area:
        raise InheritError(f"run {name!r} played a world of side {earlier.config.get('area') or 'default'}, "
                           f"this run {config.area or 'default'}")
    try:
        theirs = arrangement(earlier.task)
    except KeyError:
        raise InheritError(f"run {name!r} played task {earlier.task!r}, which this version does not know") from None
    if theirs != arrangement(config.task):
        raise InheritError(f"run {name!r} played task {earlier.task!r}, whose world is arranged differently "
                           f"from {config.task!r}'s")


def policy_name(config: RunConfig) -> str:
    """The policy recorded in the manifest and in each turn."""
    return MFMPolicy.name if config.llm is None else f"llm:{config.llm.model}"


def _rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def state_line(p: Perception) -> str:
    """The log's ``[STATE]`` line: where the player stands and how it is, when the episode ends."""
    return events.state(p.pos, p.life, p.vitals)


def episode_state(p: Perception) -> dict[str, Any]:
    """An episode's ``state/state.json``: the structured state when it ends."""
    return {"step": p.step, "life": p.life, "pos": list(p.pos), "facing": list(p.facing), "vitals": p.vitals,
            "inventory": p.inventory, "achievements": sorted(p.achievements), "daylight": round(p.daylight, 3),
            "sleeping": p.sleeping}


def start_run(harness: CrafterHarness, writer: RunWriter, budget: int, milestones: tuple[str, ...],
              stop: Callable[[], bool] | None = None, clock: StepClock | None = None) -> Recorder:
    """Reset the world and record its initial state as episode 0; return the body that
    records the rest of the run (the start of every player: the agent and the Echo learner)."""
    harness.reset()
    body = Recorder(harness, writer, budget, milestones, stop, clock)
    body.record_initial()
    return body


def run(config: RunConfig, stop: Callable[[], bool] | None = None, command: str | None = None,
        progress: bool = False) -> Runner:
    """Run the agent with ``config``; return the finished runner (its ``writer.dir`` is the run)."""
    runner = Runner(config, stop=stop, command=command, progress=progress)
    runner.run()
    return runner


def command_line(argv: list[str]) -> str:
    """The exact command as recorded in the manifest."""
    return shlex.join(argv)
