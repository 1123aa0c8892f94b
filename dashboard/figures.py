"""Figures for papers: Altair charts in a clean print style, rendered headless by vl-convert to
SVG, PDF and PNG, each with its data as CSV and a JSON manifest (runs and their content hash,
step range, filters, command, package version and commit, dashboard deep link).

Each figure draws the data of :mod:`loaders.chart_data`, the same record the page draws (in
its own on-screen chart of ``dashboard.vega_charts``, or for the seed-band curves and the A.4
rates with the page's own functions, ``band_chart`` and ``rates_chart``), so an export holds
what the page shows. ``write_figures(paths, out_dir)`` writes every
standard figure and the paper's tables (:mod:`loaders.paper_tables`) for runs or runs roots,
one folder per task; it backs ``mfm figures`` (docs/figures.md). A figure exported from a page
also records the page's view (its URL query state), so its deep link reopens that view.
"""
from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import re
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, urlencode

import altair as alt
import pandas as pd
import vl_convert as vlc
from PIL import ImageFont

from dashboard import theme, vega_charts
from loaders import analysis_pages as ap
from loaders import chart_data, echo, paper_size, paper_tables
from loaders import provenance
from loaders import lookups
from loaders.escape import csv_frame, encodable, file_segment, latex_label, latex_text
from loaders.remote.mirror import run_identity
from loaders.run import Run, find_runs, local_path, open_run
from mfm import progress as counting

WIDTHS = paper_size.WIDTHS
"""The named print widths in bp (``loaders.paper_size``, the one place they are defined):
``single`` 3.45 in, ``double`` 7 in, ``text`` 5.5 in."""
FORMATS = ("svg", "pdf", "png")
MIME = {"svg": "image/svg+xml", "pdf": "application/pdf", "png": "image/png"}
FONTS = {"sans": ("DejaVu Sans", "DejaVuSans.ttf"), "serif": ("DejaVu Serif", "DejaVuSerif.ttf")}
"""The type of ``--font sans|serif``: the family the renderer draws and its font file (also
used to measure text). DejaVu is what the renderer, Debian (fonts-dejavu-core) and headless
Chromium all have, so a figure measures the same in the PDF and in a browser; a viewer without
it substitutes a narrower face, so nothing is cut."""
FALLBACK = {"sans": "Verdana, Arial, Helvetica, sans-serif", "serif": "Georgia, Times New Roman, serif"}
FONT = f"{FONTS['sans'][0]}, {FALLBACK['sans']}"
FONT_SIZE = 8.0
"""The default type size (pt) of titles, legends and notes; tick and mark labels are 1 pt smaller."""
PNG_SCALE = 3
"""PNG pixels per bp; the file records its real resolution (72 × 3 = 216 dpi)."""
HASHED = ("run.json", "index.jsonl", "steps.jsonl", "turns.jsonl", "grid.jsonl", "milestones.jsonl", "lives.jsonl",
          "memory_writes.jsonl")


@dataclass(frozen=True)
class PrintSize:
    """The size asked of a figure: its whole ``width`` (a name of :data:`WIDTHS` or a length,
    ``3.3in``, ``241pt``), optionally its whole ``height`` (else the figure's own aspect), the
    type size (pt) and face (``sans``/``serif``)."""

    width: str | float = "double"
    height: str | float | None = None
    font_size: float = FONT_SIZE
    font: str = "sans"

    def __post_init__(self) -> None:
        paper_size.width_bp(self.width)
        if self.height is not None:
            paper_size.parse_length(self.height, "height")
        if self.font not in FONTS:
            raise ValueError(f"font {self.font!r}: use one of {', '.join(FONTS)}")
        if not 4 <= float(self.font_size) <= 14:
            raise ValueError(f"font size {self.font_size!r}: use 4-14 pt")

    @property
    def width_bp(self) -> float:
        return paper_size.width_bp(self.width)

    @property
    def height_bp(self) -> float | None:
        return None if self.height is None else paper_size.parse_length(self.height, "height")

    @property
    def small(self) -> float:
        """The size of tick labels and of text drawn in the plot."""
        return max(4.0, float(self.font_size) - 1)

    @property
    def family(self) -> str:
        return f"{FONTS[self.font][0]}, {FALLBACK[self.font]}"

    def text_width(self, text: str, size: float | None = None) -> float:
        """The width (bp) of ``text`` set in this face at ``size`` (default: the type size)."""
        size = size or float(self.font_size)
        try:
            return _face(self.font).getlength(encodable(str(text))) * size / 100
        except (OSError, RuntimeError, ValueError, UnicodeError):
            return len(str(text)) * size * WIDE_CHAR  # text the font library cannot lay out

    def wrap(self, text: str, width: float | None = None, size: float | None = None) -> list[str]:
        """``text`` broken at spaces into lines no wider than ``width`` (default: the figure's
        width less 4 bp); a word longer than a line is cut with an ellipsis (never
        beyond the figure's edge)."""
        room = (width if width is not None else self.width_bp - 4)
        lines: list[str] = []
        for word in str(text).split():
            while self.text_width(word, size) > room and len(word) > 1:
                word = word[:-2] + "…"
            if lines and self.text_width(f"{lines[-1]} {word}", size) <= room:
                lines[-1] = f"{lines[-1]} {word}"
            else:
                lines.append(word)
        return lines or [""]


WIDE_CHAR = 0.7
"""Em per character assumed for text the font file cannot measure (wider than DejaVu's average)."""


@functools.lru_cache(maxsize=4)
def _face(font: str) -> ImageFont.FreeTypeFont:
    """The font file of ``font`` at 100 px, for measuring."""
    return ImageFont.truetype(FONTS[font][1], 100, layout_engine=ImageFont.Layout.BASIC)


def print_size(width: str | float | PrintSize | None, default: str = "double") -> PrintSize:
    """``width`` as a :class:`PrintSize` (a name or a length; ``None``: ``default``)."""
    if isinstance(width, PrintSize):
        return width
    return PrintSize(default if width is None else width)


