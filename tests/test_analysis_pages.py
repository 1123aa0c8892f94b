"""The analysis pages (retargeting, steps per turn, memory, progress) on hand-built runs whose
answers are known by construction, computed directly and through Streamlit's AppTest."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import manifest, open_app, svg_images, svg_labels, use_root
from loaders import analysis_pages as ap
from loaders import chart_data
from loaders.run import open_run
from mfm.memory import RunWriter
from mfm.schema import MilestoneRow, StepRow, TurnRow


# (end position, turn calls, targets) of each turn; every turn runs one 5-step episode.
# Turn 2 inspects A (ends at 10,10) and retargets 2 cells from it: near.
# Turn 3 inspects B (ends at 40,40) and retargets 30 cells from it: far.
# Turn 4 inspects A but its target is in the plan: no retarget.
# Turn 5 inspects nothing and retargets; turns 0 and 1 name no target.
A, B = "ep_000001", "ep_000002"
TURNS = [
    ((10, 10), [], []),
    ((40, 40), [], []),
    ((12, 10), [{"tool": "search", "args": {"near": [10, 10]}, "result": {"ids": [A, B]}},
                {"tool": "inspect", "args": {"episode": A, "frames": 2}, "result": {"found": []}}],
     [{"kind": "go_to", "x": 12, "y": 10, "in_plan": False}]),
    ((10, 40), [{"tool": "inspect", "args": {"episode": B, "frames": 1}, "result": {"found": []}}],
     [{"kind": "go_to", "x": 10, "y": 40, "in_plan": False}]),
    ((10, 10), [{"tool": "inspect", "args": {"episode": A, "frames": 1}, "result": {"found": []}}],
     [{"kind": "go_to", "x": 10, "y": 10, "in_plan": True}]),
    ((20, 20), [], [{"kind": "look_at", "x": 20, "y": 20, "in_plan": False}]),
]


def write_retarget_run(run_dir: Path, method: str = "mfm", seed: int = 0, spe: int = 5) -> Path:
    """A run with the turns of :data:`TURNS`, a memory file edited three times, two milestones."""
    w = RunWriter(run_dir, manifest(method=method, seed=seed, milestone_order=("collect_wood", "place_table")))
    frame = np.zeros((64, 64, 3), dtype=np.uint8)
    rec = w.begin_episode(kind="initial", life=0, turn=None, action_kind=None, first_step=0, action={})
    w.end_episode(rec, observation=frame, state={}, outcome={}, summary="initial", tags=[], events=[], x=0, y=0,
                  outcome_label=None)
    step = 0
    for i, ((x, y), calls, targets) in enumerate(TURNS):
        rec = w.begin_episode(kind="episode", life=0, turn=i, action_kind="go_to", first_step=step, action={})
        first = step
        for _ in range(spe):
            step += 1
            rec.add_step(frame + i, StepRow(step=step, life=0, episode=rec.id, action="noop", x=x, y=y, facing=(1, 0),
                                            health=9, food=9, drink=9, energy=9, inventory={}, reward=0.0))
        row = w.end_episode(rec, observation=frame + i, state={}, outcome={}, summary=f"turn {i}", tags=[],
                            events=[], x=x, y=y, outcome_label="done")
        w.record_turn(TurnRow(turn=i, life=0, first_step=first, last_step=step, policy="test", calls=tuple(calls),
                              targets=tuple(targets), plan_before=({"x": 1, "y": 2, "label": "old"},),
                              plan_after=({"x": x, "y": y, "label": "new"},), episodes=(row.id,)))
        if i == 1:
            w.record_milestone(MilestoneRow(name="collect_wood", step=step, life=0, episode=row.id, turn=i))
        if i == 4:
            w.record_milestone(MilestoneRow(name="place_table", step=step, life=0, episode=row.id, turn=i))
    for s, text in ((5, "# Guide\n- wood at A\n"), (15, "# Guide\n- wood at A\n- coal at C\n"),
                    (25, "# Guide\n- coal at C\n<script>alert(1)</script>\n")):
        w.memory.write("GUIDE.md", text, author="consolidation", reason=f"write at {s}", sources=[A], step=s)
    w.memory.write("procedures/chop.json", '{"steps": ["go_to tree", "do"]}\n', author="agent", reason="new",
                   sources=[B], step=12)
    w.close("finished", "budget")
    return run_dir


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("analysis")
    write_retarget_run(base / "mfm_s0", "mfm", 0, spe=5)
    write_retarget_run(base / "mfm_s1", "mfm", 1, spe=5)
    write_retarget_run(base / "vista_s0", "vista", 0, spe=3)
    write_retarget_run(base / "pro_s0", "pro-long", 0, spe=2)
    return base


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    use_root(monkeypatch, root)


app = open_app


ALL = "mfm_s0,mfm_s1,vista_s0,pro_s0"


def table_with(at: AppTest, column: str):
    """The first table shown on the page that has ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_retargeting_numbers_known_by_construction(root: Path) -> None:
    per_run, per_method = ap.retarget_tables([("a", open_run(root / "mfm_s0"))])
    r = per_run.iloc[0]
    assert (r.inspect_turns, r.inspect_retargets, r.other_turns, r.other_retargets) == (3, 2, 3, 1)
    assert r.inspect_rate == pytest.approx(2 / 3) and r.other_rate == pytest.approx(1 / 3)
    assert (r.new_targets, r.near) == (2, 1) and r.near_rate == pytest.approx(0.5)
    # The initial record is not an episode. Turn 2: 2 earlier episodes (A, B), only A within 8
    # cells, k=1 -> 1/2. Turn 3: 3 earlier episodes, none within 8 cells of (10, 40) -> 0.
    assert r.null_rate == pytest.approx((1 / 2 + 0) / 2)
    _, pooled = ap.retarget_tables([("a", open_run(root / "mfm_s0")), ("b", open_run(root / "mfm_s1")),
                                    ("c", open_run(root / "vista_s0"))])
    mfm = pooled[pooled["method"] == "mfm"].iloc[0]
    assert (mfm.runs, mfm.inspect_turns, mfm.inspect_retargets, mfm.near, mfm.new_targets) == (2, 6, 4, 2, 4)
    assert list(pooled["method"]) == ["vista", "mfm"]


