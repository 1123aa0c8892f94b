"""Vega-Lite (Altair) charts of every page: the Runs page, where a dashboard session starts,
the seed-band curves (Progress, Steps per turn, Echo), Retargeting (the A.4 rates and the
retarget mini-map), Echo's analogy graph, the Frames panels, and the Provenance graph,
whose clicks are Vega-Lite point selections that the page reads through
``st.vega_lite_chart(on_select=...)`` (the Timeline and the Spatial grid's map are drawn on
canvases of their own, ``dashboard.timeline_canvas`` and ``dashboard.grid_canvas``). Pages draw a chart's spec (:func:`spec`),
made once per view where the view is cached: Streamlit's own conversion of an Altair chart
validates it on every rerun, which took half of a Timeline rerun. The exported figures of
``dashboard.figures`` draw the seed bands and the rates with the same functions. No
Streamlit.

Why not Plotly: every new tab that shows a Plotly chart loads Streamlit's Plotly
element, a 4.7 MB script, and evaluating it keeps the main thread busy for ~0.8 s on our
2-core benchmark machine before anything is drawn; a tab costs ~0.95 s more with a Plotly
chart than without, ~0.2 s more with a Vega-Lite chart (docs/benchmarks.md, "A light first
page"). These charts keep what the Plotly figures they replace showed: axis titles with
units, a legend, hover text, and the colours and markers of ``dashboard.theme``.
"""
from __future__ import annotations

import math
import threading
import warnings
import zlib
from typing import Any, Callable

import altair as alt
import numpy as np
import pandas as pd

from dashboard import theme
from dashboard.canvas import SHAPES
from loaders.chart_data import RETARGET_MEASURES, SeedBands
from loaders.display import data_uri
from loaders.frame_images import MAP_TILES_Y, TILES_X, TILES_Y, tile_size

_SPEC_LOCK = threading.Lock()


SVG_FONT = "DejaVu Sans"
"""The font of a chart drawn in the server (:func:`svg`), unless its spec sets one: a font
both vl-convert and the browser find (Debian's default sans-serif). With the generic
``sans-serif`` vl-convert laid the legend out for a narrower font than Chromium drew, and its
entries ran into each other."""


def svg(spec_: dict[str, Any]) -> str:
    """A spec of :func:`spec` drawn by Vega in this process (vl-convert, in :data:`SVG_FONT`) as
    SVG markup: a chart the page shows as an image, with nothing for the browser to compute
    (Retargeting's rates and map: drawn by Vega-Lite in the browser they cost a click what any
    element costs, and the two together kept that page over twice the bare app's click)."""
    import vl_convert

    config = spec_.get("config") or {}
    return vl_convert.vegalite_to_svg({**spec_, "config": {"font": SVG_FONT, **config}})


def spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """``chart`` as a Vega-Lite spec, its tables inline whatever their length (Altair's
    default transformer refuses more than 5,000 rows; the pages bound what they draw
    themselves), not checked against the Vega-Lite schema: that check is the costly part of
    the conversion (0.1-0.2 s of a chart's first drawing at 360,000 steps), and the tests
    make it on every chart they build (``tests/conftest.chart_spec``)."""
    with _SPEC_LOCK, alt.data_transformers.enable("default", max_rows=None):
        return chart.to_dict(validate=False)


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
            x="step:Q", y="lo:Q", y2="hi:Q", color=alt.Color("label:N", scale=color, legend=legend)))
    lines = bands.dropna(subset=["mean"])
    x = alt.X("step:Q", title=series.x_title, axis=alt.Axis(tickMinStep=1))
    y = alt.Y("mean:Q", title=series.y_title)
    widths = stacked_widths(len(labels), 1.5 if screen else 0.9)
    drawn = [alt.Chart(data(lines[lines["label"] == label])).mark_line(strokeWidth=w).encode(
        x=x, y=y, color=alt.Color("label:N", scale=color, legend=legend),
        strokeDash=alt.StrokeDash("label:N", scale=dash, legend=legend))
        for label, w in zip(labels, widths)] or [alt.Chart(data(lines)).mark_line().encode(x=x, y=y)]
    if not screen:
        return alt.layer(*layers, *drawn).properties(title=note(series.note))
    zoom = alt.selection_interval(bind="scales", encodings=["x"], zoom="wheel![event.shiftKey]")
    hover = alt.Chart(data(lines)).mark_point(size=60, opacity=0).encode(
        x=x, y=y, tooltip=[alt.Tooltip("method:N"), alt.Tooltip("step:Q", title=series.x_title),
                           alt.Tooltip("mean:Q", title=series.y_title, format=".2f")])
    drawn[0] = drawn[0].add_params(zoom)
    return alt.layer(*layers, *drawn, hover).properties(
        title=note(series.note, 12), height=SCREEN_HEIGHT, autosize=FIT_WIDTH)


