"""The notebooks of notebooks/ (issue 20): stored without outputs, and executed top to bottom by
a real Jupyter kernel (nbclient + ipykernel, slow), with checks on what their key cells (tagged)
show: tables with the expected columns and rows, frame images of the right size and pixels, the
figures, and the files exported at print size. Expectations come from the run files read here."""
from __future__ import annotations

import base64
import io
import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from loaders import paper_size
from raw import Page, decode, jsonl, shrink, stored_frame

NOTEBOOKS = REPO / "notebooks"
NAMES = ["01_why_did_it_retarget.ipynb", "02_why_did_mining_fail.ipynb", "03_paper_tables_and_figures.ipynb"]
SAMPLES = REPO / "sample_runs"
MFM = SAMPLES / "reach-1000_mfm_s0"
"""The run notebook 1 follows: a temporal-reach run whose retarget came from old frames."""
RUNS = sorted(p for p in SAMPLES.iterdir() if (p / "run.json").is_file())
"""Every sample run (what notebook 2 reads)."""
DIAMOND = [p for p in RUNS if json.loads((p / "run.json").read_text())["task"] == "diamond"]
"""The sample runs of the diamond task (what notebook 3 compares)."""


def test_the_three_notebooks_are_there():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebooks_have_no_outputs(name):
    """Diffs stay readable: no outputs, no execution counts, no widget state in the stored files."""
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code
    for c in code:
        assert c.get("outputs") == [] and c.get("execution_count") is None, c["source"][:80]
    assert "widgets" not in nb.get("metadata", {})


# --- executed ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    """A function executing one notebook top to bottom in a fresh python3 kernel (from
    notebooks/, figures exported to a temporary folder), once: name -> (notebook, figures folder).
    A cell that raises fails the test of its notebook with the kernel's traceback."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    done: dict = {}

    def run(name: str):
        if name not in done:
            figures = tmp_path_factory.mktemp("figures")
            nb = nbformat.read(NOTEBOOKS / name, as_version=4)
            old = os.environ.get("MFM_FIGURES_OUT")
            os.environ["MFM_FIGURES_OUT"] = str(figures)
            try:
                NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
                done[name] = (nb, figures, None)
            except CellExecutionError as e:
                done[name] = (nb, figures, str(e))
            finally:
                if old is None:
                    os.environ.pop("MFM_FIGURES_OUT", None)
                else:
                    os.environ["MFM_FIGURES_OUT"] = old
        nb, figures, error = done[name]
        if error:
            pytest.fail(f"{name}: a cell failed:\n{error}", pytrace=False)
        for c in nb.cells:
            if c.cell_type == "code":
                assert c.execution_count is not None, (name, c.source[:60])
        return nb, figures

    return run


