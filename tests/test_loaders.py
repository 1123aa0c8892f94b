"""Loaders and the dashboard's view functions, on written runs and damaged copies."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import chart_layers, chart_spec, write_run
from dash_data import CRAFTER, DAMAGED, NESTED, SYNTHETIC, damage, make_root
from dashboard import canvas, grid_canvas, theme, timeline_canvas, vega_charts
from dashboard.core import (FrameRef, format_frame_refs, parse_cell, parse_frame_refs, parse_range, resolve_run_key,
                            runs_root)
from loaders import chart_data
from loaders import agent_calls, frame_images, lookups, runs_summary, spatial_data, timeline_data
from loaders.run import find_runs, open_run, open_runs, runs_table, signature
from mfm.boundary import UnsafePath, inside
from mfm.memory.retrieval import FrameError
from mfm.schema import frame_chunk


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("runs"), crafter_steps=240)


def test_open_runs_finds_nested_runs(root: Path) -> None:
    found = {p.relative_to(root).as_posix() for p in find_runs(root)}
    assert found == {CRAFTER, NESTED, SYNTHETIC, DAMAGED}
    runs = open_runs(root)
    table = runs_table(runs)
    assert set(table["run"]) == {"crafter_random_s3", "crafter_mfm_s1", SYNTHETIC, DAMAGED}
    assert (table.loc[table["run"] == "crafter_mfm_s1", "method"] == "mfm").all()


def test_damaged_copy_reports_file_and_line(root: Path) -> None:
    run = open_run(root / DAMAGED)
    where = {str(p).split(": ")[0] for p in run.problems}
    index_lines = sum(1 for _ in open(root / DAMAGED / "index.jsonl", encoding="utf-8"))
    steps_lines = sum(1 for _ in open(root / DAMAGED / "steps.jsonl", encoding="utf-8"))
    assert f"index.jsonl:{index_lines}" in where, where
    assert f"steps.jsonl:{steps_lines}" in where, where
    assert any("ep_000002" in p.message and "frame strip" in p.message for p in run.problems)
    assert len(run.episodes()) == len(open_run(root / SYNTHETIC).episodes())
    table = runs_summary.problems_table(run)
    assert list(table.columns) == ["where", "severity", "message"]
    assert table["where"].str.contains(r"^[\w./]+(?::\d+)?$").all()


def test_missing_strip_gives_frame_error_not_crash(root: Path) -> None:
    run = open_run(root / DAMAGED)
    ref = run.episode("ep_000002")
    with pytest.raises(FrameError):
        lookups.frame_for(run, step=ref.first_step + 1)
    with pytest.raises(FrameError):
        lookups.frame_strip(run, "ep_000002")
    with pytest.raises(FrameError):
        lookups.frame_for(run, episode="ep_000002")
    assert lookups.frame_for(run, episode="ep_000003").shape == (64, 64, 3)


@pytest.mark.parametrize("breakage", ["truncated", "garbage", "strip", "empty", "binary"])
def test_open_run_never_raises(tmp_path: Path, breakage: str) -> None:
    d = tmp_path / "run"
    write_run(d, episodes=6)
    if breakage == "truncated":
        with open(d / "turns.jsonl", "rb+") as f:
            f.truncate(os.path.getsize(d / "turns.jsonl") - 7)
    elif breakage == "garbage":
        with open(d / "grid.jsonl", "a") as f:
            f.write('{"cell": "nowhere", "kind": "lava"}\n[1, 2\n')
    elif breakage == "strip":
        (d / frame_chunk("episodes/ep_000003", 0)[0]).write_bytes(b"not an image")
    elif breakage == "empty":
        (d / "index.jsonl").write_text("")
    else:
        (d / "run.json").write_bytes(b"\xff\xfe\x00garbage")
    run = open_run(d)
    assert run.problems or breakage in ("empty", "strip")
    for p in run.problems:
        assert p.file and isinstance(p.line, int)
    for name in ("episodes", "steps", "turns", "grid", "milestones", "lives", "memory_writes", "seen"):
        assert isinstance(run.table(name), pd.DataFrame)
    timeline_data.timeline_marks(run)
    timeline_data.timeline_bars(run.episodes())
    spatial_data.grid_cells(run.grid())
    agent_calls.inspections(run.turns(), run.episodes())
    if breakage == "strip":
        with pytest.raises(FrameError):
            lookups.frame_for(run, step=run.episode("ep_000003").first_step + 1)


def test_cache_refreshes_when_a_file_changes(tmp_path: Path) -> None:
    d = tmp_path / "run"
    write_run(d, episodes=4)
    first = open_run(d)
    assert open_run(d) is first
    before = len(first.lives())
    sig = signature(d)
    with open(d / "lives.jsonl", "a", encoding="utf-8") as f:
        f.write('{"event":"death","life":1,"step":20,"x":1,"y":2,"cause":"zombie"}\n')
    assert signature(d) != sig
    again = open_run(d)
    assert again is not first
    assert len(again.lives()) == before + 1


def test_timeline_views_on_a_crafter_run(root: Path) -> None:
    run = open_run(root / CRAFTER)
    eps = run.episodes()
    bars = timeline_data.timeline_bars(eps)
    assert len(bars) == len(eps) and (bars["count"] == 1).all()
    assert set(bars["category"]) >= {"initial", "explore"}
    by_outcome = timeline_data.timeline_bars(eps, color_by="outcome")
    assert set(by_outcome["category"]) <= {"done", "failed", "interrupted", "none"}
    marks = timeline_data.timeline_marks(run)
    assert {"search", "inspect", "memory_write"} <= set(marks["kind"])
    assert set(marks["kind"]) <= set(timeline_data.MARK_KINDS)
    lives = run.lives()
    assert (marks["kind"] == "death").sum() == (lives["event"] == "death").sum()
    lo, hi = 50, 120
    zoom = timeline_data.timeline_bars(eps, lo, hi)
    assert (zoom["end"] >= lo).all() and (zoom["start"] <= hi).all()
    assert timeline_data.vitals_series(run.steps(), lo, hi)["step"].between(lo, hi).all()


def test_inspections_pair_the_retrieved_frame_with_the_agents(root: Path) -> None:
    run = open_run(root / CRAFTER)
    ins = agent_calls.inspections(run.turns(), run.episodes())
    assert len(ins) > 0
    row = ins.iloc[0]
    assert row["episode"].startswith("ep_")
    assert lookups.frame_for(run, step=int(row["target_step"])).shape == (64, 64, 3)
    assert lookups.frame_for(run, step=int(row["step"])).shape == (64, 64, 3)
    assert "inspected" in row["label"]


CALLS_TEXTS = ['[{"tool": "search", "args": {"text": "tree"}}]', ' {"a": 1}\n', "", "  ", "1,2", '"a","b"', "[1",
               '"d"]', "NaN", "\ufeff[1]", "nul", "[1] x", "true", '"\\u006dodel"', "[1]\u00a0", "{}{}"]


@pytest.mark.parametrize("text", CALLS_TEXTS)
def test_turn_calls_parse_as_json_loads_does(text: str) -> None:
    """A turn's calls text is parsed as ``json.loads`` parses it, and is None where that fails."""
    try:
        want = json.loads(text)
    except ValueError:
        want = None
    got = agent_calls._json(text)
    assert (got != got and want != want) or got == want  # NaN is the one value not equal to itself


