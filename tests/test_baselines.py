"""Baselines and ablations on the same harness (issue 5), against the real game: each memory
mode records its method, keeps to its memory (checked from the turns' calls, the memory
writes and the state blocks), the comparison measures match an independent count, and the
sweep skips finished runs and survives a crashed one."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from loaders import open_run
from loaders.paper_measures import measure, near_chance, retargeting, retrieval_ages
from loaders.compare import report
from mfm.agent import RunConfig, run
from mfm.schema import IndexRow, TurnRow
from mfm import sweep
from mfm.sweep import Job, plan, run_sweep, state
from mfm.validate import validate

SEED, STEPS = 2, 300
"""Long enough for every mode to reach its milestones and use each of its tools (the checks
below hold from 200 steps on this seed); the eight runs take ~10 s."""
MODES = [("direct", ()), ("pro-long", ()), ("vista", ()), ("mfm", ()), ("mfm", ("no-frames",)),
         ("mfm", ("no-index",)), ("mfm", ("no-procedures",)), ("mfm", ("no-consolidation",))]
CONSOLIDATION_REASONS = ("start", "death", "every ")


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("modes")
    out = {}
    for method, abl in MODES:
        cfg = RunConfig(method=method, ablations=abl, seed=SEED, steps=STEPS, fixed_clock=True,
                        out=root / "_".join(["diamond", "-".join([method, *abl]), f"s{SEED}"]))
        run(cfg, command="test")
        out[" ".join([method, *abl])] = cfg.out
    return out


def calls(run_dir: Path) -> list[dict]:
    return [c for t in lines(run_dir / "turns.jsonl") for c in t["calls"]]


def writes(run_dir: Path) -> list[dict]:
    return lines(run_dir / "memory_writes.jsonl")


def test_every_mode_validates_and_records_its_method(runs: dict[str, Path]) -> None:
    for name, d in runs.items():
        c = validate(d, frames=False)
        assert not c.errors, (name, [str(e) for e in c.errors])
        m = json.loads((d / "run.json").read_text())
        method, *abl = name.split()
        assert m["method"] == method and m["ablations"] == abl and m["status"] == "finished"
        assert m["policy"] == "mfm-scripted" and m["run_id"] == d.name
        assert m["config"]["memory"]["label"] == name
        assert len(m["milestones"]) >= 4, name


def test_direct_has_no_memory(runs: dict[str, Path]) -> None:
    d = runs["direct"]
    assert calls(d) == [] and writes(d) == [] and not (d / "mine").exists()
    for t in lines(d / "turns.jsonl"):
        assert t["plan_before"] == [] and t["plan_after"] == []
        assert "recent:" not in t["note"] and "map:" not in t["note"] and "grid:" not in t["note"]


def test_pro_long_searches_only_by_grep_of_its_text_log(runs: dict[str, Path]) -> None:
    """PRO-LONG searches its past only by grep of ``logs.txt`` and reopens no frame; since
    issue 44 it has the notes, procedures and map every method with memory has."""
    d = runs["pro-long"]
    cs = calls(d)
    searches = [c for c in cs if c["tool"] == "search"]
    assert searches and all(c["args"]["file"] == "logs.txt" and "grep" in c["args"] for c in searches)
    assert not [c for c in cs if c["tool"] == "inspect"]
    paths = {w["path"] for w in writes(d)}
    assert {"mine/GUIDE.md", "mine/working.md"} <= paths
    assert all(p in ("mine/GUIDE.md", "mine/working.md") or p.startswith("mine/procedures/") for p in paths)
    m = json.loads((d / "run.json").read_text())["config"]["memory"]
    assert m["grid_routing"] is True and m["frames"] is None and m["search"] == "log"
    log = (d / "logs.txt").read_text()
    assert "[STATE] at (" in log and "collected wood at (" in log and "\n[SEEN] tree at (" in log


def test_vista_reads_frames_by_turn_and_writes_two_notes_files(runs: dict[str, Path]) -> None:
    d = runs["vista"]
    cs = calls(d)
    assert not [c for c in cs if c["tool"] == "search"]
    inspects = [c for c in cs if c["tool"] == "inspect"]
    assert inspects and all(c["args"]["by"] == "turn" for c in inspects)
    paths = {w["path"] for w in writes(d)}
    notes = {p for p in paths if not p.startswith("mine/procedures/")}
    assert notes == {"mine/GUIDE.md", "mine/working.md"}


def test_mfm_ablations_switch_off_one_component(runs: dict[str, Path]) -> None:
    full = calls(runs["mfm"])
    assert {"search", "inspect", "consolidate"} <= {c["tool"] for c in full}
    assert any(w["path"].startswith("mine/procedures/") for w in writes(runs["mfm"]))

    no_frames = calls(runs["mfm no-frames"])
    assert not [c for c in no_frames if c["tool"] == "inspect"]
    assert [c for c in no_frames if c["tool"] == "search" and c["args"].get("text")]

    no_index = calls(runs["mfm no-index"])
    assert not [c for c in no_index if c["tool"] == "search"]
    assert [c for c in no_index if c["tool"] == "inspect" and c["args"]["by"] == "turn"]

    assert not [w for w in writes(runs["mfm no-procedures"]) if w["path"].startswith("mine/procedures/")]
    assert not [c for c in calls(runs["mfm no-procedures"]) if "procedures/" in c["args"].get("path", "")]

    assert not [c for c in calls(runs["mfm no-consolidation"]) if c["tool"] == "consolidate"]
    reasons = [w["reason"] for w in writes(runs["mfm no-consolidation"])]
    assert reasons and not [r for r in reasons if r.startswith(CONSOLIDATION_REASONS)]
    assert [r for r in (w["reason"] for w in writes(runs["mfm"])) if r.startswith(CONSOLIDATION_REASONS)]


def test_ablations_only_apply_to_mfm_but_the_uncapped_arm_to_every_method_with_notes() -> None:
    with pytest.raises(ValueError):
        RunConfig(method="vista", ablations=("no-frames",))
    with pytest.raises(ValueError):
        RunConfig(method="direct", ablations=("no-budget",))
    assert RunConfig(method="pro-long", ablations=("no-budget",), seed=1).run_name == "diamond_pro-long-no-budget_s1"
    with pytest.raises(ValueError):
        RunConfig(method="mfm", ablations=("no-index", "no-index"))
    assert RunConfig(method="mfm", ablations=("no-index",), seed=3).run_name == "diamond_mfm-no-index_s3"


def test_near_chance_is_the_exact_draw_probability() -> None:
    for n, m, k in [(7, 2, 3), (10, 0, 4), (5, 5, 2), (6, 3, 6), (9, 4, 1)]:
        draws = list(itertools.combinations(range(n), k))
        brute = sum(any(i < m for i in c) for c in draws) / len(draws)
        assert math.isclose(near_chance(n, m, k), brute)
    assert near_chance(0, 0, 3) == 0.0


def test_retargeting_matches_an_independent_count(runs: dict[str, Path]) -> None:
    for name in ("mfm", "vista"):
        d = runs[name]
        turns_raw = lines(d / "turns.jsonl")
        index_raw = lines(d / "index.jsonl")
        pos = {r["id"]: (r["x"], r["y"]) for r in index_raw}
        counts = {"it": 0, "ir": 0, "ot": 0, "or": 0, "new": 0, "near": 0}
        for t in turns_raw:
            eps = {c["args"]["episode"] for c in t["calls"] if c["tool"] == "inspect" and c["args"]["frames"] > 0}
            new = [g for g in t["targets"] if not g["in_plan"]]
            if eps:
                counts["it"] += 1
                counts["ir"] += 1 if new else 0
                for g in new:
                    counts["new"] += 1
                    if min((g["x"] - pos[e][0]) ** 2 + (g["y"] - pos[e][1]) ** 2 for e in eps) <= 64:
                        counts["near"] += 1
            else:
                counts["ot"] += 1
                counts["or"] += 1 if new else 0
        r = retargeting([TurnRow.from_dict(t) for t in turns_raw], [IndexRow.from_dict(x) for x in index_raw])
        assert (r.inspect_turns, r.inspect_retargets, r.other_turns, r.other_retargets, r.new_targets, r.near) == (
            counts["it"], counts["ir"], counts["ot"], counts["or"], counts["new"], counts["near"]), name
        assert counts["it"] > 0 and counts["new"] > 0
        assert 0.0 <= r.null_rate <= 1.0 and r.near <= r.new_targets


def test_retrieval_ages_and_run_measures(runs: dict[str, Path]) -> None:
    d = runs["pro-long"]
    turns = [TurnRow.from_dict(t) for t in lines(d / "turns.jsonl")]
    index = [IndexRow.from_dict(x) for x in lines(d / "index.jsonl")]
    ages = retrieval_ages(turns, index)
    expected = sum(len(c["result"]["ids"]) for t in lines(d / "turns.jsonl") for c in t["calls"] if c["tool"] == "search")
    assert len(ages) == expected > 0 and all(a >= 0 and tool == "search" for tool, a in ages)
    m = measure(open_run(runs["mfm"]))
    raw = json.loads((runs["mfm"] / "run.json").read_text())
    assert m.method == "mfm" and m.milestones == len(raw["milestones"]) and m.steps == raw["last_step"]
    assert m.turns == len(lines(runs["mfm"] / "turns.jsonl")) and m.tool_calls == len(calls(runs["mfm"]))
    text = report(next(iter(runs.values())).parent)
    for name in ("direct", "pro-long", "vista", "mfm no-frames", "null rate", "env steps/turn", "median age"):
        assert name in text


LIMIT = 3600.0
"""The sweep's time limit in :func:`test_sweep_skips_finished_runs_and_survives_crashes`: far
beyond what any of its jobs takes on a loaded machine; the long job is made to overrun it
(:func:`overrun`), so what the test checks never depends on the machine's speed."""


