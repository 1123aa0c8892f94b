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

import hashlib
import html
import weakref
import json
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, urlencode

import altair as alt
import pandas as pd
import vl_convert as vlc

from dashboard import theme, vega_charts
from loaders import analysis_pages as ap
from loaders import chart_data, echo, paper_tables
from loaders import provenance
from loaders import run_pages
from loaders.escape import csv_frame, file_segment
from loaders.remote import run_identity
from loaders.run import Run, find_runs, local_path, open_run

WIDTHS = {"single": 240, "double": 500}
"""Plot widths in points for a one-column (3.33 in) and a two-column (7 in) figure."""
FORMATS = ("svg", "pdf", "png")
MIME = {"svg": "image/svg+xml", "pdf": "application/pdf", "png": "image/png"}
FONT = "Helvetica, Arial, Liberation Sans, DejaVu Sans, sans-serif"
PNG_SCALE = 3
HASHED = ("run.json", "index.jsonl", "steps.jsonl", "turns.jsonl", "grid.jsonl", "milestones.jsonl", "lives.jsonl",
          "memory_writes.jsonl")


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


def _data(df: pd.DataFrame) -> alt.Data:
    """Inline chart data as plain JSON values (no row limit, no numpy types)."""
    return alt.Data(values=json.loads(df.to_json(orient="records")))


def _style(chart: alt.TopLevelMixin, width: str, height: int) -> alt.TopLevelMixin:
    """The print style: small sans-serif type, thin axes, no grid, no frame."""
    return (chart.properties(width=WIDTHS[width], height=height)
            .configure(font=FONT, background="white")
            .configure_axis(labelFontSize=7, titleFontSize=8, grid=False, domainWidth=0.6, tickWidth=0.6,
                            labelColor="#222", titleColor="#222", titleFontWeight="normal")
            .configure_legend(labelFontSize=7, titleFontSize=8, symbolSize=40, orient="top")
            .configure_title(fontSize=9, anchor="start")
            .configure_view(stroke=None))


def timeline_figure(key: str, run: Run, width: str = "double", lo: int | None = None, hi: int | None = None,
                    color_by: str = "action_kind", view: chart_data.TimelineView | None = None) -> Figure:
    """Episodes of one run as bars over env steps (within ``lo``–``hi``), one row per life,
    coloured by action kind or outcome; ``view``: the data a page drew (else prepared here)."""
    view = view or chart_data.timeline(run, lo, hi, color_by)
    bars, lo, hi, color_by = view.bars, view.lo, view.hi, view.color_by
    cats = sorted(set(bars["category"])) if len(bars) else []
    chart = alt.Chart(_data(bars)).mark_bar(height=10).encode(
        x=alt.X("start:Q", title="env step", scale=alt.Scale(domain=[lo, hi])), x2="end:Q",
        y=alt.Y("life:O", title="life"),
        color=alt.Color("category:N", legend=alt.Legend(title=None), scale=alt.Scale(
            domain=cats, range=[theme.category_color(c, color_by) for c in cats])))
    what = "outcome" if color_by == "outcome" else "action kind"
    return Figure("timeline", _style(chart, width, max(40, 16 * len(view.lives))),
                  [(key, run)], "timeline", (lo, hi), {"color": color_by, "range": [lo, hi]}, data=bars,
                  caption=f"Episodes of {key} over env steps {lo}–{hi}, one row per life, coloured by {what}"
                          + (" (bars merge neighbouring episodes where there are too many to draw)."
                             if len(bars) and (bars["count"] > 1).any() else "."))


