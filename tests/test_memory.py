"""The memory core: write a run, read it back, and check every query kind and rule."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mfm.memory import (AgentMemory, EpisodeIndex, Fact, ProceduralMemory, Procedure, ProcedureError, SpatialGrid,
                        Target, WorkingPlan, consolidate, parse_procedure)
from mfm.memory.agent_memory import MemoryPathError, apply_diff, make_diff, rebuild, replay
from mfm.memory.appendlog import AppendLog
from mfm.memory.consolidation import GUIDE, parse_guide, parse_plan_targets
from mfm.memory.retrieval import (FrameError, compare, crop, crop_tiles, difference, enlarge, episode_frame,
                                  forget_written, frame_at, load_episode, observation, search)
from mfm.schema import GridRow
from mfm.validate import validate

from conftest import WrittenRun, write_run


def test_run_reads_back(written_run: WrittenRun):
    c = validate(written_run.dir, frames=True)
    assert c.problems == []
    assert [r.id for r in c.tables["index.jsonl"]] == [r.id for r in written_run.episodes]
    assert len(c.tables["steps.jsonl"]) == len(written_run.frames)
    assert c.manifest.status == "finished"
    assert c.manifest.milestones == {"collect_wood": written_run.episodes[4].last_step}
    assert c.manifest.lives == 2
    assert [e.event for e in c.tables["lives.jsonl"]] == ["death", "respawn"]


def test_every_frame_comes_back_lossless(written_run: WrittenRun):
    forget_written()
    index, _ = EpisodeIndex.open(written_run.dir)
    for step, frame in written_run.frames.items():
        assert np.array_equal(frame_at(written_run.dir, index, step), frame)
    last = written_run.episodes[-1]
    assert np.array_equal(observation(written_run.dir, last), written_run.frames[last.last_step])
    with pytest.raises(FrameError):
        frame_at(written_run.dir, index, 10_000)


def test_long_episode_spans_several_strips(tmp_path: Path):
    run = write_run(tmp_path / "r", episodes=2, steps_per_episode=150)
    index, _ = EpisodeIndex.open(run.dir)
    ref = run.episodes[1]
    assert ref.frames == 150
    assert len(list((run.dir / ref.path / "frames").iterdir())) == 3
    for i in (0, 63, 64, 127, 128, 149):
        assert np.array_equal(episode_frame(run.dir, ref, i), run.frames[ref.first_step + 1 + i])


def test_frames_just_written_match_the_files_and_follow_a_changed_file(tmp_path: Path):
    run = write_run(tmp_path / "r", episodes=3, steps_per_episode=4)
    ref = run.episodes[1]
    kept = [episode_frame(run.dir, ref, i) for i in range(ref.frames)]
    forget_written()
    assert all(np.array_equal(k, episode_frame(run.dir, ref, i)) for i, k in enumerate(kept))
    other = run.episodes[2]
    episode_frame(run.dir, other, 0)
    strip = run.dir / ref.path / "frames" / "00000.webp"
    strip.write_bytes((run.dir / other.path / "frames" / "00000.webp").read_bytes())
    assert np.array_equal(episode_frame(run.dir, ref, 0), run.frames[other.first_step + 1])


@pytest.mark.parametrize("changed", [False, True])
def test_end_observation_is_stored_once(tmp_path: Path, changed: bool):
    """The end observation is the last strip frame unless the harness changed it; then (and
    only then) observation/image.png is written. Both read back through ``observation``."""
    from mfm.memory.episode_store import EpisodeStore

    store = EpisodeStore(tmp_path)
    rec = store.begin(kind="episode", life=0, turn=0, action_kind="x", first_step=0, action={})
    rec.frames += [np.full((16, 16, 3), v, np.uint8) for v in (3, 5)]
    end = rec.frames[-1] + (1 if changed else 0)
    row = store.finalize(rec, observation=end, state={}, outcome={}, summary="", tags=[], events=[], x=0, y=0,
                         outcome_label=None)
    store.close()
    forget_written()
    assert (tmp_path / rec.path / "observation").exists() == changed
    assert (tmp_path / rec.path / "observation" / "image.png").exists() == changed
    assert (row.image is not None) == changed
    assert np.array_equal(observation(tmp_path, row), end)


def test_end_observation_from_a_changed_strip_is_refused(tmp_path: Path):
    run = write_run(tmp_path / "r", episodes=3, steps_per_episode=4)
    ref, other = run.episodes[1], run.episodes[2]
    assert ref.image is None and ref.frames
    strip = run.dir / ref.path / "frames" / "00000.webp"
    strip.write_bytes((run.dir / other.path / "frames" / "00000.webp").read_bytes())
    forget_written()
    with pytest.raises(FrameError, match="observation_hash"):
        observation(run.dir, ref)
    found = [p for p in validate(run.dir, frames=True).problems if "observation_hash" in p.message]
    assert [(p.file, ref.id in p.message) for p in found] == [(f"{ref.path}/frames/00000.webp", True)]
    assert not any("observation_hash" in p.message for p in validate(run.dir).problems)


@pytest.mark.parametrize("query, expect", [
    (dict(action_kind="collect"), lambda r: r.action_kind == "collect"),
    (dict(tags=("milestone",)), lambda r: "milestone" in r.tags),
    (dict(text="craft moved"), lambda r: r.action_kind == "craft"),
    (dict(text="PLACE n=17"), lambda r: "n=17" in r.summary and r.action_kind == "place"),
    (dict(life=1), lambda r: r.life == 1),
    (dict(steps=(10, 20)), lambda r: r.last_step >= 10 and r.first_step <= 20),
    (dict(near=(32, 32), radius=3), lambda r: (r.x - 32) ** 2 + (r.y - 32) ** 2 <= 9),
    (dict(as_of_step=25), lambda r: r.last_step <= 25),
    (dict(kind="initial"), lambda r: r.kind == "initial"),
    (dict(action_kind="go_to", as_of_step=40, life=0), lambda r: r.action_kind == "go_to" and r.last_step <= 40
     and r.life == 0),
])
def test_index_queries(written_run: WrittenRun, query, expect):
    index, _ = EpisodeIndex.open(written_run.dir)
    got = search(index, **query)
    want = [r for r in reversed(written_run.episodes) if expect(r)]
    assert got == want
    assert got, "each query should match something in the fixture"


def test_index_limit_order_and_references(written_run: WrittenRun):
    index, _ = EpisodeIndex.open(written_run.dir)
    newest = index.query(limit=3)
    assert [r.id for r in newest] == [r.id for r in written_run.episodes[-3:]][::-1]
    oldest = index.query(limit=2, newest_first=False)
    assert [r.id for r in oldest] == [r.id for r in written_run.episodes[:2]]
    rec = load_episode(written_run.dir, newest[0])
    assert rec.action["atom"] == newest[0].action_kind and rec.outcome["moved"] == 5
    with pytest.raises(ValueError):
        index.append(newest[0])


def test_as_of_step_sees_only_finished_episodes(written_run: WrittenRun):
    index, _ = EpisodeIndex.open(written_run.dir)
    mid = written_run.episodes[5]
    known = index.query(as_of_step=mid.last_step - 1)
    assert mid.id not in {r.id for r in known}
    assert mid.id in {r.id for r in index.query(as_of_step=mid.last_step)}


def test_grid_queries(written_run: WrittenRun):
    grid, problems = SpatialGrid.open(written_run.dir)
    assert problems == []
    assert {r.kind for r in grid.query(kinds=["hazard"])} == {"hazard"}
    hazard = grid.query(kinds=["hazard"])[0]
    assert hazard.cause == "lava" and hazard.damage == 9
    box = grid.query(box=(33, 32, 35, 32))
    assert box and all(33 <= r.cell[0] <= 35 for r in box)
    near = grid.query(near=(33, 32), radius=1.5)
    assert near and all(abs(r.cell[0] - 33) <= 1 for r in near)
    assert all(r.step <= 10 for r in grid.query(as_of_step=10))
    assert len(grid.query(as_of_step=10)) == 10
    assert grid.query(life=1) and all(r.life == 1 for r in grid.query(life=1))
    assert (hazard.cell[0], hazard.cell[1]) in grid.cells(["hazard"])


def test_memory_history_rebuilds_every_version(written_run: WrittenRun):
    mem, problems = AgentMemory.open(written_run.dir)
    assert problems == []
    assert len(written_run.memory_versions) > 16, "the fixture must exercise diffs and snapshots"
    for step, text in written_run.memory_versions:
        assert mem.read("GUIDE.md", as_of_step=step) == text
    assert mem.read("GUIDE.md", as_of_step=0) is None
    assert mem.read("mine/GUIDE.md") == (written_run.dir / "mine/GUIDE.md").read_text()
    hist = mem.history("GUIDE.md")
    assert [w.op for w in hist[:2]] == ["create", "edit"]
    assert any(w.diff is not None for w in hist) and any(w.snapshot is not None for w in hist[1:])


def test_blame_links_each_line_to_its_episode(written_run: WrittenRun):
    mem, _ = AgentMemory.open(written_run.dir)
    lines = mem.blame("GUIDE.md")
    episodes = [r.id for r in written_run.episodes[1:]]
    for i, b in enumerate(lines[1:]):
        assert b.text == f"- fact {i}\n"
        assert b.write.sources == (episodes[i],)
    assert lines[0].write.op == "create"


def test_memory_paths_cannot_leave_mine(tmp_path: Path):
    mem = AgentMemory(tmp_path)
    for bad in ("../x.md", "/etc/passwd", "mine/../../x", "mine", "mine/a\x00.md", "mine/a\nb.md", "a\\b.md"):
        with pytest.raises(MemoryPathError):
            mem.write(bad, "x", author="a", reason="r", step=0)
    assert not any(tmp_path.rglob("*a*b*")), "a refused path must leave no file"
    assert mem.write("mine/a.md", "x", author="a", reason="r", step=0).path == "mine/a.md"
    assert mem.write("a.md", "x", author="a", reason="r", step=1) is None


@pytest.mark.parametrize("old, new", [
    ("", "a\nb\n"), ("a\nb\nc\n", "a\nc\n"), ("a\nb\n", "x\na\nb\ny\n"), ("a\nb", "a\nb\nc"), ("a\n", ""),
])
def test_diff_roundtrip(old, new):
    assert apply_diff(old, make_diff(old, new)) == new


def test_delete_and_rebuild(tmp_path: Path):
    mem = AgentMemory(tmp_path)
    mem.write("n.md", "one\n", author="a", reason="r", step=1)
    mem.delete("n.md", author="a", reason="gone", step=2)
    mem.write("n.md", "two\n", author="a", reason="r", step=3)
    again, problems = AgentMemory.open(tmp_path)
    assert problems == []
    assert [again.read("n.md", s) for s in (0, 1, 2, 3)] == [None, "one\n", None, "two\n"]
    assert again.files(as_of_step=2) == []


def test_replay_of_a_damaged_history(tmp_path: Path):
    mem = AgentMemory(tmp_path)
    for step, text in enumerate(("a\n", "a\nb\n")):
        mem.write("n.md", text, author="a", reason="r", step=step)
    w = mem.writes
    assert [v.text() for v in replay(w)] == ["a\n", "a\nb\n"]
    misfit, bad_hash = replace(w[1], diff=((5, 6, ("z\n",)),)), replace(w[0], seq=2, sha256="0" * 64)
    damaged = [w[0], misfit, bad_hash]
    lenient = [(v.before, v.after, v.error is not None, v.hash_ok) for v in replay(damaged)]
    assert lenient == [(None, "a\n", False, True), ("a\n", "a\n", True, False), ("a\n", "a\n", False, False)]
    strict = [(v.before, v.after, v.error is not None, v.hash_ok) for v in replay(damaged, strict=True)]
    assert strict == [(None, "a\n", False, True), ("a\n", None, True, True), (None, None, False, False)]
    with pytest.raises(ValueError, match="does not fit"):
        rebuild(damaged, "mine/n.md")
    with pytest.raises(ValueError, match="recorded hash"):
        rebuild([w[0], bad_hash], "mine/n.md")


ATOMS = ("go_to", "collect", "place", "craft")


def _proc(**kw) -> Procedure:
    base = dict(name="make_pickaxe", description="table then pickaxe", params=("x", "y"),
                steps=({"atom": "go_to", "args": {"x": "$x", "y": "$y"}}, {"atom": "place", "args": {"item": "table"}},
                       {"atom": "craft", "args": {"item": "wood_pickaxe"}}),
                preconditions=({"have": {"wood": 3}},), sources=("ep_000001", "ep_000002"))
    base.update(kw)
    return Procedure(**base)


def test_procedures_write_reuse_version_disable(tmp_path: Path):
    procs = ProceduralMemory(AgentMemory(tmp_path), ATOMS)
    procs.save(_proc(), author="agent", reason="worked twice", sources=("ep_000001",), step=10)
    p = procs.load("make_pickaxe")
    assert p.bind({"x": 3, "y": 4})[0] == {"atom": "go_to", "args": {"x": 3, "y": 4}}
    v2 = procs.save(_proc(steps=_proc().steps[1:], params=()), author="agent", reason="shorter", step=20)
    assert v2.version == 2
    procs.disable("make_pickaxe", reason="died twice after using it", sources=("ep_000009",), author="agent",
                  step=30)
    assert procs.names() == [] and procs.names(include_disabled=True) == ["make_pickaxe"]
    assert procs.load("make_pickaxe").disabled_sources == ("ep_000009",)
    assert procs.load("make_pickaxe", as_of_step=15).version == 1
    hist = procs.memory.history("mine/procedures/make_pickaxe.json")
    assert [w.op for w in hist] == ["create", "edit", "disable"]
    with pytest.raises(ProcedureError):
        _proc().bind({})


@pytest.mark.parametrize("obj, msg", [
    ({"name": "x", "steps": [{"atom": "exec", "args": {"code": "import os"}}]}, "atom must be one of"),
    ({"name": "Bad Name", "steps": [{"atom": "go_to"}]}, "lower_snake_case"),
    ({"name": "x", "steps": []}, "non-empty"),
    ({"name": "x", "steps": [{"atom": "go_to", "args": {"x": "$q"}}]}, "undeclared parameter"),
    ({"name": "x", "steps": [{"atom": "go_to", "args": {"x": [1]}}]}, "plain values"),
    ({"name": "x", "steps": [{"atom": "go_to"}], "preconditions": [{"eval": "1"}]}, "precondition"),
    ({"name": "x", "steps": [{"atom": "go_to"}], "sources": ["../x"]}, "episode ids"),
])
def test_invalid_procedures_are_refused(obj, msg):
    with pytest.raises(ProcedureError, match=msg):
        parse_procedure(obj, ATOMS)


def _tree_hash(root: Path, skip: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith(skip):
            h.update(rel.encode() + p.read_bytes())
    return h.hexdigest()


def test_consolidation_revises_knowledge_not_episodes(written_run: WrittenRun):
    mem, _ = AgentMemory.open(written_run.dir, writable=True)
    mem.write(GUIDE, "", author="t", reason="reset", step=100)
    before = _tree_hash(written_run.dir, ("mine/", "memory_writes.jsonl"))
    r1 = consolidate(mem, [Fact("res:iron@40,12", "iron at (40, 12)", "Resources", ("ep_000003",)),
                           Fact("tree@30,30", "a tree at (30, 30)", "Resources", ("ep_000002",))],
                     plan=WorkingPlan("diamond", (Target(40, 12, "mine iron"),), "iron +1", ()),
                     step=101, reason="death")
    assert r1.added == ["res:iron@40,12", "tree@30,30"] and r1.plan_changed
    r2 = consolidate(mem, [Fact("res:iron@40,12", "iron at (40, 12), seen again", sources=("ep_000005",)),
                           Fact("tree@30,30", "", retract=True, sources=("ep_000006",))], step=102, reason="periodic")
    assert r2.revised == ["res:iron@40,12"] and r2.removed == ["tree@30,30"]
    facts = parse_guide(mem.read(GUIDE))
    assert list(facts) == ["res:iron@40,12"]
    assert facts["res:iron@40,12"].sources == ("ep_000003", "ep_000005")
    assert consolidate(mem, [Fact("res:iron@40,12", "iron at (40, 12), seen again")], step=103,
                       reason="same").changed is False
    assert parse_plan_targets(mem.read("mine/working.md")) == [Target(40, 12, "mine iron")]
    last = mem.history(GUIDE)[-1]
    assert last.author == "consolidation" and set(last.sources) == {"ep_000005", "ep_000006"}
    assert _tree_hash(written_run.dir, ("mine/", "memory_writes.jsonl")) == before


def test_inspection_helpers():
    f = np.arange(64 * 64 * 3, dtype=np.uint32).reshape(64, 64, 3).astype(np.uint8)
    assert crop(f, (7, 14, 21, 28)).shape == (14, 14, 3)
    assert crop_tiles(f, (3, 6), (2, 5)).shape == (21, 21, 3)
    big = enlarge(f, 4)
    assert big.shape == (256, 256, 3) and np.array_equal(big[::4, ::4], f)
    side = compare([f, f[:32]])
    assert side.shape == (64, 130, 3)
    g = f.copy()
    g[5, 6] = 0
    d = difference(f, g)
    assert tuple(d[5, 6]) == (255, 0, 255) and tuple(d[0, 0]) != (255, 0, 255)
    with pytest.raises(ValueError):
        crop(f, (70, 70, 80, 80))


def test_appendlog_recovers_after_a_torn_line(tmp_path: Path):
    p = tmp_path / "grid.jsonl"
    p.write_text('{"cell":[1,2],"kind":"walked","step":1}\n{"cell":[1,')
    log = AppendLog(p)
    log.append(GridRow(cell=(3, 4), kind="walked", step=2))
    log.flush()
    grid, problems = SpatialGrid.open(tmp_path)
    assert [r.step for r in grid.rows] == [1, 2]
    assert len(problems) == 1 and problems[0].line == 2 and "not valid JSON" in problems[0].message


def test_finished_episode_is_never_rewritten(written_run: WrittenRun):
    from mfm.memory.episode_store import EpisodeStore

    store = EpisodeStore(written_run.dir)
    rec = store.begin(kind="episode", life=0, turn=0, action_kind="x", first_step=0, action={})
    assert rec.number == len(written_run.episodes)
    rec.number = 1
    with pytest.raises(FileExistsError):
        store.finalize(rec, observation=np.zeros((64, 64, 3), np.uint8), state={}, outcome={}, summary="",
                       tags=[], events=[], x=0, y=0, outcome_label=None)
    assert json.loads((written_run.dir / "episodes/ep_000001/action.json").read_text())["atom"] == "go_to"