WIDTH_STEP = 0.5
"""How much wider each method's line is than the next one's, as a share of the narrowest."""


def stacked_widths(n: int, narrowest: float) -> list[float]:
    """Line widths for ``n`` methods drawn in order, widest first: where two methods share a
    value (two runs at 9 milestones), the later, narrower line lies inside the earlier one and
    both colours stay visible, where one line of equal width would hide the other."""
    return [round(narrowest * (1 + WIDTH_STEP * (n - 1 - i)), 2) for i in range(n)]


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


def rates_chart(rates: pd.DataFrame, width: float, data: Callable[[pd.DataFrame], Any] = lambda d: d,
                screen: bool = False, font_size: float = 6) -> alt.FacetChart:
    """The A.4 table as bars, one row of bars per method: the retarget rates of inspecting and
    of other turns, the near share and its null rate, each with its Wilson 95% interval and
    the counts behind it (``n/a`` where a method has nothing to count). ``width``: of each
    row's plot; ``data`` as for :func:`band_chart`; ``screen``: sized for a page, with a
    tooltip per bar; ``font_size``: of the labels beside the bars in print."""
    df = rates_table(rates)
    measures = list(RETARGET_MEASURES)
    methods = list(dict.fromkeys(df["method"]))
    names = {m: PRINT_MEASURES.get(m, m) for m in measures}
    short = alt.Axis(labelExpr=" : ".join(f"datum.value == '{m}' ? '{n}'" for m, n in names.items()) + " : datum.value")
    y = alt.Y("measure:N", sort=measures, title=None, **({} if screen else {"axis": short}))
    x = alt.X("rate:Q", title="rate (share of turns; near and null: share of new targets)" if screen else "rate",
              scale=alt.Scale(domain=[0, 1.45] if screen else [0, 1]),
              axis=alt.Axis(format="%", values=[0, 0.25, 0.5, 0.75, 1] if screen else [0, 0.5, 1]))
    color = alt.Color("measure:N", sort=measures, title=None,
                      legend=alt.Legend(orient="top") if screen else None,
                      scale=alt.Scale(domain=measures, range=[theme.RETARGET_COLORS[m] for m in measures]))
    base = alt.Chart(data(df))
    bars = base.mark_bar(height=16 if screen else 8).encode(y=y, x=x, color=color)
    if screen:
        bars = bars.encode(tooltip=[alt.Tooltip("method:N"), alt.Tooltip("measure:N"),
                                    alt.Tooltip("text:N", title="rate (counts)")])
    header = (alt.Header(labelExpr="datum.value") if screen else
              alt.Header(labelExpr="datum.value", labelOrient="top", labelAngle=0, labelAnchor="start",
                         labelAlign="left", labelFontWeight="bold", labelPadding=2))
    return alt.layer(
        bars,
        base.mark_rule(strokeWidth=1.2 if screen else 0.8, color="#222222").encode(y=y, x="lo:Q", x2="hi:Q"),
        base.mark_text(align="left", dx=3, fontSize=12 if screen else font_size).encode(y=y, x="at:Q", text="text:N"),
    ).properties(width=width, height=110 if screen else 4 * (font_size + 4)).facet(
        row=alt.Row("method:N", title=None, sort=methods, header=header), spacing=4 if not screen else 20)


PRINT_MEASURES = {"retarget | inspect": "inspecting", "retarget | other": "other turns", "near": "near",
                  "null": "null"}
"""The rates' names on the printed figure's axis (its note says what each is)."""


