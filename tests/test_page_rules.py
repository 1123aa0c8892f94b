"""The rules the pages used to hold, now plain functions of ``loaders`` (issue 45: pages only
lay out), checked without Streamlit against the raw files of the sample runs read with json
and PIL (``tests/raw.py``)."""
from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from raw import action_of, collect_failure, jsonl, stored_frame

from loaders import (
    agent_calls,
    chart_data,
    echo,
    frame_images,
    lookups,
    runs_summary,
    spatial_data,
    timeline_data,
)
from loaders import analysis_pages as ap
from loaders import failures as fl
from loaders import notes as notes_mod
from loaders import provenance as pv
from loaders import search as sr
from loaders.run import open_run
from mfm.memory.retrieval import crop

SAMPLES = REPO / "sample_runs"
MFM = SAMPLES / "diamond_mfm_s2"
AGENT_RUNS = ("diamond_mfm_s2", "reach-1000_mfm_s0")


@cache
def raw(run_dir: Path, name: str) -> list[dict]:
    return jsonl(run_dir / name) if (run_dir / name).is_file() else []


# Timeline


@pytest.mark.parametrize("name", AGENT_RUNS)
def test_an_episodes_marks_are_its_milestones_deaths_and_its_turns_decisions(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marks of an episode (``chart_data.episode_marks``) hold the milestones and deaths the
    raw files assign to it (their ``episode`` field), and, for the first episode of a turn, the
    searches and inspections of that turn (turns.jsonl), an episode that starts no turn none:
    one row each, even where the Timeline's chart bins the run's marks."""
    run_dir = SAMPLES / name
    run = open_run(run_dir)
    monkeypatch.setattr(chart_data, "TIMELINE_MARKS", 3)
    assert (chart_data.timeline(run).marks["count"] > 1).any(), "the chart's marks are binned (else this proves little)"
    index = {r["id"]: r for r in raw(run_dir, "index.jsonl")}
    milestones = Counter(m["episode"] for m in raw(run_dir, "milestones.jsonl"))
    deaths = Counter(e["episode"] for e in raw(run_dir, "lives.jsonl") if e["event"] == "death")
    turns = raw(run_dir, "turns.jsonl")
    starts = Counter((t["life"], t["first_step"]) for t in turns)
    decided: dict[str, Counter] = {}
    for t in turns:
        first = index.get(t["episodes"][0]) if t["episodes"] else None
        if first and starts[(t["life"], t["first_step"])] == 1 and first["last_step"] > first["first_step"] \
                and first["first_step"] == t["first_step"]:
            decided[first["id"]] = Counter(c["tool"] for c in t["calls"] if c["tool"] in ("search", "inspect"))
    checked = [e for e in index if milestones[e] or deaths[e] or e in decided]
    assert len(checked) > 20 and any(decided.values())
    for ep in checked:
        r = index[ep]
        got = chart_data.episode_marks(run, r["first_step"], r["last_step"], r["life"])
        assert (got["count"] == 1).all(), ep
        kinds = Counter(got["kind"])
        assert kinds["milestone"] == milestones[ep], ep
        assert kinds["death"] == deaths[ep], ep
        if ep in decided:
            assert (kinds["search"], kinds["inspect"]) == (decided[ep]["search"], decided[ep]["inspect"]), ep
        elif (r["life"], r["first_step"]) not in starts:
            assert kinds["search"] == kinds["inspect"] == 0, f"{ep} starts no turn"


@pytest.mark.parametrize("window", [(0, 0), (1, 40), (300, 310), (1200, 5000)])
def test_episodes_in_range_are_those_whose_steps_meet_the_range(window: tuple[int, int]) -> None:
    """``timeline_data.episodes_in_range`` keeps the index rows whose span meets ``lo..hi``, in
    index order."""
    lo, hi = window
    rows = raw(MFM, "index.jsonl")
    want = [r["id"] for r in rows if max(r["first_step"], lo) <= min(r["last_step"], hi)]
    got = timeline_data.episodes_in_range(open_run(MFM).episodes(), lo, hi)
    assert list(got["id"]) == want


# Frames


def _first_turn_steps(run_dir: Path) -> dict[int, int]:
    return {t["turn"]: t["first_step"] for t in raw(run_dir, "turns.jsonl")}


@pytest.mark.parametrize("name", AGENT_RUNS)
def test_each_inspection_is_found_by_the_two_frames_it_compared(name: str) -> None:
    """For every inspect call of turns.jsonl, the frame the Frames page opens for it
    (``agent_calls.inspected_frame``) is of the episode the call named, and the pair (that
    frame, the frame of the turn's first step) is recognised as an inspection of that turn's
    step (``agent_calls.inspection_between``); a pair no inspection compared is not."""
    run_dir = SAMPLES / name
    ins = agent_calls.run_inspections(open_run(run_dir))
    calls = [(t["turn"], c["args"]["episode"]) for t in raw(run_dir, "turns.jsonl") for c in t["calls"]
             if c["tool"] == "inspect"]
    assert len(ins) == len(calls) > 0
    starts = _first_turn_steps(run_dir)
    compared = {(int(r["step"]), int(r["target_step"])) for _, r in ins.iterrows()}
    for (turn, episode), (_, row) in zip(calls, ins.iterrows()):
        got = agent_calls.inspected_frame(row)
        assert (got.inherited, got.episode) == (False, episode)
        hit = agent_calls.inspection_between(ins, got.step, got.episode, starts[turn])
        assert hit is not None and hit["step"] == starts[turn] and hit["target_step"] == got.step
        if (starts[turn], got.step + 1) not in compared:
            assert agent_calls.inspection_between(ins, got.step + 1, None, starts[turn]) is None
        assert agent_calls.inspection_between(ins, got.step, got.episode, None) is None


def test_an_inspection_of_an_end_observation_matches_by_episode_and_inherited_ones_never() -> None:
    """An inspection that opened an episode's end observation is found by that episode, not by
    a step; one of an inherited episode is read from the copy of its run and never matches two
    frames of this run."""
    ins = pd.DataFrame({"turn": [4, 5], "life": [0, 0], "step": [30, 40], "episode": ["ep_000003", "inherited:ep_000009"],
                        "target_step": pd.array([None, 12], dtype="Int64"), "target_life": pd.array([0, 0], dtype="Int64"),
                        "inherited": [False, True], "retrieved": ["", ""], "label": ["a", "b"]})
    assert agent_calls.inspection_between(ins, None, "ep_000003", 30)["turn"] == 4
    assert agent_calls.inspection_between(ins, 12, None, 30) is None
    assert agent_calls.inspection_between(ins, 12, None, 40) is None
    assert agent_calls.inspected_frame(ins.iloc[0]) == agent_calls.InspectedFrame(False, "ep_000003", None)
    assert agent_calls.inspected_frame(ins.iloc[1]) == agent_calls.InspectedFrame(True, "ep_000009", 12)


@pytest.mark.parametrize("cols,rows", [((0, 9), (0, 9)), ((3, 3), (5, 2)), ((2, 6), (1, 4)), ((8, 9), (6, 7))])
def test_a_tile_region_crops_whole_tiles_of_a_stored_frame(cols: tuple[int, int], rows: tuple[int, int]) -> None:
    """``frame_images.tile_region`` over a frame cut from its WebP strip: the crop is the tiles
    named (an empty span widened to one tile), each ``width // 9`` pixels."""
    frame = stored_frame(MFM, 100)
    unit = frame.shape[1] // 9
    region = frame_images.tile_region(cols, rows, unit)
    c0, r0 = cols[0], rows[0]
    c1, r1 = max(cols[1], c0 + 1), max(rows[1], r0 + 1)
    assert region.tiles == (c0, c1, r0, r1)
    assert np.array_equal(crop(frame, region.pixels), frame[r0 * unit:r1 * unit, c0 * unit:c1 * unit])
    assert region.full == (cols == (0, 9) and rows == (0, 9))


@pytest.mark.parametrize("width", [7, 64, 129, 200, 600, 2000])
def test_magnifications_keep_the_image_within_bounds(width: int) -> None:
    """Every offered factor keeps the enlarged width within 1,100 pixels; the default is the
    largest within 640 when one is, else the smallest offered."""
    fits, default = frame_images.magnifications(width)
    assert default in fits
    if width * 2 > 1100:
        assert fits == [1]
    else:
        assert all(width * f <= 1100 for f in fits) and all(f in fits for f in (2, 3, 4, 6, 8, 12, 16, 24)
                                                              if width * f <= 1100)
        within = [f for f in fits if width * f <= 640]
        assert default == (max(within) if within else min(fits))


def _raw_cells(run_dir: Path) -> Counter:
    return Counter((s["x"], s["y"]) for s in raw(run_dir, "steps.jsonl"))


def test_frames_at_a_place_over_runs_and_one_per_life() -> None:
    """``spatial_data.frames_at_cell_in`` lists, run by run, every steps.jsonl row standing on
    the cell; ``one_per_life`` keeps the first of each run and life."""
    dirs = [SAMPLES / n for n in AGENT_RUNS]
    cell = _raw_cells(dirs[0]).most_common(1)[0][0]
    runs = [(d.name, open_run(d)) for d in dirs]
    got = spatial_data.frames_at_cell_in(runs, *cell)
    want = [(d.name, s["step"], s["life"], s["episode"]) for d in dirs for s in raw(d, "steps.jsonl")
            if (s["x"], s["y"]) == cell]
    assert list(zip(got["run"], got["step"], got["life"], got["episode"])) == want
    firsts: dict[tuple[str, int], int] = {}
    for k, step, life, _ in want:
        firsts.setdefault((k, life), step)
    spread = spatial_data.one_per_life(got, 100, by_run=True)
    assert dict(zip(zip(spread["run"], spread["life"]), spread["step"])) == firsts
    assert len(spatial_data.one_per_life(got, 2, by_run=True)) == min(2, len(firsts))


def test_frames_at_a_cell_of_one_life() -> None:
    """``spatial_data.frames_at_cell_of``: the steps.jsonl rows of one life (or all) on the cell;
    none for a map whose second axis is ``z``."""
    cell = _raw_cells(MFM).most_common(1)[0][0]
    run = open_run(MFM)
    rows = [s for s in raw(MFM, "steps.jsonl") if (s["x"], s["y"]) == cell]
    assert list(spatial_data.frames_at_cell_of(run, *cell)["step"]) == [s["step"] for s in rows]
    for life in {s["life"] for s in rows}:
        got = spatial_data.frames_at_cell_of(run, *cell, life=life)
        assert list(got["step"]) == [s["step"] for s in rows if s["life"] == life]
        assert list(spatial_data.one_per_life(got, 4)["step"]) == [min(s["step"] for s in rows if s["life"] == life)]
    assert len(spatial_data.frames_at_cell_of(run, *cell, plane="z")) == 0


def test_notes_on_the_frames_shown(tmp_path: Path) -> None:
    """``notes.at_steps``: the notes of the run on a step or a region of one of the steps shown,
    as notes.jsonl holds them (retracted ones left out)."""
    made = [notes_mod.add(tmp_path, run="a", target="step", life=0, step=5, text="five"),
            notes_mod.add(tmp_path, run="a", target="region", life=1, step=9, region=(0, 3, 0, 3), text="nine"),
            notes_mod.add(tmp_path, run="a", target="step", life=0, step=6, text="six"),
            notes_mod.add(tmp_path, run="b", target="step", life=0, step=5, text="other run"),
            notes_mod.add(tmp_path, run="a", target="run", text="the run"),
            notes_mod.add(tmp_path, run="a", target="step", life=0, step=9, text="gone")]
    notes_mod.retract(tmp_path, made[-1].id)
    lines = jsonl(notes_mod.path(tmp_path))
    gone = {x["retracts"] for x in lines if "retracts" in x}
    want = [x["id"] for x in lines if "retracts" not in x and x["id"] not in gone and x["run"] == "a"
            and x["target"] in ("step", "region") and x["step"] in (5, 9)]
    got = notes_mod.at_steps(notes_mod.read(tmp_path).notes, "a", [5, 9])
    assert [n.id for n in got] == want and len(want) == 2


# Failures


@pytest.mark.parametrize("name", AGENT_RUNS)
def test_failure_filters_offer_the_values_of_the_raw_files(name: str) -> None:
    """The Failures page's filters (``failures.filter_options``) offer the lives and outcomes of
    every failed or interrupted episode and every death of the raw files, in order."""
    run_dir = SAMPLES / name
    table = fl.failures(open_run(run_dir))
    deaths = [e for e in raw(run_dir, "lives.jsonl") if e["event"] == "death"]
    died = {e["episode"] for e in deaths}
    bad = [r for r in raw(run_dir, "index.jsonl") if r.get("outcome") in ("failed", "interrupted")]
    assert fl.filter_options(table, "life") == sorted({r["life"] for r in bad} | {e["life"] for e in deaths})
    assert fl.filter_options(table, "outcome") == sorted({r["outcome"] for r in bad if r["id"] not in died}
                                                         | ({"death"} if deaths else set()))


def test_a_failures_target_and_the_frames_reached_back() -> None:
    """A failed collect's target (``failures.target_of``) is its action.json's cell; the frames of
    its filmstrip reached back (``failures.reached_back``) are the stored frames of the steps
    before it in its life, within the steps asked for."""
    run_dir, row, _ = collect_failure(SAMPLES)
    run = open_run(run_dir)
    table = fl.failures(run)
    got = table[table["episode"] == row["id"]].iloc[0]
    args = action_of(run_dir, row)["args"]
    assert fl.target_of(got) == (args["x"], args["y"])
    back = 12
    strip = fl.filmstrip(run, row["id"], fl.target_of(got), int(got["step"]), back)
    stored = {s for r in raw(run_dir, "index.jsonl") if r["life"] == row["life"] and r["id"] != row["id"]
              for s in range(r["first_step"] + 1, r["first_step"] + r.get("frames", 0) + 1)}
    want = [s for s in range(row["first_step"] + 1 - back, row["first_step"] + 1) if s in stored]
    assert [sf.step for sf in fl.reached_back(strip, row["id"], row["first_step"])] == want
    no_target = table[table["target_x"].isna()]
    if len(no_target):
        assert fl.target_of(no_target.iloc[0]) is None


# Runs compared


def test_milestones_first_reached_and_their_order() -> None:
    """``runs_summary.first_reached`` holds each run's run.json milestone steps, its rows in the
    manifests' milestone order; ``milestone_order`` lists the reached ones in that order."""
    dirs = [SAMPLES / n for n in ("diamond_mfm_s2", "diamond_vista_s1_1900steps", "reach-1000_mfm_s0")]
    runs = [open_run(d) for d in dirs]
    reached = runs_summary.milestone_steps(runs, SAMPLES)
    wide = runs_summary.first_reached(reached)
    manifests = {d.name: json.loads((d / "run.json").read_text()) for d in dirs}
    for name, m in manifests.items():
        for ms, step in m["milestones"].items():
            assert wide.loc[ms, name] == step
        assert set(wide.index[wide[name].notna()]) == set(m["milestones"])
    listed: list[str] = []
    for d in dirs:
        listed += [x for x in manifests[d.name]["milestone_order"] if x not in listed]
    names = {x for m in manifests.values() for x in m["milestones"]}
    order = [x for x in listed if x in names]
    assert runs_summary.milestone_order(runs, reached) == order
    assert [x for x in wide.index] == [x for x in manifests["diamond_mfm_s2"]["milestone_order"] if x in names] \
        + [x for x in wide.index if x not in manifests["diamond_mfm_s2"]["milestone_order"]]


def test_table_sizes_count_the_lines_of_each_file() -> None:
    """``runs_summary.table_sizes``: one row per table, its rows the lines of its file."""
    got = runs_summary.table_sizes(open_run(MFM)).set_index("table")
    for file, table in (("index.jsonl", "episodes"), ("steps.jsonl", "steps"), ("turns.jsonl", "turns"),
                        ("milestones.jsonl", "milestones"), ("memory_writes.jsonl", "memory_writes")):
        assert got.loc[table, "rows"] == len(raw(MFM, file)), table
    assert "episode" in got.loc["steps", "columns"].split(", ")


def test_steps_per_turn_pools_the_calls_of_every_tool() -> None:
    """``chart_data.steps_per_turn_tables`` of one run: its calls per tool written out, as
    turns.jsonl counts them."""
    _, pooled = chart_data.steps_per_turn_tables([("m", open_run(MFM))], 25)
    counts = Counter(c["tool"] for t in raw(MFM, "turns.jsonl") for c in t["calls"])
    text = pooled.iloc[0]["calls_by_tool"]
    assert {k: int(v) for k, v in (p.split(": ") for p in text.split(", "))} == dict(counts)


def test_progress_tables_hold_the_first_reached_steps() -> None:
    """``chart_data.progress_tables``: the first-reached steps of each run are run.json's."""
    dirs = [SAMPLES / n for n in ("diamond_mfm_s2", "diamond_vista_s1_1900steps")]
    _, summary, _, firsts = chart_data.progress_tables([(d.name, open_run(d)) for d in dirs], SAMPLES)
    for d in dirs:
        m = json.loads((d / "run.json").read_text())
        mine = firsts[firsts["run"] == d.name]
        assert dict(zip(mine["milestone"], mine["step"])) == m["milestones"]
    assert set(summary["method"]) == {json.loads((d / "run.json").read_text())["method"] for d in dirs}


# Echo, search, provenance


@pytest.mark.parametrize("name", ["ical_s5", "passive_s5"])
def test_a_learner_library_and_its_attempts(name: str) -> None:
    """``echo.library``: the latest version of each descriptor of csd.jsonl and one attempt per
    line of echo.jsonl; ``echo.learners`` finds no damaged line in the sample."""
    run_dir = SAMPLES / "echo" / name
    run = open_run(run_dir)
    csds, _, attempts, problems = echo.library(run)
    lines = raw(run_dir, "csd.jsonl")
    assert set(csds) == {x["id"] for x in lines if "id" in x}
    assert list(attempts["episode"]) == [a["episode"] for a in raw(run_dir, "echo.jsonl")]
    assert problems == []
    bands, damaged = echo.learners([(name, run)])
    assert len(damaged) == 0 and bands.bands["method"].nunique() == 1


def test_hits_over_runs_by_kind_then_step() -> None:
    """``search.hits_in``: the hits of each run (``search.search``), with its key, ordered by
    kind, then step; every hit's text holds the word."""
    runs = [(n, open_run(SAMPLES / n)) for n in AGENT_RUNS]
    hits = sr.hits_in(((k, sr.corpus(r)) for k, r in runs), "diamond")
    each = {k: sr.search(r, "diamond") for k, r in runs}
    assert Counter(hits["run"]) == {k: len(v) for k, v in each.items()} and len(hits) > 0
    assert hits["text"].str.lower().str.contains("diamond").all()
    rank = hits["kind"].map({k: i for i, k in enumerate(sr.KINDS)})
    assert rank.is_monotonic_increasing
    for _, group in hits.groupby("kind"):
        assert group["step"].dropna().is_monotonic_increasing


def test_provenance_span_and_node_order() -> None:
    """``provenance.step_span`` reaches from the first memory write (memory_writes.jsonl) to the
    run's last step; ``in_order`` lists nodes by step."""
    run = open_run(MFM)
    graph = pv.build_graph(run)
    last = json.loads((MFM / "run.json").read_text())["last_step"]
    lo, hi = pv.step_span(graph, last)
    assert lo <= min(w["step"] for w in raw(MFM, "memory_writes.jsonl")) and hi == max(last, *(n.step for n in graph.nodes))
    steps = [n.step for n in pv.in_order(graph.nodes)]
    assert steps == sorted(steps) and len(steps) == len(graph.nodes)



def test_memory_sources_of_each_line() -> None:
    """``provenance.first_sources`` and ``all_sources`` over the Memory page's provenance table of
    GUIDE.md: every episode named is one the raw writes of that file name as sources or its
    lines cite, and is in index.jsonl; a line's first source is its first cited episode, else
    its write's first source."""
    run = open_run(MFM)
    path = "mine/GUIDE.md"
    last = json.loads((MFM / "run.json").read_text())["last_step"]
    prov = ap.memory_provenance(run, path, last)
    assert len(prov)
    writes = [w for w in raw(MFM, "memory_writes.jsonl") if w["path"] == path]
    named = {e for w in writes for e in w["sources"]}
    ids = {r["id"] for r in raw(MFM, "index.jsonl")}
    every = pv.all_sources(prov["cites"], prov["sources"])
    assert every and len(every) == len(set(every))
    for e in every:
        assert e in ids and (e in named or any(e in t for t in prov["text"])), e
    for first, c, s in zip(pv.first_sources(prov["cites"], prov["sources"]), prov["cites"], prov["sources"]):
        assert first == (c.split(", ")[0] if c else s.split(", ")[0] if s else None)
    assert pv.first_sources(["", "", "ep_2, ep_3"], ["", "ep_1", "ep_4"]) == [None, "ep_1", "ep_2"]
    assert pv.all_sources(["ep_2", ""], ["ep_1, ep_2", "ep_3"]) == ["ep_2", "ep_1", "ep_3"]


def test_memory_span_of_a_file() -> None:
    """``provenance.memory_span``: from the first step a version of the file holds (or where its
    unknown span begins, if earlier) to the later of its last version and the run's last step."""
    run = open_run(MFM)
    last = json.loads((MFM / "run.json").read_text())["last_step"]
    for path in {w["path"] for w in raw(MFM, "memory_writes.jsonl")}:
        written = ap.memory_steps(run, path)
        lo, hi = pv.memory_span(written, None, last)
        assert lo == written[0] <= min(w["step"] for w in raw(MFM, "memory_writes.jsonl") if w["path"] == path)
        assert hi == max(last, written[-1])
        assert pv.memory_span(written, (lo - 5, lo + 3), last) == (lo - 5, hi)
        assert pv.memory_span(written, (lo + 1, lo + 3), last) == (lo, hi)


def test_a_visit_opens_the_stored_frame_of_its_step_else_the_end_observation() -> None:
    """``spatial_data.visit_frame``: a step an episode of the life stored a frame of (index.jsonl:
    ``first_step < step <= first_step + frames``) opens that frame; another opens the episode's
    end observation."""
    run = open_run(MFM)
    rows = raw(MFM, "index.jsonl")
    stored = {(r["life"], s) for r in rows for s in range(r["first_step"] + 1, r["first_step"] + r.get("frames", 0) + 1)}
    seen = set()
    for r in rows[:400]:
        for step in (r["first_step"], r["last_step"], r["last_step"] + 1):
            got = spatial_data.visit_frame(run, step, r["life"], r["id"])
            assert got == ((step, None) if (r["life"], step) in stored else (None, r["id"])), (r["id"], step)
            seen.add(got[0] is None)
    assert seen == {True, False}


@pytest.mark.parametrize("side", [1, 3, 50])
def test_a_picker_lists_the_item_shown_and_its_neighbours(side: int) -> None:
    """``lookups.around`` (the Turns and Timeline pickers) lists ``2 * side + 1`` consecutive turns
    of the run's turns.jsonl (all of them when fewer) holding the one shown; the first ones for
    a turn the run lacks."""
    numbers = sorted({t["turn"] for t in raw(SAMPLES / "diamond_mfm_s2", "turns.jsonl")})
    for turn in (numbers[0], numbers[len(numbers) // 2], numbers[-1], -5, None):
        got = lookups.around(numbers, turn, side)
        assert lookups.around(pd.Series(numbers), turn, side) == got, "a Series lists the same"
        want_len = min(len(numbers), 2 * side + 1)
        assert len(got) == want_len and got == numbers[numbers.index(got[0]):numbers.index(got[0]) + want_len]
        assert (turn in got) if turn in numbers else got == numbers[:want_len]
        if turn in numbers and numbers.index(turn) >= side and len(numbers) - 1 - numbers.index(turn) >= side:
            assert got.index(turn) == side, "centred where both sides have room"
