"""Paper figures and tables as `mfm figures` writes them: one folder per task, every method named
in its figure's legend, intervals over seeds where there are several, each figure's data and
manifest beside it, LaTeX tables with booktabs rules holding the numbers `mfm results` prints.
Checked on the written files (SVG text, manifests, CSV, LaTeX), not on pixels."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, open_app, use_root, vega_data, write_run
from dashboard import figures
from loaders.compare import report
from loaders.run import open_run
from mfm.cli import main

pytestmark = pytest.mark.slow  # renders ~150 files (SVG, PDF, PNG); the quick screen/print checks: test_chart_data

COMPARISONS = ("progress", "steps_per_turn", "retargeting", "echo_unlock")


def _patch_manifest(run_dir: Path, **fields: object) -> None:
    """Give a written run another task, method or seed (run.json is plain JSON)."""
    path = run_dir / "run.json"
    m = json.loads(path.read_text())
    m.update(fields)
    path.write_text(json.dumps(m))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three mfm seeds and one vista seed of task diamond, one mfm run of task stone."""
    base = tmp_path_factory.mktemp("figs_root")
    for name, task, method, seed in (("mfm_s0", "diamond", "mfm", 0), ("mfm_s1", "diamond", "mfm", 1),
                                     ("mfm_s2", "diamond", "mfm", 2), ("vista_s0", "diamond", "vista", 0),
                                     ("stone_mfm_s0", "stone", "mfm", 0)):
        write_run(base / name, episodes=12 + 4 * seed, seed=seed)
        _patch_manifest(base / name, task=task, method=method, seed=seed)
    return base


@pytest.fixture(scope="module")
def written(root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("figs")
    return out, figures.write_figures([root], out, window=3, html_page=True, command="mfm figures test")


def _svg_text(path: Path) -> str:
    return " ".join(t for t in ET.parse(path).getroot().itertext())


def _run_json(path: str) -> dict:
    return json.loads((Path(path) / "run.json").read_text())


def test_one_folder_per_task_and_no_figure_mixes_tasks(root: Path, written) -> None:
    out, files = written
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"diamond", "stone"}
    manifests = [p for p in files if p.suffix == ".json"]
    assert manifests
    for p in manifests:
        m = json.loads(p.read_text())
        tasks = {_run_json(r["path"])["task"] for r in m["runs"]}
        assert tasks == {p.parent.name}, (p, tasks)


def test_every_comparison_figure_names_each_method_in_its_legend(written) -> None:
    out, files = written
    seen = 0
    for p in files:
        if p.suffix == ".json" and p.stem in COMPARISONS:
            m = json.loads(p.read_text())
            text = _svg_text(p.with_suffix(".svg"))
            for method in {_run_json(r["path"])["method"] for r in m["runs"]}:
                assert method in text, (p, method)
            seen += 1
    assert seen >= 4


def test_intervals_over_seeds_only_where_there_are_several(written) -> None:
    out, _ = written
    data = pd.read_csv(out / "diamond" / "progress.csv")
    mfm, vista = data[data["method"] == "mfm"], data[data["method"] == "vista"]
    assert mfm["lo"].notna().any() and vista["lo"].isna().all()
    assert (mfm["lo"].dropna() <= mfm["mean"][mfm["lo"].notna()] + 1e-9).all()
    assert set(mfm["label"]) == {"mfm (mean of 3 seeds)"} and set(vista["label"]) == {"vista (1 run)"}
    text = _svg_text(out / "diamond" / "progress.svg")
    assert "mfm (mean of 3 seeds)" in text and "95% bootstrap interval" in text
    assert "(1 run)" in _svg_text(out / "stone" / "progress.svg")


def test_each_figure_has_its_data_and_a_manifest_that_says_how_it_was_made(written) -> None:
    out, files = written
    for svg in (p for p in files if p.suffix == ".svg"):
        m = json.loads(svg.with_suffix(".json").read_text())
        assert m["data"] == svg.with_suffix(".csv").name and svg.with_suffix(".csv").is_file()
        assert m["command"] == "mfm figures test" and m["caption"]
        assert all(len(r["sha256"]) == 64 for r in m["runs"])
        assert m["package"]["name"] == "mfm" and "commit" in m["package"]
    grid = pd.read_csv(out / "diamond" / "spatial_grid_mfm_s0.csv")
    assert {"cell", "path", "episode end position"} <= set(grid["layer"])


def _latex_parts(tex: str) -> list[list[list[str]]]:
    """Each tabular of a table file: its body rows, each a list of cells without the
    alignment prefix a wrapped cell starts with."""
    parts = []
    for part in tex.split(r"\begin{tabular}")[1:]:
        body = part[part.index(r"\midrule") + len(r"\midrule"):part.index(r"\bottomrule")]
        rows = [[re.sub(r"^\\ragged(left|right)\s*", "", c.strip()) for c in re.split(r"(?<!\\)&", row)]
                for row in body.split(r"\tabularnewline") if row.strip()]
        parts.append(rows)
    return parts