MAP_SIZE = 400
"""The retarget map's plot, square (pixels)."""
CROSS = SHAPES["x"]
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
    frame["area"] = [float(MAP_KINDS[w][2]) for w in frame["what"]]
    layers.append(alt.Chart(frame).mark_point(filled=True, opacity=1).encode(
        x=x, y=y,
        color=alt.Color("what:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=kinds, range=[MAP_KINDS[k][0] for k in kinds])),
        shape=alt.Shape("what:N", title=None, scale=alt.Scale(domain=kinds, range=[MAP_KINDS[k][1] for k in kinds])),
        size=alt.Size("area:Q", scale=None, legend=None),
        tooltip=[alt.Tooltip("detail:N", title="what"), alt.Tooltip("x:Q"), alt.Tooltip("y:Q")]))
    layers.append(alt.Chart(frame[frame["label"] != ""]).mark_text(color="white", fontSize=11,
                                                                    fontWeight="bold").encode(x=x, y=y, text="label:N"))
    return alt.layer(*layers).properties(width=MAP_SIZE, height=MAP_SIZE,
                                         autosize=alt.AutoSizeParams(type="pad", contains="padding"))


PROV_COLUMNS = {"episode": 0, "knowledge": 1, "procedure": 2, "plan": 3, "file": 4}
"""The provenance graph's columns: one per node kind."""
PROV_COLORS = {"episode": "#4e79a7", "knowledge": "#1b9e77", "procedure": "#d95f02", "plan": "#7570b3",
               "file": "#999999", "disabled": "#d62728"}
"""The colour of a provenance node by its kind (red: a disabled procedure)."""
EDGE_STYLES = {"cites": ("#bdbdbd", []), "revises": ("#7570b3", [2, 3]), "disabled_because": ("#d62728", []),
               "used_in": ("#2ca02c", [])}
"""Colour and dash of each kind of provenance edge."""
PROV_SHAPES = {"version": "circle", "merged nodes": "square", "disabled": CROSS}
"""The shape of a provenance node: one version, an aggregate of many, a disabled procedure."""
PROV_PICK = "pick_node"
"""The provenance graph's click selection: the clicked node's ``id``."""


def prov_x(kind: str, chain: str) -> float:
    """Column of a node kind, spread within the column by a stable hash of its chain."""
    spread = (zlib.crc32(chain.encode("utf-8")) % 1000) / 1000 * 0.7 - 0.35 if chain else 0.0
    return PROV_COLUMNS.get(kind, len(PROV_COLUMNS)) + spread


def provenance_graph(nodes: pd.DataFrame, edges: pd.DataFrame, selected: str | None = None) -> alt.LayerChart:
    """The provenance graph of ``loaders.provenance`` (``nodes_frame``, ``edges_frame``): one
    column per node kind, env step downwards, edges as lines coloured by kind. Merged nodes
    are squares sized by how many they merge, disabled procedures red crosses; ``selected``
    is ringed. Wheel to zoom, drag to pan; clicking a node selects it (:data:`PROV_PICK`)."""
    names = list(PROV_COLUMNS)
    x_scale = alt.Scale(domain=[-0.6, len(names) - 0.4], nice=False, zero=False)
    x = alt.X("x:Q", scale=x_scale, title="node kind", axis=alt.Axis(
        values=list(PROV_COLUMNS.values()), labelExpr=f"{names}[datum.value]", grid=False))
    y = alt.Y("step:Q", title="env step", scale=alt.Scale(reverse=True, zero=False))
    if not len(nodes):
        return alt.Chart(pd.DataFrame([{"x": 2, "step": 0, "text": "no memory written in this range"}])).mark_text(
        ).encode(x=x, y=y, text="text:N").properties(height=300, autosize=FIT_WIDTH)
    xs = {i: prov_x(k, c or i) for i, k, c in zip(nodes["id"], nodes["kind"], nodes["chain"])}
    steps = dict(zip(nodes["id"], nodes["step"].astype(float)))
    layers = []
    e = edges[edges["src"].isin(xs) & edges["dst"].isin(xs)] if len(edges) else edges
    if len(e):
        kinds = [k for k in EDGE_STYLES if k in set(e["kind"])]
        frame = pd.DataFrame({"x": e["src"].map(xs), "step": e["src"].map(steps), "x2": e["dst"].map(xs),
                              "step2": e["dst"].map(steps), "edge": e["kind"].str.replace("_", " ")})
        shown = [k.replace("_", " ") for k in kinds]
        legend = alt.Legend(title="edge", orient="right", symbolType="stroke")
        layers.append(alt.Chart(frame).mark_rule(opacity=0.8, strokeWidth=1.5).encode(
            x=x, y=y, x2="x2:Q", y2="step2:Q",
            color=alt.Color("edge:N", legend=legend, scale=alt.Scale(
                domain=shown, range=[EDGE_STYLES[k][0] for k in kinds])),
            strokeDash=alt.StrokeDash("edge:N", legend=legend, scale=alt.Scale(
                domain=shown, range=[EDGE_STYLES[k][1] for k in kinds]))))
    merged = nodes["count"] > 1
    form = np.where(merged, "merged nodes", np.where(nodes["disabled"], "disabled", "version"))
    points = pd.DataFrame({"x": nodes["id"].map(xs), "step": nodes["step"], "id": nodes["id"],
                           "node": np.where(nodes["disabled"], "disabled", nodes["kind"]), "form": form,
                           "label": nodes["label"].str.slice(0, 140),
                           "size": np.square(np.minimum(22, 7 + 2 * np.log2(nodes["count"].to_numpy(float))))})
    present = [k for k in PROV_COLORS if k in set(points["node"])]
    forms = [f for f in PROV_SHAPES if f in set(points["form"])]
    pick = alt.selection_point(PROV_PICK, fields=["id"], on="click", clear=False, empty=False)
    zoom = alt.selection_interval(name="prov_zoom", bind="scales")
    layers.append(alt.Chart(points).mark_point(filled=True, opacity=1, stroke="#333333", strokeWidth=0.5).encode(
        x=x, y=y, size=alt.Size("size:Q", scale=None, legend=None),
        color=alt.Color("node:N", title="node", legend=alt.Legend(orient="right", symbolSize=100),
                        scale=alt.Scale(domain=present, range=[PROV_COLORS[k] for k in present])),
        shape=alt.Shape("form:N", title=None,
                        legend=alt.Legend(orient="right", symbolSize=100) if forms != ["version"] else None,
                        scale=alt.Scale(domain=forms, range=[PROV_SHAPES[f] for f in forms])),
        tooltip=[alt.Tooltip("id:N"), alt.Tooltip("label:N"), alt.Tooltip("step:Q", title="env step")],
    ).add_params(pick, zoom))
    if selected in xs:
        layers.append(alt.Chart(pd.DataFrame([{"x": xs[selected], "step": steps[selected]}])).mark_point(
            filled=False, size=420, stroke="#111111", strokeWidth=3).encode(x=x, y=y))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=620, autosize=FIT_WIDTH)


