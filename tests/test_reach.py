"""The temporal-reach task family, the index's content half and the notes budget (issue 23).

The world arrangement and the seal are checked on the real game (crafter's own material map,
the rendered frame decoded); ``seen.jsonl`` against the run's stored frames and trace; the
budget on a real agent memory folder.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mfm.agent import RunConfig, Runner
from mfm.agent.tools import note_seen
from mfm.envs import CrafterHarness, Reach, ReachHarness, decode_frame, estimate_daylight, load_task, make_harness
from mfm.envs.crafter_env import SPAWN
from mfm.envs.rules import CONTENT, LOCAL_VIEW
from mfm.memory import AgentMemory, ContentIndex, Fact, consolidate
from mfm.memory.consolidation import GUIDE, parse_guide, render_guide
from mfm.schema import SeenRow
from mfm.validate import validate
from raw import jsonl, stored_frame

HALF = (LOCAL_VIEW[0] // 2, LOCAL_VIEW[1] // 2)


def _materials(h: CrafterHarness) -> np.ndarray:
    """TEST-ONLY: crafter's material map as names (game internals, never given to the agent)."""
    world = h._env._world
    names = np.array([world._mat_names.get(i) for i in range(max(world._mat_names) + 1)], dtype=object)
    return names[world._mat_map]


def _decoded(frame: np.ndarray) -> list[list[str]]:
    return decode_frame(frame, estimate_daylight(frame))


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_a_reach_world_holds_one_target_shown_in_the_first_frame(seed: int) -> None:
    """One diamond in the whole world, in the first frame's view (decoded from its pixels), the
    start 14-22 cells from the centre where every respawn goes, out of the view from there;
    the same world on every reset, and crafter's world for the seed everywhere else."""
    task = load_task("reach-3000")
    h = make_harness(seed, task)
    assert isinstance(h, ReachHarness)
    p = h.reset()
    mats = _materials(h)
    cells = list(zip(*np.nonzero(mats == "diamond")))
    assert len(cells) == 1
    target = (int(cells[0][0]), int(cells[0][1]))
    dx, dy = target[0] - p.pos[0], target[1] - p.pos[1]
    assert abs(dx) <= HALF[0] and abs(dy) <= HALF[1]
    assert _decoded(p.frame)[dx + HALF[0]][dy + HALF[1]] == "diamond"
    lo, hi = task.reach.distance
    assert lo <= abs(p.pos[0] - SPAWN[0]) + abs(p.pos[1] - SPAWN[1]) <= hi
    assert abs(target[0] - SPAWN[0]) > HALF[0] or abs(target[1] - SPAWN[1]) > HALF[1]
    again = h.reset()
    assert again.pos == p.pos and np.array_equal(_materials(h), mats) and np.array_equal(again.frame, p.frame)
    plain = CrafterHarness(seed)
    plain.reset()
    base = _materials(plain)
    changed = {(int(x), int(y)) for x, y in zip(*np.nonzero(base != mats))}
    assert target in changed and all(base[c] == "diamond" and mats[c] == "stone" for c in changed - {target})


def _facing_target(h: ReachHarness) -> None:
    """TEST-ONLY: put the player beside the target, facing it, holding an iron pickaxe."""
    env = h._env
    player, world = env._player, env._world
    tx, ty = h.site.target
    for fx, fy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        here = (tx - fx, ty - fy)
        if world[here][0] == "grass" and world[here][1] is None:
            world.move(player, here)
            player.facing = (fx, fy)
            break
    else:
        raise AssertionError("no free grass beside the target")
    player.inventory["iron_pickaxe"] = 1


@pytest.mark.parametrize("delay", [0, 25])
def test_the_target_is_sealed_until_the_delay(delay: int) -> None:
    """``do`` on the target does nothing before env step ``delay`` (the diamond stays, no
    achievement); at the delay the same ``do`` collects it. With no delay it is collected at once."""
    h = ReachHarness(2, Reach("diamond", delay))
    h.reset()
    _facing_target(h)
    target = h.site.target
    while h.step_count + 1 < delay:
        r = h.step("do")
        assert _materials(h)[target] == "diamond" and "collect_diamond" not in r.achievements_unlocked
        assert r.perception.inventory["diamond"] == 0
    r = h.step("do")
    assert r.step >= delay
    assert "collect_diamond" in r.achievements_unlocked and _materials(h)[target] == "path"


