"""Paper output proven in compiled documents (issue 42): `mfm figures sample_runs` compiled
with pdflatex into a two-column article (3.45 in columns) and a one-column article (5.5 in text
block); the log read for ``Overfull \\hbox`` per figure and table, every figure PDF's page
width (pdfinfo) checked against the width asked, the text of each figure's PDF (pdftotext)
checked to hold every note, legend label and axis title in full, every SVG text element's
box measured in Chromium inside the SVG's canvas. Quick checks of the chart specs: compiled
by vl-convert without a Vega-Lite warning."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import paper_tex as tex
from conftest import REPO
from dashboard import figures, vega_charts
from loaders import analysis_pages as ap
from loaders import chart_data, open_run, paper_size, paper_tables, provenance
from mfm.cli import main

SAMPLES = REPO / "sample_runs"
EXAMPLE = REPO / "docs" / "paper-example" / "paper.tex"


# ---------------------------------------------------------------- quick: sizes and specs


def test_lengths_and_named_widths() -> None:
    assert paper_size.width_bp("single") == pytest.approx(3.45 * 72)
    assert paper_size.width_bp("3.3in") == pytest.approx(237.6)
    assert paper_size.width_bp("241pt") == pytest.approx(241 * 72 / 72.27)
    assert paper_size.width_bp("8.5cm") == pytest.approx(8.5 / 2.54 * 72)
    for bad in ("241", "3.3 furlongs", "wide", "0.1in", "-3in"):
        with pytest.raises(ValueError, match="width"):
            paper_size.width_bp(bad)


def test_a_bad_width_is_refused_by_the_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["figures", str(SAMPLES / "diamond_mfm_s2"), "--out", str(tmp_path / "f"), "--width", "241"])
    assert code == 2
    err = capsys.readouterr().err
    assert "width '241'" in err and "unit" in err and not (tmp_path / "f" / "diamond").exists()


def _screen_charts() -> dict[str, object]:
    """Every chart a page draws, made from the sample runs as the pages make them."""
    run = open_run(SAMPLES / "diamond_mfm_s2")
    runs = [(k, open_run(SAMPLES / k)) for k in ("diamond_mfm_s2", "diamond_vista_s2_2500steps",
                                                  "diamond_vista_s1_1900steps")]
    g = provenance.view(provenance.build_graph(run))
    frame = np.zeros((64, 64, 3), dtype=np.uint8)
    frame[10:20, 10:20] = 200
    rates = chart_data.retarget_rates(runs)
    return {
        "progress": vega_charts.band_chart(chart_data.progress(runs), screen=True),
        "steps_per_turn": vega_charts.band_chart(chart_data.steps_per_turn(runs, 25), screen=True),
        "retargeting": vega_charts.rates_chart(rates, 400, screen=True),
        "retarget_map": vega_charts.retarget_map((3.0, 4.0), [{"x": 1, "y": 2, "episode": "e1"},
                                                              {"x": 9, "y": 2, "episode": "e2", "inherited": True}],
                                                 [{"x": 5, "y": 5, "near": True, "kind": "tree"},
                                                  {"x": 20, "y": 5, "kind": "stone"}], 8.0),
        "provenance": vega_charts.provenance_graph(g.nodes_frame(), g.edges_frame()),
        "frames": vega_charts.frames_panels([frame, frame[::-1]], ["a", "b"], tiles=True,
                                            diffs=[(frame, "diff")]),
    }


def _as_streamlit_sends(spec: dict) -> dict:
    """The spec with the autosize Streamlit adds when the chart sets none (its own rule:
    ``streamlit.elements.vega_charts._prepare_vega_lite_spec``, the container's width used)."""
    from streamlit.elements.vega_charts import _prepare_vega_lite_spec

    return _prepare_vega_lite_spec(spec, True)


def test_every_chart_compiles_without_a_vega_lite_warning(capfd: pytest.CaptureFixture) -> None:
    """Each page's chart and each exported figure, compiled by vl-convert with its warnings
    on (printed to stderr as ``WARN ...``); a page's chart as Streamlit sends it to the browser
    (:func:`_as_streamlit_sends`: a concat given no autosize gets ``fit``, which Vega-Lite
    refuses with a warning, so such a chart must set its own)."""
    import vl_convert as vlc

    runs = [(k, open_run(SAMPLES / k)) for k in ("diamond_mfm_s2", "diamond_vista_s2_2500steps")]
    run = runs[0][1]
    charts = _screen_charts()
    printed = {f"print {f.name}": f.chart for f in (
        figures.grid_figure("diamond_mfm_s2", run), figures.retargeting_figure(runs),
        figures.progress_figure(runs), figures.timeline_figure("diamond_mfm_s2", run),
        figures.provenance_graph_figure("diamond_mfm_s2", run))}
    capfd.readouterr()
    warned = {}
    for name, chart in {**charts, **printed}.items():
        spec = chart.to_dict()
        if not name.startswith("print"):
            spec = _as_streamlit_sends(spec)
        vlc.vegalite_to_vega(spec, show_warnings=True)
        err = capfd.readouterr().err
        if "WARN" in err:
            warned[name] = err.strip()
    assert not warned, warned


def test_tables_fit_their_column_by_the_estimate() -> None:
    """The layout chosen for each sample table: a column table for ``single`` (split if it
    must be), a full-width one fitted to 5.5 in when a column cannot hold it whole."""
    runs = [(k, r) for k, r in figures._expand([SAMPLES]) if r.manifest is not None]
    seen = set()
    for task, group in chart_data.tasks(runs):
        for name, _, table in paper_tables.tables(ap.measures(group)):
            keys = paper_tables.KEYS.get(name, 1)
            single, _ = paper_tables.layout(table, "single", keys)
            assert single.env == "table" and single.width == pytest.approx(paper_size.tex_pt(paper_size.WIDTHS["single"]))
            assert [h for part in single.parts for h in part[keys:]] == [
                paper_tables.short_header(h)[0] for h in table.columns[keys:]]
            free, _ = paper_tables.layout(table, None, keys)
            assert free.env == ("table" if len(single.parts) == 1 else "table*")
            seen.add(free.env)
    assert seen == {"table", "table*"}


# ---------------------------------------------------------------- slow: compiled documents


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """`mfm figures sample_runs --width single`, written once for the module."""
    out = tmp_path_factory.mktemp("paper") / "figs"
    assert main(["figures", str(SAMPLES), "--out", str(out), "--width", "single"]) == 0
    return out, sorted(out.rglob("*"))


def _drawn_text(spec: dict) -> list[str]:
    """What a figure asks to be drawn as text: its notes (title lines), legend labels (the
    domains of scales with a legend) and axis titles."""
    out: list[str] = []
    stack: list = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack += node
            continue
        if not isinstance(node, dict):
            continue
        title = node.get("title")
        if isinstance(title, dict):
            text = title.get("text")
            out += [text] if isinstance(text, str) else list(text or [])
        elif isinstance(title, str) and "field" in node:
            out.append(title)
        enc = node.get("encoding")
        if isinstance(enc, dict):
            for c in enc.values():
                if isinstance(c, dict) and c.get("legend", {}) is not None and "field" in c:
                    domain = (c.get("scale") or {}).get("domain")
                    if isinstance(domain, list) and c.get("type") == "nominal":
                        out += [str(v) for v in domain]
        stack += [v for k, v in node.items() if k not in ("data", "datasets")]
    return [t for t in out if t and t.strip()]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.slow
def test_the_example_paper_compiles_with_nothing_overfull(single, tmp_path: Path) -> None:
    """docs/paper-example/paper.tex with every figure and table `--width single` writes: no
    LaTeX error, no missing file (either stops pdflatex), no Overfull \\hbox over 1 pt; every
    float placed (each figure's and table's number in the PDF's text), the log's page count
    that of the PDF."""
    out, files = single
    shutil.copytree(out, tmp_path / "figs")
    source = EXAMPLE.read_text(encoding="utf-8")
    done = tex.compile_tex(tmp_path, "paper", source)
    assert not [line for line in done.log.splitlines() if re.search(r"Overfull \\hbox \((\d+\.\d+)pt", line)
                and float(re.search(r"\((\d+\.\d+)pt", line).group(1)) > 1.0]
    assert "Float(s) lost" not in done.log and "Warning: Reference" not in done.log
    written_pages = int(re.search(r"Output written on paper\.pdf \((\d+) pages?", done.log).group(1))
    assert written_pages == done.pages
    n_figures = len([p for p in files if p.suffix == ".pdf"])
    n_tables = len([p for p in files if p.name.startswith("table_") and p.suffix == ".tex"])
    text = " ".join(done.text.split())
    assert n_figures >= 20 and n_tables >= 8
    assert all(f"Figure {i}:" in text for i in range(1, n_figures + 1)) and f"Figure {n_figures + 1}:" not in text
    assert all(f"Table {i}:" in text for i in range(1, n_tables + 1)) and f"Table {n_tables + 1}:" not in text
    assert done.pages >= (n_figures + n_tables) // 6


def _marked_body(out: Path) -> tuple[str, list[str]]:
    """Every figure and table of ``out`` in its float (as ``figures.tex`` writes it), each
    between log markers naming its file."""
    lines = (out / "figures.tex").read_text(encoding="utf-8").splitlines()
    body, names, block = [f"\\providecommand{{\\mfmfigures}}{{{out}}}"], [], []
    for line in lines[3:]:
        block.append(line)
        m = re.search(r"\\(?:input|includegraphics)\{\\mfmfigures/([^}]+)\}", line)
        if m:
            name = m.group(1)
        if line.startswith("\\input") or line.startswith("\\end{figure"):
            body.append(tex.marked(name, "\n".join(block)))
            names.append(name)
            block = []
    return "\n".join(body) + "\n\\clearpage", names


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["two-column", "one-column"])
def test_no_figure_or_table_is_overfull_in_either_page(single, tmp_path: Path, layout: str) -> None:
    out, _ = single
    body, names = _marked_body(out)
    done = tex.compile_tex(tmp_path, "each", tex.document(tex.TWO_COLUMN if layout == "two-column"
                                                          else tex.ONE_COLUMN, body), runs=1)
    wide = {k: v for k, v in tex.overfull(done.log).items() if v > 1.0}
    assert len(names) >= 28 and not wide, wide


