"""A new game in a known world with an earlier run's memory (mfm.memory.inheritance), and the
kit tasks that make the new game about finding one ore (ore-iron, ore-diamond); real game,
real run directories, checked against the raw files of both runs."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mfm.agent.config import RunConfig
from mfm.agent.runner import Runner, run
from mfm.envs import load_task, make_harness
from mfm.memory.consolidation import parse_guide
from mfm.memory.inheritance import InheritError
from mfm.schema import MemoryWrite, SchemaError
from mfm.sweep import plan
from mfm.validate import validate

SEED = 0


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_guide(run_dir: Path) -> str:
    """GUIDE.md as its last write left it, replayed from the raw lines (a snapshot, or hunks
    ``[start, end, new lines]`` over the text before)."""
    text = ""
    for w in lines(run_dir / "memory_writes.jsonl"):
        if w["path"] != "mine/GUIDE.md":
            continue
        if w.get("snapshot") is not None:
            text = w["snapshot"]
            continue
        old, out, pos = text.splitlines(keepends=True), [], 0
        for start, end, new in w["diff"]:
            out += old[pos:start] + new
            pos = end
        text = "".join(out + old[pos:])
    return text


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An earlier game (reach world of seed 0, 600 steps of mfm) and a new game of ore-iron in
    the same world that inherits its memory."""
    root = tmp_path_factory.mktemp("inherit")
    earlier = run(RunConfig(task="reach-1000", seed=SEED, steps=600, out=root / "earlier", fixed_clock=True)).writer.dir
    new = run(RunConfig(task="ore-iron", seed=SEED, out=root / "new", fixed_clock=True, inherit=earlier)).writer.dir
    return earlier, new


def test_kit_is_in_hand_at_the_start_of_every_life() -> None:
    task = load_task("ore-diamond")
    assert dict(task.kit) == {"wood_pickaxe": 1, "stone_pickaxe": 1, "iron_pickaxe": 1}
    h = make_harness(3, task)
    p = h.reset()
    assert all(p.inventory[k] == v for k, v in task.kit)
    player = h._env._player
    player.health, player._recover = 0, 0
    assert h.step("noop").died
    p = h.respawn()
    assert p.life == 1 and all(p.inventory[k] == v for k, v in task.kit)
    plain = make_harness(3, load_task("diamond")).reset()
    assert not any(plain.inventory[k] for k, _ in task.kit)


def test_the_inherited_run_is_copied_whole_and_the_new_run_validates(games: tuple[Path, Path]) -> None:
    earlier, new = games
    copy = new / "inherited"
    want = sorted(p.relative_to(earlier) for p in earlier.rglob("*") if p.is_file())
    assert sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file()) == want
    assert all((copy / f).read_bytes() == (earlier / f).read_bytes() for f in want)
    report = validate(new, frames=True)
    assert not report.errors, [str(e) for e in report.errors]
    m = json.loads((new / "run.json").read_text())
    theirs = json.loads((earlier / "run.json").read_text())
    assert m["run_id"] == f"ore-iron_mfm_s{SEED}_from-earlier"
    assert m["config"]["inherited"] == {"run": theirs["run_id"], "task": "reach-1000", "method": "mfm",
                                        "steps": theirs["last_step"], "status": theirs["status"],
                                        "milestones": theirs["milestones"]}


def test_notes_start_as_the_earlier_runs_with_sources_pointing_at_the_copy(games: tuple[Path, Path]) -> None:
    earlier, new = games
    first = lines(new / "memory_writes.jsonl")[0]
    assert first["author"] == "inherited" and first["path"] == "mine/GUIDE.md" and first["step"] == 0
    theirs = final_guide(earlier)
    ours = first["snapshot"] if first.get("snapshot") is not None else final_guide(new)
    assert re.sub(r"\binherited:(ep_\d+)", r"\1", ours) == theirs
    facts = parse_guide(ours)
    assert facts and all(s.startswith("inherited:ep_") for f in facts.values() for s in f.sources)
    own = {r["id"] for r in lines(earlier / "index.jsonl")}
    assert {s.split(":", 1)[1] for s in first["sources"]} <= own
    assert not any(w["path"] == "mine/working.md" and w["author"] == "inherited"
                   for w in lines(new / "memory_writes.jsonl"))