@dataclass
class Figure:
    """A chart and what it was made from (for the manifest)."""

    name: str
    chart: alt.TopLevelMixin
    runs: list[tuple[str, Run]]
    page: str
    steps: tuple[int, int] | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    """The choices the chart applies (step range, window, colouring, ...)."""
    view: dict[str, str] = field(default_factory=dict)
    """The page's URL query state when the figure was exported (empty when written headless)."""
    data: pd.DataFrame | None = None
    """The table the chart draws, written beside it as CSV so a reader can re-plot."""
    caption: str = ""
    """What the figure shows, in a sentence or two (the HTML overview and the manifest)."""
    size: PrintSize = field(default_factory=PrintSize)
    """The size asked: the whole figure's width (and height), the type size and face."""
    aspect: float | None = None
    """The plot's height over its width when it is fixed (a map: cells stay square)."""
    rendered: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The fitted SVG once drawn (:func:`render` draws it once for all three formats)."""


def _data(df: pd.DataFrame) -> alt.Data:
    """Inline chart data as plain JSON values (no row limit, no numpy types)."""
    return alt.Data(values=json.loads(df.to_json(orient="records")))


PLOT_MARGIN = 60.0
"""The first guess (bp) of what a figure's axes take beside its plot; :func:`fit` corrects it."""


def _style(chart: alt.TopLevelMixin, size: PrintSize, height: float | None = None,
           width: float | None = None) -> alt.TopLevelMixin:
    """The print style: type of ``size`` (titles, legends and notes at its size, tick labels
    1 pt smaller), thin axes, no grid, no frame; the plot ``width`` (default: the figure's
    width less :data:`PLOT_MARGIN`, a guess :func:`fit` corrects) and ``height``."""
    fs, small = float(size.font_size), size.small
    if height is not None or width is not None:
        chart = chart.properties(width=width or size.width_bp - PLOT_MARGIN, **({"height": height} if height else {}))
    return (chart.configure(font=size.family, background="white", padding=1,
                            autosize=alt.AutoSizeParams(type="pad", contains="padding"))
            .configure_axis(labelFontSize=small, titleFontSize=fs, grid=False, domainWidth=0.6, tickWidth=0.6,
                            labelColor="#222", titleColor="#222", titleFontWeight="normal",
                            labelLimit=size.width_bp / 3)
            .configure_legend(labelFontSize=fs, titleFontSize=fs, titleFontWeight="normal", symbolSize=40,
                              orient="bottom", labelLimit=size.width_bp - 30, titleLimit=size.width_bp - 4)
            .configure_header(labelFontSize=fs, titleFontSize=fs, labelLimit=size.width_bp / 3)
            .configure_title(fontSize=fs, anchor="start", limit=0)
            .configure_text(fontSize=small)
            .configure_view(stroke=None))


def _note(size: PrintSize, text: str) -> alt.TitleParams:
    """A note under the plot, wrapped to the figure's width."""
    return vega_charts.note(size.wrap(text), float(size.font_size))


def timeline_figure(key: str, run: Run, width: str | float | PrintSize = "double", lo: int | None = None,
                    hi: int | None = None, color_by: str = "action_kind",
                    view: chart_data.TimelineView | None = None) -> Figure:
    """Episodes of one run as bars over env steps (within ``lo``–``hi``), one row per life,
    coloured by action kind or outcome, the legend under the plot; ``view``: the data a page
    drew (else prepared here)."""
    size = print_size(width, "double")
    view = view or chart_data.timeline(run, lo, hi, color_by)
    bars, lo, hi, color_by = view.bars, view.lo, view.hi, view.color_by
    cats = sorted(set(bars["category"])) if len(bars) else []
    chart = alt.Chart(_data(bars)).mark_bar(height=max(6, round(float(size.font_size)))).encode(
        x=alt.X("start:Q", title="env step", scale=alt.Scale(domain=[lo, hi])), x2="end:Q",
        y=alt.Y("life:O", title="life"),
        color=alt.Color("category:N", legend=alt.Legend(title=None), scale=alt.Scale(
            domain=cats, range=[theme.category_color(c, color_by) for c in cats])))
    what = "outcome" if color_by == "outcome" else "action kind"
    return Figure("timeline", _style(chart, size, max(40, 2 * float(size.font_size) * len(view.lives))),
                  [(key, run)], "timeline", (lo, hi), {"color": color_by, "range": [lo, hi]}, data=bars,
                  caption=f"Episodes of {key} over env steps {lo}–{hi}, one row per life, coloured by {what}"
                          + (" (bars merge neighbouring episodes where there are too many to draw)."
                             if len(bars) and (bars["count"] > 1).any() else "."), size=size)


GRID_MARKS = {"episode end position": ("#777777", "circle", 10), "death": ("#111111", vega_charts.CROSS, 45)}
"""The grid figure's point marks: colour, shape and area (bp²); deaths a black ×, as on the
dashboard (a red + read as a hazard cell)."""


def _square_domains(xs: pd.Series, ys: pd.Series, pad: float = 1.0) -> tuple[list[float], list[float]]:
    """Domains of the same span (cells) holding every x and y, so a square plot keeps cells square."""
    if not len(xs):
        return [0.0, 10.0], [0.0, 10.0]
    lo_x, hi_x, lo_y, hi_y = float(xs.min()) - pad, float(xs.max()) + pad, float(ys.min()) - pad, float(ys.max()) + pad
    span = max(hi_x - lo_x, hi_y - lo_y, 4.0)
    cx, cy = (lo_x + hi_x) / 2, (lo_y + hi_y) / 2
    return [cx - span / 2, cx + span / 2], [cy - span / 2, cy + span / 2]