def test_retarget_turns_and_audit(root: Path) -> None:
    run = open_run(root / "mfm_s0")
    table = ap.retarget_turns(run)
    assert list(table["turn"]) == [2, 3, 5]
    assert list(table["near"]) == ["1/1", "0/1", ""]
    assert list(table["inspected"]) == [A, B, ""]
    audit = ap.retarget_audit(run, 2)
    assert audit.position == (40.0, 40.0)
    assert audit.searches[0]["returned"] == [A, B]
    assert [i["episode"] for i in audit.inspections] == [A]
    assert audit.targets[0]["near"] is True and audit.targets[0]["nearest"] == 2.0
    assert ap.retarget_audit(run, 99) is None


def test_retargeting_page(root: Path) -> None:
    at = app("retargeting", runs=ALL, run="mfm_s0")
    methods = table_with(at, "runs")
    assert list(methods["method"]) == ["pro-long", "vista", "mfm"]
    mfm = methods[methods["method"] == "mfm"].iloc[0]
    assert (mfm["inspect_turns"], mfm["inspect_retargets"], mfm["near"], mfm["new_targets"]) == (6, 4, 2, 4)
    assert at.query_params["turn"] == "2"
    assert list(table_with(at, "nearest")["turn"]) == [2, 3]
    assert table_with(at, "in_plan")["near"].tolist() == [True]
    rates, where = svg_images(at)
    assert not at.get("vega_lite_chart") and not at.get("plotly_chart"), "both charts are drawn in the server"
    assert {"retarget | inspect", "mfm", "vista"} <= {v for label in svg_labels(rates) for part in label.split("; ")
                                                       for v in part.split(": ")[1:]}
    assert "X-axis titled 'x (cells)'" in " ".join(svg_labels(where))
    at.selectbox(key="w_rt_turn").set_value(3).run()
    assert not at.exception
    assert at.query_params["turn"] == "3"
    assert table_with(at, "in_plan")["near"].tolist() == [False]