def test_model_requests_written_with_escapes_are_found() -> None:
    """A model request whose tool name is written with JSON escapes is still a model request."""
    calls = '[{"tool": "\\u006dodel", "args": {}, "result": {}}]'
    turns = pd.DataFrame({"turn": [0, 1], "life": [0, 0], "first_step": [3, 9],
                          "calls": [calls, '[{"tool": "search", "args": {}, "result": {}}]']})
    assert agent_calls.model_calls(turns)["step"].tolist() == [3]


def test_tool_calls_accept_frame_index_and_paths() -> None:
    turns = pd.DataFrame({
        "turn": [0, 1], "life": [0, 0], "first_step": [10, 20],
        "calls": ['[{"tool": "inspect", "args": {"episode": "ep_000001", "frame": 2}, "result": {}}]',
                  '[{"tool": "inspect", "args": {"path": "episodes/ep_000004/observation/image.png"}, "result": {}},'
                  ' {"tool": "search", "args": {"text": "iron"}, "result": {"episodes": ["ep_000001"]}}]'],
    })
    episodes = pd.DataFrame({"id": ["ep_000001", "ep_000004"], "first_step": [3, 12]})
    calls = agent_calls.tool_calls(turns)
    assert list(calls["tool"]) == ["inspect", "inspect", "search"]
    assert calls.iloc[1]["episode"] == "ep_000004"
    assert calls.iloc[2]["results"] == 1
    ins = agent_calls.inspections(turns, episodes)
    assert ins.iloc[0]["target_step"] == 3 + 1 + 2
    assert pd.isna(ins.iloc[1]["target_step"])