def test_searches_and_inspections_reach_the_earlier_games_frames(games: tuple[Path, Path]) -> None:
    earlier, new = games
    index = {r["id"]: r for r in lines(earlier / "index.jsonl")}
    seen: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for r in lines(earlier / "seen.jsonl"):
        seen.setdefault((r["episode"], r["material"]), set()).update(map(tuple, r["cells"]))
    inspected = found = agree = 0
    for t in lines(new / "turns.jsonl"):
        for c in t["calls"]:
            ep = (c["args"] or {}).get("episode") if c["tool"] == "inspect" else None
            if c["tool"] == "search":
                for i in c["result"].get("ids", []):
                    assert not i.startswith("inherited:") or i.split(":", 1)[1] in index
            if ep is None or not ep.startswith("inherited:"):
                continue
            inspected += 1
            bare = ep.split(":", 1)[1]
            assert bare in index and c["args"]["turn"] == index[bare]["turn"]
            for f in c["result"]["found"]:
                if f["name"] == "lava":
                    continue
                found += 1
                agree += (f["x"], f["y"]) in seen.get((bare, f["name"]), set())
    assert inspected >= 1 and found >= 1
    assert agree >= 0.9 * found, (agree, found)


def test_the_ore_found_through_inherited_memory_is_recorded(games: tuple[Path, Path]) -> None:
    _, new = games
    m = json.loads((new / "run.json").read_text())
    recalls = m["config"]["agent_summary"]["recalls"]
    assert m["milestones"].get("collect_iron") is not None
    inherited = [r for r in recalls if r.get("inherited")]
    assert inherited and all(r["source"].startswith("inherited:ep_") and r["age"] is None for r in inherited)
    assert all(r["name"] == "iron" for r in recalls)


def test_the_inherited_memory_table_counts_from_the_manifests(games: tuple[Path, Path], tmp_path: Path) -> None:
    from loaders.compare import measures
    from loaders.paper_measures import inherit_table

    earlier, new = games
    fresh = run(RunConfig(task="ore-iron", seed=SEED, out=tmp_path / "fresh", fixed_clock=True)).writer.dir
    table = inherit_table(measures(new.parent) + measures(tmp_path))
    by = {row["memory"]: row for row in table.to_dict("records")}
    for memory, d in (("inherited", new), ("none", fresh)):
        m = json.loads((d / "run.json").read_text())
        assert by[memory]["runs"] == 1 and by[memory]["successes"] == int("collect_iron" in m["milestones"])
    held = any(r["material"] == "iron" for r in lines(earlier / "seen.jsonl")) or "[res:iron@" in final_guide(earlier)
    assert by["inherited"]["held"] == int(held) and by["none"]["held"] != by["none"]["held"]


@pytest.mark.parametrize("change, says", [
    ({"seed": SEED + 1}, "another world"),
    ({"task": "ore-diamond"}, "arranged differently"),
    ({"area": 48}, "world of side"),
])
def test_inheriting_from_another_world_is_refused_before_anything_is_written(
        games: tuple[Path, Path], tmp_path: Path, change: dict, says: str) -> None:
    earlier, _ = games
    config = dataclasses.replace(RunConfig(task="ore-iron", seed=SEED, out=tmp_path / "x", inherit=earlier), **change)
    with pytest.raises(InheritError, match=says):
        Runner(config)
    assert not (tmp_path / "x").exists()