def test_retargeting_page_deep_link_and_bad_turn(root: Path) -> None:
    at = app("retargeting", runs="mfm_s0", run="mfm_s0", turn="5")
    assert at.selectbox(key="w_rt_turn").value == 5
    at = app("retargeting", runs="mfm_s0", run="mfm_s0", turn="77")
    assert any("not a retarget turn" in w.value for w in at.warning)
    assert at.query_params["turn"] == "2"


def test_steps_per_turn_bands_and_shading(root: Path) -> None:
    runs = {k: open_run(root / k) for k in ALL.split(",")}
    spt = ap.steps_per_turn(runs["mfm_s0"], window=3)
    assert list(spt["steps"]) == [5.0] * len(TURNS) and list(spt["median"]) == [5.0] * len(TURNS)
    bands = chart_data.seed_bands([(ap.method_of(r), ap.seed_of(r), ap.steps_per_turn(r, 3)) for r in runs.values()],
                          "median")
    mfm = bands[(bands["method"] == "mfm") & bands["mean"].notna()]
    assert set(mfm["seeds"]) == {2} and set(mfm["mean"]) == {5.0}
    assert set(bands.loc[(bands["method"] == "vista") & bands["mean"].notna(), "mean"]) == {3.0}
    shade = chart_data.exceed_intervals(bands)
    assert len(shade) == 1 and shade[0][0] == int(mfm["step"].min())
    assert chart_data.exceed_intervals(bands[bands["method"] != "vista"]) == []


def test_steps_per_turn_page(root: Path) -> None:
    at = app("steps_per_turn", runs=ALL, run="mfm_s0")
    pooled = table_with(at, "steps_per_turn").set_index("method")
    assert pooled.loc["mfm", "steps_per_turn"] == pytest.approx(5.0)
    assert pooled.loc["pro-long", "steps_per_turn"] == pytest.approx(2.0)
    assert any("exceeds both in 1 interval" in c.value for c in at.caption)
    at.select_slider(key="w_window").set_value(50).run()
    assert not at.exception
    assert at.query_params["window"] == "50"
    at = app("steps_per_turn", runs="mfm_s0", window="10")
    assert at.select_slider(key="w_window").value == 10
    assert any("Shading needs" in c.value for c in at.caption)


def test_memory_provenance_and_diff(root: Path) -> None:
    run = open_run(root / "mfm_s0")
    assert ap.memory_paths(run) == ["mine/GUIDE.md", "mine/procedures/chop.json"]
    assert ap.memory_steps(run, "mine/GUIDE.md") == [5, 15, 25]
    prov = ap.memory_provenance(run, "mine/GUIDE.md", 15)
    assert list(prov["text"]) == ["# Guide", "- wood at A", "- coal at C"]
    assert list(prov["step"]) == [5, 5, 15]
    assert list(prov["removed_at"].astype(object).where(prov["removed_at"].notna(), None)) == [None, 25, None]
    assert set(prov["sources"]) == {A}
    assert ap.memory_provenance(run, "mine/GUIDE.md", 25)["removed_at"].isna().all()
    diff = ap.memory_diff(run, "mine/GUIDE.md", 5, 15)
    assert "+- coal at C" in diff and "-- wood at A" not in diff
    assert "-- wood at A" in ap.memory_diff(run, "mine/GUIDE.md", 15, 25)


def test_memory_page_renders_without_html(root: Path) -> None:
    at = app("memory", runs="mfm_s0", run="mfm_s0")
    assert at.query_params["file"] == "mine/GUIDE.md"
    assert at.slider(key="w_mem_asof").value == 30
    shown = [m for m in at.markdown if "<script>" in m.value]
    assert shown and all(not m.allow_html for m in shown)
    assert list(table_with(at, "removed_at")["text"]) == ["# Guide", "- coal at C", "<script>alert(1)</script>"]
    at.slider(key="w_mem_asof").set_value(15).run()
    assert not at.exception and at.query_params["asof"] == "15"
    prov = table_with(at, "removed_at")
    assert prov.loc[prov["text"] == "- wood at A", "removed_at"].iloc[0] == "25"
    diff = table_with(at, "change")
    assert list(diff.loc[diff["change"] == "added", "text"]) == ["- coal at C"]


