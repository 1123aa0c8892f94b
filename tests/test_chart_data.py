"""Screen and print draw one prepared view: the chart of a page and the Altair figure it
exports hold the same data, and that data matches the run's raw files read here with json."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, chart_layers, open_app, svg_images, svg_labels, use_root
from dashboard import canvas, charts, figures, grid_canvas, theme, timeline_canvas, vega_charts
from loaders import chart_data
from loaders.run import open_run

SAMPLES = REPO / "sample_runs"
DIAMOND = sorted(p for p in SAMPLES.iterdir() if (p / "run.json").is_file() and p.name.startswith("diamond_"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _raw_cells(run_dir: Path, lo: int, hi: int, kinds: set[str] | None) -> set[tuple[int, int, str]]:
    """The latest kind of each cell within the filters, from grid.jsonl (ties: file order)."""
    latest: dict[tuple[int, int], tuple[int, int, str]] = {}
    for i, row in enumerate(_lines(run_dir / "grid.jsonl")):
        if lo <= row["step"] <= hi and (kinds is None or row["kind"] in kinds):
            x, y = row["cell"][0], row["cell"][1]
            if (x, y) not in latest or (row["step"], i) >= latest[(x, y)][:2]:
                latest[(x, y)] = (row["step"], i, row["kind"])
    return {(x, y, k) for (x, y), (_, _, k) in latest.items()}


def _rows(chart) -> list[dict]:
    """Every data row a chart draws, over all its views (:func:`conftest.chart_layers`)."""
    return [row for layer in chart_layers(chart) for row in layer["rows"]]


@pytest.mark.parametrize("lo,hi,kinds", [(None, None, None), (10, 120, None), (None, None, ("walked",)),
                                         (50, None, ("placed", "opened", "blocked"))])
def test_grid_screen_and_print_show_the_raw_cells(lo, hi, kinds) -> None:
    run_dir = DIAMOND[0]
    run = open_run(run_dir)
    view = chart_data.grid(run, lo, hi, kinds)
    first, last = view.lo, view.hi
    raw = _raw_cells(run_dir, first, last, set(kinds) if kinds else None)
    assert raw, "the sample run must have cells in this range"
    ends = {(r["x"], r["y"]) for r in _lines(run_dir / "index.jsonl")
            if r.get("x") is not None and r["last_step"] >= first and r["first_step"] <= last}
    drawn = grid_canvas.map_data(view)
    kinds, names = [k for k, _ in drawn["kinds"]], [m[0] for m in drawn["marks"]]
    screen = ([{**r, "kind": kinds[r["kind"]]} for r in canvas.rows(drawn["cells"])]
              + [{**r, "mark": names[r["mark"]]} for r in canvas.rows(drawn["points"])])
    printed = _rows(figures.grid_figure(run_dir.name, run, view=view).chart)
    for values in (screen, printed):
        assert {(int(v["x"]), int(v["y"]), v["kind"]) for v in values if "kind" in v} == raw
        assert {(v["x"], v["y"]) for v in values if v.get("mark") == "episode end position"} == ends


def _methods(run_dirs: list[Path]) -> set[str]:
    return {json.loads((d / "run.json").read_text())["method"] for d in run_dirs}


@pytest.mark.parametrize("lo,hi", [(None, None), (40, 300)])
def test_timeline_screen_and_print_show_the_raw_episodes(lo, hi) -> None:
    """The Timeline's bars are index.jsonl's episodes of the range (one per episode, in its
    life's lane, from its first step), its milestone marks milestones.jsonl's, and the
    selected episode is outlined and shaded where the index puts it."""
    run_dir = DIAMOND[0]
    run = open_run(run_dir)
    view = chart_data.timeline(run, lo, hi)
    rows = [r for r in _lines(run_dir / "index.jsonl") if r["last_step"] >= view.lo and r["first_step"] <= view.hi]
    pick = rows[len(rows) // 2]
    drawn = timeline_canvas.lanes_data(view, pick["id"], pick["first_step"] + 1,
                                       (pick["first_step"], pick["last_step"], pick["life"]))
    bars = canvas.rows(drawn["bars"])
    want = {(r["id"], r["life"], r["first_step"]) for r in rows}
    assert {(b["episode"], b["life"], b["start"]) for b in bars} == want
    assert all(drawn["categories"][b["cat"]][0] == r["action_kind"] for b in bars for r in rows
               if r["id"] == b["episode"] and r.get("action_kind"))
    printed = figures.timeline_figure(run_dir.name, run, view=view).chart
    assert {v["episode"] for v in _rows(printed)} == {r["id"] for r in rows}
    marks = canvas.rows(drawn["marks"])
    names = [k[0] for k in drawn["kinds"]]
    milestones = [m for m in _lines(run_dir / "milestones.jsonl") if view.lo <= m["step"] <= view.hi]
    assert milestones, "the sample run must have milestones in this range"
    assert sorted((m["step"], m["lane"]) for m in marks if names[m["kind"]] == "milestone") == \
        sorted((m["step"], m["life"] + timeline_canvas.MARK_OFFSETS["milestone"]) for m in milestones)
    assert drawn["chosen"] == [pick["first_step"], next(b["end"] for b in bars if b["episode"] == pick["id"]),
                               pick["life"]]
    assert drawn["span"] == [pick["first_step"], max(pick["last_step"], pick["first_step"] + 0.5), pick["life"]]
    assert drawn["step"] == pick["first_step"] + 1
    pointer = [m for m in marks if names[m["kind"]] == timeline_canvas.SELECTED]
    assert [(m["step"], m["lane"]) for m in pointer] == [((pick["first_step"] + pick["last_step"]) / 2,
                                                          pick["life"] - 0.47)]


STEPPED = sorted(p.parent for p in SAMPLES.glob("*/steps.jsonl"))


@pytest.mark.parametrize("run_dir", STEPPED, ids=[p.name for p in STEPPED])
def test_timeline_vitals_are_steps_jsonl(run_dir: Path) -> None:
    """The Timeline's vitals, drawn only where a value changes, read back as a step-after
    line: at every step of steps.jsonl the line has that step's value (a run binned to fewer
    points shows each bin's minimum: never above the step's value, and each drawn value is one
    the run had within its segment), with far fewer points than 4 per step."""
    raw = _lines(run_dir / "steps.jsonl")
    view = chart_data.timeline(open_run(run_dir))
    drawn = timeline_canvas.lanes_data(view)
    names = [v for v, _ in drawn["vital_colors"]]
    points = canvas.rows(drawn["vitals"])
    lines: dict[tuple[int, str], list[tuple[int, float]]] = {}
    breaks: dict[str, list[float]] = {}
    for r in points:
        if r["value"] is None:
            breaks.setdefault(names[r["vital"]], []).append(r["step"])
        else:
            lines.setdefault((r["life"], names[r["vital"]]), []).append((r["step"], r["value"]))
    assert {k for k in lines} == {(r["life"], v) for r in raw for v in theme.VITAL_COLORS}
    assert len(points) < 4 * len(raw) / 3
    lives = sorted({r["life"] for r in raw})
    for vital in theme.VITAL_COLORS:  # one line per vital, broken (a null) between each life and the next
        assert len(breaks.get(vital, [])) == len(lives) - 1
        for b, (a, c) in zip(breaks.get(vital, []), zip(lives, lives[1:])):
            assert lines[(a, vital)][-1][0] < b < lines[(c, vital)][0][0]
    binned = len(view.vitals) < len(raw)
    seen: dict[tuple[int, str, int], set] = {}
    for r in raw:
        for vital in theme.VITAL_COLORS:
            pts = lines[(r["life"], vital)]
            i = max(j for j, (s, _) in enumerate(pts) if s <= r["step"])
            assert pts[i][1] == r[vital] if not binned else pts[i][1] <= r[vital], (r["step"], vital)
            seen.setdefault((r["life"], vital, i), set()).add(r[vital])
    if binned:
        assert all(pts[i][1] in seen[(life, vital, i)] for (life, vital), pts in lines.items()
                   for i in range(len(pts)))


@pytest.mark.parametrize("run_dir", STEPPED, ids=[p.name for p in STEPPED])
def test_grid_paths_pass_every_position_of_steps_jsonl(run_dir: Path) -> None:
    """Each life's path on the map, drawn through the points where it turns, passes every
    position of steps.jsonl in step order: each step's cell lies on the segment between the
    drawn points before and after it; and it has fewer points than steps."""
    raw = _lines(run_dir / "steps.jsonl")
    view = chart_data.grid(open_run(run_dir))
    path = canvas.rows(grid_canvas.map_data(view)["paths"])
    drawn: dict[int, list[tuple[int, int, int]]] = {}
    for r in path:
        drawn.setdefault(r["life"], []).append((r["step"], r["x"], r["y"]))
    assert all(a[0] < b[0] for pts in drawn.values() for a, b in zip(pts, pts[1:])), "each life's points in step order"
    assert sorted(drawn) == sorted({r["life"] for r in raw})
    assert len(path) < len(raw) / 2
    for r in raw:
        pts = drawn[r["life"]]
        i = max(j for j, p in enumerate(pts) if p[0] <= r["step"])
        (_, ax, ay), (_, bx, by) = pts[i], pts[min(i + 1, len(pts) - 1)]
        cross = (bx - ax) * (r["y"] - ay) - (by - ay) * (r["x"] - ax)
        inside = min(ax, bx) <= r["x"] <= max(ax, bx) and min(ay, by) <= r["y"] <= max(ay, by)
        assert cross == 0 and inside, (r["step"], pts[i], r["x"], r["y"])


@pytest.mark.parametrize("which", ["progress", "steps_per_turn"])
def test_band_figures_name_every_method_on_screen_and_in_print(which: str) -> None:
    runs = [(d.name, open_run(d)) for d in DIAMOND]
    series = chart_data.progress(runs) if which == "progress" else chart_data.steps_per_turn(runs, 5)
    want = _methods(DIAMOND)
    screen = [t.name for t in charts.band_figure(series).data if t.showlegend is not False and t.mode == "lines"]
    assert {name.split(" (")[0] for name in screen} == want
    seeds: dict[str, int] = {}
    for d in DIAMOND:
        method = json.loads((d / "run.json").read_text())["method"]
        seeds[method] = seeds.get(method, 0) + 1
    assert sorted(screen) == sorted(f"{m} (1 run)" if n == 1 else f"{m} (mean of {n} seeds)" for m, n in seeds.items())
    fig = (figures.progress_figure(runs, series=series) if which == "progress"
           else figures.steps_per_turn_figure(runs, 5, series=series))
    layers = fig.chart.to_dict()["layer"]
    legends = [lay["encoding"]["color"] for lay in layers if "color" in lay.get("encoding", {})
               and lay["encoding"]["color"].get("legend") is not None]
    assert legends and legends[0]["scale"]["domain"] == screen
    page = vega_charts.band_chart(series, screen=True).to_dict()["layer"]
    domains = [lay["encoding"]["color"]["scale"]["domain"] for lay in page
               if lay.get("encoding", {}).get("color", {}).get("legend") is not None]
    assert domains and all(d == screen for d in domains)


def test_intervals_over_seeds() -> None:
    """Two seeds holding 1 and 3: the mean is 2, and a bootstrap over two seeds resamples (1, 1)
    or (3, 3) a quarter of the time each, so its 2.5th and 97.5th percentiles are 1 and 3. One
    seed: no interval."""
    flat = lambda v: pd.DataFrame({"step": [0, 100], "y": [v, v]})  # noqa: E731
    bands = chart_data.seed_bands([("mfm", 0, flat(1.0)), ("mfm", 1, flat(3.0)), ("vista", 0, flat(5.0))], "y",
                                  points=11)
    mfm, vista = bands[bands["method"] == "mfm"], bands[bands["method"] == "vista"]
    assert set(mfm["mean"]) == {2.0} and set(mfm["lo"]) == {1.0} and set(mfm["hi"]) == {3.0}
    assert set(mfm["seeds"]) == {2} and set(vista["seeds"]) == {1} and vista["lo"].isna().all()
    series = chart_data.SeedBands(bands, "y")
    assert series.label("mfm") == "mfm (mean of 2 seeds)" and series.label("vista") == "vista (1 run)"
    assert "95% bootstrap interval" in series.note
    spec = vega_charts.band_chart(series).to_dict()
    areas = [lay for lay in spec["layer"] if lay["mark"]["type"] == "area"]
    assert len(areas) == 1 and {v["method"] for v in spec["datasets"][areas[0]["data"]["name"]]} == {"mfm"}


def test_retargeting_screen_and_print_hold_the_same_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rates the Retargeting page shows (its chart, drawn in the server: each bar's label
    in the SVG), and the exported figure's."""
    runs = [(d.name, open_run(d)) for d in DIAMOND]
    rates = chart_data.retarget_rates(runs)
    use_root(monkeypatch, SAMPLES)
    at = open_app("retargeting", runs=",".join(d.name for d in DIAMOND))
    bars = [re.fullmatch(r"rate \(share.*\): ([0-9.]+)%; measure: (.+?); method: (.+?); rate \(counts\): .*", label)
            for svg in svg_images(at) for label in svg_labels(svg)]
    screen = {(b[2], b[3], round(float(b[1]) / 100, 6)) for b in bars if b}
    values = _rows(figures.retargeting_figure(runs, rates=rates).chart)
    printed = {(v["measure"], v["method"], round(float(v["rate"]), 6)) for v in values if v.get("rate") is not None}
    assert screen == printed and screen
    na = {(v["method"], v["measure"]) for v in values if v.get("rate") is None}
    assert all(v["text"].startswith("n/a") for v in values if v.get("rate") is None)
    assert ("direct", "retarget | inspect") in na, "a method that never inspects shows n/a, not an empty row"
    turns_by_method: dict[str, int] = {}
    for d in DIAMOND:
        method = json.loads((d / "run.json").read_text())["method"]
        turns_by_method[method] = turns_by_method.get(method, 0) + len(_lines(d / "turns.jsonl"))
    for measure, method, rate in screen:
        assert 0.0 <= rate <= 1.0 and turns_by_method[method] > 0
