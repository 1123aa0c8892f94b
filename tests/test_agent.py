"""Tests of the memory-driven Crafter agent (mfm.agent) against the real game."""
from __future__ import annotations

import filecmp
import gc
import inspect
import json
from pathlib import Path

import numpy as np

from mfm.agent import Decision, MFMPolicy, RunConfig, Runner, run
from mfm.agent import atoms as atoms_mod
from mfm.agent import mapping as mapping_mod
from mfm.agent import policy as policy_mod
from mfm.agent import tools as tools_mod
from mfm.envs import CrafterHarness, Perception, decode_frame
from mfm.memory import AgentMemory
from mfm.memory.retrieval import episode_frame
from mfm.schema import IndexRow
from mfm.validate import validate


def files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def assert_valid(run_dir: Path) -> None:
    c = validate(run_dir, frames=True)
    assert not c.errors, [str(e) for e in c.errors]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kill_on_next_step(runner: Runner) -> None:
    """TEST-ONLY: set the player's health to 0 (and its regeneration counter too), so the
    next env step is fatal whatever the policy does."""
    player = runner.harness._env._player
    player.health = 0
    player._recover = 0


def test_same_seed_gives_byte_identical_runs_that_validate(tmp_path: Path) -> None:
    dirs = []
    for name in ("a", "b"):
        r = run(RunConfig(seed=1, steps=500, out=tmp_path / name, fixed_clock=True), command="test")
        assert r.status == "finished" and r.writer.manifest.last_step == 500
        dirs.append(tmp_path / name)
    fa, fb = files(dirs[0]), files(dirs[1])
    assert fa.keys() == fb.keys() and len(fa) > 100
    different = [k for k in fa if not filecmp.cmp(fa[k], fb[k], shallow=False)]
    assert different == []
    assert_valid(dirs[0])
    m = json.loads((dirs[0] / "run.json").read_text())
    assert m["method"] == "mfm" and m["ablations"] == [] and m["command"] == "test"
    assert m["package_version"] and m["config"]["agent_summary"]["turns"] > 10
    assert len(m["milestones"]) >= 5


def test_policy_sees_only_perception_and_memory(tmp_path: Path) -> None:
    for mod in (policy_mod, atoms_mod, tools_mod, mapping_mod):
        src = inspect.getsource(mod)
        for forbidden in ("CrafterHarness", "semantic", "._world", "._env", "_harness", "import crafter"):
            assert forbidden not in src, f"{mod.__name__} mentions {forbidden}"
    assert "harness" not in inspect.signature(MFMPolicy.__init__).parameters

    seen: list[tuple[type, object]] = []

    class Watched(MFMPolicy):
        """Records what the policy receives each turn."""

        def decide(self, p, tools, source):
            seen.append((type(p), p))
            return super().decide(p, tools, source)

    runner = Runner(RunConfig(seed=0, steps=150, out=tmp_path / "run", fixed_clock=True))
    runner.policy = Watched(runner.task, runner.procedures)
    runner.start()
    while not runner.done:
        runner.run_turn()
    assert len(seen) > 5
    for kind, p in seen:
        assert kind is Perception
        assert len(p.local) == 9 and all(len(col) == 7 for col in p.local)
        assert p.frame.shape == (64, 64, 3)
    reachable, todo = set(), [runner.policy]
    while todo:
        obj = todo.pop()
        if id(obj) in reachable or isinstance(obj, (str, bytes, int, float, np.ndarray, type)):
            continue
        reachable.add(id(obj))
        assert not isinstance(obj, CrafterHarness), "the policy can reach the harness"
        if isinstance(obj, (dict, list, tuple, set, frozenset)) or hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
            todo.extend(gc.get_referents(obj))
    runner.finish("finished", "test")


def test_death_is_recorded_and_life_resumes_in_the_same_world(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=2, steps=400, out=tmp_path / "run", fixed_clock=True))
    runner.start()
    for _ in range(12):
        runner.run_turn()
    guide_before = runner.writer.memory.read("mine/GUIDE.md")
    world = runner.harness._env._world._mat_map.copy()  # test-only: compare the world itself
    kill_on_next_step(runner)
    row = runner.run_turn()
    assert "died" in row.tags
    assert [e["event"] for e in lines(tmp_path / "run" / "lives.jsonl")] == ["death"]
    runner.run_turn()
    lives = lines(tmp_path / "run" / "lives.jsonl")
    assert [e["event"] for e in lives] == ["death", "respawn"]
    assert lives[0]["episode"] == row.id and lives[0]["cause"] and lives[1]["life"] == 1
    hazards = [g for g in lines(tmp_path / "run" / "grid.jsonl") if g["kind"] == "hazard" and g.get("damage")]
    assert any(g["cell"] == [lives[0]["x"], lives[0]["y"]] for g in hazards)
    after = runner.harness._env._world._mat_map
    assert (after != world).sum() <= 4  # the same world, at most the last step's own change
    guide = runner.writer.memory.read("mine/GUIDE.md")
    assert guide_before and guide and "hazard:death@" in guide
    for _ in range(5):
        runner.run_turn()
    assert runner.harness.perception.life == 1 and runner.writer.manifest.lives == 2
    runner.finish("finished", "test")
    assert_valid(tmp_path / "run")