def test_seen_rows_are_what_the_stored_frames_show(tmp_path: Path) -> None:
    """Every episode's ``seen.jsonl`` rows name, per material, exactly the cells its stored
    frames show (decoded from the WebP strips, placed by the positions of ``steps.jsonl``),
    the initial episode's from its observation image; all by day, where every tile is legible."""
    out = Runner(RunConfig(task="reach-1000", method="mfm", seed=1, steps=140, out=tmp_path / "run",
                           fixed_clock=True)).run()
    assert not validate(out).errors
    seen: dict[str, dict[str, set]] = {}
    for row in jsonl(out / "seen.jsonl"):
        assert row["material"] in CONTENT
        cells = seen.setdefault(row["episode"], {}).setdefault(row["material"], set())
        assert not cells & {tuple(c) for c in row["cells"]}, "a cell listed twice for one episode"
        cells |= {tuple(c) for c in row["cells"]}
    pos = {r["step"]: (r["x"], r["y"]) for r in jsonl(out / "steps.jsonl")}
    index = jsonl(out / "index.jsonl")
    assert index[-1]["last_step"] < 148, "the test needs daylight throughout"
    for ep in index:
        frames = [(ep["first_step"] + 1 + i, stored_frame(out, ep["first_step"] + 1 + i)) for i in range(ep["frames"])]
        if ep["kind"] == "initial":
            image = np.asarray(Image.open(out / ep["image"]).convert("RGB"))
            frames = [(0, image)]
            pos[0] = (int(ep["x"]), int(ep["y"]))
        shown: dict[str, set] = {}
        for step, frame in frames:
            for c, column in enumerate(_decoded(frame)):
                for r, name in enumerate(column):
                    if name in CONTENT:
                        shown.setdefault(name, set()).add((pos[step][0] + c - HALF[0], pos[step][1] + r - HALF[1]))
        assert seen.get(ep["id"], {}) == shown, ep["id"]
    first = seen["ep_000000"]["diamond"]
    assert len(first) == 1


def test_the_content_index_finds_by_material_and_place_over_all_history() -> None:
    """Cells by material, nearest first (or newest first without a place), each with the latest
    episode that showed it as of a step and the step it was first seen; no recency window."""
    rows = [SeenRow("ep_000001", 0, 0, 9, "diamond", ([5, 5],)),
            SeenRow("ep_000001", 0, 0, 9, "iron", ([6, 5], [40, 40])),
            SeenRow("ep_005000", 2, 60_000, 60_010, "iron", ([40, 40],)),
            SeenRow("ep_005001", 2, 60_010, 60_020, "diamond", ([30, 30],))]
    index = ContentIndex(rows[:2])
    for r in rows[2:]:
        index.append(r)
    assert index.materials() == ["diamond", "iron"]
    near = index.find("diamond", near=(28.0, 28.0))
    assert [(h.cell, h.episode) for h in near] == [((30, 30), "ep_005001"), ((5, 5), "ep_000001")]
    old = index.find("diamond", near=(28.0, 28.0), as_of_step=100)
    assert [(h.cell, h.episode, h.last_step) for h in old] == [((5, 5), "ep_000001", 9)]
    iron = {h.cell: h for h in index.find("iron")}
    assert iron[(40, 40)].episode == "ep_005000" and iron[(40, 40)].first_seen == 0
    assert index.find("iron", near=(6.0, 5.0), radius=2.0)[0].cell == (6, 5)
    assert len(index.find("iron", near=(6.0, 5.0), radius=2.0)) == 1
    assert index.find("lava") == []