CSD_STATUS_COLORS = {"verified": "#1b9e77", "failed": "#d62728", "candidate": "#999999"}
"""The colour of an Echo task by its status now."""
ANALOGY_ROLES = {"representative": [], "exemplar": [2, 3]}
"""Dash of an analogy edge by the role of its source (solid: the representative task)."""


def analogy_graph(nodes: pd.DataFrame, edges: pd.DataFrame) -> alt.LayerChart:
    """The Echo analogy graph from ``loaders.echo.analogy_layout`` (``nodes``) and
    ``analogy_edges``: edges labelled with the axes that carried the analogy (solid from the
    representative, dotted from the exemplar sharing the value); node colour is the task's
    status, its name above it."""
    pos = {r.task: (r.x, r.y) for r in nodes.itertuples()}
    known = edges[edges["source"].isin(pos) & edges["target"].isin(pos)] if len(edges) else edges
    frame = pd.DataFrame({"x": known["source"].map(lambda t: pos[t][0]), "y": known["source"].map(lambda t: pos[t][1]),
                          "x2": known["target"].map(lambda t: pos[t][0]),
                          "y2": known["target"].map(lambda t: pos[t][1]),
                          "status": known["status"], "role": known["role"], "axes": known["axes"]})
    frame["mx"], frame["my"] = (frame["x"] + frame["x2"]) / 2, (frame["y"] + frame["y2"]) / 2
    hidden = alt.Axis(labels=False, ticks=False, domain=False, grid=False, title=None)
    pad = 0.5
    xs = alt.Scale(domain=[float(nodes["x"].min()) - pad, float(nodes["x"].max()) + pad], nice=False, zero=False)
    ys = alt.Scale(domain=[float(nodes["y"].min()) - pad, float(nodes["y"].max()) + pad], nice=False, zero=False)
    x, y = alt.X("x:Q", axis=hidden, scale=xs), alt.Y("y:Q", axis=hidden, scale=ys)
    statuses = [s for s in CSD_STATUS_COLORS if s in set(nodes["status"]) | set(frame["status"])]
    color = alt.Scale(domain=statuses, range=[CSD_STATUS_COLORS[s] for s in statuses])
    roles = [r for r in ANALOGY_ROLES if r in set(frame["role"])]
    status = alt.Legend(orient="top", title="task")
    layers = [alt.Chart(frame).mark_rule(strokeWidth=1.2).encode(
        x=x, y=y, x2="x2:Q", y2="y2:Q", color=alt.Color("status:N", scale=color, legend=status),
        strokeDash=alt.StrokeDash("role:N", title="edge from", legend=alt.Legend(orient="top"),
                                  scale=alt.Scale(domain=roles, range=[ANALOGY_ROLES[r] for r in roles]))),
              alt.Chart(frame).mark_text(fontSize=10, color="#333333").encode(
        x=alt.X("mx:Q", axis=hidden, scale=xs), y=alt.Y("my:Q", axis=hidden, scale=ys), text="axes:N")]
    layers += [alt.Chart(nodes).mark_point(filled=True, size=220, stroke="#333333", strokeWidth=1, opacity=1).encode(
        x=x, y=y, color=alt.Color("status:N", scale=color, legend=status),
        tooltip=[alt.Tooltip("task:N"), alt.Tooltip("status:N")]),
        alt.Chart(nodes).mark_text(dy=-16, fontSize=12).encode(x=x, y=y, text="task:N")]
    tallest = int(nodes["x"].value_counts().max()) if len(nodes) else 1
    return alt.layer(*layers).properties(height=max(320, 70 * tallest), autosize=FIT_WIDTH)