@pytest.mark.slow
def test_every_figure_is_the_width_asked_and_its_text_whole(single) -> None:
    """Each PDF's MediaBox within 1 pt of 3.45 in; its text (pdftotext) holds every note line,
    legend label and axis title the figure's spec asks for, whole; its PNG is three pixels a
    point at 216 dpi, so it prints at the same size."""
    out, files = single
    pdfs = [p for p in files if p.suffix == ".pdf"]
    assert len(pdfs) >= 20
    checked = 0
    for pdf in pdfs:
        w, h = tex.pdf_size(pdf)
        assert abs(w - paper_size.WIDTHS["single"]) <= 1.0, (pdf.name, w)
        manifest = json.loads(pdf.with_suffix(".json").read_text())
        assert manifest["width_pt"] == pytest.approx(paper_size.WIDTHS["single"], abs=0.01)
        png = Image.open(pdf.with_suffix(".png"))
        assert png.info["dpi"][0] == pytest.approx(216, abs=0.1)
        assert abs(png.width / 3 - w) <= 1.0
        svg = pdf.with_suffix(".svg").read_text()
        assert re.search(r'<svg[^>]*width="248\.40"', svg)
        text = _squash(tex.pdf_text(pdf))
        drawn = _drawn_text(json.loads(_spec_of(pdf)))
        missing = [t for t in drawn if _squash(t) not in text]
        assert not missing, (pdf.name, missing)
        checked += len(drawn)
    assert checked > 200