def test_note_seen_reads_only_legible_tiles_at_night(tmp_path: Path) -> None:
    """By day every content tile of the view is noted; in the dark only the central 5x5."""
    h = CrafterHarness(0)
    p = h.reset()
    day: dict = {}
    note_seen(p, day)
    expected: dict = {}
    for x, y, name in p.local_cells():
        if name in CONTENT:
            expected.setdefault(name, set()).add((x, y))
    assert {k: set(v) for k, v in day.items()} == expected
    dark: dict = {}
    note_seen(dataclasses.replace(p, daylight=0.1), dark)
    for name, cells in dark.items():
        assert all(abs(x - p.pos[0]) <= 2 and abs(y - p.pos[1]) <= 2 for x, y in cells)
    assert sum(map(len, dark.values())) < sum(map(len, day.values()))


def test_a_notes_budget_evicts_the_facts_written_longest_ago(tmp_path: Path) -> None:
    """Over the budget, the least recently written facts go first (a revised fact counts as
    written anew); the file then fits the budget, and the write's reason says what was evicted."""
    memory = AgentMemory(tmp_path / "run")
    facts = [Fact(f"res:tree@{i},{i}", f"tree at ({i}, {i})", "Resources", (f"ep_{i:06d}",)) for i in range(12)]
    budget = 80
    consolidate(memory, facts[:6], step=1, reason="seen", budget_tokens=budget)
    again = consolidate(memory, [Fact("res:tree@0,0", "tree at (0, 0), again", "Resources", ("ep_000100",))],
                        step=2, reason="seen again", budget_tokens=budget)
    assert again.revised == ["res:tree@0,0"] and not again.evicted
    rep = consolidate(memory, facts[6:], step=3, reason="more", budget_tokens=budget)
    text = memory.read(GUIDE)
    assert len(text) <= budget * 4
    kept = list(parse_guide(text))
    assert rep.evicted and not set(rep.evicted) & set(kept)
    order = ["res:tree@1,1", "res:tree@2,2", "res:tree@3,3", "res:tree@4,4", "res:tree@5,5", "res:tree@0,0"] + \
        [f.key for f in facts[6:]]
    assert rep.evicted == order[:len(rep.evicted)] and kept == order[len(rep.evicted):]
    last = [json.loads(line) for line in (tmp_path / "run" / "memory_writes.jsonl").read_text().splitlines()][-1]
    assert f"{len(rep.evicted)} evicted" in last["reason"]
    unbounded = consolidate(memory, facts[:6], step=4, reason="all again")
    assert not unbounded.evicted and len(parse_guide(memory.read(GUIDE))) == len(kept) + len(rep.evicted)
    assert len(render_guide(parse_guide(memory.read(GUIDE)).values())) > budget * 4


def test_the_budget_is_the_tasks_and_the_same_for_every_method() -> None:
    """Reach tasks cap GUIDE.md for every method alike; ``no-budget`` lifts it for mfm; the
    diamond task has none."""
    cap = load_task("reach-1000").notes_tokens
    assert cap is not None
    for method in ("mfm", "vista", "pro-long", "direct"):
        assert RunConfig(task="reach-1000", method=method).notes_tokens == cap
    assert RunConfig(task="reach-1000", ablations=("no-budget",)).notes_tokens is None
    assert RunConfig(task="diamond").notes_tokens is None
    assert RunConfig(task="reach-1000").mode.content and not RunConfig(task="reach-1000", method="vista").mode.content
    assert not RunConfig(task="reach-1000", ablations=("no-content",)).mode.content


REACH_SAMPLE = Path(__file__).resolve().parent.parent / "sample_runs" / "reach-1000_mfm_s0"


