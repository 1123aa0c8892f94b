"""The Runs page's Vega-Lite charts (``dashboard.vega_charts``): what they draw, recounted
from each sample run's ``run.json`` and ``milestones.jsonl`` with plain ``json``, and how
they draw it (legend, axis titles, the colours and markers of ``dashboard.theme``)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import REPO, open_app, use_root, vega_tables
from dashboard import theme, vega_charts
from loaders import open_run
from loaders import runs_summary

SAMPLES = REPO / "sample_runs"
MANIFESTS = {str(p.parent.relative_to(SAMPLES)): json.loads(p.read_text(encoding="utf-8"))
             for p in sorted(SAMPLES.rglob("run.json"))}


def _first_steps(run: str) -> dict[str, int]:
    """Each milestone's first step in the run's raw ``milestones.jsonl``."""
    out: dict[str, int] = {}
    for line in (SAMPLES / run / "milestones.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["name"]] = min(out.get(row["name"], row["step"]), row["step"])
    return out


def test_the_runs_page_charts_recount_the_milestone_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """For each task (the page's radio), the runs charted, their milestones reached of how
    many, and each milestone's first step."""
    use_root(monkeypatch, SAMPLES)
    at = open_app()
    radio = next(r for r in at.radio if r.label == "Task")
    assert list(radio.options) == sorted({m["task"] for m in MANIFESTS.values()})
    for task in radio.options:
        radio.set_value(task).run()
        assert not at.exception
        assert not at.get("plotly_chart")  # the page a session starts on loads no Plotly in the browser
        reached = next(t for t in vega_tables(at) if "reached" in t.columns)
        runs = sorted(k for k, m in MANIFESTS.items() if m["task"] == task)
        assert sorted(reached["run"]) == runs
        for run in runs:
            row = reached[reached["run"] == run].iloc[0]
            m = MANIFESTS[run]
            assert (row["method"], row["total"], row["reached"]) == (
                m["method"], len(m["milestone_order"]), len(_first_steps(run)))
        points = [t for t in vega_tables(at) if "milestone" in t.columns]
        expected = sorted((run, name, step) for run in runs for name, step in _first_steps(run).items())
        drawn = sorted((r.run, r.milestone, int(r.step)) for r in points[0].itertuples()) if points else []
        assert drawn == expected and expected


def _sample_charts() -> list:
    runs = [open_run(SAMPLES / k) for k, m in MANIFESTS.items() if m["task"] == "diamond"]
    ov = runs_summary.runs_overview(runs, SAMPLES)
    ms = runs_summary.milestone_steps(runs, SAMPLES)
    order = list(MANIFESTS["diamond_mfm_s2"]["milestone_order"])
    return [vega_charts.reached_chart(ov).to_dict(), vega_charts.milestones_chart(ms, order).to_dict()]


@pytest.mark.parametrize("which", [0, 1], ids=["reached", "milestones"])
def test_each_chart_has_titled_axes_a_legend_and_the_method_palette(which: int) -> None:
    spec = _sample_charts()[which]
    enc = spec["encoding"]
    assert enc["x"]["title"] and enc["y"]["title"]
    assert enc["color"]["legend"]["title"] == "method"
    methods = sorted({m["method"] for m in MANIFESTS.values() if m["task"] == "diamond"})
    assert enc["color"]["scale"]["domain"] == methods
    assert enc["color"]["scale"]["range"] == [theme.method_color(m) for m in methods]
    assert len(set(enc["color"]["scale"]["range"])) == len(methods)
    tips = {t["field"] for t in enc["tooltip"]}
    assert {"run", "method"} <= tips
    if which == 1:
        assert enc["shape"]["scale"]["range"] == [theme.VEGA_SHAPES[theme.method_style(m).marker] for m in methods]
        assert enc["y"]["sort"] == list(MANIFESTS["diamond_mfm_s2"]["milestone_order"])


def test_a_run_without_a_method_is_drawn_as_unknown() -> None:
    ov = pd.DataFrame({"key": ["a", "b"], "method": ["mfm", None], "milestones_reached": [2, 0],
                       "milestones_total": [10, 10], "status": ["finished", "crashed"]})
    spec = vega_charts.reached_chart(ov).to_dict()
    values = next(iter(spec["datasets"].values()))
    assert [v["method"] for v in values] == ["mfm", vega_charts.UNKNOWN]
    assert spec["encoding"]["y"]["sort"] == ["a", "b"]


@pytest.mark.parametrize("n", [3, vega_charts.LABELLED_RUNS, vega_charts.LABELLED_RUNS + 1])
def test_runs_are_labelled_across_or_stand_unlabelled_in_a_large_sweep(n: int) -> None:
    keys = [f"run_{i:03d}" for i in range(n)]
    ov = pd.DataFrame({"key": keys, "method": ["mfm"] * n, "milestones_reached": [1] * n,
                       "milestones_total": [10] * n, "status": ["finished"] * n})
    enc = vega_charts.reached_chart(ov).to_dict()["encoding"]
    run_axis = "y" if n <= vega_charts.LABELLED_RUNS else "x"
    assert enc[run_axis]["field"] == "run" and enc[run_axis]["sort"] == keys
    assert enc[run_axis].get("axis", {}).get("labels", True) is (n <= vega_charts.LABELLED_RUNS)