def _spec_of(pdf: Path) -> str:
    """The figure's Vega-Lite spec, rebuilt the way `mfm figures` built it (by name)."""
    name, key = pdf.stem, None
    task = pdf.parent.name
    runs = [(k, r) for k, r in figures._expand([SAMPLES]) if r.manifest is not None]
    group = dict(chart_data.tasks(runs))[task]
    size = figures.PrintSize("single")
    for prefix, make in (("timeline_", figures.timeline_figure), ("spatial_grid_", figures.grid_figure),
                         ("provenance_graph_", figures.provenance_graph_figure),
                         ("provenance_", figures.provenance_figure)):
        if name.startswith(prefix):
            key = next(k for k, _ in group if figures.file_stem(k) == name[len(prefix):])
            return make(key, dict(group)[key], size).chart.to_json()
    if name == "progress":
        return figures.progress_figure(group, size).chart.to_json()
    if name == "steps_per_turn":
        return figures.steps_per_turn_figure(group, 25, size).chart.to_json()
    if name == "retargeting":
        return figures.retargeting_figure(group, size).chart.to_json()
    learners = [(k, r) for k, r in group if figures.echo.has_csd(r.path)]
    return figures.echo_figure(learners, size).chart.to_json()


@pytest.mark.slow
@pytest.mark.parametrize("width", ["double", "text", "3.3in", "241pt"])
def test_explicit_widths_and_a_height(width: str, tmp_path: Path) -> None:
    """The widest figures (a timeline with its legend, the provenance graph, the faceted
    retargeting bars, a map) at other widths: each PDF within 1 pt of the width; with a
    height asked, the height too (the map keeps its cells square instead)."""
    runs = [(k, open_run(SAMPLES / k)) for k in ("diamond_mfm_s2", "diamond_vista_s2_2500steps")]
    run = runs[0][1]
    want = paper_size.width_bp(width)
    size = figures.PrintSize(width, "2.5in", 9, "serif")
    for fig in (figures.timeline_figure("diamond_mfm_s2", run, size),
                figures.provenance_graph_figure("diamond_mfm_s2", run, size),
                figures.retargeting_figure(runs, size), figures.grid_figure("diamond_mfm_s2", run, size),
                figures.progress_figure(runs, size)):
        pdf = tmp_path / f"{fig.name}.pdf"
        pdf.write_bytes(figures.render(fig, "pdf"))
        w, h = tex.pdf_size(pdf)
        assert abs(w - want) <= 1.0, (fig.name, w, want)
        if fig.name != "spatial_grid":
            assert abs(h - 180) <= 1.0, (fig.name, h)
        missing = [t for t in _drawn_text(fig.chart.to_dict()) if _squash(t) not in _squash(tex.pdf_text(pdf))]
        assert not missing, (fig.name, missing)