def grid_figure(key: str, run: Run, width: str = "single", lo: int | None = None, hi: int | None = None,
                kinds: Sequence[str] | None = None, view: chart_data.GridView | None = None) -> Figure:
    """The cells the agent interacted with (within steps ``lo``–``hi``, of ``kinds``), coloured
    by kind, each life's path, the end positions of the episodes of that range and deaths; the
    second axis grows downwards. ``view``: the data a page drew (else prepared here)."""
    view = view or chart_data.grid(run, lo, hi, kinds)
    x = alt.X("x:Q", title="x (cells)", scale=alt.Scale(zero=False))
    y = alt.Y("y:Q", title=f"{view.plane} (cells)", scale=alt.Scale(zero=False, reverse=True))
    marks = {"episode end position": "#111111", "death": "#d62728"}
    kinds_shown = list(dict.fromkeys(view.cells["kind"])) if len(view.cells) else []
    layers = []
    if kinds_shown:
        layers.append(alt.Chart(_data(view.cells)).mark_square(size=6).encode(
            x=x, y=y, color=alt.Color("kind:N", title="cell", legend=alt.Legend(orient="right"), scale=alt.Scale(
                domain=kinds_shown, range=[theme.cell_kind_color(k) for k in kinds_shown]))))
    if len(view.paths):
        layers.append(alt.Chart(_data(view.paths)).mark_line(strokeWidth=0.6, opacity=0.6, color="#555555").encode(
            x=x, y=y, detail="life:N", order="step:Q"))
    points = pd.concat([view.positions[["x", "y"]].assign(mark="episode end position"),
                        view.deaths[["x", "y"]].assign(mark="death")], ignore_index=True)
    if len(points):
        shown = [m for m in marks if m in set(points["mark"])]
        layers.append(alt.Chart(_data(points)).mark_point(filled=True, opacity=0.85).encode(
            x=x, y=y, size=alt.condition(alt.datum.mark == "death", alt.value(60), alt.value(10)),
            shape=alt.Shape("mark:N", title=None, scale=alt.Scale(
                domain=shown, range=["circle" if m != "death" else "cross" for m in shown])),
            color=alt.Color("mark:N", title=None, scale=alt.Scale(domain=shown, range=[marks[m] for m in shown]))))
    if not layers:
        layers.append(alt.Chart(_data(pd.DataFrame([{"text": "no cells or positions recorded"}])))
                      .mark_text(fontSize=8).encode(text="text:N"))
    chart = alt.layer(*layers).resolve_scale(color="independent", shape="independent").properties(
        title=vega_charts.note("Grey lines: each life's path." if len(view.paths) else ""))
    filters: dict[str, Any] = {"range": [view.lo, view.hi]}
    if view.kinds is not None:
        filters["kinds"] = sorted(view.kinds)
    if view.life is not None:
        filters["life"] = view.life
    data = pd.concat([view.cells.assign(layer="cell"), view.paths.assign(layer="path"),
                      view.positions.assign(layer="episode end position"), view.deaths.assign(layer="death")],
                     ignore_index=True)
    return Figure("spatial_grid", _style(chart, width, WIDTHS[width]), [(key, run)], "grid", (view.lo, view.hi),
                  filters, data=data,
                  caption=f"Cells {key} interacted with in env steps {view.lo}–{view.hi} (latest kind of each "
                          f"cell), each life's path (grey), episode end positions"
                          + (f" ({view.merged}, one mark per cell)" if view.merged else "")
                          + f" and deaths; {view.plane} grows downwards as in the game.")


def steps_per_turn_figure(runs: list[tuple[str, Run]], window: int = 25, width: str = "double",
                          series: chart_data.SeedBands | None = None) -> Figure:
    """Rolling median env steps per turn per method (seed band), shaded where MFM leads;
    ``series``: the data a page drew (else prepared here)."""
    series = series or chart_data.steps_per_turn(runs, window)
    return Figure("steps_per_turn", _style(vega_charts.band_chart(series, data=_data), width, 140), runs,
                  "steps_per_turn", _range(runs), dict(series.filters), data=vega_charts.band_table(series),
                  caption=f"Env steps per policy decision, rolling median over {window} turns, against env step. "
                          + series.note)


