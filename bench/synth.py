"""Format-valid synthetic runs at paper scale, written through the memory core.

Frames are real Crafter frames (a seeded random walk in the real game, rendered once per
step), so their size and compression are what a real run has; episodes, turns, grid rows,
milestones, deaths and memory writes follow the counts of our agent's runs. Written to a
folder you name (a temp folder by default), never committed.

    python -m bench.synth OUT --steps 36000 [--seed 0]
    python -m bench.synth OUT --sweep 48 --steps 36000     # 48 runs (1.7M steps)
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from mfm.envs import CrafterHarness, load_task
from mfm.memory import RunWriter
from mfm.schema import SCHEMA_VERSION, GridRow, LifeEvent, MilestoneRow, RunManifest, StepRow, TurnRow

ATOMS = ("go_to", "collect", "explore", "place", "craft", "drink", "eat", "sleep", "look_at")
MOVES = ("move_left", "move_right", "move_up", "move_down")


def make_run(out: Path, steps: int = 36_000, seed: int = 0, method: str = "mfm", task: str = "all",
             frames: np.ndarray | None = None) -> Path:
    """Write one synthetic run of ``steps`` env steps into ``out``.

    ``frames``: a pool of frames to cycle through (makes sweeps fast); by default the run
    plays the real game for its own frames."""
    rng = np.random.default_rng(seed)
    t = load_task(task)
    w = RunWriter(out, RunManifest(
        schema_version=SCHEMA_VERSION, run_id=out.name, env="crafter", task=task, method=method, seed=seed,
        step_budget=steps, milestone_order=t.milestones, status="running", started_at="2026-01-01T00:00:00+00:00",
        policy="synthetic", command="python -m bench.synth"), clock=lambda: "2026-01-01T00:00:00+00:00")
    env = CrafterHarness(seed) if frames is None else None
    per = env.reset() if env else None
    frame0 = per.frame if per else frames[0]
    rec = w.begin_episode(kind="initial", life=0, turn=None, action_kind=None, first_step=0, action={})
    w.end_episode(rec, observation=frame0, state={}, outcome={}, summary="initial state", tags=["initial"], events=[],
                  x=32, y=32, outcome_label=None)
    step, life, turn, x, y = 0, 0, 0, 32, 32
    seen: set[tuple[int, int]] = set()
    milestone_steps = sorted(rng.choice(np.arange(100, steps), size=min(len(t.milestones), steps // 200),
                                        replace=False))
    deaths = set(int(s) for s in rng.choice(np.arange(min(500, steps // 2), steps), size=max(1, steps // 6000),
                                            replace=False))
    plan: list[dict] = []
    while step < steps:
        n_eps = int(rng.integers(1, 4))
        first_turn_step = step
        calls, targets, episodes = [], [], []
        if rng.random() < 0.3:
            hits = [f"ep_{int(i):06d}" for i in rng.integers(0, max(1, len(w.index)), 3)]
            calls.append({"tool": "search", "args": {"text": "iron"}, "result": {"episodes": hits}})
            if rng.random() < 0.5:
                calls.append({"tool": "inspect", "args": {"episode": hits[0]}, "result": {"found": ["iron"]}})
        plan_before = list(plan)
        for _ in range(n_eps):
            if step >= steps:
                break
            atom = ATOMS[int(rng.integers(0, len(ATOMS)))]
            length = int(min(steps - step, rng.geometric(1 / 10)))
            rec = w.begin_episode(kind="episode", life=life, turn=turn, action_kind=atom, first_step=step,
                                  action={"atom": atom, "args": {"x": x, "y": y}})
            grid = []
            died = False
            for _ in range(length):
                step += 1
                action = MOVES[int(rng.integers(0, 4))]
                if env:
                    res = env.step(action)
                    if res.died:
                        env.respawn()
                    frame = res.perception.frame
                    x, y = res.perception.pos
                else:
                    frame = frames[step % len(frames)]
                    x = int(np.clip(x + rng.integers(-1, 2), 0, 63))
                    y = int(np.clip(y + rng.integers(-1, 2), 0, 63))
                rec.add_step(frame, StepRow(step=step, life=life, episode=rec.id, action=action, x=x, y=y,
                                            facing=(1, 0), health=9, food=int(rng.integers(0, 10)), drink=7,
                                            energy=8, inventory={"wood": int(rng.integers(0, 9))}, reward=0.0))
                if (x, y) not in seen:
                    seen.add((x, y))
                    grid.append(GridRow(cell=(x, y), kind="walked", step=step, life=life))
                if milestone_steps and step >= milestone_steps[0]:
                    milestone_steps.pop(0)
                    name = t.milestones[len(w.manifest.milestones) % len(t.milestones)]
                    w.record_milestone(MilestoneRow(name=name, step=step, life=life, episode=rec.id, turn=turn))
                if step in deaths:
                    died = True
                    grid.append(GridRow(cell=(x, y), kind="hazard", step=step, life=life, damage=2, cause="zombie"))
                    w.record_life_event(LifeEvent(event="death", life=life, step=step, x=x, y=y, cause="zombie",
                                                  episode=rec.id))
                    break
            if rng.random() < 0.05:
                grid.append(GridRow(cell=(x + 1, y), kind="placed", step=step, life=life, item="table",
                                    pose={"x": x, "y": y, "facing": [1, 0]}))
            row = w.end_episode(rec, grid=grid, observation=frame, state={"pos": [x, y]}, outcome={"moved": length},
                                summary=f"{atom}(x={x},y={y}) -> {length} steps", tags=["died"] if died else [],
                                events=[], x=x, y=y, outcome_label="done" if rng.random() < 0.8 else "failed")
            episodes.append(row.id)
            if atom in ("go_to", "look_at"):
                tx, ty = int(rng.integers(0, 64)), int(rng.integers(0, 64))
                targets.append({"kind": atom, "x": tx, "y": ty, "in_plan": rng.random() < 0.85})
            if died:
                life += 1
                w.record_life_event(LifeEvent(event="respawn", life=life, step=step, x=32, y=32))
                break
        if rng.random() < 0.2:
            plan = [{"x": int(rng.integers(0, 64)), "y": int(rng.integers(0, 64)), "label": "target"}]
            text = "# Working memory\n\n" + "".join(f"- ({p['x']}, {p['y']}) {p['label']}\n" for p in plan)
            w.memory.write("working.md", text, author="agent", reason="plan", sources=episodes[-1:], step=step,
                           life=life, turn=turn)
            calls.append({"tool": "write", "args": {"path": "mine/working.md"}, "result": {}})
        w.record_turn(TurnRow(turn=turn, life=life, first_step=first_turn_step, last_step=step, policy="synthetic",
                              calls=tuple(calls), targets=tuple(targets), plan_before=tuple(plan_before),
                              plan_after=tuple(plan), episodes=tuple(episodes)))
        turn += 1
    w.close("finished", "budget")
    return out


def frame_pool(seed: int = 0, n: int = 2000) -> np.ndarray:
    """Real Crafter frames from a random walk, to share across the runs of a sweep."""
    env = CrafterHarness(seed)
    env.reset()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        res = env.step(MOVES[int(rng.integers(0, 4))])
        if res.died:
            env.respawn()
        out.append(res.perception.frame)
    return np.stack(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=36_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweep", type=int, default=0, help="write this many runs under OUT")
    a = p.parse_args()
    t0 = time.perf_counter()
    if a.sweep:
        pool = frame_pool(a.seed)
        methods = ("direct", "pro-long", "vista", "mfm")
        for i in range(a.sweep):
            make_run(a.out / f"run_{i:02d}", a.steps, a.seed + i, methods[i % 4], frames=pool)
    else:
        make_run(a.out, a.steps, a.seed)
    print(f"wrote {a.out} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