@pytest.mark.slow
@pytest.mark.parametrize("width", [None, "text", "double"])
def test_tables_of_every_width_compile_unscaled_and_whole(width: str | None, tmp_path: Path) -> None:
    """Every sample table laid out for ``width`` in both pages (a full-width table in the
    two-column page is a ``table*``): nothing overfull; each cell's text in the PDF."""
    runs = [(k, r) for k, r in figures._expand([SAMPLES]) if r.manifest is not None]
    body, cells = [], []
    for task, group in chart_data.tasks(runs):
        for name, title, table in paper_tables.tables(ap.measures(group)):
            source = paper_tables.to_latex(table, title, f"tab:{name}-{task}", width, paper_tables.KEYS.get(name, 1))
            assert r"\resizebox" not in source and r"\scalebox" not in source
            body.append(tex.marked(f"{task}/{name}", source + "\\clearpage"))
            cells += [str(v) for v in table.to_numpy().ravel()]
    for layout in (tex.TWO_COLUMN, tex.ONE_COLUMN):
        if width == "double" and layout == tex.ONE_COLUMN:
            continue  # a 7 in table is not made for a 5.5 in page
        done = tex.compile_tex(tmp_path, "tables", tex.document(layout, "\n".join(body)), runs=1)
        wide = {k: v for k, v in tex.overfull(done.log).items() if v > 1.0}
        assert not wide, wide
        text = _squash(tex.pdf_text(done.pdf)).replace("−", "-")
        assert not [c for c in cells if _squash(c) not in text]


@pytest.mark.slow
@pytest.mark.browser
def test_every_svg_text_lies_inside_its_canvas_in_chromium(single, page) -> None:
    """Each SVG opened in headless Chromium: the box of every ``<text>`` (getBBox through
    its transform to the canvas, as drawn in Chromium's own fonts) inside the viewBox."""
    out, files = single
    svgs = [p for p in files if p.suffix == ".svg"]
    outside = {}
    for svg in svgs:
        page.goto(svg.as_uri())
        boxes = page.evaluate("""() => {
            const root = document.documentElement;
            const vb = root.viewBox.baseVal;
            const out = [];
            for (const t of root.querySelectorAll('text')) {
                if (!t.textContent.trim()) continue;
                const b = t.getBBox(), m = t.getCTM();
                const pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
                    .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
                const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
                out.push({text: t.textContent, x0: Math.min(...xs), x1: Math.max(...xs),
                          y0: Math.min(...ys), y1: Math.max(...ys), w: vb.width, h: vb.height});
            }
            return out;
        }""")
        assert boxes, svg.name
        bad = [b["text"] for b in boxes if b["x0"] < -0.5 or b["y0"] < -0.5 or b["x1"] > b["w"] + 0.5
               or b["y1"] > b["h"] + 0.5]
        if bad:
            outside[svg.name] = bad
    assert len(svgs) >= 20 and not outside, outside