def progress_figure(runs: list[tuple[str, Run]], width: str = "double",
                    series: chart_data.SeedBands | None = None) -> Figure:
    """Milestones reached against env step per method (seed band)."""
    series = series or chart_data.progress(runs)
    return Figure("progress", _style(vega_charts.band_chart(series, data=_data), width, 140), runs, "progress",
                  _range(runs), data=vega_charts.band_table(series),
                  caption="Milestones reached against env step (a finished run keeps its final count). " + series.note)


def echo_figure(runs: list[tuple[str, Run]], width: str = "double", series: chart_data.SeedBands | None = None
                ) -> Figure:
    """Echo learner runs: distinct achievements unlocked after each Echo episode per
    configuration, the mean over seeds with its 95% interval."""
    series = series or echo.unlock_bands(echo.learner_runs(r.path for _, r in runs)[0])
    return Figure("echo_unlock", _style(vega_charts.band_chart(series, data=_data), width, 140), runs, "echo",
                  None, data=vega_charts.band_table(series),
                  caption="Echo learner: distinct achievements unlocked after each Echo episode (one attempt at a "
                          "goal), per configuration. " + series.note)


def retargeting_figure(runs: list[tuple[str, Run]], width: str = "single", rates: pd.DataFrame | None = None
                       ) -> Figure:
    """The A.4 table as bars per method: retarget rates of inspecting vs other turns and the
    near share vs its null rate, each with its Wilson 95% interval and the counts behind it
    (``n/a`` where a method has nothing to count)."""
    df = chart_data.retarget_rates(runs) if rates is None else rates
    chart = vega_charts.rates_chart(df, WIDTHS[width], data=_data)
    styled = (chart.properties(title=vega_charts.note("Bars: rates pooled over each method's seeds; lines: Wilson 95% "
                                           "intervals; null: the near share expected by chance."))
              .configure(font=FONT, background="white")
              .configure_axis(labelFontSize=7, titleFontSize=8, grid=False, domainWidth=0.6,
                              titleFontWeight="normal")
              .configure_legend(labelFontSize=7, orient="top", symbolSize=40)
              .configure_header(labelFontSize=8, labelAngle=0, labelAlign="left")
              .configure_view(stroke=None))
    return Figure("retargeting", styled, runs, "retargeting", _range(runs), {"radius": ap.RADIUS},
                  data=vega_charts.rates_table(df),
                  caption=f"Retargeting after inspection (paper A.4): per method, the share of inspecting and of "
                          f"other turns that name a new target, and the share of new targets within {ap.RADIUS:g} "
                          "cells of an inspected episode against the share expected by chance.")


def provenance_figure(key: str, run: Run, width: str = "double", lo: int | None = None, hi: int | None = None,
                      bins: int = 40) -> Figure:
    """Provenance summary of one run: memory versions written per step bin, stacked by kind
    (knowledge lines, procedure versions, plan versions, other files), and below, how many
    episode citations those versions carry."""
    g = provenance.filter_steps(provenance.build_graph(run), lo, hi)
    table = provenance.summary(g, bins)
    table["what"] = [theme.PROVENANCE_KINDS[k][0] if k in theme.PROVENANCE_KINDS else k for k in table["kind"]]
    table["end"] = table["hi"] + 1
    present = set(table["kind"])
    kinds = [label for k, (label, _) in theme.PROVENANCE_KINDS.items() if k in present]
    colors = [color for k, (_, color) in theme.PROVENANCE_KINDS.items() if k in present]
    lo_, hi_ = chart_data.clip_range(run, lo, hi)
    if len(table):
        x = alt.X("lo:Q", title="env step", scale=alt.Scale(domain=[lo_, max(hi_, int(table["end"].max()))],
                                                            nice=False))
        bars = alt.Chart(_data(table)).mark_bar().encode(
            x=x, x2="end:Q", y=alt.Y("sum(versions):Q", title="versions written"),
            color=alt.Color("what:N", legend=alt.Legend(title=None), scale=alt.Scale(domain=kinds, range=colors)))
        cites = alt.Chart(_data(table)).mark_bar(color="#444444").encode(
            x=x, x2="end:Q", y=alt.Y("sum(citations):Q", title="episode citations"))
        chart = alt.vconcat(bars.properties(width=WIDTHS[width], height=110),
                            cites.properties(width=WIDTHS[width], height=50))
    else:
        chart = alt.Chart(_data(pd.DataFrame([{"text": "no memory written in this range"}]))).mark_text(
            fontSize=8).encode(text="text:N").properties(width=WIDTHS[width], height=60)
    styled = (chart.configure(font=FONT, background="white")
              .configure_axis(labelFontSize=7, titleFontSize=8, grid=False, domainWidth=0.6, tickWidth=0.6,
                              titleFontWeight="normal")
              .configure_legend(labelFontSize=7, orient="top").configure_view(stroke=None))
    return Figure("provenance", styled, [(key, run)], "provenance", (lo_, hi_), {"range": [lo_, hi_], "bins": bins},
                  data=table, caption=f"Agent-written memory of {key}, env steps {lo_}–{hi_}: versions written per "
                                      "step bin by kind, and the episode citations they carry.")