def overrun(monkeypatch: pytest.MonkeyPatch, job: Job) -> None:
    """Make ``job`` overrun the sweep's time limit once it is under way: when the sweep starts
    its process (the first time), wait until its ``run.json`` records steps, then have the
    sweep's clock (``mfm.sweep.time``) date the job's start ``LIMIT`` + 1 s back. The other
    jobs, and a later run of the same job, keep the real clock."""
    back, started = [0.0], []

    def popen(cmd: list[str], **kw):
        proc = subprocess.Popen(cmd, **kw)
        if str(job.out) in cmd and not started:
            started.append(proc)
            hang = time.monotonic() + 600  # only a guard against a hang, not a limit on speed
            while state(job)[1] == 0 and proc.poll() is None and time.monotonic() < hang:
                time.sleep(0.1)
            back[0] = LIMIT + 1
        return proc

    def monotonic() -> float:
        now = time.monotonic() - back[0]
        back[0] = 0.0
        return now

    monkeypatch.setattr(sweep, "subprocess", SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT))
    monkeypatch.setattr(sweep, "time", SimpleNamespace(monotonic=monotonic, sleep=time.sleep))


def test_sweep_skips_finished_runs_and_survives_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = plan("diamond", ["direct", "mfm"], [0], tmp_path, steps=40)
    bad = Job("diamond", "mfm", 1, tmp_path / "diamond_mfm_s1", 40, ("--steps", "0"))
    killed = Job("diamond", "direct", 5, tmp_path / "diamond_direct_s5", 100_000)
    overrun(monkeypatch, killed)
    final = run_sweep(jobs + [bad, killed], parallel=2, poll=0.2, timeout=LIMIT, stream=open(tmp_path / "p.txt", "w"))
    assert final["diamond_direct_s0"] == "finished" and final["diamond_mfm_s0"] == "finished"
    assert final["diamond_mfm_s1"].startswith("crashed (process exited with code 2")
    assert final["diamond_direct_s5"].startswith(f"crashed (killed after {LIMIT:g} s")
    m = json.loads((tmp_path / "diamond_direct_s5" / "run.json").read_text())
    assert m["status"] == "crashed" and "killed" in m["end_reason"] and m["last_step"] > 0
    assert state(jobs[0])[0] == "finished" and "sweep: 4/4 runs after " in (tmp_path / "p.txt").read_text()
    again = run_sweep(jobs + [killed], parallel=2, poll=0.2, stream=open(tmp_path / "p2.txt", "w"))
    assert again["diamond_direct_s0"] == "skipped (finished)" and again["diamond_mfm_s0"] == "skipped (finished)"
    assert again["diamond_direct_s5"].startswith("skipped (crashed")
    retried = run_sweep([Job("diamond", "direct", 5, tmp_path / "diamond_direct_s5", 30)], poll=0.2, retry=True,
                        stream=open(tmp_path / "p3.txt", "w"))
    assert retried == {"diamond_direct_s5": "finished"}
    assert (tmp_path / ".failed" / "diamond_direct_s5.1" / "run.json").exists()
