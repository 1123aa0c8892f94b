"""Every dashboard page through Streamlit's AppTest, on a root of generated runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, components, grid_map, grid_marks, open_app, texts, use_root, vega_tables, write_run
from dash_data import CRAFTER, DAMAGED, NESTED, SYNTHETIC, make_root
from loaders.run import open_run
from loaders.agent_calls import inspections



@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("runs"), crafter_steps=240)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    use_root(monkeypatch, root)


app = open_app


def test_runs_page_lists_every_run(root: Path) -> None:
    at = app()
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    assert set(table["key"]) == {CRAFTER, NESTED, SYNTHETIC, DAMAGED}
    assert {"task", "method", "ablations", "seed", "steps", "lives", "milestones", "status", "problems"} <= set(
        table.columns)
    assert table.loc[table["key"] == CRAFTER, "milestones"].iloc[0].endswith("/10")
    labels = [e.label for e in at.expander]
    assert any(DAMAGED in label and "problem" in label for label in labels)
    damaged = [e for e in at.expander if DAMAGED in e.label][0]
    where = damaged.dataframe[0].value["where"].tolist()
    assert any(w.startswith("index.jsonl:") for w in where) and any(w.startswith("steps.jsonl:") for w in where)


def test_milestones_are_compared_within_one_task(monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(monkeypatch, REPO / "sample_runs")
    at = app()
    radio = next(r for r in at.radio if r.label == "Task")
    tasks = {json.loads(m.read_text())["task"] for m in (REPO / "sample_runs").rglob("run.json")}
    assert list(radio.options) == sorted(tasks) and {"diamond", "echo", "reach-1000"} <= tasks

    def charted() -> set[str]:
        reached = next(t for t in vega_tables(at) if "reached" in t.columns)
        return set(reached["run"])

    assert charted() and all(k.startswith("diamond_") for k in charted())
    radio.set_value("echo").run()
    assert charted() == {"echo/ical_s5", "echo/passive_s5"}


def test_opening_runs_goes_into_the_url(root: Path) -> None:
    at = app()
    at.multiselect(key="w_runs").set_value([CRAFTER, NESTED]).run()
    assert not at.exception
    assert at.query_params["runs"] == f"{CRAFTER},{NESTED}"
    assert at.query_params["run"] == CRAFTER
    assert at.selectbox(key="w_focus").value == CRAFTER
    assert len(at.get("vega_lite_chart")) == 2


def test_escaping_run_paths_are_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    write_run(outside, episodes=2)
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    try:
        at = app(runs=f"../{root.name}/{CRAFTER},/etc,link_out,{SYNTHETIC}")
    finally:
        (root / "link_out").unlink()
    errors = [e.value for e in at.error]
    assert len(errors) == 3, errors
    assert all("Refused run path" in e for e in errors)
    assert any("'..'" in e and "are refused" in e for e in errors) and any("outside" in e for e in errors)
    assert at.selectbox(key="w_focus").options == [SYNTHETIC]


@pytest.mark.parametrize("page", ["timeline", "frames", "grid"])
def test_pages_without_a_run_point_to_the_runs_page(page: str) -> None:
    at = app(page)
    assert "No run is open" in texts(at)


def test_timeline_page(root: Path) -> None:
    at = app("timeline", runs=CRAFTER, ep="ep_000004", step="30")
    assert at.title[0].value == "Timeline"
    assert any(s.value.startswith("ep_000004") for s in at.subheader)
    assert len(components(at, "mfm_timeline_lanes")) == 1
    assert not at.get("vega_lite_chart") and not at.get("plotly_chart")
    assert len(at.json) == 1, "only the open tab of the episode's record is built"
    (scrub,) = components(at, "mfm_frame_scrubber")
    assert scrub["step"] == 30 and scrub["captions"][30 - scrub["first"]][0] == "Step 30"
    assert not at.image, "the frame strip waits in its tab"
    at.selectbox(key="w_ep").set_value("ep_000006").run()
    assert not at.exception
    assert at.query_params["ep"] == "ep_000006"
    first = open_run(root / CRAFTER).episode("ep_000006").first_step
    assert at.query_params["step"] == str(first + 1)
    at.radio(key="w_color").set_value("outcome").run()
    assert at.query_params["color"] == "outcome"
    at.slider(key="w_range").set_value((20, 120)).run()
    assert at.query_params["range"] == "20-120"


def test_timeline_tabs_build_what_is_chosen(root: Path) -> None:
    """The episode's record and its frames sit in lazy tabs: choosing one builds its content
    (read from the episode's files) and drops the one left."""
    at = app("timeline", runs=CRAFTER, ep="ep_000004")
    ep_dir = root / CRAFTER / open_run(root / CRAFTER).episode("ep_000004").path
    assert len(at.json) == 1
    at.session_state["w_detail"] = "outcome.json"
    at.session_state["w_frames_view"] = "Frame strip"
    at.run()
    assert not at.exception
    assert [json.loads(j.value) for j in at.json] == [json.loads((ep_dir / "outcome.json").read_text())]
    assert not components(at, "mfm_frame_scrubber"), "the scrubber is not built while the strip is shown"
    (strip,) = at.image
    frames = open_run(root / CRAFTER).episode("ep_000004").frames
    assert len(strip.value) == min(24, frames) and all(c.startswith("step ") for c in strip.captions)
    at.session_state["w_detail"] = "steps"
    at.run()
    assert not at.json and len(at.dataframe) >= 1


def test_timeline_deep_link_restores_range_and_colour(root: Path) -> None:
    at = app("timeline", runs=CRAFTER, range="10-90", color="outcome")
    assert at.slider(key="w_range").value == (10, 90)
    assert at.radio(key="w_color").value == "outcome"
    assert "Steps 10–90" in texts(at)


def test_timeline_on_a_damaged_run_shows_errors_not_exceptions(root: Path) -> None:
    at = app("timeline", runs=DAMAGED, ep="ep_000002")
    assert any("cannot be shown" in e.value for e in at.error)
    assert any("problem" in e.label for e in at.expander)


def test_frames_page(root: Path) -> None:
    at = app("frames", runs=CRAFTER, frames=f"{CRAFTER}:20,{CRAFTER}:21,{CRAFTER}:ep_000003", tiles="1", diff="1")
    assert at.title[0].value == "Frames"
    assert len(at.get("vega_lite_chart")) == 1 and not at.get("plotly_chart")
    images = [t["url"].iloc[0] for t in vega_tables(at) if "url" in t.columns]
    assert len(images) == 3 + 2, "three frames, and two differences from the first"
    assert at.toggle(key="w_tiles").value and at.toggle(key="w_diff").value
    assert "A/B wipe" in texts(at)
    at.slider(key="w_cols").set_value((2, 5)).run()
    assert at.query_params["region"] == "2,0,5,9"
    at.button(key="rm_0").click().run()
    assert at.query_params["frames"] == f"{CRAFTER}:21,{CRAFTER}:ep_000003"


def test_frames_from_an_inspection(root: Path) -> None:
    ins = inspections(open_run(root / CRAFTER).turns(), open_run(root / CRAFTER).episodes())
    at = app("frames", runs=CRAFTER)
    assert "No frame chosen yet" in texts(at)
    assert not any(b.key == "use_insp" for b in at.button), "the picker's tabs are lazy: only 'By step' is built"
    at.session_state["w_pick"] = "From an inspection"
    at.run()
    at.button(key="use_insp").click().run()
    assert not at.exception
    row = ins.iloc[0]
    assert at.query_params["frames"] == f"{CRAFTER}:{int(row['target_step'])},{CRAFTER}:{int(row['step'])}"
    assert "left is the retrieved frame" in texts(at)


def test_frames_by_place_across_runs(root: Path) -> None:
    at = app("frames", runs=f"{CRAFTER},{NESTED}", cell="32,32")
    assert "frames were taken at (32, 32)" in texts(at)
    at.button(key="place_spread").click().run()
    assert not at.exception
    assert len(at.query_params["frames"].split(",")) >= 2


def test_frames_by_number_when_a_run_has_too_many_episodes_to_list(root: Path, monkeypatch) -> None:
    """Past ``ui.LISTED`` episodes the page asks for the episode's number instead of sending
    every episode as an option; the number picks the index's row of that position."""
    from dashboard import ui

    monkeypatch.setattr(ui, "LISTED", 5)
    rows = [json.loads(line) for line in (root / CRAFTER / "index.jsonl").read_text().splitlines()]
    at = app("frames", runs=CRAFTER)
    at.session_state["w_pick"] = "By episode"
    at.run()
    assert not any(s.key == "w_frames_ep" for s in at.selectbox)
    at.number_input(key="w_frames_ep_no").set_value(7).run()
    assert any(c.value.startswith(rows[7]["id"]) for c in at.caption)
    at.button(key="add_ep").click().run()
    assert at.query_params["frames"] == f"{CRAFTER}:{rows[7]['id']}"


def test_frames_pixel_values_on_hover_only_when_asked(root: Path) -> None:
    """Pixel values (``px=1``) send a hover table per frame: every pixel with its colour;
    the toggle off (the default) sends none and says how to turn it on."""
    frames = f"{CRAFTER}:3,{CRAFTER}:5"
    at = app("frames", runs=CRAFTER, frames=frames)
    assert not [t for t in vega_tables(at) if {"r", "g", "b"} <= set(t.columns)]
    assert "Turn on *Pixel values*" in texts(at)
    at.toggle(key="w_pixels").set_value(True).run()
    assert at.query_params["px"] == "1"
    for deep in (at, app("frames", runs=CRAFTER, frames=frames, px="1")):
        hover = [t for t in vega_tables(deep) if {"r", "g", "b"} <= set(t.columns)]
        assert [len(t) for t in hover] == [64 * 64, 64 * 64], "one hover target per pixel of each frame"
        assert "Hover shows the pixel position and colour" in texts(deep)


def test_frames_refuse_escaping_paths(root: Path) -> None:
    at = app("frames", runs=CRAFTER, frames=f"../{root.name}/{CRAFTER}:3,/etc:1,{CRAFTER}:5")
    errors = [e.value for e in at.error]
    assert sum("Refused frame" in e for e in errors) == 2, errors
    assert len(at.get("vega_lite_chart")) == 1


def test_grid_page(root: Path) -> None:
    run = open_run(root / CRAFTER)
    s = run.steps().iloc[10]
    cell = f"{int(s['x'])},{int(s['y'])}"
    at = app("grid", runs=CRAFTER, cell=cell)
    assert at.title[0].value == "Spatial grid"
    assert len(components(at, "mfm_grid_map")) == 1 and not at.get("vega_lite_chart") and not at.get("plotly_chart")
    picked = [(x, y) for x, y, what in grid_marks(grid_map(at)) if what == "selected cell"]
    assert picked == [(int(s["x"]), int(s["y"]))]
    assert f"({cell.replace(',', ', ')})" in texts(at)
    assert at.number_input(key="w_gx").value == int(s["x"])
    links = at.get("page_link")
    assert any("Timeline" in link.proto.label for link in links)
    assert any("frames=" in link.proto.query_string for link in links)
    at.multiselect(key="w_kinds").set_value(["walked"]).run()
    assert at.query_params["kinds"] == "walked"
    assert at.selectbox(key="w_life").value is None
    at.selectbox(key="w_life").set_value(1).run()
    assert not at.exception
    assert at.query_params["life"] == "1"


def test_grid_cell_typed_goes_into_the_url(root: Path) -> None:
    at = app("grid", runs=CRAFTER)
    assert "Pick a cell" in texts(at) and "cell" not in at.query_params
    assert at.number_input(key="w_gx").value is None and at.number_input(key="w_gy").value is None
    at.number_input(key="w_gx").set_value(3).run()
    assert "cell" not in at.query_params and "Pick a cell" in texts(at)
    at.number_input(key="w_gy").set_value(4).run()
    assert at.query_params["cell"] == "3,4"
    assert "(3, 4)" in texts(at)


def test_grid_deep_link_restores_filters(root: Path) -> None:
    at = app("grid", runs=CRAFTER, life="0", kinds="walked,blocked", range="5-100")
    assert at.selectbox(key="w_life").value == 0
    assert set(at.multiselect(key="w_kinds").value) == {"walked", "blocked"}
    assert at.slider(key="w_grid_range").value == (5, 100)


def test_a_run_being_written_refreshes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "live"
    write_run(root / "r", episodes=3)
    monkeypatch.setenv("MFM_RUNS_ROOT", str(root))
    manifest = json.loads((root / "r" / "run.json").read_text())
    manifest["status"] = "running"
    (root / "r" / "run.json").write_text(json.dumps(manifest))
    at = app()
    assert at.dataframe[0].value["status"].iloc[0].endswith("running")
    manifest["status"] = "interrupted"
    (root / "r" / "run.json").write_text(json.dumps(manifest) + "\n")
    at.run()
    assert at.dataframe[0].value["status"].iloc[0].endswith("interrupted")


def test_the_timeline_lists_the_episodes_around_the_open_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a run with more episodes than the picker lists, the Timeline's episode picker holds
    the open episode and its neighbours in index.jsonl order, and says how many it lists."""
    use_root(monkeypatch, REPO / "sample_runs")
    run_dir = REPO / "sample_runs" / "diamond_direct_s3_1600steps"
    ids = [json.loads(line)["id"] for line in (run_dir / "index.jsonl").read_text().splitlines() if line.strip()]
    at = app("timeline", runs=run_dir.name, ep=ids[-3])
    options = at.selectbox(key="w_ep").options
    listed = [o.split(" — ")[0] for o in options]
    assert ids[-3] in listed and len(listed) < len(ids)
    assert listed == ids[len(ids) - len(listed):], "the last episodes, as the open one is near the end"
    assert f"Listed: {len(listed)} of the range's {len(ids):,} episodes" in texts(at)