def provenance_graph_figure(key: str, run: Run, width: str = "double", lo: int | None = None,
                            hi: int | None = None, layout: chart_data.ProvenancePrint | None = None) -> Figure:
    """The provenance graph of a step range, for paper: memory versions in rows by kind
    (knowledge, procedures, plan) over env steps, episodes on the bottom row, lines for
    citations (grey) and revisions (purple), the most cited versions labelled without overlap."""
    p = layout or chart_data.provenance_print(run, lo, hi, width_pt=WIDTHS[width])
    lanes = {lane: ("episodes" if kind == "episode" else theme.PROVENANCE_KINDS[kind][0])
             for kind, lane in chart_data.PROVENANCE_LANES.items()}
    shown = sorted(set(p.nodes["lane"])) if len(p.nodes) else []
    x = alt.X("step:Q", title="env step", scale=alt.Scale(domain=[p.lo, max(p.hi, p.lo + 1)], nice=False))
    y = alt.Y("lane:Q", title=None, scale=alt.Scale(domain=[-0.4, max(shown, default=1) + 0.9]),
              axis=alt.Axis(values=shown, labelExpr=" : ".join(f"datum.value == {k} ? '{v}'" for k, v in
                                                                 lanes.items() if k in shown) + " : ''",
                            grid=False, ticks=False, domain=False))
    kinds = [k for k in chart_data.PROVENANCE_LANES if k in set(p.nodes["kind"])]
    palette = {k: theme.PROVENANCE_KINDS[k][1] for k in theme.PROVENANCE_KINDS} | {"episode": "#444444"}
    layers = []
    edge_dashes = {"cites": [], "revises": [3, 2], "disabled_because": [1, 1.5], "used_in": [6, 2]}
    if len(p.edges):
        ekinds = [k for k in edge_dashes if k in set(p.edges["kind"])]
        layers.append(alt.Chart(_data(p.edges)).mark_rule(strokeWidth=0.6, opacity=0.7, color="#777777").encode(
            x="x:Q", y="y:Q", x2="x2:Q", y2="y2:Q", strokeDash=alt.StrokeDash("kind:N", title="link", scale=alt.Scale(
                domain=ekinds, range=[edge_dashes[k] for k in ekinds]), legend=alt.Legend(orient="top"))))
    if len(p.nodes):
        layers.append(alt.Chart(_data(p.nodes)).mark_point(size=14, filled=True, opacity=0.9).encode(
            x=x, y=y, shape=alt.Shape("kind:N", title="node", legend=alt.Legend(orient="top"), scale=alt.Scale(
                domain=kinds, range=["square" if k == "episode" else "circle" for k in kinds])),
            color=alt.Color("kind:N", title="node", scale=alt.Scale(domain=kinds, range=[palette[k] for k in kinds]))))
    if len(p.labels):
        layers.append(alt.Chart(_data(p.labels.rename(columns={"y": "lane", "x": "step"}))).mark_text(
            align="left", baseline="middle", dx=2, fontSize=6, color="#222222").encode(x=x, y=y, text="text:N"))
    if not layers:
        layers.append(alt.Chart(_data(pd.DataFrame([{"text": "no memory written in this range"}]))).mark_text(
            fontSize=8).encode(text="text:N"))
    chart = alt.layer(*layers).properties(title=vega_charts.note(
        f"Labelled: the {len(p.labels)} most cited versions ({p.unlabelled} others unlabelled; the Provenance page "
        "shows every label)."))
    return Figure("provenance_graph", _style(chart, width, 36 * (len(shown) + 1)), [(key, run)], "provenance",
                  (p.lo, p.hi), {"range": [p.lo, p.hi]}, data=p.nodes,
                  caption=f"Provenance of {key}'s agent-written memory, env steps {p.lo}–{p.hi}: each memory "
                          "version at the step it was written, linked to the episodes it cites and to the version "
                          "it revises.")