def outputs(nb, tag: str) -> list[dict]:
    """The outputs of the one cell tagged ``tag``."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, tag
    return cells[0]["outputs"]


def html_of(nb, tag: str) -> str:
    found = [o["data"]["text/html"] for o in outputs(nb, tag) if "text/html" in o.get("data", {})]
    assert found, f"{tag}: no HTML output"
    return found[-1]


def png_of(nb, tag: str) -> np.ndarray:
    found = [o["data"]["image/png"] for o in outputs(nb, tag) if "image/png" in o.get("data", {})]
    assert found, f"{tag}: no PNG output"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(found[-1]))))


def frame_table(html: str) -> list[list[str]]:
    """The rows of a pandas/DuckDB HTML table: header cells first (index column dropped)."""
    rows = Page(html).tables[0]
    head = [c.split("\n")[0] for c in rows[0]]
    if head and head[0] == "":
        return [head[1:]] + [r[1:] for r in rows[1:] if r]
    return [head] + [r for r in rows[1:] if r]


slow = pytest.mark.slow


def notebook_turn() -> int:
    """The turn notebook 1 shows (``TURN = ...`` in its ``turn-view`` cell)."""
    nb = json.loads((NOTEBOOKS / NAMES[0]).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if "turn-view" in c.get("metadata", {}).get("tags", []))
    return int(re.search(r"^TURN = (\d+)$", "".join(cell["source"]), re.M).group(1))


@slow
def test_retarget_notebook(executed):
    """Notebook 1: the retargeting turns that inspected frames (as counted here from
    turns.jsonl and index.jsonl), the whole turn with its search results and a frame of the
    right size, the inspected episode's frames pixel-exact, a map figure, the scrubber."""
    nb, _ = executed(NAMES[0])
    index = {r["id"]: r for r in jsonl(MFM / "index.jsonl")}
    turns = jsonl(MFM / "turns.jsonl")

    def inspecting(t: dict) -> bool:
        looked = [c["args"].get("episode") for c in t["calls"] if c["tool"] == "inspect"]
        return any(e in index and index[e].get("x") is not None for e in looked)

    expect = [t["turn"] for t in turns if any(not g.get("in_plan") for g in t["targets"]) and inspecting(t)]
    table = frame_table(html_of(nb, "retarget-turns"))
    assert table[0] == ["turn", "life", "step", "inspected", "targets", "near", "nearest"]
    assert [int(r[0]) for r in table[1:]] == expect

    shown = notebook_turn()
    turn = next(t for t in turns if t["turn"] == shown)
    html = html_of(nb, "turn-view")
    returned = [i for c in turn["calls"] if c["tool"] == "search" for i in c["result"]["ids"]]
    assert returned and all(i in html for i in returned)
    first = Page(html).images[0]
    assert np.array_equal(shrink(decode(first["src"]), 2), stored_frame(MFM, turn["first_step"]))

    strip = Page(html_of(nb, "inspected-episode")).images
    assert strip
    for im in strip:
        frame = stored_frame(MFM, int(im["title"].split()[-1]))
        assert decode(im["src"]).shape[:2] == (frame.shape[0] * 3, frame.shape[1] * 3)
        assert np.array_equal(shrink(decode(im["src"]), 3), frame)

    writes = frame_table(html_of(nb, "writes"))
    assert writes[0] == ["seq", "step", "path", "author", "reason"]
    assert [int(r[0]) for r in writes[1:]] == [w["seq"] for w in jsonl(MFM / "memory_writes.jsonl")
                                               if w["turn"] == shown]
    plan = html_of(nb, "memory-file")
    assert all(f"{k}. ({p['x']}, {p['y']}) {p['label']}" in plan for k, p in enumerate(turn["plan_after"], 1))
    chart = png_of(nb, "turn-map")
    assert chart.shape[0] > 100 and chart.shape[1] > 100
    nxt = frame_table(html_of(nb, "next-episodes"))
    last = max((r for r in index.values() if r["first_step"] >= turn["first_step"]),
               key=lambda r: (r["first_step"], r["id"]))
    assert nxt[0][:2] == ["id", "action_kind"] and nxt[-1][0] == last["id"]
    data = outputs(nb, "scrubber")[-1]["data"]
    assert "application/vnd.jupyter.widget-view+json" in data
    still = Page(data["text/html"]).images[0]
    assert np.array_equal(shrink(decode(still["src"]), 4), stored_frame(MFM, turn["first_step"] + 1))


@slow
def test_mining_notebook(executed):
    """Notebook 2: every failed or interrupted collect of every sample run, the deaths during a
    collect (from lives.jsonl and index.jsonl), the episode's frames pixel-exact, its step
    trace, before/after frames and the grid figure."""
    nb, _ = executed(NAMES[1])
    bad, deaths = 0, []
    for run in RUNS:
        index = {r["id"]: r for r in jsonl(run / "index.jsonl")}
        bad += sum(r.get("action_kind") == "collect" and r.get("outcome") != "done" for r in index.values())
        lives = jsonl(run / "lives.jsonl") if (run / "lives.jsonl").is_file() else []
        deaths += [(run.name, d["step"], d["episode"]) for d in lives
                   if d["event"] == "death" and index.get(d.get("episode"), {}).get("action_kind") == "collect"]
    html = html_of(nb, "failed-collects")
    rows = frame_table(html)
    assert rows[0] == ["run", "id", "life", "first_step", "last_step", "outcome", "summary", "why"]
    if "rows × " in html:  # pandas shows a long table cut, with its size under it
        assert f"{bad} rows × 8 columns" in html
    else:
        assert len(rows) - 1 == bad
    table = frame_table(html_of(nb, "deaths-while-mining"))
    assert table[0] == ["run", "life", "step", "cause", "episode", "x", "y", "summary"]
    assert sorted((r[0], int(r[2]), r[4]) for r in table[1:]) == sorted(deaths)

    run_name, step, ep = table[1][0], int(table[1][2]), table[1][4]
    run_dir = SAMPLES / run_name
    row = next(r for r in jsonl(run_dir / "index.jsonl") if r["id"] == ep)
    images = Page(html_of(nb, "episode-strip")).images
    assert len(images) == min(16, row["frames"])
    for im in images:
        frame = stored_frame(run_dir, int(im["title"].split()[-1]))
        assert np.array_equal(shrink(decode(im["src"]), 3), frame)
    trace = frame_table(html_of(nb, "step-trace"))
    assert trace[0][:4] == ["step", "action", "x", "y"] and int(trace[-1][0]) == step
    assert [int(r[0]) for r in trace[1:]] == [s["step"] for s in jsonl(run_dir / "steps.jsonl") if s["episode"] == ep]
    before, after, wipe = (decode(i["src"]) for i in Page(html_of(nb, "before-after")).images)
    assert np.array_equal(shrink(after, 3), stored_frame(run_dir, row["last_step"]))
    assert before.shape == after.shape == wipe.shape == (192, 192, 3)
    assert png_of(nb, "grid-figure").shape[0] > 100


