"""Vega-Lite (Altair) charts for the pages whose charts need no click events: the Runs page,
where a dashboard session starts, the seed-band curves (Progress, Steps per turn, Echo) and
Retargeting (the A.4 rates and the retarget mini-map). The exported figures of
``dashboard.figures`` draw the seed bands and the rates with the same functions. No Streamlit.

Why not Plotly there: every new tab that shows a Plotly chart loads Streamlit's Plotly
element, a 4.7 MB script, and evaluating it keeps the main thread busy for ~0.8 s on our
2-core benchmark machine before anything is drawn; a tab costs ~0.95 s more with a Plotly
chart than without, ~0.2 s more with a Vega-Lite chart (docs/benchmarks.md, "A light first
page"). These charts keep what the Plotly figures they replace showed: axis titles with
units, a legend, hover text, and the colours and markers of ``dashboard.theme``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import altair as alt
import pandas as pd

from dashboard import theme
from loaders.chart_data import RETARGET_MEASURES, SeedBands

UNKNOWN = "unknown"
"""The method shown for a run whose manifest names none."""


def _method_names(values: pd.Series) -> pd.Series:
    """Each run's method as text, :data:`UNKNOWN` where the manifest names none."""
    return values.where(values.notna(), UNKNOWN).astype(str)


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
        "method": _method_names(overview["method"]),
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
        "method": _method_names(ms["method"]),
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


def band_table(series: SeedBands) -> pd.DataFrame:
    """The drawn series with each method's legend label (``label``)."""
    methods = series.bands["method"]
    return series.bands.assign(label=methods.map({m: series.label(m) for m in methods.unique()}))


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
    bands = band_table(series)
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
    if not screen:
        return alt.layer(*layers, line).resolve_legend(fill="independent").properties(title=note(series.note))
    zoom = alt.selection_interval(bind="scales", encodings=["x"], zoom="wheel![event.shiftKey]")
    hover = alt.Chart(data(lines)).mark_point(size=60, opacity=0).encode(
        x=x, y=y, tooltip=[alt.Tooltip("method:N"), alt.Tooltip("step:Q", title=series.x_title),
                           alt.Tooltip("mean:Q", title=series.y_title, format=".2f")])
    return alt.layer(*layers, line.add_params(zoom), hover).resolve_legend(fill="independent").properties(
        title=note(series.note, 12), height=SCREEN_HEIGHT, autosize=FIT_WIDTH)


LABEL_GAP = 2.0
"""Cells between two labelled points of the retarget map; closer points share one label."""


def label_groups(points: list[tuple[float, float, str]], gap: float = LABEL_GAP
                 ) -> list[tuple[float, float, list[str]]]:
    """Points ``(x, y, name)`` merged greedily, in order, into groups whose centres lie at least
    ``gap`` cells apart: ``(x, y, names)`` with the group at its first point. Each group gets
    one label, so no two labels of a map can sit on top of each other."""
    groups: list[tuple[float, float, list[str]]] = []
    for x, y, name in points:
        hit = next((g for g in groups if math.hypot(g[0] - x, g[1] - y) < gap), None)
        if hit is None:
            groups.append((x, y, [name]))
        elif name not in hit[2]:
            hit[2].append(name)
    return groups


def inspected_groups(inspected: list[dict]) -> list[tuple[float, float, list[str]]]:
    """The retarget map's numbered markers: the inspected episodes that have a recorded
    position, grouped by :func:`label_groups`."""
    return label_groups([(float(i["x"]), float(i["y"]), str(i["episode"])) for i in inspected
                         if i.get("x") is not None])


def rates_table(rates: pd.DataFrame) -> pd.DataFrame:
    """The A.4 rates (``loaders.chart_data.retarget_rates``) with each bar's label (``text``:
    the rate and its counts, or ``n/a``) and where the label sits (``at``: right of the
    interval)."""
    return rates.assign(text=[lab if lab.startswith("n/a") else f"{rate:.0%} ({lab})"
                              for rate, lab in zip(rates["rate"], rates["label"])],
                        at=[0.0 if math.isnan(r) else (h if not math.isnan(h) else r)
                            for r, h in zip(rates["rate"], rates["hi"])])


def rates_chart(rates: pd.DataFrame, width: int, data: Callable[[pd.DataFrame], Any] = lambda d: d,
                screen: bool = False) -> alt.FacetChart:
    """The A.4 table as bars, one row of bars per method: the retarget rates of inspecting and
    of other turns, the near share and its null rate, each with its Wilson 95% interval and
    the counts behind it (``n/a`` where a method has nothing to count). ``width``: of each
    row's plot; ``data`` as for :func:`band_chart`; ``screen``: sized for a page, with a
    tooltip per bar."""
    df = rates_table(rates)
    measures = list(RETARGET_MEASURES)
    methods = list(dict.fromkeys(df["method"]))
    y = alt.Y("measure:N", sort=measures, title=None)
    x = alt.X("rate:Q", title="rate (share of turns; near and null: share of new targets)",
              scale=alt.Scale(domain=[0, 1.45]), axis=alt.Axis(format="%", values=[0, 0.25, 0.5, 0.75, 1]))
    color = alt.Color("measure:N", sort=measures, title=None, legend=alt.Legend(orient="top"),
                      scale=alt.Scale(domain=measures, range=[theme.RETARGET_COLORS[m] for m in measures]))
    base = alt.Chart(data(df))
    bars = base.mark_bar(height=16 if screen else 8).encode(y=y, x=x, color=color)
    if screen:
        bars = bars.encode(tooltip=[alt.Tooltip("method:N"), alt.Tooltip("measure:N"),
                                    alt.Tooltip("text:N", title="rate (counts)")])
    return alt.layer(
        bars,
        base.mark_rule(strokeWidth=1.2 if screen else 0.8, color="#222222").encode(y=y, x="lo:Q", x2="hi:Q"),
        base.mark_text(align="left", dx=3, fontSize=12 if screen else 6).encode(y=y, x="at:Q", text="text:N"),
    ).properties(width=width, height=110 if screen else 60).facet(
        row=alt.Row("method:N", title=None, sort=methods, header=alt.Header(labelExpr="datum.value")))