def _range(runs: list[tuple[str, Run]]) -> tuple[int, int] | None:
    bounds = [run_pages.step_bounds(r) for _, r in runs]
    return (min(b[0] for b in bounds), max(b[1] for b in bounds)) if bounds else None


_hashes: "weakref.WeakKeyDictionary[Run, tuple[tuple, str]]" = weakref.WeakKeyDictionary()


def content_hash(run: Run) -> str:
    """SHA-256 over the run's manifest and tables (frames excluded), in a fixed file order;
    computed once per run and file signature (every figure of a run names it)."""
    hit = _hashes.get(run)
    if hit is not None and hit[0] == run.signature:
        return hit[1]
    h = hashlib.sha256()
    for name in HASHED:
        p = run.path / name
        if p.is_file():
            h.update(name.encode() + b"\0")
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    _hashes[run] = (run.signature, h.hexdigest())
    return _hashes[run][1]


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


def manifest(fig: Figure, width: str, base_url: str = "", command: str = "", data_file: str | None = None
             ) -> dict[str, Any]:
    """The figure's provenance record: what it shows, the runs and their hashes, the range and
    filters, the data file beside it, the command and the code that made it."""
    tasks = sorted({r.manifest.task for _, r in fig.runs if r.manifest})
    return {"figure": fig.name, "caption": fig.caption, "task": tasks[0] if len(tasks) == 1 else tasks,
            "width": width, "width_pt": WIDTHS[width],
            "runs": [{"key": k, "path": str(r.path), "method": ap.method_of(r), "seed": ap.seed_of(r),
                      "sha256": content_hash(r)} for k, r in fig.runs],
            "steps": list(fig.steps) if fig.steps else None, "filters": fig.filters, "view": fig.view,
            "data": data_file, "command": command,
            "package": {"name": "mfm", "version": package_version(), "commit": code_commit()},
            "deep_link": deep_link(fig, base_url)}


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as SVG, PDF or PNG bytes."""
    spec = fig.chart.to_json()
    if fmt == "svg":
        return vlc.vegalite_to_svg(spec).encode("utf-8")
    if fmt == "pdf":
        return vlc.vegalite_to_pdf(spec)
    if fmt == "png":
        return vlc.vegalite_to_png(spec, scale=PNG_SCALE)
    raise ValueError(f"unknown figure format {fmt!r}; use one of {', '.join(FORMATS)}")


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


def save(fig: Figure, out_dir: Path, width: str, stem: str | None = None, base_url: str = "",
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
    spelled (``loaders.remote.run_identity``), is opened once, under its first key."""
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
                         f"style='width:{2 * WIDTHS[width] + 120}px;max-width:100%'><figcaption><b>{esc(stem)}</b> "
                         f"({width} column). {esc(fig.caption)}<br>{files}</figcaption></figure>")
        for title, table_html in tabs:
            parts.append(f"<h3>{esc(title)}</h3>{table_html}")
    return "\n".join(parts) + "\n"