def test_a_36000_step_run_stays_under_50k_points() -> None:
    rng = np.random.default_rng(0)
    n_steps, n_eps = 36_000, 6_000
    bounds = np.sort(rng.choice(np.arange(1, n_steps), n_eps - 1, replace=False))
    first = np.concatenate([[0], bounds])
    last = np.concatenate([bounds, [n_steps]])
    life = np.searchsorted([9_000, 20_000, 31_000], first, side="right")
    eps = pd.DataFrame({"id": [f"ep_{i:06d}" for i in range(n_eps)], "kind": "episode",
                        "action_kind": rng.choice(["go_to", "collect", "craft", "explore"], n_eps),
                        "outcome": rng.choice(["done", "failed"], n_eps), "first_step": first, "last_step": last,
                        "life": life, "summary": "x"})
    step_life = np.searchsorted([9_000, 20_000, 31_000], np.arange(1, n_steps + 1), side="right")
    steps = pd.DataFrame({"step": np.arange(1, n_steps + 1), "life": step_life,
                          "x": rng.integers(0, 64, n_steps), "y": rng.integers(0, 64, n_steps),
                          "health": 9, "food": 5, "drink": 5, "energy": 5})
    calls = '[{"tool": "search", "args": {"text": "t"}, "result": {}}, {"tool": "inspect", "args": ' \
            '{"episode": "ep_000001", "step": 5}, "result": {}}]'
    turns = pd.DataFrame({"turn": range(n_eps), "life": life, "first_step": first, "calls": calls})
    mw = pd.DataFrame({"step": first, "life": life, "op": "edit", "path": "mine/GUIDE.md", "reason": "r"})
    ms = pd.DataFrame({"name": ["collect_wood"], "step": [100], "life": [0], "episode": ["ep_000003"]})
    lv = pd.DataFrame({"event": ["death", "respawn"], "life": [0, 1], "step": [9_000, 9_000],
                       "cause": ["zombie", None], "episode": ["ep_001000", None]})
    bars = timeline_data.timeline_bars(eps, 0, n_steps)
    marks = timeline_data.marks(ms, lv, turns, mw, 0, n_steps)
    vit = timeline_data.vitals_series(steps)
    paths = spatial_data.trajectories(steps)
    assert (bars["count"] > 1).any() and bars["count"].sum() == n_eps
    assert marks.groupby("kind")["count"].sum()["memory_write"] == n_eps
    drawn = timeline_canvas.lanes_data(chart_data.TimelineView(bars, marks, vit, 0, n_steps, "action_kind"))
    points = sum(len(next(iter(drawn[t].values()))) for t in ("bars", "marks", "vitals"))
    assert points <= timeline_data.MAX_POINTS, points
    assert len(paths) <= spatial_data.MAX_PATH_POINTS + steps["life"].nunique()
    assert paths.groupby("life")["step"].max().tolist() == steps.groupby("life")["step"].max().tolist()