def grid_figure(key: str, run: Run, width: str | float | PrintSize = "single", lo: int | None = None,
                hi: int | None = None, kinds: Sequence[str] | None = None,
                view: chart_data.GridView | None = None) -> Figure:
    """The cells the agent interacted with (within steps ``lo``–``hi``, of ``kinds``), coloured
    by kind, each life's path, the end positions of the episodes of that range and deaths; the
    second axis grows downwards, both axes the same span, the plot square. ``view``: the data
    a page drew (else prepared here)."""
    size = print_size(width, "single")
    view = view or chart_data.grid(run, lo, hi, kinds)
    every = pd.concat([view.cells[["x", "y"]], view.paths[["x", "y"]], view.positions[["x", "y"]],
                       view.deaths[["x", "y"]]], ignore_index=True)
    xd, yd = _square_domains(every["x"], every["y"])
    x = alt.X("x:Q", title="x (cells)", scale=alt.Scale(domain=xd, nice=False, zero=False))
    y = alt.Y("y:Q", title=f"{view.plane} (cells)", scale=alt.Scale(domain=yd, nice=False, zero=False, reverse=True))
    kinds_shown = list(dict.fromkeys(view.cells["kind"])) if len(view.cells) else []
    layers = []
    if kinds_shown:
        layers.append(alt.Chart(_data(view.cells)).mark_square(size=6).encode(
            x=x, y=y, color=alt.Color("kind:N", title="cell", scale=alt.Scale(
                domain=kinds_shown, range=[theme.cell_kind_color(k) for k in kinds_shown]))))
    if len(view.paths):
        layers.append(alt.Chart(_data(view.paths)).mark_line(strokeWidth=0.6, opacity=0.6, color="#555555").encode(
            x=x, y=y, detail="life:N", order="step:Q"))
    points = pd.concat([view.positions[["x", "y"]].assign(mark="episode end position"),
                        view.deaths[["x", "y"]].assign(mark="death")], ignore_index=True)
    if len(points):
        shown = [m for m in GRID_MARKS if m in set(points["mark"])]
        points["area"] = points["mark"].map({m: GRID_MARKS[m][2] for m in shown})
        layers.append(alt.Chart(_data(points)).mark_point(filled=True, opacity=0.9).encode(
            x=x, y=y, size=alt.Size("area:Q", scale=None, legend=None),
            shape=alt.Shape("mark:N", title=None,
                            scale=alt.Scale(domain=shown, range=[GRID_MARKS[m][1] for m in shown])),
            color=alt.Color("mark:N", title=None,
                            scale=alt.Scale(domain=shown, range=[GRID_MARKS[m][0] for m in shown]))))
    if not layers:
        layers.append(alt.Chart(_data(pd.DataFrame([{"x": sum(xd) / 2, "y": sum(yd) / 2,
                                                     "text": "no cells or positions recorded"}])))
                      .mark_text().encode(x=x, y=y, text="text:N"))
    chart = alt.layer(*layers).resolve_scale(color="independent", shape="independent")
    if len(view.paths):
        chart = chart.properties(title=_note(size, "Grey lines: each life's path."))
    filters: dict[str, Any] = {"range": [view.lo, view.hi]}
    if view.kinds is not None:
        filters["kinds"] = sorted(view.kinds)
    if view.life is not None:
        filters["life"] = view.life
    data = pd.concat([view.cells.assign(layer="cell"), view.paths.assign(layer="path"),
                      view.positions.assign(layer="episode end position"), view.deaths.assign(layer="death")],
                     ignore_index=True)
    plot = size.width_bp - PLOT_MARGIN
    return Figure("spatial_grid", _style(chart, size, plot, plot), [(key, run)], "grid", (view.lo, view.hi),
                  filters, data=data, size=size, aspect=1.0,
                  caption=f"Cells {key} interacted with in env steps {view.lo}–{view.hi} (latest kind of each "
                          f"cell), each life's path (grey), episode end positions"
                          + (f" ({view.merged}, one mark per cell)" if view.merged else "")
                          + f" and deaths (black ×); {view.plane} grows downwards as in the game.")


def _band_figure(name: str, series: chart_data.SeedBands, size: PrintSize, runs: list[tuple[str, Run]],
                 page: str, steps: tuple[int, int] | None, filters: dict, caption: str) -> Figure:
    """A seed-band figure (``vega_charts.band_chart``) in print style, its note wrapped."""
    chart = vega_charts.band_chart(series, data=_data).properties(title=_note(size, series.note))
    return Figure(name, _style(chart, size, 140 * float(size.font_size) / FONT_SIZE), runs, page, steps, filters,
                  data=vega_charts.band_table(series), caption=caption, size=size)


def steps_per_turn_figure(runs: list[tuple[str, Run]], window: int = 25, width: str | float | PrintSize = "double",
                          series: chart_data.SeedBands | None = None) -> Figure:
    """Rolling median env steps per turn per method (seed band), shaded where MFM leads;
    ``series``: the data a page drew (else prepared here)."""
    series = series or chart_data.steps_per_turn(runs, window)
    return _band_figure("steps_per_turn", series, print_size(width), runs, "steps_per_turn", _range(runs),
                        dict(series.filters),
                        f"Env steps per policy decision, rolling median over {window} turns, against env step. "
                        + series.note)


def progress_figure(runs: list[tuple[str, Run]], width: str | float | PrintSize = "double",
                    series: chart_data.SeedBands | None = None) -> Figure:
    """Milestones reached against env step per method (seed band)."""
    series = series or chart_data.progress(runs)
    return _band_figure("progress", series, print_size(width), runs, "progress", _range(runs), {},
                        "Milestones reached against env step (a finished run keeps its final count). " + series.note)


def echo_figure(runs: list[tuple[str, Run]], width: str | float | PrintSize = "double",
                series: chart_data.SeedBands | None = None) -> Figure:
    """Echo learner runs: distinct achievements unlocked after each Echo episode per
    configuration, the mean over seeds with its 95% interval."""
    series = series or echo.unlock_bands(echo.learner_runs(r.path for _, r in runs)[0])
    return _band_figure("echo_unlock", series, print_size(width), runs, "echo", None, {},
                        "Echo learner: distinct achievements unlocked after each Echo episode (one attempt at a "
                        "goal), per configuration. " + series.note)


def retargeting_figure(runs: list[tuple[str, Run]], width: str | float | PrintSize = "single",
                       rates: pd.DataFrame | None = None) -> Figure:
    """The A.4 table as bars per method: retarget rates of inspecting vs other turns and the
    near share vs its null rate, each with its Wilson 95% interval and the counts behind it
    (``n/a`` where a method has nothing to count)."""
    size = print_size(width, "single")
    df = chart_data.retarget_rates(runs) if rates is None else rates
    chart = vega_charts.rates_chart(df, size.width_bp - 2.5 * PLOT_MARGIN, data=_data, font_size=size.small)
    text = ("Per method, bars: the retarget rate of the turns that inspected frames (inspecting) and of the other "
            f"turns, the share of new targets within {ap.RADIUS:g} cells of an inspected episode (near) and that "
            "share by chance (null), pooled over seeds; lines: Wilson 95% intervals.")
    styled = _style(chart.properties(title=_note(size, text)), size)
    return Figure("retargeting", styled, runs, "retargeting", _range(runs), {"radius": ap.RADIUS},
                  data=vega_charts.rates_table(df), size=size,
                  caption=f"Retargeting after inspection: per method, the share of inspecting and of other turns "
                          f"that name a new target, and the share of new targets within {ap.RADIUS:g} cells of an "
                          "inspected episode against the share expected by chance (compare with paper A.4).")


