"""Figures for papers: Altair charts in a clean print style, rendered headless by vl-convert to
SVG, PDF and PNG, each with a JSON manifest (runs and their content hash, step range,
filters, package version, dashboard deep link).

``write_figures(paths, out_dir)`` writes every standard figure (timeline, spatial grid,
steps per turn, retargeting, progress, provenance summary) for runs or runs roots; it backs
``mfm figures``. A figure exported from a page also records the page's view (its URL query
state), so its manifest names the filters chosen there and its deep link reopens that view.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlencode

import altair as alt
import pandas as pd
import vl_convert as vlc

from dashboard import theme
from loaders import analysis_pages as ap
from loaders import provenance
from loaders import run_pages
from loaders.run import Run, find_runs, open_run

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


def _method_scale(methods: Sequence[str]) -> alt.Scale:
    ms = list(dict.fromkeys(methods))
    return alt.Scale(domain=ms, range=[theme.method_color(m) for m in ms])


def _clip(run: Run, lo: int | None, hi: int | None) -> tuple[int, int]:
    first, last = run_pages.step_bounds(run)
    return (first if lo is None else max(first, lo), last if hi is None else min(last, hi))


def timeline_figure(key: str, run: Run, width: str = "double", lo: int | None = None, hi: int | None = None,
                    color_by: str = "action_kind") -> Figure:
    """Episodes of one run as bars over env steps (within ``lo``–``hi``), one row per life,
    coloured by action kind or outcome."""
    lo, hi = _clip(run, lo, hi)
    bars = run_pages.timeline_bars(run.episodes(), lo, hi, color_by)
    cats = sorted(set(bars["category"])) if len(bars) else []
    chart = alt.Chart(_data(bars)).mark_bar(height=10).encode(
        x=alt.X("start:Q", title="env step", scale=alt.Scale(domain=[lo, hi])), x2="end:Q",
        y=alt.Y("life:O", title="life"),
        color=alt.Color("category:N", legend=alt.Legend(title=None), scale=alt.Scale(
            domain=cats, range=[theme.category_color(c, color_by) for c in cats])))
    return Figure("timeline", _style(chart, width, max(40, 16 * bars["life"].nunique() if len(bars) else 40)),
                  [(key, run)], "timeline", (lo, hi), {"color": color_by, "range": [lo, hi]})


def grid_figure(key: str, run: Run, width: str = "single", lo: int | None = None, hi: int | None = None,
                kinds: Sequence[str] | None = None) -> Figure:
    """The cells the agent interacted with (within steps ``lo``–``hi``, of ``kinds``), coloured
    by kind, and the end positions of the episodes of that range (black dots); the second axis
    grows downwards."""
    lo, hi = _clip(run, lo, hi)
    cells = run_pages.grid_cells(run.grid(), lo, hi, kinds)
    eps = run.episodes()
    eps = eps[eps["x"].notna() & eps["y"].notna() & (eps["last_step"] >= lo) & (eps["first_step"] <= hi)][
        ["id", "x", "y"]] if len(eps) else pd.DataFrame(columns=["id", "x", "y"])
    x = alt.X("x:Q", title="x (cells)", scale=alt.Scale(zero=False))
    y = alt.Y("y:Q", title="y (cells)", scale=alt.Scale(zero=False, reverse=True))
    layers = []
    if len(cells):
        kinds = list(dict.fromkeys(cells["kind"]))
        layers.append(alt.Chart(_data(cells)).mark_square(size=6).encode(
            x=x, y=y, color=alt.Color("kind:N", legend=alt.Legend(title=None),
                                      scale=alt.Scale(domain=kinds, range=[theme.cell_kind_color(k) for k in kinds]))))
    if len(eps):
        layers.append(alt.Chart(_data(eps)).mark_circle(size=4, color="#111111", opacity=0.6).encode(x=x, y=y))
    if not layers:
        layers.append(alt.Chart(_data(pd.DataFrame([{"text": "no cells or positions recorded"}])))
                      .mark_text(fontSize=8).encode(text="text:N"))
    return Figure("spatial_grid", _style(alt.layer(*layers), width, WIDTHS[width]), [(key, run)], "grid",
                  (lo, hi), {"range": [lo, hi]} | ({"kinds": sorted(kinds)} if kinds is not None else {}))


def _band_chart(bands: pd.DataFrame, y_title: str, shade: list[tuple[int, int]] | None = None) -> alt.LayerChart:
    scale = _method_scale(list(bands["method"]))
    base = alt.Chart(_data(bands.dropna(subset=["mean"])))
    layers = []
    if shade:
        layers.append(alt.Chart(_data(pd.DataFrame(shade, columns=["lo", "hi"]))).mark_rect(
            color="#1b9e77", opacity=0.12).encode(x="lo:Q", x2="hi:Q"))
    layers.append(base.mark_area(opacity=0.2).encode(x="step:Q", y="lo:Q", y2="hi:Q",
                                                     color=alt.Color("method:N", scale=scale, legend=None)))
    layers.append(base.mark_line(strokeWidth=1.2).encode(
        x=alt.X("step:Q", title="env step"), y=alt.Y("mean:Q", title=y_title),
        color=alt.Color("method:N", scale=scale, legend=alt.Legend(title=None))))
    return alt.layer(*layers)


def steps_per_turn_figure(runs: list[tuple[str, Run]], window: int = 25, width: str = "double") -> Figure:
    """Rolling median env steps per turn per method (seed band), shaded where MFM leads."""
    bands = ap.seed_bands([(ap.method_of(r), ap.seed_of(r), ap.steps_per_turn(r, window)) for _, r in runs],
                          "median")
    chart = _band_chart(bands, "env steps per turn", ap.exceed_intervals(bands))
    return Figure("steps_per_turn", _style(chart, width, 140), runs, "steps_per_turn", _range(runs),
                  {"window": window})


def progress_figure(runs: list[tuple[str, Run]], width: str = "double") -> Figure:
    """Milestones reached against env step per method (seed band)."""
    bands = ap.seed_bands([(ap.method_of(r), ap.seed_of(r), ap.milestone_curve(r)) for _, r in runs], "milestones",
                          points=400, hold=True)
    return Figure("progress", _style(_band_chart(bands, "milestones reached"), width, 140), runs, "progress",
                  _range(runs))


def retargeting_figure(runs: list[tuple[str, Run]], width: str = "single") -> Figure:
    """The A.4 table as grouped bars per method: retarget rates (inspecting vs other turns)
    and the near share vs the null rate, with the counts as labels."""
    _, table = ap.retarget_tables(runs)
    rows = []
    for r in table.itertuples():
        rows += [{"method": r.method, "measure": "retarget | inspect", "rate": r.inspect_rate,
                  "label": f"{r.inspect_retargets}/{r.inspect_turns}"},
                 {"method": r.method, "measure": "retarget | other", "rate": r.other_rate,
                  "label": f"{r.other_retargets}/{r.other_turns}"},
                 {"method": r.method, "measure": "near", "rate": r.near_rate, "label": f"{r.near}/{r.new_targets}"},
                 {"method": r.method, "measure": "null", "rate": r.null_rate, "label": ""}]
    df = pd.DataFrame(rows, columns=["method", "measure", "rate", "label"]).dropna(subset=["rate"])
    measures = ["retarget | inspect", "retarget | other", "near", "null"]
    base = alt.Chart(_data(df)).encode(
        y=alt.Y("measure:N", sort=measures, title=None),
        x=alt.X("rate:Q", title="rate", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")))
    chart = alt.layer(
        base.mark_bar(height=8).encode(color=alt.Color("measure:N", sort=measures, legend=None, scale=alt.Scale(
            domain=measures, range=["#1b9e77", "#a6d8c9", "#d95f02", "#bbbbbb"]))),
        base.mark_text(align="left", dx=3, fontSize=6).encode(text="label:N"),
    ).properties(width=WIDTHS[width], height=60).facet(row=alt.Row("method:N", title=None,
                                                                   sort=list(table["method"])))
    styled = (chart.configure(font=FONT, background="white")
              .configure_axis(labelFontSize=7, titleFontSize=8, grid=False, domainWidth=0.6,
                              titleFontWeight="normal")
              .configure_legend(labelFontSize=7, orient="top")
              .configure_header(labelFontSize=8, labelAngle=0, labelAlign="left")
              .configure_view(stroke=None))
    return Figure("retargeting", styled, runs, "retargeting", _range(runs), {"radius": ap.RADIUS})


PROVENANCE_LABELS = {"knowledge": "knowledge lines", "procedure": "procedure versions", "plan": "plan versions",
                     "file": "other files"}


def provenance_figure(key: str, run: Run, width: str = "double", lo: int | None = None, hi: int | None = None,
                      bins: int = 40) -> Figure:
    """Provenance summary of one run: memory versions written per step bin, stacked by kind
    (knowledge lines, procedure versions, plan versions, other files), and below, how many
    episode citations those versions carry."""
    g = provenance.filter_steps(provenance.build_graph(run), lo, hi)
    table = provenance.summary(g, bins)
    table["what"] = [PROVENANCE_LABELS.get(k, k) for k in table["kind"]]
    table["end"] = table["hi"] + 1
    kinds = [PROVENANCE_LABELS[k] for k in PROVENANCE_LABELS if k in set(table["kind"])]
    palette = dict(zip(PROVENANCE_LABELS.values(), ("#1b9e77", "#d95f02", "#7570b3", "#999999")))
    lo_, hi_ = _clip(run, lo, hi)
    if len(table):
        x = alt.X("lo:Q", title="env step", scale=alt.Scale(domain=[lo_, max(hi_, int(table["end"].max()))],
                                                            nice=False))
        bars = alt.Chart(_data(table)).mark_bar().encode(
            x=x, x2="end:Q", y=alt.Y("sum(versions):Q", title="versions written"),
            color=alt.Color("what:N", legend=alt.Legend(title=None),
                            scale=alt.Scale(domain=kinds, range=[palette[k] for k in kinds])))
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
    return Figure("provenance", styled, [(key, run)], "provenance", (lo_, hi_), {"range": [lo_, hi_], "bins": bins})


def _range(runs: list[tuple[str, Run]]) -> tuple[int, int] | None:
    bounds = [run_pages.step_bounds(r) for _, r in runs]
    return (min(b[0] for b in bounds), max(b[1] for b in bounds)) if bounds else None


def content_hash(run: Run) -> str:
    """SHA-256 over the run's manifest and tables (frames excluded), in a fixed file order."""
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


