"""Vega-Lite (Altair) charts for the pages people open by a link, above all the Runs page,
where a dashboard session starts, and the seed-band curves (Progress, Steps per turn, Echo),
which the exported figures of ``dashboard.figures`` draw with the same function. No Streamlit.

Why not Plotly there: every new tab that shows a Plotly chart loads Streamlit's Plotly
element, a 4.7 MB script, and evaluating it keeps the main thread busy for ~0.8 s on our
2-core benchmark machine before anything is drawn; a tab costs ~0.95 s more with a Plotly
chart than without, ~0.2 s more with a Vega-Lite chart (docs/benchmarks.md, "A light first
page"). These charts keep what the Plotly figures they replace showed: axis titles with
units, a legend, hover text, and the colours and markers of ``dashboard.theme``.
"""
from __future__ import annotations

from typing import Any, Callable

import altair as alt
import pandas as pd

from dashboard import theme
from loaders.chart_data import SeedBands

UNKNOWN = "unknown"
"""The method shown for a run whose manifest names none."""


def _methods(values: pd.Series) -> list[str]:
    return sorted({str(v) for v in values})


def _method_scales(methods: list[str]) -> tuple[alt.Scale, alt.Scale]:
    """The colour and the point shape of each method, as on every other page."""
    styles = [theme.method_style(m) for m in methods]
    return (alt.Scale(domain=methods, range=[s.color for s in styles]),
            alt.Scale(domain=methods, range=[theme.VEGA_SHAPES[s.marker] for s in styles]))


def _legend(columns: int = 0) -> alt.Legend:
    """The method legend above the plot; ``columns`` > 0 wraps it (a narrow chart)."""
    return alt.Legend(title="method", orient="top", direction="horizontal", columns=columns, symbolSize=120)


FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")
"""Fit the page's width; the height set is the plot's own, so legends and axes never
squeeze it (Streamlit's default fits both within the height)."""


LABELLED_RUNS = 24
"""Up to this many runs the bars lie across the chart, each labelled with its run; more
stand upright, unlabelled (the tooltip names each)."""


def reached_chart(overview: pd.DataFrame) -> alt.Chart:
    """Milestones reached per run (of the task's total), one colour per method; the runs in
    the overview's order."""
    d = pd.DataFrame({
        "run": overview["key"].astype(str),
        "method": overview["method"].where(overview["method"].notna(), UNKNOWN).astype(str),
        "reached": overview["milestones_reached"].astype(int),
        "total": overview["milestones_total"],
        "status": overview["status"].astype(str),
    })
    color, _ = _method_scales(_methods(d["method"]))
    count = alt.Axis(tickMinStep=1)
    if len(d) <= LABELLED_RUNS:
        run = alt.Y("run:N", sort=list(d["run"]), title="run", axis=alt.Axis(labelLimit=180))
        value = alt.X("reached:Q", title="milestones reached (count)", axis=count)
        height = 22 * max(3, len(d))
    else:
        run = alt.X("run:N", sort=list(d["run"]), title=f"run ({len(d)}; hover for names)",
                    axis=alt.Axis(labels=False, ticks=False))
        value = alt.Y("reached:Q", title="milestones reached (count)", axis=count)
        height = 240
    return alt.Chart(d).mark_bar().encode(
        run, value, color=alt.Color("method:N", scale=color, legend=_legend(columns=2)),
        tooltip=[alt.Tooltip("run:N"), alt.Tooltip("method:N"), alt.Tooltip("reached:Q", title="milestones reached"),
                 alt.Tooltip("total:Q", title="of"), alt.Tooltip("status:N")],
    ).properties(height=height, autosize=FIT_WIDTH)


