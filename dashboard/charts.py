"""Plotly figures for the pages, built from the view tables of ``loaders.run_pages``. No Streamlit.

Each figure has axis titles with units and a legend, and uses the palette of
``dashboard.theme`` so colours mean the same on every page.
"""
from __future__ import annotations

import base64
import io
import zlib
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from PIL import Image
from plotly.subplots import make_subplots

from dashboard import theme
from loaders.chart_data import GridView, SeedBands, TimelineView
from loaders.run_pages import MAP_TILES_Y, TILES_X, TILES_Y, tile_size
from mfm.schema import GRID_KINDS

MARK_OFFSETS = {"milestone": -0.42, "memory_write": -0.32, "death": 0.0, "search": 0.32, "inspect": 0.42,
                "model_ok": 0.2, "model_retried": 0.2, "model_failed": 0.2}
FONT = dict(size=13)
CSD_STATUS_COLORS = {"verified": "#1b9e77", "failed": "#d62728", "candidate": "#999999"}


def _layout(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=70, r=20, t=60, b=55), font=FONT, template="plotly_white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      hoverlabel=dict(font_size=12), modebar=dict(orientation="v"))
    return fig


def timeline_figure(view: TimelineView, selected: str | None = None, step: int | None = None,
                    selected_span: tuple[int, int, int] | None = None) -> go.Figure:
    """Episodes as horizontal bars over env steps, one lane per life, with event marks and,
    below, the vitals (minimum per bin when binned). ``selected_span`` = (first_step,
    last_step, life) of the selected episode, highlighted even when its bar is binned."""
    bars, marks, vitals, color_by, lives = view.bars, view.marks, view.vitals, view.color_by, view.lives
    with_vitals = len(vitals) > 0
    fig = make_subplots(rows=2 if with_vitals else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.68, 0.32] if with_vitals else [1.0])
    what = "outcome" if color_by == "outcome" else "action kind"
    for cat in sorted(bars["category"].unique()) if len(bars) else []:
        b = bars[bars["category"] == cat]
        fig.add_trace(go.Bar(
            orientation="h", y=b["life"], base=b["start"], x=b["end"] - b["start"], width=0.5,
            name=f"{cat}", legendgroup=f"cat-{cat}", legendgrouptitle_text=None,
            marker=dict(color=theme.category_color(cat, color_by), line=dict(width=0)),
            customdata=np.stack([b["episode"], b["label"], b["count"]], axis=-1),
            hovertemplate=f"%{{customdata[1]}}<br>{what}: {cat}<br>steps %{{base}}–%{{x:.0f}} long<extra></extra>"
        ), row=1, col=1)
    if selected and len(bars):
        s = bars[bars["episode"] == selected]
        if len(s):
            fig.add_trace(go.Bar(
                orientation="h", y=s["life"], base=s["start"], x=s["end"] - s["start"], width=0.72,
                name=f"selected {selected}", showlegend=False,
                marker=dict(color="rgba(0,0,0,0)", line=dict(color="#000", width=2.5)),
                customdata=np.stack([s["episode"], s["label"], s["count"]], axis=-1),
                hovertemplate="%{customdata[1]}<extra>selected</extra>"), row=1, col=1)
    for kind, style in theme.MARK_STYLES.items():
        m = marks[marks["kind"] == kind] if len(marks) else marks
        if not len(m):
            continue
        scale = 1.0 if len(lives) <= 8 else max(0.55, 8 / len(lives))
        size = style["size"] * scale if m["count"].max() <= 1 else \
            np.clip((style["size"] + np.log2(m["count"])) * scale, 5, 22)
        fig.add_trace(go.Scatter(
            x=m["step"], y=m["life"] + MARK_OFFSETS[kind], mode="markers", name=style["name"],
            marker=dict(symbol=style["symbol"], color=style["color"], size=size, line=dict(width=0.5, color="#fff")),
            customdata=np.stack([m["label"], m["count"], m["episode"].fillna("")], axis=-1),
            hovertemplate="step %{x}<br>%{customdata[0]}<extra>" + style["name"] + "</extra>"), row=1, col=1)
    if selected_span is not None:
        a, b, life = selected_span
        fig.add_vrect(x0=a, x1=max(b, a + 0.5), fillcolor="rgba(0,0,0,0.10)", line_width=0, row=1, col=1)
        fig.add_trace(go.Scatter(x=[(a + b) / 2], y=[life - 0.47], mode="markers", name=f"selected {selected}",
                                 marker=dict(symbol="triangle-down", size=14, color="#000"),
                                 hovertemplate=f"selected {selected}: steps {a}–{b}<extra></extra>"), row=1, col=1)
    if step is not None:
        fig.add_vline(x=step, line=dict(color="#444", width=1, dash="dot"))
    fig.update_yaxes(title_text="life (one lane each)", tickvals=lives, ticktext=[f"life {i}" for i in lives],
                     autorange="reversed", range=None, row=1, col=1, zeroline=False,
                     showgrid=False)
    if lives:
        fig.update_yaxes(range=[max(lives) + 0.6, min(lives) - 0.6], autorange=False, row=1, col=1)
    if with_vitals:
        for name, color in theme.VITAL_COLORS.items():
            xs, ys = [], []
            for _, g in vitals.groupby("life", sort=True):
                xs += g["step"].tolist() + [None]
                ys += g[name].tolist() + [None]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, width=1.5),
                                     legendgroup="vitals", line_shape="hv",
                                     hovertemplate="step %{x}<br>" + name + " %{y}<extra></extra>"), row=2, col=1)
        fig.update_yaxes(title_text="vitals (0–9)", range=[-0.5, 9.5], row=2, col=1)
        fig.update_xaxes(title_text="env step", row=2, col=1)
    else:
        fig.update_xaxes(title_text="env step", row=1, col=1)
    fig.update_xaxes(showticklabels=True, row=1, col=1)
    fig.update_xaxes(range=[view.lo - 0.5, view.hi + 0.5])
    fig.update_layout(barmode="overlay")
    lane = 70 if len(lives) <= 8 else max(22, 560 // len(lives))
    return _layout(fig, 260 + lane * max(1, len(lives)) + (170 if with_vitals else 0))


def _cell_matrix(cells: pd.DataFrame, kind: str, extent: tuple[int, int, int, int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    x0, y0, x1, y1 = extent
    z = np.full((y1 - y0 + 1, x1 - x0 + 1), np.nan)
    text = np.full(z.shape, "", dtype=object)
    c = cells[cells["kind"] == kind]
    c = c[(c["x"] >= x0) & (c["x"] <= x1) & (c["y"] >= y0) & (c["y"] <= y1)]
    for x, y, n, a, b, lv in zip(c["x"], c["y"], c["count"], c["first_step"], c["last_step"], c["lives"]):
        z[y - y0, x - x0] = 1
        text[y - y0, x - x0] = f"{n} record(s), steps {a}–{b}, lives {lv}"
    return z, text


def _life_colors(lives: pd.Series) -> dict[str, Any]:
    """Marker colour by life (``theme.life_color``) as numbers on a stepped colour scale: one
    number per point instead of one colour string, which Plotly would check one by one."""
    palette = theme.QUALITATIVE
    n = len(palette)
    scale = [[pos, c] for i, c in enumerate(palette) for pos in (i / n, (i + 1) / n)]
    return dict(color=lives.to_numpy(int) % n, colorscale=scale, cmin=-0.5, cmax=n - 0.5, showscale=False)


def grid_figure(view: GridView, cell: tuple[int, int] | None = None) -> go.Figure:
    """The traversed-cell grid as a map (second axis downwards as in the game), with each
    life's path, episode end positions and deaths; the view's ``plane`` names the second axis
    (``z`` for 3-D runs)."""
    cells, paths, positions, deaths, extent = view.cells, view.paths, view.positions, view.deaths, view.extent
    fig = go.Figure()
    x0, y0, x1, y1 = extent
    for kind in GRID_KINDS:
        if not len(cells) or not (cells["kind"] == kind).any():
            continue
        color = theme.cell_kind_color(kind)
        z, text = _cell_matrix(cells, kind, extent)
        fig.add_trace(go.Heatmap(
            z=z, x0=x0, dx=1, y0=y0, dy=1, colorscale=[[0, color], [1, color]], showscale=False, zmin=0, zmax=1,
            hoverongaps=False, text=text, name=kind, legendgroup=kind, xgap=0.5, ygap=0.5,
            hovertemplate="cell (%{x}, %{y})<br>" + kind + ": %{text}<extra></extra>"))
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"cell: {kind}", legendgroup=kind,
                                 marker=dict(symbol="square", size=12, color=color,
                                             line=dict(width=1, color="#666"))))
    many = len(paths) and paths["life"].nunique() > 6
    for i, (life, g) in enumerate(paths.groupby("life", sort=True) if len(paths) else []):
        fig.add_trace(go.Scatter(
            x=g["x"].to_numpy(float), y=g["y"].to_numpy(float), mode="lines",
            name="paths (one colour per life)" if many else f"life {life} path",
            legendgroup="paths" if many else None, showlegend=not many or i == 0,
            line=dict(color=theme.life_color(life), width=2),
            opacity=0.75, customdata=g["step"], hovertemplate="step %{customdata}<br>(%{x}, %{y})<extra>life "
            + str(life) + "</extra>"))
    if len(positions):
        many_here = positions["count"] > 1
        lives = positions["life"].astype(str)
        ended = ("1 episode ended here, life " + lives).where(
            ~many_here, positions["count"].astype(str) + " episodes ended here, lives "
            + positions["first_life"].astype(str) + "–" + lives)
        latest = ("latest " + positions["id"]).where(many_here, positions["id"])
        name = ("episode end positions" + (f": {view.merged} in {len(positions)} cells" if view.merged else "")
                + " (click to pick)")
        fig.add_trace(go.Scatter(
            x=positions["x"], y=positions["y"], mode="markers", name=name,
            marker=dict(size=7, **_life_colors(positions["life"]), line=dict(width=1, color="#222")),
            customdata=np.stack([ended, latest, positions["summary"].str.slice(0, 80)], axis=-1),
            hovertemplate="(%{x}, %{y}): %{customdata[0]}<br>%{customdata[1]}: %{customdata[2]}<extra></extra>"))
    if len(deaths):
        fig.add_trace(go.Scatter(
            x=deaths["x"], y=deaths["y"], mode="markers", name="death",
            marker=dict(symbol="x", size=14, color="#111", line=dict(width=1, color="#fff")),
            customdata=np.stack([deaths["step"], deaths["cause"].fillna("unknown")], axis=-1),
            hovertemplate="death at step %{customdata[0]}: %{customdata[1]}<br>(%{x}, %{y})<extra></extra>"))
    if cell is not None:
        fig.add_trace(go.Scatter(x=[cell[0]], y=[cell[1]], mode="markers", name=f"selected cell {cell}",
                                 marker=dict(symbol="square-open", size=20, color="#ff00aa", line=dict(width=3)),
                                 hoverinfo="skip"))
    fig.update_xaxes(title_text="x (cells)", range=[x0 - 0.5, x1 + 0.5], constrain="domain", zeroline=False,
                     showgrid=False)
    fig.update_yaxes(title_text=f"{view.plane} (cells, downwards as in the game)", range=[y1 + 0.5, y0 - 0.5],
                     scaleanchor="x", scaleratio=1, zeroline=False, showgrid=False)
    fig.update_layout(plot_bgcolor="#f7f7f7")
    return _layout(fig, 760)


def png_data_uri(frame: np.ndarray) -> str:
    """A lossless PNG data URI of an HxWx3 frame (for Plotly image traces)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _tile_shapes(fig: go.Figure, frame: np.ndarray, row: int, col: int) -> None:
    t = tile_size(frame)
    h, w = frame.shape[:2]
    for i in range(TILES_X + 1):
        fig.add_shape(type="line", x0=i * t - 0.5, x1=i * t - 0.5, y0=-0.5, y1=min(h, TILES_Y * t) - 0.5,
                      line=dict(color="rgba(255,255,255,0.55)", width=1), row=row, col=col)
    for j in range(TILES_Y + 1):
        strong = j == MAP_TILES_Y
        fig.add_shape(type="line", x0=-0.5, x1=min(w, TILES_X * t) - 0.5, y0=j * t - 0.5, y1=j * t - 0.5,
                      line=dict(color="rgba(255,230,0,0.95)" if strong else "rgba(255,255,255,0.55)",
                                width=2 if strong else 1), row=row, col=col)


def frames_figure(frames: list[np.ndarray], titles: list[str], tiles: bool = False,
                  diffs: list[tuple[np.ndarray, str]] | None = None,
                  region: tuple[int, int, int, int] | None = None) -> go.Figure:
    """2–4 frames side by side with synchronised zoom and pan (matched axes), drawn pixelated.

    ``diffs`` adds a second row (difference masks); ``region`` = (x0, y0, x1, y1) in pixels
    sets the initial zoom of every panel; ``tiles`` draws the Crafter tile grid (the yellow
    line closes the 9x7 map area).
    """
    n = len(frames)
    rows = 2 if diffs else 1
    sub = list(titles) + (["frame 1 is the reference"] + [d[1] for d in diffs] if diffs else [])
    fig = make_subplots(rows=rows, cols=max(1, n), subplot_titles=sub, horizontal_spacing=0.03,
                        vertical_spacing=0.08)
    for i, f in enumerate(frames):
        fig.add_trace(go.Image(source=png_data_uri(f), zsmooth=False, name=titles[i],
                               hovertemplate="pixel (%{x}, %{y})<br>rgb %{color}<extra>" + titles[i] + "</extra>"),
                      row=1, col=i + 1)
        if tiles:
            _tile_shapes(fig, f, 1, i + 1)
    if diffs:
        for i, (d, label) in enumerate(diffs):
            fig.add_trace(go.Image(source=png_data_uri(d), zsmooth=False, name=label,
                                   hovertemplate="pixel (%{x}, %{y})<extra>" + label + "</extra>"),
                          row=2, col=i + 2)
            if tiles:
                _tile_shapes(fig, d, 2, i + 2)
    fig.update_xaxes(matches="x", title_text="x (px)", showgrid=False, zeroline=False)
    fig.update_yaxes(matches="y", showgrid=False, zeroline=False)
    fig.update_yaxes(title_text="y (px)", col=1)
    if diffs:
        fig.update_yaxes(title_text="y (px)", row=2, col=2)
    fig.update_annotations(font_size=13 if n <= 2 else 12)
    if region is not None:
        x0, y0, x1, y1 = region
        fig.update_xaxes(range=[x0 - 0.5, x1 - 0.5], autorange=False)
        fig.update_yaxes(range=[y1 - 0.5, y0 - 0.5], autorange=False)
    fig.update_layout(dragmode="zoom", showlegend=False)
    h = 440 if n <= 2 else 360 if n == 3 else 300
    fig = _layout(fig, (h + 40) * rows + 40)
    if any("<br>" in t for t in titles):
        fig.update_layout(margin=dict(t=85))
    return fig


def band_figure(series: SeedBands, x_title: str = "env step") -> go.Figure:
    """One line per method (mean over seeds, its dash and colour from the theme) with the 95%
    interval of the mean where it has several seeds; shaded step intervals; the legend names
    each method and its seeds, a note under the plot says what lines, bands and shading mean."""
    bands, shade = series.bands, series.shade
    fig = go.Figure()
    shade_color = theme.method_color("mfm")
    for lo, hi in shade:
        fig.add_vrect(x0=lo, x1=max(hi, lo + 1), fillcolor=shade_color, opacity=0.12, line_width=0)
    for method in series.methods:
        g = bands[bands["method"] == method]
        style = theme.method_style(method)
        band = g.dropna(subset=["lo", "hi"])
        if len(band):
            fig.add_trace(go.Scatter(x=list(band["step"]) + list(band["step"])[::-1],
                                     y=list(band["hi"]) + list(band["lo"])[::-1], fill="toself",
                                     fillcolor=style.color, opacity=0.18, line=dict(width=0), hoverinfo="skip",
                                     showlegend=False, name=f"{method} 95% interval"))
        fig.add_trace(go.Scatter(x=g["step"], y=g["mean"], mode="lines", name=series.label(method),
                                 line=dict(color=style.color, width=2, dash=style.dash),
                                 hovertemplate="step %{x}: %{y:.2f}<extra>" + str(method) + "</extra>"))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=series.y_title, rangemode="tozero")
    fig.add_annotation(text=series.note, xref="paper", yref="paper", x=0, y=-0.22, showarrow=False, xanchor="left",
                       yanchor="top", font=dict(size=11, color="#555"))
    _layout(fig, 460)
    fig.update_layout(margin=dict(b=110))
    return fig


PROV_COLUMNS = {"episode": 0, "knowledge": 1, "procedure": 2, "plan": 3, "file": 4}
PROV_COLORS = {"knowledge": "#1b9e77", "procedure": "#d95f02", "plan": "#7570b3", "file": "#999999",
               "episode": "#4e79a7"}
EDGE_STYLES = {"cites": dict(color="rgba(120,120,120,0.35)", width=1),
               "revises": dict(color="#7570b3", width=1.5, dash="dot"),
               "disabled_because": dict(color="#d62728", width=2),
               "used_in": dict(color="#2ca02c", width=1.5)}


def _prov_x(kind: str, chain: str) -> float:
    """Column of a node kind, spread within the column by a stable hash of its chain."""
    spread = (zlib.crc32(chain.encode("utf-8")) % 1000) / 1000 * 0.7 - 0.35 if chain else 0.0
    return PROV_COLUMNS.get(kind, len(PROV_COLUMNS)) + spread


def provenance_figure(nodes: pd.DataFrame, edges: pd.DataFrame, selected: str | None = None) -> go.Figure:
    """The provenance graph: one column per node kind, env step downwards; edges as lines.
    Nodes carry their id as customdata (for click selection); aggregates are squares sized
    by how many nodes they merge, disabled procedures are crosses."""
    fig = go.Figure()
    if not len(nodes):
        return _layout(fig, 300)
    pos = {i: (_prov_x(k, c or i), float(s)) for i, k, c, s in zip(nodes["id"], nodes["kind"], nodes["chain"],
                                                                      nodes["step"])}
    for kind, style in EDGE_STYLES.items():
        sub = edges[edges["kind"] == kind] if len(edges) else edges
        xs: list = []
        ys: list = []
        for s, d in zip(sub["src"], sub["dst"]) if len(sub) else ():
            if s in pos and d in pos:
                xs += [pos[s][0], pos[d][0], None]
                ys += [pos[s][1], pos[d][1], None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=style, hoverinfo="skip",
                                     name=kind.replace("_", " ")))
    for kind in PROV_COLUMNS:
        sub = nodes[nodes["kind"] == kind]
        if not len(sub):
            continue
        agg = sub["count"] > 1
        fig.add_trace(go.Scatter(
            x=[pos[i][0] for i in sub["id"]], y=sub["step"], mode="markers", name=kind,
            customdata=list(zip(sub["id"], sub["label"].str.slice(0, 140))),
            hovertemplate="%{customdata[1]}<br>step %{y}<extra>%{customdata[0]}</extra>",
            marker=dict(color=["#d62728" if d else PROV_COLORS[kind] for d in sub["disabled"]],
                        symbol=["square" if a else "x" if d else "circle" for a, d in zip(agg, sub["disabled"])],
                        size=[min(22, 7 + 2 * float(np.log2(c))) for c in sub["count"]],
                        line=dict(width=0.5, color="#333333"))))
    if selected in pos:
        fig.add_trace(go.Scatter(x=[pos[selected][0]], y=[pos[selected][1]], mode="markers", name="selected",
                                 hoverinfo="skip", marker=dict(size=20, color="rgba(0,0,0,0)",
                                                               line=dict(width=3, color="#111111"))))
    fig.update_xaxes(tickvals=list(PROV_COLUMNS.values()), ticktext=[k for k in PROV_COLUMNS],
                     range=[-0.6, len(PROV_COLUMNS) - 0.4], showgrid=False, zeroline=False)
    fig.update_yaxes(title_text="env step", autorange="reversed")
    return _layout(fig, 620)


def analogy_figure(nodes: pd.DataFrame, edges: pd.DataFrame) -> go.Figure:
    """The Echo analogy graph from ``loaders.echo.analogy_layout`` (``nodes``) and
    ``analogy_edges``: edges labelled with the axes that carried the analogy (solid from the
    representative, dotted from the exemplar sharing the value); node colour is the task's status."""
    pos = {r.task: (r.x, r.y) for r in nodes.itertuples()}
    fig = go.Figure()
    for r in edges.itertuples():
        (x0, y0), (x1, y1) = pos[r.source], pos[r.target]
        fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=CSD_STATUS_COLORS.get(r.status, "#999999"), width=1.2,
                                           dash="solid" if r.role == "representative" else "dot")))
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=r.axes, showarrow=False, font=dict(size=9),
                           bgcolor="rgba(255,255,255,0.7)")
    for status, color in CSD_STATUS_COLORS.items():
        ns = nodes[nodes["status"] == status]
        if not len(ns):
            continue
        fig.add_trace(go.Scatter(
            x=list(ns["x"]), y=list(ns["y"]), mode="markers+text", name=status, text=list(ns["task"]),
            textposition="top center", marker=dict(size=14, color=color, line=dict(width=1, color="#333")),
            customdata=list(ns["task"]), hovertemplate="%{customdata}<extra>" + status + "</extra>"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    tallest = int(nodes["x"].value_counts().max()) if len(nodes) else 1
    fig.update_layout(height=max(320, 70 * tallest), margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h"))
    return fig
