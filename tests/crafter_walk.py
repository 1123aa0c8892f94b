"""Test helper: write a real-Crafter run (a seeded random walk) through the memory core.

Gives the dashboard tests real pixel art, positions, deaths and milestones until the agent
in ``mfm/agent`` writes real runs. Turns carry plausible ``search``/``inspect`` calls.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from mfm.envs import CrafterHarness, load_task
from mfm.memory import RunWriter
from mfm.schema import SCHEMA_VERSION, GridRow, LifeEvent, MilestoneRow, RunManifest, StepRow, TurnRow

MOVES = {"move_left": (-1, 0), "move_right": (1, 0), "move_up": (0, -1), "move_down": (0, 1)}
KIND_OF = {"noop": "noop", "do": "collect", "sleep": "sleep"}


def _kind(actions: list[str]) -> str:
    counts: dict[str, int] = {}
    for a in actions:
        k = "explore" if a in MOVES else "place" if a.startswith("place") else "craft" if a.startswith("make") \
            else KIND_OF.get(a, a)
        counts[k] = counts.get(k, 0) + 1
    return max(counts, key=lambda k: counts[k])


def write_crafter_run(run_dir: Path, steps: int = 300, seed: int = 0, method: str = "random",
                      world_seed: int | None = None, status: str = "finished") -> Path:
    """Walk ``steps`` env steps in a real Crafter world and record them as an MFM run."""
    rng = np.random.default_rng(seed)
    task = load_task("diamond")
    h = CrafterHarness(seed if world_seed is None else world_seed)
    p = h.reset()
    w = RunWriter(run_dir, RunManifest(
        schema_version=SCHEMA_VERSION, run_id=Path(run_dir).name, env="crafter", task=task.name, method=method,
        seed=seed, step_budget=steps, milestone_order=task.milestones, status="running",
        started_at="2026-11-30T00:00:00+00:00", policy="random-walk"), clock=lambda: "2026-11-30T00:00:00+00:00")
    rec = w.begin_episode(kind="initial", life=0, turn=None, action_kind=None, first_step=0, action={})
    w.end_episode(rec, observation=p.frame, state={"step": 0, "pos": list(p.pos), "vitals": p.vitals},
                  outcome={}, summary="initial state", tags=["initial"], events=[], x=p.pos[0], y=p.pos[1],
                  outcome_label=None)
    names = ["move_left", "move_right", "move_up", "move_down", "do", "noop", "place_stone", "place_table",
             "make_wood_pickaxe"]
    weights = np.array([6, 6, 6, 6, 8, 1, 1, 1, 1])
    weights = weights / weights.sum()
    turn, step = 0, 0
    done_ids: list[str] = []
    while step < steps:
        n = int(min(steps - step, rng.integers(4, 18)))
        acts = [str(a) for a in rng.choice(names, size=n, p=weights)]
        life = h.life
        rec = w.begin_episode(kind="episode", life=life, turn=turn, action_kind=_kind(acts), first_step=step,
                              action={"atom": _kind(acts), "actions": acts})
        grid: list[GridRow] = []
        events: list[str] = []
        tags: list[str] = []
        start_inv = dict(p.inventory)
        start_pos = p.pos
        died = None
        for a in acts:
            before = p
            r = h.step(a)
            p = r.perception
            step = r.step
            rec.add_step(p.frame, StepRow(step=step, life=life, episode=rec.id, action=a, x=p.pos[0], y=p.pos[1],
                                          facing=p.facing, health=p.vitals["health"], food=p.vitals["food"],
                                          drink=p.vitals["drink"], energy=p.vitals["energy"],
                                          inventory=dict(p.inventory), reward=r.reward,
                                          unlocked=r.achievements_unlocked))
            if p.pos != before.pos:
                grid.append(GridRow(cell=p.pos, kind="walked", step=step, life=life))
            elif a in MOVES:
                tx, ty = before.pos[0] + MOVES[a][0], before.pos[1] + MOVES[a][1]
                kind = "water" if before.tile(*MOVES[a]) == "water" else "blocked"
                grid.append(GridRow(cell=(tx, ty), kind=kind, step=step, life=life, item=before.tile(*MOVES[a])))
            if a.startswith("place") and sum(p.inventory.values()) < sum(before.inventory.values()):
                fx, fy = before.pos[0] + before.facing[0], before.pos[1] + before.facing[1]
                grid.append(GridRow(cell=(fx, fy), kind="placed", step=step, life=life, item=a[6:],
                                    pose={"x": before.pos[0], "y": before.pos[1], "facing": list(before.facing)}))
            for m in r.achievements_unlocked:
                events.append(f"unlocked {m}")
                if m in task.milestones:
                    tags.append("milestone")
                    w.record_milestone(MilestoneRow(name=m, step=step, life=life, episode=rec.id, turn=turn))
            if r.died:
                died = r
                break
        if p.inventory != start_inv:
            tags.append("inventory_changed")
        if died:
            tags.append("death")
            events.append(f"died: {died.death_cause}")
            if died.death_cause == "lava":
                grid.append(GridRow(cell=p.pos, kind="hazard", step=step, life=life, damage=9, cause="lava"))
            w.record_life_event(LifeEvent(event="death", life=life, step=step, x=p.pos[0], y=p.pos[1],
                                          cause=died.death_cause, episode=rec.id))
        moved = abs(p.pos[0] - start_pos[0]) + abs(p.pos[1] - start_pos[1])
        label = "failed" if died else ("done" if moved or p.inventory != start_inv else "failed")
        row = w.end_episode(rec, grid=grid, observation=p.frame,
                            state={"step": step, "pos": list(p.pos), "vitals": p.vitals, "inventory": p.inventory},
                            outcome={"moved": moved}, summary=f"{rec.action_kind} x{len(acts)} -> moved {moved}"
                            + (", died" if died else ""), tags=tags, events=events, x=p.pos[0], y=p.pos[1],
                            outcome_label=label)
        calls: list[dict] = [{"tool": "atom", "args": {"atom": rec.action_kind}, "result": {"ok": True}}]
        if turn % 3 == 1 and done_ids:
            calls.insert(0, {"tool": "search", "args": {"text": "tree", "near": list(start_pos)},
                             "result": {"episodes": done_ids[-3:]}})
        if turn % 4 == 2 and done_ids:
            target = w.index.get(done_ids[int(rng.integers(0, len(done_ids)))])
            args = {"episode": target.id}
            if target.frames:
                args["step"] = target.first_step + 1 + int(rng.integers(0, target.frames))
            calls.insert(0, {"tool": "inspect", "args": args, "result": {"ok": True}})
        w.record_turn(TurnRow(turn=turn, life=life, first_step=row.first_step, last_step=row.last_step,
                              policy="random-walk", calls=tuple(calls),
                              targets=({"kind": "go_to", "x": p.pos[0], "y": p.pos[1], "in_plan": turn % 2 == 0},),
                              plan_before=(), plan_after=(), episodes=(row.id,)))
        if turn % 5 == 0:
            w.memory.write("GUIDE.md", f"# Knowledge\n- visited ({p.pos[0]}, {p.pos[1]}) at step {step}\n",
                           author="test", reason=f"turn {turn}", sources=[row.id], step=step, life=life, turn=turn)
        done_ids.append(row.id)
        turn += 1
        if died:
            p = h.respawn()
            w.record_life_event(LifeEvent(event="respawn", life=h.life, step=step, x=p.pos[0], y=p.pos[1]))
    w.close(status, "budget")
    return Path(run_dir)