def test_the_cli_names_what_cannot_be_inherited(games: tuple[Path, Path], tmp_path: Path) -> None:
    earlier, _ = games
    running = tmp_path / "running"
    running.mkdir()
    m = json.loads((earlier / "run.json").read_text())
    (running / "run.json").write_text(json.dumps({**m, "status": "running"}))
    for src, says in ((running, "is running; only a run that ended"), (tmp_path / "nowhere", "no run.json")):
        out = subprocess.run([sys.executable, "-m", "mfm.cli", "run", "--task", "ore-iron", "--inherit", str(src),
                              "--out", str(tmp_path / "new"), "--quiet"], capture_output=True, text=True)
        assert out.returncode == 2 and says in out.stderr and str(src) in out.stderr
        assert not (tmp_path / "new").exists()
    out = subprocess.run([sys.executable, "-m", "mfm.cli", "run", "--method", "direct", "--inherit", str(earlier),
                          "--out", str(tmp_path / "new")], capture_output=True, text=True)
    assert out.returncode == 2 and "keeps no memory" in out.stderr


def test_sources_may_name_inherited_episodes_and_nothing_else() -> None:
    base = dict(seq=0, turn=None, step=0, life=0, path="mine/GUIDE.md", op="create", author="inherited",
                reason="r", time="t", sha256="x", snapshot="")
    assert MemoryWrite.from_dict({**base, "sources": ["inherited:ep_000018", "ep_000001"]}).sources
    with pytest.raises(SchemaError, match="not an episode id"):
        MemoryWrite.from_dict({**base, "sources": ["other:ep_000018"]})


def test_a_sweep_plans_each_seed_with_its_own_earlier_run(tmp_path: Path) -> None:
    jobs = plan("ore-diamond", ["mfm"], [3, 4], tmp_path, inherit=str(tmp_path / "diamond_mfm_s{seed}"))
    assert [j.name for j in jobs] == ["ore-diamond_mfm_s3_from-diamond_mfm_s3", "ore-diamond_mfm_s4_from-diamond_mfm_s4"]
    cmd = jobs[1].command()
    assert cmd[cmd.index("--inherit") + 1] == str(tmp_path / "diamond_mfm_s4")
    assert RunConfig(task="ore-diamond", seed=4, inherit=tmp_path / "diamond_mfm_s4").run_name == jobs[1].name


def test_the_validator_follows_inherited_sources_into_the_copy(games: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    _, new = games
    run_dir = tmp_path / "run"
    shutil.copytree(new, run_dir)
    index = run_dir / "inherited" / "index.jsonl"
    rows = lines(index)
    first = lines(run_dir / "memory_writes.jsonl")[0]
    dropped = first["sources"][0].split(":", 1)[1]
    index.write_text("".join(json.dumps(r) + "\n" for r in rows if r["id"] != dropped))
    problems = [p for p in validate(run_dir).problems if "inherited" in p.message]
    assert [(p.file, p.line, p.severity) for p in problems] == [("memory_writes.jsonl", 1, "warning")]
    assert f"inherited:{dropped} is not in inherited/index.jsonl" in problems[0].message
    shutil.rmtree(run_dir / "inherited")
    (run_dir / "inherited").symlink_to(new / "inherited")
    errors = [p for p in validate(run_dir).errors if "inherited" in p.message]
    assert len(errors) == 1 and errors[0].line == 1 and "no inherited/index.jsonl inside it" in errors[0].message


def test_inherited_procedures_name_the_copys_episodes(games: tuple[Path, Path]) -> None:
    earlier, new = games
    theirs = {w["path"] for w in lines(earlier / "memory_writes.jsonl") if w["path"].startswith("mine/procedures/")}
    ours = [w for w in lines(new / "memory_writes.jsonl") if w["author"] == "inherited"
            and w["path"].startswith("mine/procedures/")]
    assert theirs and {w["path"] for w in ours} == theirs
    for w in ours:
        ids = re.findall(r'"((?:\w+:)?ep_\d+)"', w["snapshot"] or "")
        assert ids and all(i.startswith("inherited:ep_") for i in ids), (w["path"], ids)