def provenance_figure(key: str, run: Run, width: str | float | PrintSize = "double", lo: int | None = None,
                      hi: int | None = None, bins: int = 40) -> Figure:
    """Provenance summary of one run: memory versions written per step bin, stacked by kind
    (knowledge lines, procedure versions, plan versions, other files), and below, how many
    episode citations those versions carry."""
    size = print_size(width, "double")
    g = provenance.filter_steps(provenance.build_graph(run), lo, hi)
    table = provenance.summary(g, bins)
    table["what"] = [theme.PROVENANCE_KINDS[k][0] if k in theme.PROVENANCE_KINDS else k for k in table["kind"]]
    table["end"] = table["hi"] + 1
    present = set(table["kind"])
    kinds = [label for k, (label, _) in theme.PROVENANCE_KINDS.items() if k in present]
    colors = [color for k, (_, color) in theme.PROVENANCE_KINDS.items() if k in present]
    lo_, hi_ = chart_data.clip_range(run, lo, hi)
    plot = size.width_bp - PLOT_MARGIN
    if len(table):
        x = alt.X("lo:Q", title="env step", scale=alt.Scale(domain=[lo_, max(hi_, int(table["end"].max()))],
                                                            nice=False))
        bars = alt.Chart(_data(table)).mark_bar().encode(
            x=x, x2="end:Q", y=alt.Y("sum(versions):Q", title="versions written"),
            color=alt.Color("what:N", legend=alt.Legend(title=None), scale=alt.Scale(domain=kinds, range=colors)))
        cites = alt.Chart(_data(table)).mark_bar(color="#444444").encode(
            x=x, x2="end:Q", y=alt.Y("sum(citations):Q", title="citations"))
        chart = alt.vconcat(bars.properties(width=plot, height=110), cites.properties(width=plot, height=50))
    else:
        chart = alt.Chart(_data(pd.DataFrame([{"text": "no memory written in this range"}]))).mark_text(
        ).encode(text="text:N").properties(width=plot, height=60)
    return Figure("provenance", _style(chart, size), [(key, run)], "provenance", (lo_, hi_),
                  {"range": [lo_, hi_], "bins": bins}, data=table, size=size,
                  caption=f"Agent-written memory of {key}, env steps {lo_}–{hi_}: versions written per "
                          "step bin by kind (top), and the episode citations they carry (bottom).")


LABEL_LEVEL = 0.17
"""The lane fraction between two label levels of ``chart_data.provenance_print``: lanes are
made tall enough for a line of labels per level."""


def provenance_graph_figure(key: str, run: Run, width: str | float | PrintSize = "double", lo: int | None = None,
                            hi: int | None = None, layout: chart_data.ProvenancePrint | None = None) -> Figure:
    """The provenance graph of a step range, for paper: memory versions in rows by kind
    (knowledge, procedures, plan) over env steps, episodes on the bottom row, lines for
    citations (grey) and revisions (purple), the most cited versions labelled without overlap."""
    size = print_size(width, "double")
    plot = size.width_bp - 1.6 * PLOT_MARGIN
    p = layout or chart_data.provenance_print(run, lo, hi, width_pt=plot,
                                              char_pt=size.text_width("procedure versions", size.small) / 18)
    lanes = {lane: ("episodes" if kind == "episode" else theme.PROVENANCE_KINDS[kind][0])
             for kind, lane in chart_data.PROVENANCE_LANES.items()}
    shown = sorted(set(p.nodes["lane"])) if len(p.nodes) else []
    x = alt.X("step:Q", title="env step", scale=alt.Scale(domain=[p.lo, max(p.hi, p.lo + 1)], nice=False))
    y = alt.Y("lane:Q", title=None, scale=alt.Scale(domain=[-0.4, max(shown, default=1) + 0.9]),
              axis=alt.Axis(values=shown, labelExpr=" : ".join(f"datum.value == {k} ? '{v}'" for k, v in
                                                                 lanes.items() if k in shown) + " : ''",
                            grid=False, ticks=False, domain=False, labelPadding=2))
    kinds = [k for k in chart_data.PROVENANCE_LANES if k in set(p.nodes["kind"])]
    palette = {k: theme.PROVENANCE_KINDS[k][1] for k in theme.PROVENANCE_KINDS} | {"episode": "#444444"}
    layers = []
    edge_dashes = {"cites": [], "revises": [3, 2], "disabled_because": [1, 1.5], "used_in": [6, 2]}
    if len(p.edges):
        ekinds = [k for k in edge_dashes if k in set(p.edges["kind"])]
        layers.append(alt.Chart(_data(p.edges)).mark_rule(strokeWidth=0.6, opacity=0.7, color="#777777").encode(
            x="x:Q", y="y:Q", x2="x2:Q", y2="y2:Q", strokeDash=alt.StrokeDash("kind:N", title="link", scale=alt.Scale(
                domain=ekinds, range=[edge_dashes[k] for k in ekinds]))))
    if len(p.nodes):
        layers.append(alt.Chart(_data(p.nodes)).mark_point(size=14, filled=True, opacity=0.9).encode(
            x=x, y=y, shape=alt.Shape("kind:N", title="node", scale=alt.Scale(
                domain=kinds, range=["square" if k == "episode" else "circle" for k in kinds])),
            color=alt.Color("kind:N", title="node", scale=alt.Scale(domain=kinds, range=[palette[k] for k in kinds]))))
    if len(p.labels):
        layers.append(alt.Chart(_data(p.labels.rename(columns={"y": "lane", "x": "step"}))).mark_text(
            align="left", baseline="middle", dx=2, color="#222222").encode(x=x, y=y, text="text:N"))
    if not layers:
        layers.append(alt.Chart(_data(pd.DataFrame([{"text": "no memory written in this range"}]))).mark_text(
        ).encode(text="text:N"))
    chart = alt.layer(*layers).properties(title=_note(size, 
        f"Labelled: the {len(p.labels)} most cited versions ({p.unlabelled} others unlabelled; the Provenance page "
        "shows every label)."))
    lane_bp = (size.small + 1.5) / LABEL_LEVEL
    return Figure("provenance_graph", _style(chart, size, lane_bp * (max(shown, default=1) + 1.3), plot),
                  [(key, run)], "provenance", (p.lo, p.hi), {"range": [p.lo, p.hi]}, data=p.nodes, size=size,
                  caption=f"Provenance of {key}'s agent-written memory, env steps {p.lo}–{p.hi}: each memory "
                          "version at the step it was written, linked to the episodes it cites and to the version "
                          "it revises.")