def manifest(fig: Figure, width: str, base_url: str = "") -> dict[str, Any]:
    """The figure's provenance record."""
    return {"figure": fig.name, "width": width, "width_pt": WIDTHS[width],
            "runs": [{"key": k, "path": str(r.path), "method": ap.method_of(r), "seed": ap.seed_of(r),
                      "sha256": content_hash(r)} for k, r in fig.runs],
            "steps": list(fig.steps) if fig.steps else None, "filters": fig.filters, "view": fig.view,
            "package": {"name": "mfm", "version": package_version()}, "deep_link": deep_link(fig, base_url)}


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


def save(fig: Figure, out_dir: Path, width: str, stem: str | None = None, base_url: str = "") -> list[Path]:
    """Write ``stem.svg/.pdf/.png`` and ``stem.json`` (the manifest) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or fig.name
    written = []
    for fmt in FORMATS:
        p = out_dir / f"{stem}.{fmt}"
        p.write_bytes(render(fig, fmt))
        written.append(p)
    p = out_dir / f"{stem}.json"
    p.write_text(json.dumps(manifest(fig, width, base_url), indent=2) + "\n", encoding="utf-8")
    return [*written, p]


def file_stem(key: str) -> str:
    """A run key as part of a file name (nested keys ``a/b`` become ``a_b``)."""
    return key.replace("/", "_")


def _expand(paths: Sequence[str | Path]) -> list[tuple[str, Run]]:
    """Runs named by run folders or runs roots, keyed as the dashboard keys them under that
    root (a run folder given directly: its name); made unique."""
    out: dict[str, Run] = {}
    for p in map(Path, paths):
        is_run = (p / "run.json").is_file()
        for d in ([p] if is_run else find_runs(p)):
            key = d.name if is_run else d.resolve().relative_to(p.resolve()).as_posix()
            n = 2
            while key in out:
                key, n = f"{d.name}_{n}", n + 1
            out[key] = open_run(d)
    return list(out.items())


def write_figures(paths: Sequence[str | Path], out_dir: str | Path, window: int = 25,
                  base_url: str = "") -> list[Path]:
    """Every standard figure for the runs under ``paths``: per run a timeline, a spatial grid
    and a provenance summary (runs that wrote memory), over all runs steps per turn,
    retargeting and progress. Returns the files written."""
    runs = [(k, r) for k, r in _expand(paths) if r.manifest is not None]
    if not runs:
        raise ValueError(f"no run found under {', '.join(map(str, paths))}")
    out = Path(out_dir)
    written: list[Path] = []
    for key, run in runs:
        written += save(timeline_figure(key, run), out, "double", f"timeline_{file_stem(key)}", base_url)
        written += save(grid_figure(key, run), out, "single", f"spatial_grid_{file_stem(key)}", base_url)
        if run.records("memory_writes.jsonl"):
            written += save(provenance_figure(key, run), out, "double", f"provenance_{file_stem(key)}", base_url)
    written += save(steps_per_turn_figure(runs, window), out, "double", base_url=base_url)
    written += save(retargeting_figure(runs), out, "single", base_url=base_url)
    written += save(progress_figure(runs), out, "double", base_url=base_url)
    return written
