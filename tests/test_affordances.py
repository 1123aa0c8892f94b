"""Matched affordances (issue 44): every method is built and played in the real game, and what
it did is checked against the declared table of :mod:`mfm.agent.modes` (not against its flags):
whether it routes over the map, writes notes, stores and runs procedures, revises its notes,
searches, reopens frames and how, and keeps to the notes budget or, in the uncapped arm, not."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mfm.agent import RunConfig
from mfm.agent.modes import AFFORDANCES, ARMS, TABLE, mode_for, table_rows
from mfm.agent.protocol import Decision
from mfm.agent.runner import Runner
from mfm.memory import Fact, Procedure
from mfm.memory.consolidation import GUIDE

TASK, SEED, STEPS = "reach-1000", 2, 600
"""A reach task (its notes are capped at 500 tokens) long enough for every method with
procedures to store both and run one, and for a night (consolidation at a death or every 25
episodes); each run takes a few seconds."""


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def calls(run_dir: Path) -> list[dict]:
    return [c for t in lines(run_dir / "turns.jsonl") for c in t["calls"]]


PROBE = 100
"""Steps left after :data:`STEPS` for one more turn, the probe of stored procedures."""
TABLE_TOOL = Procedure("table_tool", "place a table where I stand, then make a tool at it",
                       ({"atom": "place", "args": {"item": "table"}}, {"atom": "craft", "args": {"item": "$tool"}}),
                       params=("tool",))
"""The procedure offered by hand to a method that does not run procedures."""


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Runner, Decision, Decision | None]]:
    """Each method of the table, and each method with notes in the uncapped arm, played for
    :data:`STEPS` steps of the same world; then one more turn of the policy's own choice of
    how to place a table for a pickaxe (a stored procedure if its mode runs them), played."""
    root = tmp_path_factory.mktemp("affordances")
    out = {}
    arms = [(m, (a,)) for a in ARMS for m in TABLE if TABLE[m]["notes"]]
    for method, abl in [(m, ()) for m in TABLE] + arms:
        cfg = RunConfig(task=TASK, method=method, ablations=abl, seed=SEED, steps=STEPS + PROBE, fixed_clock=True,
                        out=root / "-".join([method, *abl]))
        runner = Runner(cfg, command="test")
        runner.start()
        while runner.harness.perception.step < STEPS and not runner.done:
            runner.run_turn()
        probe = runner.policy.targets.place_table("wood_pickaxe", "probe: a table for a pickaxe")
        runner.run_turn(probe)
        offered = None
        if not runner.config.mode.procedures:
            runner.procedures.save(TABLE_TOOL, author="test", reason="offered by hand", step=STEPS)
            offered = runner.policy.targets.place_table("wood_pickaxe", "with a procedure offered by hand")
        if runner.config.mode.notes:
            runner.tools.consolidate([Fact(f"res:stone@{i},{i}", f"stone at ({i}, {i}), a probe of the budget", "Probe")
                                      for i in range(60)], None, "probe: more facts than the budget holds")
        runner.finish("finished", "probe played")
        out[" ".join([method, *abl])] = (runner, probe, offered)
    return out


def test_the_table_declares_every_affordance_for_every_method() -> None:
    head, *rows = table_rows()
    assert head == ["method", *(a.name for a in AFFORDANCES)]
    assert [r[0] for r in rows] == list(TABLE) == ["direct", "pro-long", "vista", "mfm"]
    for method, row in TABLE.items():
        assert set(row) == {a.name for a in AFFORDANCES}, method
    with_memory = [m for m in TABLE if m != "direct"]
    for name in ("recent", "map", "notes", "procedures", "consolidation"):
        assert all(TABLE[m][name] for m in with_memory) and not TABLE["direct"][name], name
    assert [TABLE[m]["search"] for m in TABLE] == [None, "log", None, "index"]
    assert [TABLE[m]["frames"] for m in TABLE] == [None, None, "turn", "index"]


def test_mfm_methods_prints_the_table() -> None:
    out = subprocess.run([sys.executable, "-m", "mfm.cli", "methods", "--markdown"], capture_output=True, text=True,
                         check=True).stdout
    for row in table_rows():
        assert "| " + " | ".join(row) + " |" in out
    assert "no-budget" in out


def test_each_method_does_what_its_row_declares(played: dict[str, tuple[Runner, Decision, Decision | None]]) -> None:
    for method, row in TABLE.items():
        runner, probe, offered = played[method]
        d = runner.writer.dir
        cs, turns = calls(d), lines(d / "turns.jsonl")
        writes = [w for w in lines(d / "memory_writes.jsonl") if w["author"] != "test"]
        index = lines(d / "index.jsonl")
        notes = [t["note"] for t in turns]
        # [RECENT] and [MAP] in the state block
        assert all(("recent:" in n) == row["recent"] for n in notes), method
        assert all(("map:" in n) == row["map"] for n in notes), method
        # map routing: the atoms route over the spatial grid's walked cells, even those out of view
        p = runner.harness.perception
        walked = {tuple(r["cell"]) for r in lines(d / "grid.jsonl") if r["kind"] == "walked"}
        far = {c for c in walked if abs(c[0] - p.pos[0]) > 4 or abs(c[1] - p.pos[1]) > 3}
        assert far, method
        nav = runner.nav_map(p)
        assert (far <= set(nav.cells)) == row["map"] and (not (far & set(nav.cells))) == (not row["map"]), method
        # notes: GUIDE.md and working.md written by the agent, nothing else outside procedures
        note_writes = {w["path"] for w in writes if not w["path"].startswith("mine/procedures/")}
        assert note_writes == ({"mine/GUIDE.md", "mine/working.md"} if row["notes"] else set()), method
        # procedures: learned and stored in the game, chosen by the policy and run as an episode
        stored = {w["path"] for w in writes if w["path"].startswith("mine/procedures/")}
        assert bool(stored) == row["procedures"], (method, stored)
        assert (probe.kind == "procedure") == row["procedures"], method
        assert ("procedure" in index[-1]["tags"]) == row["procedures"], method
        assert (offered is None) == row["procedures"] and (offered is None or offered.kind == "atom"), method
        # consolidation: revisions of the notes at the start, deaths or every N episodes
        revised = [c for c in cs if c["tool"] == "consolidate"]
        assert bool(revised) == row["consolidation"], method
        # search: grep of the text log, a search of the index, or none
        searches = [c for c in cs if c["tool"] == "search"]
        kinds = {"log" if "grep" in c["args"] else "index" for c in searches}
        assert kinds == ({row["search"]} if row["search"] else set()), (method, kinds)
        if row["search"] == "log":
            assert all(c["args"]["file"] == "logs.txt" and "SEEN" in c["args"]["grep"] for c in searches)
        # frames: reopened by turn id, by what the index says frames showed, or never
        inspects = [c for c in cs if c["tool"] == "inspect"]
        by = {c["args"]["by"] for c in inspects}
        assert by == ({"turn": {"turn"}, "index": {"content"}}[row["frames"]] if row["frames"] else set()), method


def test_the_notes_budget_binds_every_method_with_notes_and_the_uncapped_arm_frees_it(
        played: dict[str, tuple[Runner, Decision, Decision | None]]) -> None:
    """GUIDE.md stays within the task's 500 tokens in every capped run (the oldest facts are
    evicted) and holds every fact in each method's uncapped arm, which plays the same world,
    once 60 more facts are written to each."""
    for method in (m for m in TABLE if TABLE[m]["notes"]):
        capped, free = played[method][0], played[f"{method} no-budget"][0]
        assert capped.config.notes_tokens == 500 and free.config.notes_tokens is None
        assert free.config.mode == dataclasses.replace(mode_for(method), budget=False, label=f"{method} no-budget")
        assert 400 < len(capped.tools.peek(GUIDE) or "") / 4 <= 500, method
        assert len(free.tools.peek(GUIDE) or "") / 4 > 500 + 60 * 8, method
        assert not [c for c in calls(free.writer.dir) if "evicted" in c["result"]], method
    with pytest.raises(ValueError):
        RunConfig(method="direct", ablations=("no-budget",))
    with pytest.raises(ValueError):
        RunConfig(method="vista", ablations=("no-content",))


def test_pro_long_greps_a_place_its_view_showed_long_ago(played: dict[str, tuple[Runner, Decision, Decision | None]]) -> None:
    """The text log names what the view showed (``[SEEN]`` lines), so grep finds the reach
    world's diamond, seen at step 0 and in no note: PRO-LONG's log can remember it."""
    runner = played["pro-long"][0]
    log = (runner.writer.dir / "logs.txt").read_text()
    target = runner.harness.site.target
    assert re.search(rf"^\[SEEN\] diamond at .*\({target[0]}, {target[1]}\)", log, re.M)
    hits = runner.tools.text_log.grep(r"^\[SEEN\] diamond at")
    assert hits and hits[0].step == 0
    runner.policy.recall.sites_until = -1
    runner.policy.recall.update_sites(runner.harness.perception, runner.tools)
    assert target in runner.policy.recall.seen_sites["diamond"]


def test_vista_reopens_a_frame_older_than_1000_steps_once_its_note_is_gone(tmp_path: Path) -> None:
    """VISTA addresses stored frames by turn id, any earlier turn, not only the last 16: after
    1,100 steps of a reach game, with the diamond's note taken out of its GUIDE.md, its
    lookups walk back through the turns and reopen the frames that showed the diamond, more
    than 1,000 steps old, and note the place again from them."""
    cfg = RunConfig(task="reach-3000", method="vista", seed=3, steps=1100, fixed_clock=True, out=tmp_path / "vista")
    runner = Runner(cfg, command="test")
    runner.run()
    policy, tools, p = runner.policy, runner.tools, runner.harness.perception
    target = runner.harness.site.target
    key = f"res:diamond@{target[0]},{target[1]}"
    facts = tools.facts()
    if key in facts:
        tools.consolidate([dataclasses.replace(facts[key], retract=True)], None, "test: the note is gone")
    assert key not in tools.facts()
    ends = {r.id: r.last_step for r in runner.writer.index.rows}
    opened: list[tuple[int, bool]] = []
    for lookup in range(1, 200):
        now = dataclasses.replace(p, step=p.step + lookup)
        tools.begin_turn(runner.turn + lookup, now.step, now.life)
        policy.recall.inspect(now, {"diamond"}, tools, tools.facts())
        for c in tools.calls:
            if c["tool"] == "inspect":
                assert c["args"]["by"] == "turn"
                shown = any((f["name"], f["x"], f["y"]) == ("diamond", *target) for f in c["result"]["found"])
                opened.append((now.step - ends[c["args"]["episode"]], shown))
        if key in tools.facts():
            break
    assert key in tools.facts(), "the diamond was never noted again"
    assert max(age for age, _ in opened) > 1000
    assert any(age > 1000 and shown for age, shown in opened)


def test_a_content_hit_left_out_by_the_episode_cap_is_not_marked_as_looked_up(tmp_path: Path) -> None:
    """A content search names more episodes than one lookup opens (``inspect_episodes // 4``).
    Only the episodes opened count as looked up: a hit left out by the cap is opened by the
    next lookup, not barred for ``RECALL_AGAIN`` steps as before the fix."""
    from mfm.agent.recall import RECALL_AGAIN, RECALL_CELLS, SEEK_BY_FRAMES

    runner = Runner(RunConfig(task="reach-1000", seed=2, steps=200, out=tmp_path / "run", fixed_clock=True,
                              inspect_episodes=4))
    runner.run()
    policy, tools, p = runner.policy, runner.tools, runner.harness.perception
    names = set(SEEK_BY_FRAMES)
    cap = max(1, policy.recall.inspect_episodes // 4)
    policy.recall.recalled.clear()
    considered = [(name, h.cell, h.episode) for name in sorted(names)
                  for h in [h for h in tools.find_seen(name, near=p.pos, limit=4 * RECALL_CELLS)
                            if h.cell not in policy.head.opened and policy.head.failed[h.cell] < 2][:RECALL_CELLS]]
    first = policy.recall.by_content(p, names, tools, {})
    assert len(first) == cap
    assert {ep for _, _, ep in policy.recall.recalled} <= {r.id for r in first}
    left_out = [k for k in considered if k not in policy.recall.recalled]
    assert left_out and all(ep not in {r.id for r in first} for _, _, ep in left_out)
    for later in range(1, RECALL_AGAIN):
        opened = policy.recall.by_content(dataclasses.replace(p, step=p.step + later), names, tools, {})
        if left_out[0] in policy.recall.recalled:
            break
    assert left_out[0] in policy.recall.recalled and left_out[0][2] in {r.id for r in opened}


def test_the_reach_screen_demands_the_iron_a_run_can_expect_to_need(capsys: pytest.CaptureFixture[str]) -> None:
    """A reach world must hold one iron cell for the pickaxe after the seal plus what a run
    mines before it (the measured rate in ``data/screen.json``); seed 13's world has 4 iron
    cells in all, so it is dropped at D = 3,000 (9 needed) and kept with the kit, which gives
    the pickaxes."""
    import math


    from mfm.cli import _screened
    from mfm.envs import load_task
    from mfm.envs.reach import SCREEN, ReachHarness, iron_needed, screen

    reach, kit = load_task("reach-3000"), load_task("reach-kit-10000")
    rate = SCREEN["iron_per_1000_steps"]
    assert iron_needed(reach.reach, reach.kit) == 1 + math.ceil(rate * 3000 / 1000) == 9
    assert iron_needed(load_task("reach-1000").reach) == 1 + math.ceil(rate)
    assert iron_needed(kit.reach, kit.kit) == 0
    h = ReachHarness(13, reach.reach)
    h.reset()
    world = h._env._world
    cells = int((world._mat_map == world._mat_ids["iron"]).sum())
    assert cells == 4
    assert screen(13, reach.reach, iron=cells) is None
    assert "4 iron cells" in (screen(13, reach.reach, iron=cells + 1) or "")
    assert _screened("reach-3000", [12, 13]) == [12]
    err = capsys.readouterr().err
    assert "dropped seed 13: 4 iron cells" in err and "kept 1 of 2 seeds (1 dropped, 1 of them for fewer than 9" in err
    assert _screened("reach-kit-10000", [13]) == [13]


def test_a_sweep_holds_perception_equal_and_results_print_affordances_seeds_and_commit(tmp_path: Path) -> None:
    """``mfm sweep --perception pixels`` gives every run the same perception; the sweep
    records its commit in ``sweeps.jsonl``, and ``mfm results`` prints the runs' affordances,
    the seed block with that commit, and the paired tests before the paper's tables."""
    from mfm.cli import main
    from mfm.sweep import source_commit

    out = tmp_path / "sweep"
    assert main(["sweep", "--task", "reach-1000", "--methods", "direct,vista", "--ablations", "no-budget",
                 "--seeds", "5", "--steps", "30", "--perception", "pixels", "--jobs", "1", "--out", str(out)]) == 0
    runs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert runs == ["reach-1000_direct_s5", "reach-1000_vista-no-budget_s5", "reach-1000_vista_s5"]
    for name in runs:
        assert json.loads((out / name / "run.json").read_text())["config"]["perception"] == "pixels"
    rec = lines(out / "sweeps.jsonl")
    assert len(rec) == 1 and rec[0]["commit"] == source_commit()[0] and sorted(rec[0]["runs"]) == runs
    text = subprocess.run([sys.executable, "-m", "mfm.cli", "results", str(out)], capture_output=True, text=True,
                          check=True).stdout
    heads = [ln for ln in text.splitlines() if ln.startswith("### ")]
    assert heads[:4] == ["### Affordances of these runs (from their run.json)", "### Seeds",
                         "### Sweeps that wrote here",
                         "### Paired comparisons over the same seeds (success: exact McNemar; steps: a failure at "
                         "its budget)"]
    assert "| vista no-budget | yes | yes | yes | yes | yes | - | turn | uncapped | pixels | 1 |" in text
    assert "| reach-1000 | vista | 1 | 5 | development |" in text
    assert f"from commit(s) {rec[0]['commit']}" in text
    assert "| reach-1000 | vista no-budget | vista | 1 |" in text