def test_latex_tables_parse_and_hold_the_numbers_of_mfm_results(root: Path, written) -> None:
    out, _ = written
    tables = sorted((out / "diamond").glob("table_*.tex"))
    assert {p.stem for p in tables} >= {"table_milestones", "table_retargeting", "table_interaction"}
    sections = {}
    for part in report(root, task="diamond").split("### ")[1:]:
        title, _, body = part.partition("\n")
        sections[title.strip()] = {line.split("|")[1].strip(): line for line in body.splitlines()
                                   if line.startswith("| ")}
    for tex_path in tables:
        tex = tex_path.read_text()
        caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
        md_rows = next(rows for title, rows in sections.items()
                       if caption.startswith(title.replace("%", r"\%").replace("±", r"$\pm$")))
        assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") >= 1
        assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
        csv_rows = len(pd.read_csv(tex_path.with_suffix(".csv")))
        for rows in _latex_parts(tex):
            assert len(rows) == csv_rows, tex_path
            for row in rows:
                numbers = re.findall(r"\d+(?:\.\d+)?", " ".join(row))
                line = next(v for k, v in md_rows.items() if k == row[0])
                md_numbers = iter(re.findall(r"\d+(?:\.\d+)?", line))
                assert all(n in md_numbers for n in numbers), (tex_path.name, row)  # in order


def test_html_page_shows_every_figure(written) -> None:
    out, files = written
    page = (out / "index.html").read_text()
    for svg in (p for p in files if p.suffix == ".svg"):
        assert f"{svg.parent.name}/{svg.name}" in page


def test_width_option_and_nothing_to_show(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["figures", str(root / "stone_mfm_s0"), "--out", str(tmp_path / "f"), "--width", "single"]) == 0
    for p in (tmp_path / "f").rglob("*.json"):
        assert json.loads(p.read_text())["width_pt"] == figures.WIDTHS["single"]
    notes: list[str] = []
    figures.write_figures([REPO / "sample_runs" / "echo"], tmp_path / "e", notes=notes)
    assert (tmp_path / "e" / "echo" / "echo_unlock.svg").is_file()


@pytest.mark.parametrize("page", ["progress", "steps_per_turn"])
def test_pages_draw_one_chart_per_task(monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    keys = ["diamond_mfm_s2", "diamond_vista_s2_2500steps", "echo/ical_s5", "echo/passive_s5"]
    at = open_app(page, runs=",".join(keys), run=keys[0])
    assert not at.exception
    drawn = [{m for t in tables if "mean" in t.columns for m in t["method"]} for tables in vega_data(at)]
    tasks = {k: _run_json(str(REPO / "sample_runs" / k))["task"] for k in keys}
    assert len(drawn) == len(set(tasks.values())) == 2 and not at.get("plotly_chart")
    for methods in drawn:
        assert methods and len({tasks[k] for k in keys
                                if _run_json(str(REPO / "sample_runs" / k))["method"] in methods}) == 1


def test_a_figure_with_nothing_to_draw_says_so_rather_than_fitting_forever(tmp_path: Path) -> None:
    """Vega lays out a chart without data at an infinite size; saving it is refused with a reason."""
    with pytest.raises(ValueError, match="any data to draw"):
        figures.save(figures.progress_figure([]), tmp_path, "single")
    assert list(tmp_path.iterdir()) == []


def test_two_methods_on_the_same_values_both_stay_visible(tmp_path: Path) -> None:
    """Two methods whose runs reached the same milestones at the same steps draw one path twice:
    the later path is narrower than the earlier, so the earlier colour shows on both sides of it."""
    for method in ("mfm", "vista"):
        write_run(tmp_path / method, episodes=12, seed=0)
        _patch_manifest(tmp_path / method, task="diamond", method=method, seed=0)
    runs = [(m, open_run(tmp_path / m)) for m in ("mfm", "vista")]
    svg = ET.fromstring(figures.render(figures.progress_figure(runs, "single"), "svg"))
    lines = [(p.get("d"), p.get("stroke"), float(p.get("stroke-width", 1))) for p in svg.iter("{http://www.w3.org/2000/svg}path")
             if p.get("aria-roledescription") == "line mark"]
    shared = [(a, b) for i, a in enumerate(lines) for b in lines[i + 1:] if a[0] == b[0] and a[1] != b[1]]
    assert shared, lines
    for (_, _, first), (_, _, later) in shared:
        assert later < first