def test_memory_page_procedure_is_text(root: Path) -> None:
    at = app("memory", runs="mfm_s0", run="mfm_s0", file="mine/procedures/chop.json", asof="20")
    assert any(c.language == "json" and '"go_to tree"' in c.value for c in at.code)
    at = app("memory", runs="mfm_s0", run="mfm_s0", file="../../etc/passwd")
    assert any("never written" in w.value for w in at.warning)


def test_progress_curve_and_bands(root: Path) -> None:
    curve = ap.milestone_curve(open_run(root / "mfm_s0"))
    assert list(curve.itertuples(index=False, name=None)) == [(0, 0), (10, 1), (25, 2), (30, 2)]
    runs = [open_run(root / k) for k in ("mfm_s0", "mfm_s1", "vista_s0")]
    bands = chart_data.seed_bands([(ap.method_of(r), ap.seed_of(r), ap.milestone_curve(r)) for r in runs], "milestones",
                          hold=True)
    at = bands.set_index(["method", "step"])["mean"]
    assert at[("mfm", 12)] == 1 and at[("vista", 12)] == 1 and at[("vista", 16)] == 2 and at[("vista", 30)] == 2


def test_progress_page(root: Path) -> None:
    at = app("progress", runs=ALL, run="mfm_s0")
    table = table_with(at, "per seed").set_index("method")
    assert table.loc["mfm", "milestones"] == "2.0 ± 0.0 of 2" and table.loc["mfm", "seeds"] == 2
    assert table.loc["vista", "milestones"] == "2.0 of 2 (single run)"
    reach = table_with(at, "over_1000").set_index(["method", "tool"])
    # per run: search returned A (age 5) and B (0); inspections opened A (5), B (5), A (15)
    assert reach.loc[("mfm", "search"), "episodes"] == 4 and reach.loc[("mfm", "search"), "median"] == 2.5
    assert reach.loc[("mfm", "inspect"), "median"] == 5 and reach.loc[("mfm", "inspect"), "max"] == 15
    assert at.get("vega_lite_chart") and not at.get("plotly_chart")


def test_write_figures_files_are_valid(root: Path, tmp_path: Path) -> None:
    import json
    import xml.etree.ElementTree as ET

    from PIL import Image

    from dashboard import figures

    written = figures.write_figures([root], tmp_path / "figs", window=3)
    out = tmp_path / "figs" / "diamond"
    names = {p.name for p in written}
    for stem in ("steps_per_turn", "retargeting", "progress", "timeline_mfm_s0", "spatial_grid_vista_s0",
                 "provenance_mfm_s0"):
        assert {f"{stem}.{x}" for x in ("svg", "pdf", "png", "json")} <= names
    for p in written:
        if p.suffix == ".svg":
            assert ET.parse(p).getroot().tag.endswith("svg")
        elif p.suffix == ".pdf":
            assert p.read_bytes().startswith(b"%PDF")
        elif p.suffix == ".png":
            with Image.open(p) as im:
                im.verify()
                assert im.format == "PNG"
    m = json.loads((out / "steps_per_turn.json").read_text())
    assert {r["key"] for r in m["runs"]} == set(ALL.split(","))
    assert all(len(r["sha256"]) == 64 for r in m["runs"]) and m["filters"] == {"window": 3}
    assert m["steps"] == [0, 30] and m["package"]["name"] == "mfm" and m["width_pt"] == figures.WIDTHS["double"]
    assert m["deep_link"].startswith("/steps_per_turn?runs=") and "window=3" in m["deep_link"]
    again = json.loads((out / "timeline_mfm_s0.json").read_text())["runs"][0]["sha256"]
    assert again == figures.content_hash(open_run(root / "mfm_s0"))
    with pytest.raises(ValueError):
        figures.write_figures([tmp_path / "empty"], out)