FRAME_SIDE = {1: 440, 2: 440, 3: 290, 4: 220}
"""The height (pixels) of each frame panel, by how many frames are compared."""
FRAME_HOVER_PIXELS = 128 * 128
"""Frames up to this many pixels get a hover target per pixel (its position and colour)."""


def _tile_lines(frame: np.ndarray) -> pd.DataFrame:
    """Crafter's tile grid over a frame: one row per line with its colour and width (``strong``:
    the yellow line that closes the 9x7 map area)."""
    t = tile_size(frame)
    h, w = frame.shape[:2]
    bottom, right = min(h, TILES_Y * t) - 0.5, min(w, TILES_X * t) - 0.5
    rows = [{"x": i * t - 0.5, "x2": i * t - 0.5, "y": -0.5, "y2": bottom, "strong": False}
            for i in range(TILES_X + 1)]
    rows += [{"x": -0.5, "x2": right, "y": j * t - 0.5, "y2": j * t - 0.5, "strong": j == MAP_TILES_Y}
             for j in range(TILES_Y + 1)]
    lines = pd.DataFrame(rows)
    return lines.assign(color=np.where(lines["strong"], "rgba(255,230,0,0.95)", "rgba(255,255,255,0.55)"),
                        width=np.where(lines["strong"], 2, 1))


def _pixels(frame: np.ndarray) -> pd.DataFrame:
    """One row per pixel: position and colour, for the panel's hover."""
    h, w = frame.shape[:2]
    flat = np.ascontiguousarray(frame[:, :, :3], dtype=np.uint8).reshape(-1, 3)
    xs, ys = np.arange(w, dtype=np.uint16), np.arange(h, dtype=np.uint16)
    return pd.DataFrame({"x": np.tile(xs, h), "y": np.repeat(ys, w), "r": flat[:, 0], "g": flat[:, 1], "b": flat[:, 2]})