def test_the_reach_sample_finds_its_diamond_again_in_old_frames() -> None:
    """The shipped reach run, read from its files: the diamond, seen in the first frames, is
    evicted from the budgeted GUIDE.md; after the seal opens, a content search of the index
    names an old episode whose ``seen.jsonl`` rows hold the diamond's cell, its frames are
    opened and show it, and the diamond is collected, from a recall more than 500 steps old."""
    run = json.loads((REACH_SAMPLE / "run.json").read_text())
    delay = load_task(run["task"]).reach.delay
    got = run["milestones"]["collect_diamond"]
    assert got >= delay
    recalls = [r for r in run["config"]["agent_summary"]["recalls"] if r["via"] == "frames" and r["step"] <= got]
    assert recalls and recalls[-1]["age"] > 500
    recall = recalls[-1]
    cell = [recall["x"], recall["y"]]
    source = recall["source"]
    seen = [r for r in jsonl(REACH_SAMPLE / "seen.jsonl") if r["episode"] == source and r["material"] == "diamond"]
    assert seen and cell in seen[0]["cells"]
    index = {r["id"]: r for r in jsonl(REACH_SAMPLE / "index.jsonl")}
    assert recall["step"] - index[source]["last_step"] == recall["age"]
    turns = jsonl(REACH_SAMPLE / "turns.jsonl")
    at = next(t for t in turns if t["first_step"] == recall["step"])
    searched = [c for c in at["calls"] if c["tool"] == "search" and c["args"].get("seen") == "diamond"]
    assert searched and source in searched[0]["result"]["ids"]
    opened = [c for c in at["calls"] if c["tool"] == "inspect" and c["args"]["episode"] == source]
    assert opened and opened[0]["args"]["by"] == "content"
    assert {"name": "diamond", "x": cell[0], "y": cell[1]} in [
        {k: f[k] for k in ("name", "x", "y")} for f in opened[0]["result"]["found"]]
    key = f"res:diamond@{cell[0]},{cell[1]}"
    evicted = [t["first_step"] for t in turns if t["first_step"] < recall["step"]
               for c in t["calls"] if key in (c.get("result") or {}).get("evicted", [])]
    assert evicted, "the diamond was never evicted from GUIDE.md before it was recalled"