@slow
def test_paper_notebook(executed):
    """Notebook 3: the milestones per method (as run.json counts them), the A.4, interaction
    and reach tables with their columns, three figures shown, and each exported as SVG, PDF
    and PNG at its column width with a manifest naming the four runs."""
    nb, figures = executed(NAMES[2])
    manifests = [json.loads((d / "run.json").read_text()) for d in DIAMOND]
    table = frame_table(html_of(nb, "milestones-table"))
    assert table[0] == ["method", "seeds", "milestones", "per seed"]
    reached: dict[str, list[int]] = {}
    for m in manifests:
        reached.setdefault(m["method"], []).append(sum(n in m["milestones"] for n in m["milestone_order"]))
    got = {method: sum(v) / len(v) for method, v in reached.items()}  # the mean over a method's seeds
    assert {r[0]: float(r[2].split()[0]) for r in table[1:]} == pytest.approx(got, abs=0.05)
    assert {r[0]: int(r[1]) for r in table[1:]} == {method: len(v) for method, v in reached.items()}
    rt = frame_table(html_of(nb, "retarget-table"))
    assert rt[0][:6] == ["method", "runs", "inspect_turns", "inspect_retargets", "inspect_rate", "other_turns"]
    assert {r[0] for r in rt[1:]} == set(got)
    inter = frame_table(html_of(nb, "interaction-table"))
    assert inter[0][:4] == ["method", "steps", "turns", "steps_per_turn"]
    steps: dict[str, int] = {}
    for m in manifests:  # pooled over a method's seeds
        steps[m["method"]] = steps.get(m["method"], 0) + m["last_step"]
    assert {r[0]: int(r[1]) for r in inter[1:]} == steps
    reach = frame_table(html_of(nb, "reach-table"))
    assert reach[0] == ["method", "tool", "episodes", "median", "p90", "max", "over_1000"]
    for tag in ("progress-figure", "retarget-figure", "steps-per-turn-figure"):
        assert png_of(nb, tag).shape[1] > 200, tag
    shown = [o["data"] for o in outputs(nb, "progress-interactive") if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert shown, "the interactive chart of the same data is shown"
    plotly = [d["application/vnd.plotly.v1+json"] for d in shown]
    still = np.asarray(Image.open(io.BytesIO(base64.b64decode(shown[0]["image/png"]))))
    assert still.shape[1] > 200 and len(np.unique(still.reshape(-1, still.shape[-1]), axis=0)) > 4, \
        "a still image of the same chart beside it, for viewers without Plotly"
    lines = {t["name"].split(" (")[0] for t in plotly[0]["data"] if t.get("mode") == "lines"}
    assert lines == {m["method"] for m in manifests}
    widths = {"progress": "double", "retargeting": "single", "steps_per_turn": "double"}
    for stem, width in widths.items():
        for ext in ("svg", "pdf", "png"):
            assert (figures / f"{stem}.{ext}").stat().st_size > 1000, (stem, ext)
        m = json.loads((figures / f"{stem}.json").read_text())
        assert m["width"] == width and m["width_pt"] == pytest.approx(paper_size.WIDTHS[width], abs=0.01)
        assert sorted(r["key"] for r in m["runs"]) == [d.name for d in DIAMOND]
    assert (figures / "progress.pdf").read_bytes().startswith(b"%PDF")
    shown = png_of(nb, "exported-png")
    exported = np.asarray(Image.open(figures / "progress.png"))
    assert shown.shape == exported.shape