def test_procedure_written_reused_and_disabled(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=2, steps=2000, out=tmp_path / "run", fixed_clock=True))
    runner.start()
    while runner.procedures.load("table_tool") is None and runner.turn < 60:
        runner.run_turn()
    proc = runner.procedures.load("table_tool")
    assert proc is not None and len(proc.sources) == 2 and proc.uses == 0
    runner.harness._env._player.inventory["wood"] = 9  # test-only: enough wood for two more tables
    runner.run_turn()
    row = runner.run_turn(Decision("procedure", "table_tool", {"tool": "wood_sword"}, "test reuse"))
    assert row.action_kind == "table_tool" and "procedure" in row.tags
    runner.writer.wait()
    action = json.loads((tmp_path / "run" / row.path / "action.json").read_text())
    assert action["is_procedure"] and action["procedure"] == "table_tool" and len(action["atoms"]) == 2
    assert row.outcome == "done" and "made wood_sword" in row.events
    assert runner.procedures.load("table_tool").uses == 1
    kill_on_next_step(runner)
    fatal = runner.run_turn(Decision("procedure", "table_tool", {"tool": "wood_pickaxe"}, "test death"))
    assert "died" in fatal.tags
    proc = runner.procedures.load("table_tool")
    assert proc.disabled and fatal.id in proc.disabled_sources and proc.uses == 2
    history = runner.writer.memory.history("mine/procedures/table_tool.json")
    assert [w.op for w in history][0] == "create" and history[-1].op == "disable"
    assert fatal.id in history[-1].sources
    assert "table_tool" not in runner.procedures.names()
    runner.finish("finished", "test")
    assert_valid(tmp_path / "run")


def test_stop_flag_leaves_a_valid_interrupted_run(tmp_path: Path) -> None:
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 120

    runner = Runner(RunConfig(seed=0, steps=1000, out=tmp_path / "run", fixed_clock=True), stop=stop)
    runner.run()
    m = json.loads((tmp_path / "run" / "run.json").read_text())
    assert m["status"] == "interrupted" and m["ended_at"] and m["last_step"] == 120
    index = lines(tmp_path / "run" / "index.jsonl")
    assert index[-1]["outcome"] == "interrupted"
    assert_valid(tmp_path / "run")


def test_an_exception_in_the_policy_leaves_a_valid_crashed_run(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=0, steps=1000, out=tmp_path / "run", fixed_clock=True))
    decide = runner.policy.decide

    def failing(p: Perception, *args: object) -> Decision:
        if p.step >= 60:
            raise ZeroDivisionError("policy bug")
        return decide(p, *args)

    runner.policy.decide = failing
    try:
        runner.run()
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("the policy's exception must be re-raised")
    m = json.loads((tmp_path / "run" / "run.json").read_text())
    assert m["status"] == "crashed" and m["end_reason"] == "ZeroDivisionError: policy bug"
    assert m["last_step"] >= 60 and lines(tmp_path / "run" / "index.jsonl")
    assert_valid(tmp_path / "run")


def test_inspection_finds_a_resource_later_used_as_a_target(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=2, steps=700, out=tmp_path / "run", fixed_clock=True))
    runner.run()
    run_dir = tmp_path / "run"
    turns = lines(run_dir / "turns.jsonl")
    index = {r["id"]: IndexRow.from_dict(r) for r in lines(run_dir / "index.jsonl")}
    trace = {s["step"]: (s["x"], s["y"]) for s in lines(run_dir / "steps.jsonl")}
    memory, _ = AgentMemory.open(run_dir)
    from_frames = {}
    for w in memory.writes:
        if w.path == "mine/GUIDE.md" and w.reason.startswith("frame inspection"):
            text = memory.read("mine/GUIDE.md", as_of_step=w.step) or ""
            for line in text.splitlines():
                if "read from frame" in line:
                    key = line.split("[", 1)[1].split("]", 1)[0]
                    name, at = key[4:].split("@")
                    x, y = (int(v) for v in at.split(","))
                    source = line.rsplit("(", 1)[1].rstrip(")").split(", ")[0]
                    from_frames[(name, x, y)] = (source, w.step)
    used = 0
    for (name, x, y), (source, step) in from_frames.items():
        later = [t for t in turns if t["first_step"] >= step and any((g["x"], g["y"]) == (x, y) for g in t["targets"])]
        if not later:
            continue
        ref = index[source]
        seen = False
        for i in range(ref.frames):
            pos = trace[ref.first_step + 1 + i]
            c, r = x - pos[0] + 4, y - pos[1] + 3
            if 0 <= c < 9 and 0 <= r < 7 and decode_frame(episode_frame(run_dir, ref, i))[c][r] == name:
                seen = True
                break
        assert seen, f"{name} at {(x, y)} is not in the frames of {source}"
        assert any(c["tool"] == "inspect" and c["args"]["episode"] == source for t in turns for c in t["calls"])
        used += 1
    assert used >= 1
    summary = json.loads((run_dir / "run.json").read_text())["config"]["agent_summary"]
    assert summary["inspection_targets_used"] >= 1 and sum(summary["found_by_inspection"].values()) >= 1
