"""Helpers of the benchmark scripts that decide a reported figure."""
from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go

from bench.apptimes import figure_points


def test_figure_points_counts_every_trace_as_the_browser_gets_it() -> None:
    xs = np.arange(1234, dtype=float)
    fig = go.Figure([go.Scatter(x=xs, y=xs * 2), go.Bar(x=["a", "b", "c"], y=[1, 2, 3]),
                     go.Heatmap(z=np.ones((7, 11), dtype=np.int32))])
    spec = json.loads(fig.to_json())
    assert figure_points(spec) == 1234 + 3 + 7 * 11
    assert figure_points({"data": []}) == 0


def test_the_recording_baseline_plays_the_same_game_recording_nothing(tmp_path) -> None:
    """``bench.nullrec``: the agent with recording off (the overhead's baseline) plays the same
    steps and takes the same decisions as with it on, and writes no frames, index or seen rows."""
    from bench.nullrec import play

    on = play(tmp_path / "on", 150, 0, on=True)
    off = play(tmp_path / "off", 150, 0, on=False)
    assert on[2] == off[2] == 150 and on[3] == off[3]
    assert (tmp_path / "on" / "seen.jsonl").stat().st_size > 0
    assert not any((tmp_path / "off" / name).exists() for name in ("index.jsonl", "seen.jsonl", "grid.jsonl"))
    assert not list((tmp_path / "off").glob("episodes/*/frames/*"))