def _range(runs: list[tuple[str, Run]]) -> tuple[int, int] | None:
    bounds = [lookups.step_bounds(r) for _, r in runs]
    return (min(b[0] for b in bounds), max(b[1] for b in bounds)) if bounds else None


def content_hash(run: Run) -> str:
    """SHA-256 over the run's manifest and tables (frames excluded), in a fixed file order;
    computed once per version of the run (``Run.derived``: every figure of a run names it)."""
    return run.derived("content-hash", _content_hash)


def _content_hash(run: Run) -> str:
    h = hashlib.sha256()
    for name in HASHED:
        p = run.path / name
        if p.is_file():
            h.update(name.encode() + b"\0")
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def package_version() -> str:
    try:
        return version("mfm")
    except PackageNotFoundError:
        return "unknown"


def deep_link(fig: Figure, base_url: str = "") -> str:
    """The dashboard URL of the page showing this figure's data."""
    q = {"runs": ",".join(k for k, _ in fig.runs), "run": fig.runs[0][0] if fig.runs else ""}
    if fig.view:
        q.update(fig.view)
    else:
        q.update({k: str(v) for k, v in fig.filters.items() if k in ("window",)})
        if isinstance(fig.filters.get("range"), list):
            q["range"] = "{}-{}".format(*fig.filters["range"])
    return f"{base_url.rstrip('/')}/{fig.page}?" + urlencode({k: v for k, v in q.items() if v})


def code_commit() -> str | None:
    """The git commit of the source tree the package runs from, if it is a checkout."""
    git = Path(__file__).resolve().parent.parent / ".git"
    try:
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text(encoding="utf-8").strip()
        for line in (git / "packed-refs").read_text(encoding="utf-8").splitlines():
            if line.endswith(" " + ref):
                return line.split(" ")[0]
    except OSError:
        return None
    return None


def manifest(fig: Figure, width: str | float, base_url: str = "", command: str = "", data_file: str | None = None
             ) -> dict[str, Any]:
    """The figure's provenance record: what it shows, the runs and their hashes, the range and
    filters, the data file beside it, the command and the code that made it."""
    tasks = sorted({r.manifest.task for _, r in fig.runs if r.manifest})
    return {"figure": fig.name, "caption": fig.caption, "task": tasks[0] if len(tasks) == 1 else tasks,
            "width": str(width), "width_pt": round(fig.size.width_bp, 2),
            "height_pt": float(fig.size.height_bp) if fig.size.height_bp is not None else None,
            "font": {"family": FONTS[fig.size.font][0], "size_pt": float(fig.size.font_size)},
            "runs": [{"key": k, "path": str(r.path), "method": ap.method_of(r), "seed": ap.seed_of(r),
                      "sha256": content_hash(r)} for k, r in fig.runs],
            "steps": list(fig.steps) if fig.steps else None, "filters": fig.filters, "view": fig.view,
            "data": data_file, "command": command,
            "package": {"name": "mfm", "version": package_version(), "commit": code_commit()},
            "deep_link": deep_link(fig, base_url), "notes": researcher_notes(fig.runs)}


def researcher_notes(runs: Sequence[tuple[str, Run]]) -> list[dict[str, Any]]:
    """The researcher's notes on the figure's runs (``loaders.notes``: bookmarks and comments
    kept under the runs root), each with the dashboard query that opens where it points."""
    from loaders.notes import for_runs

    return for_runs(runs)


class FigureTooWide(ValueError):
    """A figure whose legends, labels or notes cannot fit the width asked."""


_VIEW_KEYS = ("vconcat", "hconcat", "concat", "layer")


def _views(spec: dict) -> list[dict]:
    """The (sub)views of a Vega-Lite spec that set a numeric plot width."""
    out = [spec] if isinstance(spec.get("width"), (int, float)) else []
    for key in _VIEW_KEYS:
        for sub in spec.get(key, []) or []:
            out += _views(sub)
    if isinstance(spec.get("spec"), dict):
        out += _views(spec["spec"])
    return out


def _legends(spec: dict) -> list[tuple[list[dict], list[str]]]:
    """Every legend of a spec that is drawn (channels on one field with one domain share one
    legend: all their legend objects), with the labels its scale's domain lists."""
    found: dict[str, tuple[list[dict], list[str]]] = {}
    stack: list[Any] = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack += node
            continue
        if not isinstance(node, dict):
            continue
        enc = node.get("encoding")
        if isinstance(enc, dict):
            for channel in ("color", "fill", "stroke", "shape", "strokeDash", "size", "opacity"):
                c = enc.get(channel)
                if not isinstance(c, dict) or "field" not in c or ("legend" in c and c["legend"] is None):
                    continue
                domain = (c.get("scale") or {}).get("domain")
                labels = [str(v) for v in domain] if isinstance(domain, list) else []
                entry = found.setdefault(f"{c['field']}\0{labels}", ([], labels))
                entry[0].append(c.setdefault("legend", {}))
        stack += [v for k, v in node.items() if k not in ("data", "datasets", "encoding")]
    return list(found.values())


LEGEND_GAP = 10.0
"""Space (bp) between two legend columns and between two legends side by side."""