def test_the_screen_keeps_open_worlds_and_drops_a_walled_in_centre(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed's reach world is kept when the tech tree and the target can be reached from the
    centre; walled in by water (a ring around the centre, put in for the test) it is dropped,
    and the reason names what cannot be reached."""
    from mfm.envs import reach as reach_module

    spec = load_task("reach-3000").reach
    assert reach_module.screen(4, spec) is None
    arrange = reach_module.arrange

    def walled(world, player, seed, r):
        site = arrange(world, player, seed, r)
        for x in range(SPAWN[0] - 3, SPAWN[0] + 4):
            for y in range(SPAWN[1] - 3, SPAWN[1] + 4):
                if max(abs(x - SPAWN[0]), abs(y - SPAWN[1])) == 3:
                    world[(x, y)] = "water"
        return site

    monkeypatch.setattr(reach_module, "arrange", walled)
    why = reach_module.screen(4, spec)
    assert why is not None and "reachable from the centre" in why and "iron" in why


@pytest.mark.parametrize("n", [5, 10, 30])
@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9])
def test_the_wilson_interval_covers_the_true_rate(n: int, p: float) -> None:
    """Over every outcome k of n trials (binomial probabilities, exactly), the 95% interval
    holds the true rate at least 90% of the time (Wilson's coverage dips a few points below
    95% at small n); each interval holds k/n and lies in [0, 1]."""
    from math import comb

    from loaders.paper_measures import wilson

    cover = 0.0
    for k in range(n + 1):
        lo, hi = wilson(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
        if lo <= p <= hi:
            cover += comb(n, k) * p ** k * (1 - p) ** (n - k)
    assert cover >= 0.90


@pytest.mark.parametrize(("df", "table"), [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (9, 2.262),
                                           (10, 2.228), (20, 2.086), (29, 2.045)])
def test_t_quantiles_match_the_printed_table(df: int, table: float) -> None:
    """The 97.5% quantiles of Student's t used for the steps' intervals, against the values
    every statistics table prints (three decimals)."""
    from loaders.paper_measures import t975

    assert abs(t975(df) - table) < 0.004


def test_the_reach_table_counts_diamonds_and_recalls_from_the_run_files(tmp_path: Path) -> None:
    """Three copies of the reach sample as three seeds, one without its diamond: the table's
    counts, steps and the age of the recall that led to each diamond are those of the
    ``run.json`` files, read with json."""
    import shutil

    from loaders.compare import measures
    from loaders.paper_measures import reach_success_table

    for seed in (0, 1, 2):
        out = tmp_path / f"reach-1000_mfm_s{seed}"
        shutil.copytree(REACH_SAMPLE, out)
        run = json.loads((out / "run.json").read_text())
        run["seed"], run["run_id"] = seed, out.name
        if seed == 2:
            run["milestones"].pop("collect_diamond")
        (out / "run.json").write_text(json.dumps(run))
    raw = [json.loads((tmp_path / f"reach-1000_mfm_s{s}" / "run.json").read_text()) for s in (0, 1, 2)]
    got = [r for r in raw if "collect_diamond" in r["milestones"]]
    table = reach_success_table(measures(tmp_path))
    row = table.iloc[0]
    assert (row["delay"], row["method"], row["seeds"], row["successes"]) == (1000, "mfm", 3, len(got))
    assert row["steps_mean"] == sum(r["milestones"]["collect_diamond"] for r in got) / len(got)
    ages = [[c for c in r["config"]["agent_summary"]["recalls"] if c["step"] <= r["milestones"]["collect_diamond"]][-1]
            ["age"] for r in got]
    assert row["recall_ages"] == ages and row["by_frames"] == len(got)


@pytest.mark.slow
def test_a_larger_world_is_played_and_recorded_at_its_size(tmp_path: Path) -> None:
    """``area=128``: crafter builds a 128x128 world, the player starts and respawns at its
    centre, routes are planned past the old 64-tile edge, the explore lattice spans the whole
    world, and a run records cells beyond 64 that validate against the size in its manifest."""
    from mfm.agent.explore import EDGE, lattice
    from mfm.agent.mapping import NavMap, path_to

    h = CrafterHarness(0, area=(128, 128))
    p = h.reset()
    assert p.pos == (64, 64) and p.area == (128, 128) and _materials(h).shape == (128, 128)
    route = path_to(NavMap(area=p.area), p.pos, (100, 100), set(), False)
    assert route and route[-1] == (100, 100)
    assert path_to(NavMap(), (60, 60), (100, 100), set(), False) is None, "a 64-tile map has no cell (100, 100)"
    points = lattice((128, 128))
    assert all(EDGE <= v < 128 - EDGE for c in points for v in c) and max(x for x, _ in points) > 128 - 2 * EDGE
    out = Runner(RunConfig(task="diamond", seed=0, steps=120, out=tmp_path / "run", fixed_clock=True, area=128)).run()
    run = json.loads((out / "run.json").read_text())
    assert run["run_id"].endswith("_a128") and run["config"]["area"] == 128
    cells = [c for r in jsonl(out / "seen.jsonl") for c in r["cells"]]
    assert max(max(c) for c in cells) >= 64
    result = validate(out)
    assert not result.errors and not [q for q in result.problems if "outside" in q.message]


@pytest.mark.parametrize("step, source, life, source_life", [
    (50, "ep_000001", 0, 0),        # before any death, from the first life
    (400, "ep_000001", 1, 0),       # after the respawn at 300: an earlier life's episode
    (300, "ep_000009", 1, 1),       # the respawn's own step counts as the new life
    (900, "ep_000020", 2, None),    # a source the index does not hold
    (900, "inherited:ep_000001", 2, None),  # an inherited game's episode has no life here
])
def test_a_recall_knows_its_life_and_the_life_that_showed_the_place(step: int, source: str, life: int,
                                                                    source_life: int | None) -> None:
    from types import SimpleNamespace

    from loaders.paper_measures import recall_lives

    index = [SimpleNamespace(id="ep_000001", life=0), SimpleNamespace(id="ep_000009", life=1)]
    out = recall_lives([{"name": "diamond", "step": step, "source": source}], index, [300, 700])
    assert out == [{"name": "diamond", "step": step, "source": source, "life": life, "source_life": source_life}]


def _short_kit_game(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: int, steps: int, seed: int = 0,
                    **task: Any) -> Path:
    """A ``reach-kit-10000`` game with the delay (and any other task field) changed."""
    import mfm.agent.runner as runner

    base = load_task("reach-kit-10000")
    short = dataclasses.replace(base, reach=dataclasses.replace(base.reach, delay=delay), **task)
    real = runner.load_task
    monkeypatch.setattr(runner, "load_task", lambda name: short if name == base.name else real(name))
    return Runner(RunConfig(task=base.name, seed=seed, steps=steps, out=tmp_path / "run", fixed_clock=True)).run()


def test_a_kit_reach_game_does_other_work_until_the_seal_opens(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``reach-kit-*`` (the pickaxes in hand in every life, the only milestone the diamond):
    no turn goes for the diamond before the delay, though it is in view at the start; after
    it the diamond is collected. Read from the run's turns and manifest; the delay shortened
    to 300 steps so the game is short."""
    out = _short_kit_game(tmp_path, monkeypatch, 300, 1500)
    turns = jsonl(out / "turns.jsonl")
    decisions = [(t["first_step"], t["note"].rsplit("decision: ", 1)[-1]) for t in turns]
    assert "diamond=1" in turns[0]["note"], "the diamond is in view at the start"
    going = [s for s, d in decisions if d.startswith(("find diamond", "find a diamond"))]
    assert going and min(going) >= 299
    steps = json.loads((out / "run.json").read_text())["milestones"]
    assert steps.get("collect_diamond", -1) >= 300


@pytest.mark.parametrize("task, d", [("reach-1000", 1000), ("reach-kit-10000", 10000), ("ore-iron", None),
                                     ("reach-kit-x", None), ("diamond", None)])
def test_the_delay_is_read_from_the_task_name(task: str, d: int | None) -> None:
    from loaders.paper_measures import delay

    assert delay(task) == d


def test_a_kit_task_gets_its_own_row_beside_the_plain_task_of_its_delay(tmp_path: Path) -> None:
    """The same run filed under ``reach-1000`` and ``reach-kit-1000``: two rows of D = 1,000,
    the plain task first, each counting its own run."""
    import shutil

    from loaders.compare import measures
    from loaders.paper_measures import reach_success_table
    from loaders.paper_tables import reach_success

    for task in ("reach-1000", "reach-kit-1000"):
        out = tmp_path / f"{task}_mfm_s0"
        shutil.copytree(REACH_SAMPLE, out)
        run = json.loads((out / "run.json").read_text())
        run["task"], run["run_id"] = task, out.name
        (out / "run.json").write_text(json.dumps(run))
    ms = measures(tmp_path)
    table = reach_success_table(ms)
    assert list(zip(table["task"], table["delay"], table["seeds"])) == [("reach-1000", 1000, 1),
                                                                        ("reach-kit-1000", 1000, 1)]
    assert list(reach_success(ms)["D"]) == ["1000", "1000 (kit)"]


def test_a_lookup_of_the_frames_may_be_made_again_once_the_note_is_gone(tmp_path: Path) -> None:
    """The content search names the latest episode that showed a place. A lookup of that
    episode for that thing is not made twice in a row, but it is made again
    ``RECALL_AGAIN`` steps later while the place is not in the notes (evicted over the
    budget): before, it was barred for good, and with the place's note evicted the agent
    explored until its budget ran out (``reach-kit-10000`` seed 9, 12,000 steps)."""
    from mfm.agent.recall import RECALL_AGAIN

    runner = Runner(RunConfig(task="reach-kit-10000", seed=9, steps=40, out=tmp_path / "run", fixed_clock=True))
    runner.run()
    policy, tools, p = runner.policy, runner.tools, runner.harness.perception
    shown = {r["episode"] for r in jsonl(tmp_path / "run" / "seen.jsonl") if r["material"] == "diamond"}
    policy.recall.recalled.clear()
    first = [e.id for e in policy.recall.by_content(p, {"diamond"}, tools, {})]
    assert first and set(first) <= shown
    assert policy.recall.by_content(dataclasses.replace(p, step=p.step + RECALL_AGAIN - 1), {"diamond"}, tools, {}) == []
    later = policy.recall.by_content(dataclasses.replace(p, step=p.step + RECALL_AGAIN), {"diamond"}, tools, {})
    assert [e.id for e in later] == first