def test_grid_views(root: Path) -> None:
    run = open_run(root / CRAFTER)
    cells = spatial_data.grid_cells(run.grid())
    assert len(cells) and set(cells["kind"]) <= {"walked", "placed", "opened", "blocked", "hazard", "water"}
    assert not cells.duplicated(["x", "y"]).any()
    walked = spatial_data.grid_cells(run.grid(), kinds=["walked"])
    assert set(walked["kind"]) == {"walked"}
    early = spatial_data.grid_cells(run.grid(), 0, 20)
    assert early["last_step"].max() <= 20
    x, y = int(walked.iloc[0]["x"]), int(walked.iloc[0]["y"])
    here = spatial_data.episodes_at_cell(run, x, y)
    assert len(here) >= 1 and here["episode"].str.startswith("ep_").all()
    frames = spatial_data.frames_at_cell(run.steps(), x, y)
    assert len(frames) >= 1
    assert lookups.frame_for(run, step=int(frames.iloc[0]["step"])).shape == (64, 64, 3)
    x0, y0, x1, y1 = spatial_data.grid_extent(run.grid(), run.steps(), run.episodes())
    assert x0 <= cells["x"].min() and x1 >= cells["x"].max() and y0 <= cells["y"].min()
    visits = spatial_data.visits_per_cell([run, open_run(root / NESTED)])
    assert visits["runs"].max() >= 1


def test_grid_map_has_legends_and_the_picked_cell(root: Path) -> None:
    """The map's data: the cell kinds with the theme's colours (its legend), every cell of the
    view, the marks' legend with the picked cell among them, and the picked cell itself (the
    equal axes and the downward second axis are measured where the map is drawn,
    tests/test_browser.py)."""
    run = open_run(root / CRAFTER)
    view = chart_data.grid(run)
    drawn = grid_canvas.map_data(view, (32, 32))
    colours = dict(drawn["kinds"])
    assert colours["walked"] == theme.cell_kind_color("walked")
    kinds = [k for k, _ in drawn["kinds"]]
    cells = canvas.rows(drawn["cells"])
    assert {(r["x"], r["y"], kinds[r["kind"]]) for r in cells} == set(zip(view.cells["x"], view.cells["y"],
                                                                        view.cells["kind"]))
    assert {"episode end position", "selected cell"} <= {m[0] for m in drawn["marks"]}
    assert drawn["cell"] == [32, 32] and drawn["target"] is None and drawn["here"] is None
    x0, y0, x1, y1 = view.extent
    assert drawn["extent"] == [min(x0, 32), min(y0, 32), max(x1, 32), max(y1, 32)] and drawn["plane"] == view.plane
    far = grid_canvas.map_data(view, mark=(x0 - 3, y1 + 2))
    assert far["extent"] == [x0 - 3, y0, x1, y1 + 2], "a failed target beyond the cells shown stays on the map"
    assert grid_canvas.with_here(drawn, x1 + 1, y0, 5, 0)["extent"][2] == max(x1 + 1, 32)
    here = grid_canvas.with_here(drawn, 3, 4, 17, 0)
    assert here["here"] == [3, 4, 17, 0] and "time cursor" in {m[0] for m in here["marks"]}
    assert drawn["here"] is None and "time cursor" not in {m[0] for m in drawn["marks"]}, "the kept data unchanged"


