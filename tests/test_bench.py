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