def _fit_legends(spec: dict, size: PrintSize) -> None:
    """Every legend under the plot (or, when two cannot sit side by side, the second above
    it), each with as many columns as fit the figure's width, its entries measured in the
    figure's type; labels are never cut (only one wider than the whole figure would be)."""
    legends = _legends(spec)
    if not legends:
        return
    fs, room = float(size.font_size), size.width_bp - 4
    entries: list[tuple[float, int, float]] = []
    limits: list[float] = []
    for group, labels in legends:
        symbol = 20.0 if group[0].get("symbolType") == "stroke" else 10.0
        title = next((g.get("title") for g in group if g.get("title")), None)
        label = min(max((size.text_width(t) for t in labels), default=room / 2), room - symbol - 7)
        entries.append((symbol + 5 + label, len(labels) or 1, size.text_width(title) if title else 0.0))
        limits.append(min(label * 1.1 + 4, room - symbol - 7))
    side = sum(e + LEGEND_GAP for e, _, _ in entries) - LEGEND_GAP <= room
    columns = [1] * len(entries)

    def width(i: int) -> float:
        e, _, t = entries[i]
        return max(t, columns[i] * e + (columns[i] - 1) * LEGEND_GAP)

    def total() -> float:
        return (sum(width(i) for i in range(len(entries))) + LEGEND_GAP * (len(entries) - 1) if side
                else max(width(i) for i in range(len(entries))))

    while True:
        rows = [math.ceil(n / c) for (_, n, _), c in zip(entries, columns)]
        i = max(range(len(entries)), key=lambda k: rows[k])
        if rows[i] <= 1:
            break
        columns[i] += 1
        if total() > room:
            columns[i] -= 1
            break
    for k, (group, _) in enumerate(legends):
        orient = "bottom" if side or k % 2 == 0 else "top"
        for legend in group:
            legend.update(orient=orient, direction="horizontal", columns=columns[k], labelFontSize=fs,
                          titleOrient="top", titleFontSize=fs, columnPadding=LEGEND_GAP,
                          labelLimit=max(limits[k], 20.0), titleLimit=room,
                          symbolSize=min(float(legend.get("symbolSize", 40)), 400.0))


def _svg_size(svg: str) -> tuple[float, float]:
    """The drawn width and height; ValueError when Vega gave none it could lay out (a chart with no
    data to scale, say), instead of fitting an infinite figure."""
    m = re.search(r'<svg[^>]*?width="([^"]+)" height="([^"]+)"', svg)
    w, h = (float(m.group(1)), float(m.group(2))) if m else (math.inf, math.inf)
    if not (0 < w < 1e6 and 0 < h < 1e6):
        raise ValueError("the chart has no size Vega could lay out (has it any data to draw?)")
    return w, h


def _set_size(svg: str, width: float, height: float) -> str:
    """The SVG with its canvas exactly ``width`` × ``height`` bp (the drawing, no larger, stays at
    its top left; the white background covers the whole canvas)."""
    w, h = _svg_size(svg)
    head, rest = svg.split(">", 1)
    head = head.replace(f'width="{w:g}"', f'width="{width:.2f}"', 1)
    head = head.replace(f'height="{h:g}"', f'height="{height:.2f}"', 1)
    head = re.sub(r'viewBox="0 0 [\d.]+ [\d.]+"', f'viewBox="0 0 {width:.2f} {height:.2f}"', head, count=1)
    rest = rest.replace(f'<rect width="{w:g}" height="{h:g}" fill="white"/>',
                        f'<rect width="{width:.2f}" height="{height:.2f}" fill="white"/>', 1)
    return head + ">" + rest


def fit(fig: Figure) -> str:
    """The figure as SVG exactly the width asked (and the height, when asked), legends, axes
    and notes included: the plot's width (and height) set, the figure rendered and measured,
    and corrected until its drawing lies within 1 bp of the size; the canvas then set to the
    size exactly. A legend that leaves the plot no room gets one column fewer and the fit is
    tried again. Raises :class:`FigureTooWide` when nothing helps, and ValueError for a figure
    whose table is empty (nothing to draw)."""
    if fig.data is not None and fig.data.empty:
        raise ValueError(f"{fig.name}: the figure's table is empty: it has not any data to draw")
    spec = fig.chart.to_dict()
    _fit_legends(spec, fig.size)
    while True:
        svg, ok = _fit_once(fig, spec)
        if ok:
            return svg
        wide = [g for group, _ in _legends(spec) for g in group if g.get("columns", 1) > 1]
        if not wide:
            w, _ = _svg_size(svg)
            raise FigureTooWide(f"{fig.name}: its legends, labels or notes need {w:.0f} bp, more than the "
                                f"{fig.size.width_bp:.1f} bp asked")
        most = max(g["columns"] for g in wide)
        for g in wide:
            if g["columns"] == most:
                g["columns"] = most - 1


def _fit_once(fig: Figure, spec: dict) -> tuple[str, bool]:
    """One fitting of ``spec``'s plot sizes (:func:`fit`): the SVG and whether it fits."""
    size = fig.size
    views = _views(spec)
    base_w = [float(v["width"]) for v in views]
    base_h = [float(v.get("height", 0) or 0) for v in views]
    target_w = math.floor(size.width_bp)
    target_h = None if size.height_bp is None or fig.aspect else math.floor(size.height_bp)
    dw, fh = 0.0, 1.0
    svg = ""
    w = h = 0.0
    for _ in range(8):
        for v, bw, bh in zip(views, base_w, base_h):
            v["width"] = max(10.0, bw + dw)
            if fig.aspect:
                v["height"] = round(v["width"] * fig.aspect, 2)
            elif bh:
                v["height"] = max(10.0, bh * fh)
        svg = vlc.vegalite_to_svg(spec)
        w, h = _svg_size(svg)
        if target_w - 1 < w <= target_w and (target_h is None or target_h - 1 < h <= target_h):
            break
        if w != target_w:
            dw += target_w - w
        if target_h is not None and sum(base_h):
            fh = max(0.05, fh + (target_h - h) / sum(base_h))
    for v, bw, bh in zip(views, base_w, base_h):
        v["width"], v["height"] = bw, bh if bh else v.get("height")
    if w > size.width_bp or min(bw + dw for bw in base_w or [20.0]) < 20:
        return svg, False
    return _set_size(svg, size.width_bp, size.height_bp if target_h is not None else h), True


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as SVG, PDF or PNG bytes, all three the size asked (:func:`fit`); the PNG
    at :data:`PNG_SCALE` pixels per bp, recording that resolution (216 dpi), so it prints
    at the same size."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}; use one of {', '.join(FORMATS)}")
    if "svg" not in fig.rendered:
        fig.rendered["svg"] = fit(fig)
    svg = fig.rendered["svg"]
    if fmt == "svg":
        return svg.encode("utf-8")
    if fmt == "pdf":
        return vlc.svg_to_pdf(svg)
    return vlc.svg_to_png(svg, ppi=72 * PNG_SCALE)