def milestones_chart(ms: pd.DataFrame, order: list[str]) -> alt.Chart:
    """When each run reached each milestone (env step), one colour and marker per method;
    milestones top to bottom in ``order``."""
    d = pd.DataFrame({
        "run": ms["run"].astype(str),
        "method": ms["method"].where(ms["method"].notna(), UNKNOWN).astype(str),
        "milestone": ms["milestone"].astype(str),
        "step": ms["step"].astype(int),
    })
    color, shape = _method_scales(_methods(d["method"]))
    return alt.Chart(d).mark_point(size=90, filled=True, opacity=0.9, stroke="#fff", strokeWidth=1).encode(
        x=alt.X("step:Q", title="env step first reached"),
        y=alt.Y("milestone:N", sort=list(order), title="milestone", axis=alt.Axis(labelLimit=220)),
        color=alt.Color("method:N", scale=color, legend=_legend()),
        shape=alt.Shape("method:N", scale=shape, legend=_legend()),
        tooltip=[alt.Tooltip("run:N"), alt.Tooltip("milestone:N"), alt.Tooltip("step:Q", title="at step"),
                 alt.Tooltip("method:N")],
    ).properties(height=26 * max(3, len(order)), autosize=FIT_WIDTH)


def note(text: str, size: float = 7) -> alt.TitleParams:
    """A note under the plot, in the chart itself, saying what its marks mean."""
    return alt.TitleParams(text, orient="bottom", anchor="start", fontSize=size, fontWeight="normal",
                           color="#444444", limit=0)


SCREEN_HEIGHT = 320
"""The plot's height on a page (pixels)."""


def band_chart(series: SeedBands, data: Callable[[pd.DataFrame], Any] = lambda d: d,
               screen: bool = False) -> alt.LayerChart:
    """Lines (mean over seeds; colour and dash per method, legend with seeds), 95% interval
    bands where a method has several seeds, shaded intervals, and the note saying so.

    ``data`` turns each layer's table into the chart's data (the exported figures inline it
    as JSON values). ``screen``: drawn for a page: a tooltip with method, step and value at
    each point of the lines, the step axis dragged to pan and zoomed with shift + wheel
    (double-click resets), screen-sized lines and note (an exported file has no use for
    either)."""
    methods = series.methods
    labels = [series.label(m) for m in methods]
    styles = [theme.method_style(m) for m in methods]
    bands = series.bands.assign(label=series.bands["method"].map(dict(zip(methods, labels))))
    color = alt.Scale(domain=labels, range=[s.color for s in styles])
    dash = alt.Scale(domain=labels, range=[s.dash_array for s in styles])
    layers = []
    if series.shade:
        layers.append(alt.Chart(data(pd.DataFrame(series.shade, columns=["lo", "hi"]))).mark_rect(
            color=theme.method_color("mfm"), opacity=0.12).encode(x="lo:Q", x2="hi:Q"))
    band = bands.dropna(subset=["lo", "hi"])
    legend = alt.Legend(title=None, orient="top", symbolStrokeWidth=1.5, symbolType="stroke", symbolSize=400,
                        labelLimit=400)
    if len(band):
        layers.append(alt.Chart(data(band)).mark_area(fillOpacity=0.2, strokeWidth=0).encode(
            x="step:Q", y="lo:Q", y2="hi:Q", fill=alt.Fill("label:N", scale=color, legend=None)))
    lines = bands.dropna(subset=["mean"])
    x = alt.X("step:Q", title=series.x_title, axis=alt.Axis(tickMinStep=1))
    y = alt.Y("mean:Q", title=series.y_title)
    line = alt.Chart(data(lines)).mark_line(strokeWidth=2 if screen else 1.2).encode(
        x=x, y=y, color=alt.Color("label:N", scale=color, legend=legend),
        strokeDash=alt.StrokeDash("label:N", scale=dash, legend=legend))
    if screen:
        zoom = alt.selection_interval(bind="scales", encodings=["x"], zoom="wheel![event.shiftKey]")
        line = line.add_params(zoom)
    layers.append(line)
    if screen:
        layers.append(alt.Chart(data(lines)).mark_point(size=60, opacity=0).encode(
            x=x, y=y, tooltip=[alt.Tooltip("method:N"), alt.Tooltip("step:Q", title=series.x_title),
                               alt.Tooltip("mean:Q", title=series.y_title, format=".2f")]))
    chart = alt.layer(*layers).resolve_legend(fill="independent")
    if screen:
        return chart.properties(title=note(series.note, 12), height=SCREEN_HEIGHT, autosize=FIT_WIDTH)
    return chart.properties(title=note(series.note))
