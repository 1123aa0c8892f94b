"""Plotly figures for notebooks: the seed-band figure (Jupyter loads Plotly once per
notebook). The dashboard's pages draw Vega-Lite (``dashboard.vega_charts``). No Streamlit.

The figure has axis titles with units and a legend, and uses the palette of
``dashboard.theme`` so colours mean the same everywhere.
"""
from __future__ import annotations

try:
    import plotly.graph_objects as go
except ModuleNotFoundError as e:
    raise ModuleNotFoundError('dashboard.charts draws with Plotly, which the notebook extra installs: '
                              'pip install "mfm[notebook]"', name=e.name) from e

from dashboard import theme
from loaders.chart_data import SeedBands

FONT = dict(size=13)


def _layout(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=70, r=20, t=60, b=55), font=FONT, template="plotly_white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      hoverlabel=dict(font_size=12), modebar=dict(orientation="v"))
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