STEM_BYTES = 200
"""The longest file stem :func:`save` writes (a prefix, a run's name of at most
:data:`loaders.escape.SEGMENT_BYTES` and a suffix stay under the 255 bytes file systems allow)."""


class OutsideOutput(ValueError):
    """A file to be written would land outside the output folder (a name or a symlink leading
    out of it)."""


def inside(root: Path, path: Path) -> Path:
    """``path``, once checked to lie inside ``root`` with symlinks and ``..`` resolved; raises
    :class:`OutsideOutput` otherwise."""
    if not path.resolve().is_relative_to(Path(root).resolve()):
        raise OutsideOutput(f"refusing to write {path}: it leads outside the output folder {root}")
    return path


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """``df`` as CSV with every text cell a spreadsheet would run as a formula neutralised
    (:func:`loaders.escape.csv_frame`). Rows end in CRLF (RFC 4180), so a cell holding a
    carriage return or a line break is quoted and can never start a row of its own."""
    csv_frame(df).to_csv(path, index=False, lineterminator="\r\n")


def save(fig: Figure, out_dir: Path, width: str | float, stem: str | None = None, base_url: str = "",
         command: str = "", root: Path | None = None) -> list[Path]:
    """Write ``stem.svg/.pdf/.png``, its data ``stem.csv`` and ``stem.json`` (the manifest)
    into ``out_dir``; ``stem`` is made one safe file name, and every file is checked to land
    inside ``root`` (default ``out_dir``) before it is written."""
    out_dir = Path(out_dir)
    root = out_dir if root is None else Path(root)
    inside(root, out_dir).mkdir(parents=True, exist_ok=True)
    stem = file_segment(stem or fig.name, limit=STEM_BYTES)
    written = []
    for fmt in FORMATS:
        p = inside(root, out_dir / f"{stem}.{fmt}")
        p.write_bytes(render(fig, fmt))
        written.append(p)
    data_file = None
    if fig.data is not None:
        data_file = f"{stem}.csv"
        write_csv(fig.data, inside(root, out_dir / data_file))
        written.append(out_dir / data_file)
    p = inside(root, out_dir / f"{stem}.json")
    p.write_text(json.dumps(manifest(fig, width, base_url, command, data_file), indent=2) + "\n",
                 encoding="utf-8")
    return [*written, p]


def file_stem(key: str) -> str:
    """A run key as part of a file name: one safe path segment (nested keys ``a/b`` become
    ``a_b``; :func:`loaders.escape.file_segment`)."""
    return file_segment(key)


def _expand(paths: Sequence[str | Path]) -> list[tuple[str, Run]]:
    """Runs named by run folders or runs roots, keyed as the dashboard keys them under that
    root (a run folder given directly: its name); made unique. A run named twice, however
    spelled (``loaders.remote.mirror.run_identity``), is opened once, under its first key."""
    out: dict[str, Run] = {}
    seen: set[str] = set()
    for p in map(local_path, paths):
        is_run = (p / "run.json").is_file()
        for d in ([p] if is_run else find_runs(p)):
            if run_identity(d) in seen:
                continue
            seen.add(run_identity(d))
            key = d.name if is_run else d.resolve().relative_to(p.resolve()).as_posix()
            n = 2
            while key in out:
                key, n = f"{d.name}_{n}", n + 1
            out[key] = open_run(d)
    return list(out.items())