def frames_panels(frames: list[np.ndarray], titles: list[str], tiles: bool = False,
                  diffs: list[tuple[np.ndarray, str]] | None = None,
                  region: tuple[int, int, int, int] | None = None, pixels: bool = False) -> alt.ConcatChart:
    """1–4 frames side by side, drawn as blocks (never smoothed), that zoom (wheel) and pan
    (drag) together; double-click resets. ``diffs`` adds a row of difference masks under
    frames 2… (one wrapped concat: a concat of rows would give the rows' views the same
    names, and Vega-Lite then draws the second row's images in the first); ``region`` =
    (x0, y0, x1, y1) in pixels is the initial view of every panel; ``tiles`` draws the
    Crafter tile grid (the yellow line closes the 9x7 map area). ``pixels``: each pixel's
    position and colour show on hover (frames up to :data:`FRAME_HOVER_PIXELS`); it costs a
    hover target per pixel, which took the browser ~0.8 s more to draw two 64x64 frames."""
    h, w = frames[0].shape[:2]
    x0, y0, x1, y1 = region if region is not None else (0, 0, w, h)
    xs = alt.Scale(domain=[x0 - 0.5, x1 - 0.5], nice=False, zero=False)
    ys = alt.Scale(domain=[y0 - 0.5, y1 - 0.5], nice=False, zero=False, reverse=True)
    side = FRAME_SIDE.get(len(frames), min(FRAME_SIDE.values()))
    width = round(side * (x1 - x0) / max(1, y1 - y0))
    zoom = alt.selection_interval(name="frames_zoom", bind="scales")

    def panel(frame: np.ndarray, title: str, first: bool, hover: bool) -> alt.LayerChart:
        y_axis = alt.Axis(title="y (px)") if first else None
        x = alt.X("x:Q", scale=xs, title="x (px)")
        fh, fw = frame.shape[:2]
        image = alt.Chart(pd.DataFrame([{"url": data_uri(frame, 1), "x": -0.5, "x2": fw - 0.5, "y": -0.5,
                                         "y2": fh - 0.5}])).mark_image(
            smooth=False, aspect=False, tooltip=False).encode(
            x=x, x2=alt.X2("x2"), y=alt.Y("y:Q", scale=ys, axis=y_axis), y2=alt.Y2("y2"), url=alt.Url("url:N")
        ).add_params(zoom)
        layers = [image]
        if tiles:
            layers.append(alt.Chart(_tile_lines(frame)).mark_rule(tooltip=False).encode(
                x=x, x2=alt.X2("x2"), y=alt.Y("y:Q", scale=ys, axis=y_axis), y2=alt.Y2("y2"),
                color=alt.Color("color:N", scale=None), strokeWidth=alt.StrokeWidth("width:Q", scale=None)))
        if hover and fh * fw <= FRAME_HOVER_PIXELS:
            layers.append(alt.Chart(_pixels(frame)).transform_calculate(
                left="datum.x - 0.5", right="datum.x + 0.5", top="datum.y - 0.5", bottom="datum.y + 0.5"
            ).mark_rect(opacity=0.001).encode(
                x=alt.X("left:Q", scale=xs, title="x (px)"), x2=alt.X2("right"),
                y=alt.Y("top:Q", scale=ys, axis=y_axis), y2=alt.Y2("bottom"),
                tooltip=[alt.Tooltip("x:Q", title="x (px)"), alt.Tooltip("y:Q", title="y (px)"), alt.Tooltip("r:Q"),
                         alt.Tooltip("g:Q"), alt.Tooltip("b:Q")]))
        return alt.layer(*layers).properties(width=width, height=side, title=alt.TitleParams(
            title.split("<br>"), fontSize=13 if len(frames) <= 2 else 12, fontWeight="normal"))

    panels = [panel(f, t, i == 0, pixels) for i, (f, t) in enumerate(zip(frames, titles))]
    if diffs:
        panels.append(alt.Chart(pd.DataFrame([{"x": (x0 + x1) / 2, "y": (y0 + y1) / 2,
                                               "text": "frame 1 is the reference"}])).mark_text(
            fontSize=12, color="#555555", tooltip=False).encode(x=alt.X("x:Q", scale=xs, title="x (px)"),
                                                 y=alt.Y("y:Q", scale=ys, title="y (px)"), text=alt.Text("text:N")
                                                 ).properties(width=width, height=side))
        panels += [panel(d, label, False, False) for d, label in diffs]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Automatically deduplicated selection parameter")  # wanted: one zoom
        return alt.concat(*panels, columns=len(frames), spacing=12).resolve_scale(x="shared", y="shared").properties(
            autosize=alt.AutoSizeParams(type="pad", contains="padding"))