def test_grid_episode_positions_one_marker_per_cell() -> None:
    """One marker per cell where episodes ended, in the colour of the life of the latest
    episode there, its hover counting the episodes and the lives they span: recounted from
    index.jsonl."""
    path = Path(__file__).resolve().parent.parent / "sample_runs" / "diamond_direct_s3_1600steps"
    rows = [json.loads(line) for line in (path / "index.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("x") is not None]
    assert len({r["life"] for r in rows}) > len(theme.QUALITATIVE), "the sample must cycle the palette"
    want: dict[tuple[int, int], dict] = {}
    for r in rows:
        w = want.setdefault((r["x"], r["y"]), {"count": 0, "first_life": r["life"]})
        w.update(count=w["count"] + 1, id=r["id"], life=r["life"])
    assert len(want) < len(rows), "the sample must have cells where several episodes ended"
    view = chart_data.grid(open_run(path))
    assert view.merged == len(rows)
    got = {(p.x, p.y): {"count": p.count, "first_life": p.first_life, "id": p.id, "life": p.life}
           for p in view.positions.itertuples()}
    assert got == want
    assert view.positions["id"].iloc[-1] == rows[-1]["id"]
    drawn = grid_canvas.map_data(view)
    colour, names = dict(drawn["lives"]), [m[0] for m in drawn["marks"]]
    shown = {(r["x"], r["y"]): r for r in canvas.rows(drawn["points"]) if names[r["mark"]] == "episode end position"}
    assert shown.keys() == want.keys()
    for cell, w in want.items():
        r = shown[cell]
        assert colour[r["life"]] == theme.life_color(w["life"])
        if w["count"] == 1:
            assert r["what"] == f"1 episode ended here, life {w['life']}" and r["detail"].startswith(w["id"] + ": ")
        else:
            assert r["what"] == f"{w['count']} episodes ended here, lives {w['first_life']}–{w['life']}"
            assert r["detail"].startswith(f"latest {w['id']}: ")


def test_grid_one_episode_per_cell_is_not_merged() -> None:
    """A life whose episodes each ended in a cell of their own: one marker each, nothing merged."""
    path = Path(__file__).resolve().parent.parent / "sample_runs" / "diamond_direct_s3_1600steps"
    rows = [json.loads(line) for line in (path / "index.jsonl").read_text().splitlines()]
    by_life: dict[int, list] = {}
    for r in rows:
        if r.get("x") is not None:
            by_life.setdefault(r["life"], []).append((r["x"], r["y"]))
    life = next(lf for lf, cells in sorted(by_life.items()) if len(set(cells)) == len(cells) > 1)
    view = chart_data.grid(open_run(path), life=life)
    assert view.merged == 0 and sorted(zip(view.positions["x"], view.positions["y"])) == sorted(by_life[life])
    drawn = grid_canvas.map_data(view)
    names = [m[0] for m in drawn["marks"]]
    rows = [r for r in canvas.rows(drawn["points"]) if names[r["mark"]] == "episode end position"]
    assert len(rows) == len(by_life[life]) and all(r["what"] == f"1 episode ended here, life {life}" for r in rows)


def test_episode_detail_and_frames(root: Path) -> None:
    run = open_run(root / CRAFTER)
    d = lookups.episode_detail(run, "ep_000003")
    assert d.state and d.action and d.outcome
    assert len(d.steps) == d.row.frames
    strip = lookups.frame_strip(run, "ep_000003", max_frames=4)
    assert 1 <= len(strip) <= 4 and strip[0][0] == d.row.first_step + 1
    assert lookups.frame_for(run, step=0).shape == (64, 64, 3)
    big = frame_images.upscale(strip[0][1], 256)
    assert big.shape == (256, 256, 3) and (big[:4, :4] == strip[0][1][0, 0]).all()
    a, b = strip[0][1], strip[-1][1]
    w = frame_images.wipe(a, b, 0.5)
    assert (w[:, :10] == a[:, :10]).all() and (w[:, 40:] == b[:, 40:]).all()
    assert frame_images.difference_count(a, a) == 0
    panels = vega_charts.frames_panels([a, b], ["a", "b"], tiles=True, diffs=[(a, "d")], region=(0, 0, 21, 21))
    spec = chart_spec(panels)
    assert spec["resolve"]["scale"] == {"x": "shared", "y": "shared"} and spec["columns"] == 2
    images = [la for la in chart_layers(panels) if la["mark"]["type"] == "image"]
    assert len(images) == 3 and all(la["mark"]["smooth"] is False for la in images)
    shown = [np.asarray(Image.open(io.BytesIO(base64.b64decode(la["rows"][0]["url"].split(",", 1)[1]))))
             for la in images]
    assert (shown[0] == a).all() and (shown[1] == b).all() and (shown[2] == a).all()
    zoom = next(la["encoding"]["x"]["scale"]["domain"] for la in images)
    assert zoom == [-0.5, 20.5]
    assert not [la for la in chart_layers(panels) if la["mark"]["type"] == "rect"], "no pixel hover unless asked"


def test_frame_panels_show_each_pixel_on_hover_when_asked(root: Path) -> None:
    """With ``pixels``: a hover target per pixel of each frame (not of the differences),
    its position and colour those of the frame's array."""
    run = open_run(root / CRAFTER)
    a, b = lookups.frame_for(run, step=1), lookups.frame_for(run, step=3)
    panels = vega_charts.frames_panels([a, b], ["a", "b"], diffs=[(b, "d")], pixels=True)
    hover = [la for la in chart_layers(panels) if la["mark"]["type"] == "rect"]
    assert len(hover) == 2
    for layer, frame in zip(hover, (a, b)):
        assert {t["field"] for t in layer["encoding"]["tooltip"]} == {"x", "y", "r", "g", "b"}
        rows = layer["rows"]
        assert len(rows) == frame.shape[0] * frame.shape[1]
        assert all([r["r"], r["g"], r["b"]] == frame[r["y"], r["x"]].tolist() for r in rows)


def test_runs_overview_and_milestones(root: Path) -> None:
    runs = open_runs(root)
    ov = runs_summary.runs_overview(runs, root)
    assert set(ov["key"]) == {CRAFTER, NESTED, SYNTHETIC, DAMAGED}
    row = ov[ov["key"] == DAMAGED].iloc[0]
    assert row["problems"] >= 3 and row["status"] == "finished"
    assert ov["milestones"].str.match(r"^\d+/\d+$").all()
    ms = runs_summary.milestone_steps(runs, root)
    assert set(ms.columns) == {"run", "method", "milestone", "order", "step"}


def test_unsafe_paths_are_refused(root: Path, tmp_path: Path) -> None:
    for bad in ("../x", "/etc", "a/../../b", "", "a\\b"):
        with pytest.raises(UnsafePath):
            inside(root, bad)
    outside = tmp_path / "outside_run"
    write_run(outside, episodes=2)
    link = root / "escape"
    link.symlink_to(outside, target_is_directory=True)
    try:
        with pytest.raises(UnsafePath, match="outside"):
            resolve_run_key(root, "escape")
        assert "escape" not in {p.name for p in find_runs(root)}
    finally:
        link.unlink()
    with pytest.raises(UnsafePath):
        resolve_run_key(root, "ablations")
    assert resolve_run_key(root, NESTED) == (root / NESTED).resolve()


def test_an_index_row_pointing_outside_the_run_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "run"
    write_run(d, episodes=3)
    (tmp_path / "secret").mkdir()
    text = (d / "index.jsonl").read_text().replace('"path":"episodes/ep_000002"', '"path":"../secret"')
    (d / "index.jsonl").write_text(text)
    run = open_run(d)
    assert run.episode("ep_000002") is None
    assert [p.line for p in run.problems if "path must be a relative path" in p.message] == [3]
    with pytest.raises(FrameError):
        lookups.frame_for(run, episode="ep_000002")


def test_core_parsing() -> None:
    refs, errors = parse_frame_refs("a/b:12,a/b:ep_000003,bad,x:-1,c:1,d:2,e:3")
    assert refs[:2] == [FrameRef("a/b", step=12), FrameRef("a/b", episode="ep_000003")]
    assert len(refs) == 4 and len(errors) == 3
    assert format_frame_refs(refs[:2]) == "a/b:12,a/b:ep_000003"
    assert parse_range("10-20") == (10, 20) and parse_range("x") is None and parse_range("20-10") == (10, 20)
    assert parse_cell("3,-4") == (3, -4) and parse_cell("3") is None


def test_runs_root_precedence(tmp_path: Path) -> None:
    assert runs_root(["--root", str(tmp_path)], {"MFM_RUNS_ROOT": "/nowhere"}) == tmp_path.resolve()
    assert runs_root([], {"MFM_RUNS_ROOT": str(tmp_path)}) == tmp_path.resolve()
    assert runs_root([], {}).name == "sample_runs"


def test_damage_helper_matches_real_breakage(tmp_path: Path) -> None:
    d = tmp_path / "run"
    write_run(d, episodes=4)
    shutil.copytree(d, tmp_path / "copy")
    damage(tmp_path / "copy")
    assert len(open_run(tmp_path / "copy").problems) > len(open_run(d).problems)


def test_search_calls_of_every_shape_read_as_query_and_count() -> None:
    import json as _json

    calls = [
        {"tool": "search", "args": {"text": "iron ore", "tags": ["milestone"], "outcome": "done", "limit": 8,
                                    "kind": "episode", "steps": [10, 99], "near": [3.5, 4], "radius": 12.0},
         "result": {"ids": ["ep_000001", "ep_000002", "ep_000003"]}},
        {"tool": "search", "args": {"grep": "diamond|iron", "file": "logs.txt", "since_step": 0},
         "result": {"ids": ["ep_000004"], "lines": 7}},
        {"tool": "search", "args": {"script": "python tools/episodes.py --near", "kinds": ["episodes"]},
         "result": {"exit": 0, "output_chars": 120}},
    ]
    turns = pd.DataFrame({"turn": [3], "life": [1], "first_step": [40], "calls": [_json.dumps(calls)]})
    got = agent_calls.tool_calls(turns, ("search",))
    assert list(got["results"].astype(object).where(got["results"].notna(), None)) == [3, 1, None]
    first = got["text"].iloc[0]
    for words in ("'iron ore'", "tags milestone", "outcome done", "steps 10–99", "near (3.5, 4) within 12",
                  "at most 8"):
        assert words in first
    assert got["text"].iloc[1] == "grep /diamond|iron/ in logs.txt · since step 0"
    assert "python tools/episodes.py --near" in got["text"].iloc[2]
    marks = timeline_data.marks(pd.DataFrame(), pd.DataFrame(), turns, pd.DataFrame(), 0, 100)
    labels = list(marks.loc[marks["kind"] == "search", "label"])
    assert labels[0].endswith("→ 3 results") and labels[1].endswith("→ 1 result")
    assert labels[2].endswith("→ results not recorded")


def test_merged_timeline_bars_count_the_episodes_of_their_steps() -> None:
    """More episodes than bars: each merged bar's count, colour, hover mix and episode are
    those of its life's episodes lying within the bar's steps (episodes here follow each
    other without overlapping, so the steps say which episodes a bar holds)."""
    rng = np.random.default_rng(3)
    kinds = ["collect", "go_to", "explore", "craft", None]
    rows, step = [], 0
    for life, n in ((0, 70), (1, 45)):
        for _ in range(n):
            length = int(rng.integers(1, 9))
            action = kinds[int(rng.integers(0, len(kinds)))]
            rows.append({"id": f"ep_{len(rows):06d}", "life": life, "first_step": step, "last_step": step + length,
                         "kind": "episode" if action else "initial", "action_kind": action, "summary": "s",
                         "outcome": None})
            step += length + 1
    bars = timeline_data.timeline_bars(pd.DataFrame(rows), max_bars=12)
    assert len(bars) < len(rows) and bars["count"].sum() == len(rows)
    for bar in bars.itertuples():
        n, first, last, mix = re.fullmatch(r"(\d+) episodes, steps (\d+)–(\d+): (.*)", bar.label).groups()
        inside = [r for r in rows if r["life"] == bar.life and int(first) <= r["first_step"]
                  and r["last_step"] <= int(last)]
        assert int(n) == bar.count == len(inside), bar.label
        counts: dict[str, int] = {}
        for r in inside:
            kind = r["action_kind"] or r["kind"]
            counts[kind] = counts.get(kind, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        assert bar.category == ranked[0][0]
        assert mix == ", ".join(f"{k} {c}" for k, c in ranked[:4])
        assert bar.episode == (inside[0]["id"] if len(inside) == 1 else "")