def write_figures(paths: Sequence[str | Path], out_dir: str | Path, window: int = 25, base_url: str = "",
                  width: str | None = None, html_page: bool = False, command: str = "",
                  notes: list[str] | None = None) -> list[Path]:
    """Every standard figure and table for the runs under ``paths``, one folder per task (never
    two tasks on one axis): per run a timeline, a spatial grid and, for runs that wrote memory,
    a provenance summary and graph; over the task's runs progress, steps per turn, retargeting
    and (learner runs) Echo unlock curves; the paper's tables as LaTeX and CSV. ``width``
    (``single``/``double``) overrides each figure's own; ``html_page`` adds ``index.html``
    showing everything. A figure with nothing to show is not written and a sentence saying so
    is appended to ``notes``. Returns the files written."""
    runs = [(k, r) for k, r in _expand(paths) if r.manifest is not None]
    if not runs:
        raise ValueError(f"no run found under {', '.join(map(str, paths))}")
    if width is not None and width not in WIDTHS:
        raise ValueError(f"unknown width {width!r}; use one of {', '.join(WIDTHS)}")
    notes = [] if notes is None else notes
    written: list[Path] = []
    sections = []
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    folders: set[str] = set()
    for task, group in chart_data.tasks(runs):
        folder = file_segment(task, folders)
        out = inside(root, root / folder)
        made: list[tuple[str, Figure, str]] = []

        def add(fig: Figure, w: str, stem: str) -> None:
            written.extend(save(fig, out, w, stem, base_url, command, root=root))
            made.append((stem, fig, w))

        names: set[str] = set()
        for key, run in group:
            name = file_segment(key, names)
            add(timeline_figure(key, run, width or "double"), width or "double", f"timeline_{name}")
            add(grid_figure(key, run, width or "single"), width or "single", f"spatial_grid_{name}")
            if run.records("memory_writes.jsonl"):
                add(provenance_figure(key, run, width or "double"), width or "double", f"provenance_{name}")
                add(provenance_graph_figure(key, run, width or "double"), width or "double",
                    f"provenance_graph_{name}")
        progress = chart_data.progress(group)
        if len(progress.bands):
            add(progress_figure(group, width or "double", progress), width or "double", "progress")
        else:
            notes.append(f"progress ({task}): no run records a milestone curve; not drawn.")
        if any(len(r.records("turns.jsonl")) for _, r in group):
            add(steps_per_turn_figure(group, window, width or "double"), width or "double", "steps_per_turn")
            rates = chart_data.retarget_rates(group)
            if rates["rate"].notna().any():
                add(retargeting_figure(group, width or "single", rates), width or "single", "retargeting")
            else:
                notes.append(f"retargeting ({task}): no turn to count; not drawn.")
        else:
            notes.append(f"steps_per_turn, retargeting ({task}): no run of this task records turns; not drawn.")
        learners = [(k, r) for k, r in group if echo.has_csd(r.path)]
        if learners:
            series = echo.unlock_bands(echo.learner_runs(r.path for _, r in learners)[0])
            if len(series.bands):
                add(echo_figure(learners, width or "double", series), width or "double", "echo_unlock")
            else:
                notes.append(f"echo_unlock ({task}): no Echo episode recorded yet; not drawn.")
        tabs = []
        for name, title, table in paper_tables.tables(ap.measures(group)):
            tex, csv = inside(root, out / f"table_{name}.tex"), inside(root, out / f"table_{name}.csv")
            tex.write_text(paper_tables.to_latex(table, f"{title}; task {task}.", f"tab:{name}-{task}"),
                           encoding="utf-8")
            write_csv(table, csv)
            written += [tex, csv]
            tabs.append((title, table.to_html(index=False, escape=True, border=0)))
        sections.append((task, folder, made, tabs, [n for n in notes if f"({task})" in n]))
    if html_page:
        page = inside(root, root / "index.html")
        page.write_text(_html(sections), encoding="utf-8")
        written.append(page)
    return written