def test_figure_downloads_on_pages(root: Path) -> None:
    at = app("steps_per_turn", runs=ALL, run="mfm_s0")
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Figure SVG", "Figure PDF", "Figure PNG", "Manifest JSON"]


def test_sql_page_reads_and_refuses_files(root: Path, tmp_path: Path) -> None:
    at = app("sql", runs="mfm_s0", run="mfm_s0", q="SELECT count(*) AS n FROM turns")
    assert table_with(at, "n")["n"].tolist() == [len(TURNS)]
    target = tmp_path / "leak.csv"
    at.text_area(key="w_sql").set_value(f"COPY turns TO '{target}'").run()
    assert not at.exception and at.error and not target.exists()
    assert at.query_params["q"] == f"COPY turns TO '{target}'"
    at.text_area(key="w_sql").set_value("SELECT * FROM read_csv('/etc/passwd')").run()
    assert at.error and not any("root:" in d.value.to_string() for d in at.dataframe)


def test_mfm_figures_command_writes_files(tmp_path):
    from conftest import write_run
    from mfm.cli import main

    write_run(tmp_path / "runs" / "r", episodes=4)
    assert main(["figures", str(tmp_path / "runs"), "--out", str(tmp_path / "figs")]) == 0
    assert list((tmp_path / "figs").rglob("*.svg")) and list((tmp_path / "figs").rglob("*.pdf"))
    assert main(["figures", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2


def _sample_turn_at(step: int) -> dict:
    import json

    from conftest import REPO

    turns = [json.loads(x) for x in (REPO / "sample_runs/diamond_mfm_s2/turns.jsonl").read_text().splitlines()]
    return next(t for t in turns if t["first_step"] < step <= t["last_step"])


def test_memory_page_shows_the_plan_being_followed_and_diffs_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import REPO

    use_root(monkeypatch, REPO / "sample_runs")
    turn = _sample_turn_at(410)
    at = open_app("memory", runs="diamond_mfm_s2", run="diamond_mfm_s2", file="mine/working.md", asof="410")
    at.toggle(key="w_mem_raw").set_value(True).run()
    shown = next(c.value for c in at.code if c.language == "markdown")
    want = [f"{i}. ({p['x']}, {p['y']}) {p['label']}" for i, p in enumerate(turn["plan_after"], 1)]
    assert [ln for ln in shown.splitlines() if ln[:1].isdigit()] == want
    diffs = [d.value for d in at.dataframe if "change" in d.value.columns]
    assert len(diffs) == 1 and (diffs[0]["change"] == "added").any()
    assert not any("No change" in c.value for c in at.caption)


def test_runs_table_has_no_dead_checkboxes_and_no_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from conftest import REPO

    use_root(monkeypatch, REPO / "sample_runs")
    at = open_app()
    table = at.dataframe[0].value.set_index("key")
    assert "open" not in table.columns and "budget" not in table.columns
    for key in table.index:
        m = json.loads((REPO / "sample_runs" / key / "run.json").read_text())
        assert table.loc[key, "steps"] == f"{m['last_step']:,} / {m['step_budget']:,}"
        assert table.loc[key, "seed"] == str(m["seed"])
    assert not table.astype(str).isin(["None", "nan", "<NA>"]).any().any()


def test_memory_page_shows_an_unreplayable_history_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from conftest import shared_export

    g4 = shared_export().parent / "g4_excerpt"
    if not (g4 / "data.json").is_file():
        pytest.skip(f"no MFM export excerpt at {g4}")
    hist = json.loads((g4 / "data.json").read_text())["mine"]["history"]["mine/working.md"]
    first, last = min(e["step"] for e in hist), max(e["step"] for e in hist)
    use_root(monkeypatch, g4.parent)
    at = open_app("memory", runs="g4_excerpt", run="g4_excerpt", file="mine/working.md", asof=str((first + last) // 2))
    assert any("**unknown**" in c.value and f"from step {last}" in c.value for c in at.caption)
    assert any("Content unknown" in i.value for i in at.info)
    at = open_app("memory", runs="g4_excerpt", run="g4_excerpt", file="mine/working.md", asof=str(last))
    assert any("version 1 of 1" in c.value for c in at.caption)
