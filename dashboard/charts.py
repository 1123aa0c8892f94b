"""Plotly figures: the frame panels of the Frames page (zoom and pan shared by every panel,
pixels drawn as blocks, the colour of each pixel on hover) and the seed-band figure the
notebooks show. The other pages draw Vega-Lite (``dashboard.vega_charts``). No Streamlit.

Each figure has axis titles with units and a legend, and uses the palette of
``dashboard.theme`` so colours mean the same everywhere.
"""
from __future__ import annotations

import base64
import io

import numpy as np
import plotly.graph_objects as go
from PIL import Image
from plotly.subplots import make_subplots

from dashboard import theme
from loaders.chart_data import SeedBands
from loaders.run_pages import MAP_TILES_Y, TILES_X, TILES_Y, tile_size

FONT = dict(size=13)


def _layout(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=70, r=20, t=60, b=55), font=FONT, template="plotly_white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      hoverlabel=dict(font_size=12), modebar=dict(orientation="v"))
    return fig


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