def _html(sections: list[tuple[str, str, list[tuple[str, Figure, str]], list[tuple[str, str]], list[str]]]
          ) -> str:
    """One page showing every figure (its SVG, caption and files) and table, per task (each
    section: the task, its folder, figures, tables and notes)."""
    esc = html.escape
    parts = ["<!doctype html><meta charset='utf-8'><title>mfm figures</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "figure{margin:1.5em 0;border-top:1px solid #ddd;padding-top:1em}figcaption{font-size:.9em;color:#444}"
             "table{border-collapse:collapse;font-size:.85em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
             ".note{color:#a33}</style>", "<h1>mfm figures</h1>"]
    for task, folder, figs, tabs, notes in sections:
        parts.append(f"<h2>Task: {esc(task)}</h2>")
        parts += [f"<p class='note'>{esc(n)}</p>" for n in notes]
        for stem, fig, width in figs:
            href = esc(f"{quote(folder)}/{quote(stem)}")
            files = " · ".join(f"<a href='{href}.{ext}'>{ext}</a>"
                               for ext in (*FORMATS, *(("csv",) if fig.data is not None else ()), "json"))
            parts.append(f"<figure><img src='{href}.svg' alt='{esc(fig.name)}' "
                         f"style='width:{round(2 * fig.size.width_bp)}px;max-width:100%'>"
                         f"<figcaption><b>{esc(stem)}</b> "
                         f"({width} column). {esc(fig.caption)}<br>{files}</figcaption></figure>")
        for title, table_html in tabs:
            parts.append(f"<h3>{esc(title)}</h3>{table_html}")
    return "\n".join(parts) + "\n"


@counting.task("figures written")
def write_figures(paths: Sequence[str | Path], out_dir: str | Path, window: int = 25, base_url: str = "",
                  width: str | float | None = None, html_page: bool = False, command: str = "",
                  notes: list[str] | None = None, height: str | float | None = None,
                  font_size: float = FONT_SIZE, font: str = "sans") -> list[Path]:
    """Every standard figure and table for the runs under ``paths``, one folder per task (never
    two tasks on one axis): per run a timeline, a spatial grid and, for runs that wrote memory,
    a provenance summary and graph; over the task's runs progress, steps per turn, retargeting
    and (learner runs) Echo unlock curves; the paper's tables as LaTeX and CSV; and
    ``figures.tex``, every figure and table as a LaTeX float (:func:`latex_floats`).
    ``width`` (a name of :data:`WIDTHS` or a length, ``3.3in``, ``241pt``) sets every figure's
    whole width and the width the tables are fitted to; without it each figure has its own
    (grid and retargeting single, the others double) and each table takes a column if it fits
    one, else the full width. ``height`` (a length) sets every figure's whole height (a map
    keeps its cells square); ``font_size`` (pt) and ``font`` (``sans``/``serif``) the type.
    ``html_page`` adds ``index.html`` showing everything. A figure with nothing to show is not
    written and a sentence saying so is appended to ``notes``. Returns the files written."""
    runs = [(k, r) for k, r in _expand(paths) if r.manifest is not None]
    if not runs:
        raise ValueError(f"no run found under {', '.join(map(str, paths))}")

    def sized(default: str) -> PrintSize:
        return PrintSize(width if width is not None else default, height, font_size, font)

    sized("single")
    notes = [] if notes is None else notes
    written: list[Path] = []
    sections = []
    floats: list[tuple[str, str, Figure | None]] = []
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    folders: set[str] = set()
    for task, group in chart_data.tasks(runs):
        folder = file_segment(task, folders)
        out = inside(root, root / folder)
        made: list[tuple[str, Figure, str]] = []

        def add(fig: Figure, stem: str) -> None:
            try:
                written.extend(save(fig, out, fig.size.width, stem, base_url, command, root=root))
            except FigureTooWide as e:
                notes.append(f"{stem} ({task}): {e}; not drawn.")
                return
            made.append((stem, fig, str(fig.size.width)))
            floats.append((folder, stem, fig))
            counting.tick("figures written", 1, f"{folder}/{stem}")

        names: set[str] = set()
        for key, run in group:
            name = file_segment(key, names)
            add(timeline_figure(key, run, sized("double")), f"timeline_{name}")
            add(grid_figure(key, run, sized("single")), f"spatial_grid_{name}")
            if run.records("memory_writes.jsonl"):
                add(provenance_figure(key, run, sized("double")), f"provenance_{name}")
                add(provenance_graph_figure(key, run, sized("double")), f"provenance_graph_{name}")
        progress = chart_data.progress(group)
        if len(progress.bands):
            add(progress_figure(group, sized("double"), progress), "progress")
        else:
            notes.append(f"progress ({task}): no run records a milestone curve; not drawn.")
        if any(len(r.records("turns.jsonl")) for _, r in group):
            add(steps_per_turn_figure(group, window, sized("double")), "steps_per_turn")
            rates = chart_data.retarget_rates(group)
            inspecting = rates[rates["measure"] == chart_data.RETARGET_MEASURES[0]]
            if inspecting["rate"].notna().any():
                add(retargeting_figure(group, sized("single"), rates), "retargeting")
            else:
                notes.append(f"retargeting ({task}): no run of this task has a turn that inspected frames, so there "
                             "is no retargeting after inspection to show; not drawn.")
        else:
            notes.append(f"steps_per_turn, retargeting ({task}): no run of this task records turns; not drawn.")
        learners = [(k, r) for k, r in group if echo.has_csd(r.path)]
        if learners:
            series = echo.unlock_bands(echo.learner_runs(r.path for _, r in learners)[0])
            if len(series.bands):
                add(echo_figure(learners, sized("double"), series), "echo_unlock")
            else:
                notes.append(f"echo_unlock ({task}): no Echo episode recorded yet; not drawn.")
        tabs = []
        for name, title, table in paper_tables.tables(ap.measures(group)):
            tex, csv = inside(root, out / f"table_{name}.tex"), inside(root, out / f"table_{name}.csv")
            tex.write_text(paper_tables.to_latex(table, f"{title}; task {task}.", f"tab:{name}-{task}", width,
                                                 paper_tables.KEYS.get(name, 1)), encoding="utf-8")
            write_csv(table, csv)
            written += [tex, csv]
            floats.append((folder, f"table_{name}", None))
            tabs.append((title, table.to_html(index=False, escape=True, border=0)))
        sections.append((task, folder, made, tabs, [n for n in notes if f"({task})" in n]))
    include = inside(root, root / "figures.tex")
    include.write_text(latex_floats(floats, root.name), encoding="utf-8")
    written.append(include)
    if html_page:
        page = inside(root, root / "index.html")
        page.write_text(_html(sections), encoding="utf-8")
        written.append(page)
    return written


def latex_floats(floats: Sequence[tuple[str, str, Figure | None]], folder: str) -> str:
    """``figures.tex``: each figure (``folder/stem.pdf``) as a ``figure`` when it is a
    column's width or a ``figure*`` when wider, at its own size (no scaling: its type stays
    the size asked), with its caption and a label ``fig:<folder>-<stem>``; each table
    ``\\input``. Paths begin with ``\\mfmfigures``, by default the output folder's name (a
    document beside it); define it before ``\\input`` to say where the folder is."""
    folder = folder if re.fullmatch(r"[A-Za-z0-9._-]+", folder) else "FIGURES-FOLDER"
    out = ["% Written by mfm figures: every figure and table of this folder as LaTeX floats. Needs graphicx and "
           "booktabs;",
           "% \\newcommand{\\mfmfigures}{path/to/this/folder} before \\input{.../figures.tex} when the document "
           "is not beside it.",
           f"\\providecommand{{\\mfmfigures}}{{{folder}}}"]
    for sub, stem, fig in floats:
        if fig is None:
            out.append(f"\\input{{\\mfmfigures/{sub}/{stem}.tex}}")
            continue
        env = "figure" if paper_size.is_column(fig.size.width) else "figure*"
        out += [f"\\begin{{{env}}}[tbp]", "\\centering", f"\\includegraphics{{\\mfmfigures/{sub}/{stem}.pdf}}",
                f"\\caption{{{latex_text(fig.caption)}}}", f"\\label{{{latex_label(f'fig:{sub}-{stem}')}}}",
                f"\\end{{{env}}}"]
    return "\n".join(out) + "\n"