MAP_SIZE = 400
"""The retarget map's plot, square (pixels)."""
CROSS = "M-0.8,-1L0,-0.2L0.8,-1L1,-0.8L0.2,0L1,0.8L0.8,1L0,0.2L-0.8,1L-1,0.8L-0.2,0L-1,-0.8Z"
"""A filled × as a Vega point shape (an SVG path in the unit square)."""
MAP_KINDS = {"agent": ("#111111", "circle", 170),
             "inspected episodes": (theme.MARK_STYLES["inspect"]["color"], "diamond", 620),
             "new target, near": ("#d62728", CROSS, 190),
             "new target": ("#7f7f7f", CROSS, 190)}
"""What the retarget map marks: colour, point shape and size."""


def _square(xs: list[float], ys: list[float], pad: float = 1.5) -> tuple[list[float], list[float]]:
    """Domains of equal span holding every ``xs`` / ``ys`` (cells), so a square plot keeps a
    cell square and a circle round."""
    if not xs:
        return [0.0, 10.0], [0.0, 10.0]
    lo_x, hi_x, lo_y, hi_y = min(xs) - pad, max(xs) + pad, min(ys) - pad, max(ys) + pad
    span = max(hi_x - lo_x, hi_y - lo_y)
    cx, cy = (lo_x + hi_x) / 2, (lo_y + hi_y) / 2
    return [cx - span / 2, cx + span / 2], [cy - span / 2, cy + span / 2]


def retarget_map(position: tuple[float, float] | None, inspected: list[dict], targets: list[dict],
                 radius: float) -> alt.LayerChart:
    """A retarget turn on a mini-map: the agent, the inspected episodes' positions with the
    ``radius`` circle around each (none around an inherited episode, marked ``inherited``:
    §A.4 does not count it), and the new targets (red when near). Inspected episodes within
    :data:`LABEL_GAP` cells of each other share one numbered marker (its tooltip lists them),
    so labels never overlap. Equal axes, y growing downwards as in the game."""
    counted = [(float(i["x"]), float(i["y"])) for i in inspected if i.get("x") is not None and not i.get("inherited")]
    marks = [{"x": gx, "y": gy, "what": "inspected episodes", "label": str(k + 1), "detail": ", ".join(names)}
             for k, (gx, gy, names) in enumerate(inspected_groups(inspected))]
    marks += [{"x": float(t["x"]), "y": float(t["y"]), "what": "new target, near" if t.get("near") else "new target",
               "label": "", "detail": str(t.get("kind", "?"))} for t in targets]
    if position is not None:
        marks.append({"x": float(position[0]), "y": float(position[1]), "what": "agent", "label": "",
                      "detail": "the agent when the turn began"})
    circles = [{"circle": i, "k": k, "x": cx + radius * math.cos(2 * math.pi * k / 48),
                "y": cy + radius * math.sin(2 * math.pi * k / 48)}
               for i, (cx, cy) in enumerate(dict.fromkeys(counted)) for k in range(49)]
    xd, yd = _square([m["x"] for m in marks] + [c["x"] for c in circles],
                     [m["y"] for m in marks] + [c["y"] for c in circles])
    x = alt.X("x:Q", title="x (cells)", scale=alt.Scale(domain=xd, nice=False, zero=False))
    y = alt.Y("y:Q", title="y (cells)", scale=alt.Scale(domain=yd, nice=False, zero=False, reverse=True))
    kinds = [k for k in MAP_KINDS if any(m["what"] == k for m in marks)]
    layers = []
    if circles:
        layers.append(alt.Chart(pd.DataFrame(circles)).mark_line(
            color=MAP_KINDS["inspected episodes"][0], strokeDash=[2, 3], strokeWidth=1.2).encode(
            x=x, y=y, detail="circle:N", order="k:Q"))
    frame = pd.DataFrame(marks, columns=["x", "y", "what", "label", "detail"])
    layers.append(alt.Chart(frame).mark_point(filled=True, opacity=1).encode(
        x=x, y=y,
        color=alt.Color("what:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=kinds, range=[MAP_KINDS[k][0] for k in kinds])),
        shape=alt.Shape("what:N", title=None, scale=alt.Scale(domain=kinds, range=[MAP_KINDS[k][1] for k in kinds])),
        size=alt.Size("what:N", legend=None, scale=alt.Scale(domain=kinds, range=[MAP_KINDS[k][2] for k in kinds])),
        tooltip=[alt.Tooltip("detail:N", title="what"), alt.Tooltip("x:Q"), alt.Tooltip("y:Q")]))
    layers.append(alt.Chart(frame[frame["label"] != ""]).mark_text(color="white", fontSize=11,
                                                                    fontWeight="bold").encode(x=x, y=y, text="label:N"))
    return alt.layer(*layers).properties(width=MAP_SIZE, height=MAP_SIZE,
                                         autosize=alt.AutoSizeParams(type="pad", contains="padding"))
