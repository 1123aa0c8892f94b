"""The dashboard in a real browser: `mfm dashboard ROOT --port P` driven by Playwright + Chromium.

Screenshots of every page go to ``test-artifacts/screenshots/``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from dash_browser import SHOTS, dashboard, needs_browser, no_exception, query, screenshot, settle, url
from dash_data import CRAFTER, DAMAGED, NESTED, SYNTHETIC, make_root
from loaders.run import open_run
from loaders.agent_calls import inspections

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]
LANES = ".mfm-lanes canvas[aria-label]"
"""The Timeline's chart, once drawn (it sets its label as it draws)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = make_root(tmp_path_factory.mktemp("runs"), crafter_steps=300)
    with dashboard(root, tmp_path_factory.mktemp("log")) as base:
        yield base, root


def check(pg, name: str, *expected: str, tall: int = 2000) -> None:
    """No Streamlit exception, the expected texts visible, and a screenshot."""
    settle(pg)
    for text in expected:
        pg.get_by_text(text, exact=False).filter(visible=True).first.wait_for(state="visible", timeout=60_000)
    no_exception(pg)
    screenshot(pg, SHOTS / f"{name}.png", tall)


def click_point(pg, selector: str, index: int) -> None:
    """Hover then click a chart's mark (a Plotly bar or marker, a Vega-Lite symbol or cell)
    the way a person does."""
    box = pg.locator(selector).nth(index).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    pg.mouse.move(x - 4, y)
    time.sleep(0.3)
    pg.mouse.move(x, y)
    time.sleep(0.5)
    pg.mouse.click(x, y)


def test_runs_page(server, page) -> None:
    base, _ = server
    page.goto(url(base, "", runs=f"{CRAFTER},{NESTED},{DAMAGED}"))
    check(page, "runs", "Runs", "Damaged runs", "Milestones", "crafter_random_s3")
    page.get_by_text(f"{DAMAGED}:", exact=False).first.click()
    check(page, "runs_damaged_open", "These lines or files were skipped", tall=1500)


def test_timeline_page_and_deep_link(server, page) -> None:
    base, _ = server
    link = url(base, "timeline", runs=CRAFTER, ep="ep_000005", step="40", range="0-200", color="outcome")
    page.goto(link)
    check(page, "timeline", "Timeline", "Frame strip", "Step (scrub the episode's frames)", tall=2600)
    page.locator(LANES).wait_for(timeout=60_000)
    assert page.locator(".js-plotly-plot").count() == 0
    heading = page.get_by_role("heading", name="ep_000005").first.inner_text()
    assert "ep_000005" in heading
    assert query(page)["ep"] == "ep_000005" and query(page)["range"] == "0-200"
    other = page.context.browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    other.goto(page.url)
    check(other, "timeline_deeplink", "Frame strip")
    assert other.get_by_role("heading", name="ep_000005").first.inner_text() == heading
    assert other.locator('[data-testid="stRadio"] input[type="radio"]').nth(1).is_checked()
    other.context.close()


BARS_JS = """() => {
  const root = document.querySelector('.mfm-lanes'), st = root.__mfm, b = st.data.bars;
  const box = root.querySelector('canvas').getBoundingClientRect();
  return b.start.map((s, i) => ({episode: b.episode[i], start: s, color: st.data.categories[b.cat[i]][1],
    left: box.left + st.k.x(s), right: box.left + st.k.x(b.end[i]), y: box.top + st.k.pos(b.life[i])}));
}"""
PIXEL_JS = """([x, y]) => {
  const cv = document.querySelector('.mfm-lanes canvas'), box = cv.getBoundingClientRect(), r = cv.width / box.width;
  const p = cv.getContext('2d').getImageData(Math.round((x - box.left) * r), Math.round((y - box.top) * r), 1, 1).data;
  return '#' + [p[0], p[1], p[2]].map((v) => v.toString(16).padStart(2, '0')).join('');
}"""


def test_clicking_a_bar_opens_its_episode(server, page) -> None:
    """The Timeline's canvas: the widest bar of one episode is drawn in its category's colour
    where the chart's scales put it, hovering it names the episode, and clicking it opens that
    episode (the episodes themselves checked against the run's index)."""
    base, root = server
    page.goto(url(base, "timeline", runs=CRAFTER))
    settle(page)
    page.locator(LANES).wait_for(timeout=60_000)
    assert "ep" not in query(page)
    assert "episodes" in page.locator(LANES).get_attribute("aria-label")
    bars = [b for b in page.evaluate(BARS_JS) if b["episode"]]
    assert {b["episode"] for b in bars} <= set(open_run(root / CRAFTER).episodes()["id"])
    widest = max(bars, key=lambda b: b["right"] - b["left"])
    x, y = (widest["left"] + widest["right"]) / 2, widest["y"]
    assert page.evaluate(PIXEL_JS, [x, y]) == widest["color"].lower()
    page.mouse.move(x - 4, y)
    page.mouse.move(x, y)
    tip = page.locator(".mfm-lanes-tip")
    tip.wait_for(state="visible", timeout=10_000)
    assert widest["episode"] in tip.inner_text()
    page.mouse.click(x, y)
    page.wait_for_function("() => location.search.includes('ep=ep_')", timeout=60_000)
    settle(page)
    assert query(page)["ep"] == widest["episode"]
    check(page, "timeline_clicked", "Frame strip", widest["episode"])
    page.locator(LANES).wait_for(timeout=60_000)
    chosen = page.evaluate("() => document.querySelector('.mfm-lanes').__mfm.data.chosen")
    assert chosen[0] == widest["start"], "the opened episode's bar is outlined"


GRID = ".mfm-grid canvas[aria-label]"
"""The Spatial grid's map, once drawn."""
PLOT_JS = """() => {
  const root = document.querySelector('.mfm-grid'), st = root.__mfm, box = root.querySelector('canvas').getBoundingClientRect();
  return {left: box.left + st.k.X(st.data.extent[0] - 0.5), top: box.top + st.k.Y(st.data.extent[1] - 0.5),
          width: st.k.pw, height: st.k.ph, extent: st.data.extent, zoom: st.zoom.z};
}"""


def _hover(pg, x: float, y: float) -> str:
    """The map's hover text with the pointer at (x, y) of the page."""
    pg.mouse.move(x - 3, y)
    pg.mouse.move(x, y)
    tip = pg.locator(".mfm-grid-tip")
    tip.wait_for(state="visible", timeout=10_000)
    return tip.inner_text()


def test_clicking_a_marker_picks_its_cell(server, page) -> None:
    """The Spatial grid's canvas: a cell of the run's grid, placed by the map's plot box and
    extent alone (equal pixels per cell on both axes, the second axis growing downwards),
    names itself on hover and is drawn in its kind's colour; clicking an episode's end
    position picks its cell, clicking another cell picks that one; the wheel zooms and a
    double-click resets."""
    base, root = server
    page.goto(url(base, "grid", runs=CRAFTER))
    settle(page)
    page.locator(GRID).wait_for(timeout=60_000)
    assert page.locator(".js-plotly-plot").count() == 0 and page.locator(".vega-embed").count() == 0
    plot = page.evaluate(PLOT_JS)
    x0, y0, x1, y1 = plot["extent"]
    per = plot["width"] / (x1 - x0 + 1)
    assert plot["height"] / (y1 - y0 + 1) == pytest.approx(per, rel=1e-6), "equal pixels per cell"
    cells = open_run(root / CRAFTER).grid()
    colours = {k: c.lower() for k, c in page.evaluate("() => document.querySelector('.mfm-grid').__mfm.data.kinds")}
    at = lambda x, y, dx=0.0, dy=0.0: (plot["left"] + (x - x0 + 0.5 + dx) * per, plot["top"] + (y - y0 + 0.5 + dy) * per)
    last = cells.drop_duplicates(["x", "y"], keep="last")
    low, high = last.loc[last["y"].idxmin()], last.loc[last["y"].idxmax()]
    assert high["y"] > low["y"]
    for c in (low, high):
        assert _hover(page, *at(int(c["x"]), int(c["y"]), 0.38, 0.38)).startswith(f"({int(c['x'])}, {int(c['y'])}) · ")
    kind = next(k for k in ("placed", "opened", "blocked", "hazard", "water") if k in set(last["kind"]))
    c = last[last["kind"] == kind].iloc[0]
    assert page.evaluate(PIXEL_JS.replace(".mfm-lanes", ".mfm-grid"), list(at(int(c["x"]), int(c["y"]), 0.38, 0.38))
                         ) == colours[kind]

    run = open_run(root / CRAFTER)
    lives = run.lives()
    died = {(int(r.x), int(r.y)) for r in lives[lives["event"] == "death"].itertuples()}
    ends = run.episodes().dropna(subset=["x"])
    ends = ends[[(int(x), int(y)) not in died for x, y in zip(ends["x"], ends["y"])]]
    end = ends.iloc[len(ends) // 2]
    text = _hover(page, *at(int(end["x"]), int(end["y"])))
    assert "ended here" in text and f"({int(end['x'])}, {int(end['y'])})" in text
    page.mouse.click(*at(int(end["x"]), int(end["y"])))
    page.wait_for_function("() => location.search.includes('cell=')", timeout=60_000)
    settle(page)
    assert query(page)["cell"] == f"{int(end['x'])},{int(end['y'])}"
    check(page, "grid_clicked", f"({int(end['x'])}, {int(end['y'])}):", tall=1800)
    page.locator(GRID).wait_for(timeout=60_000)
    assert page.evaluate("() => document.querySelector('.mfm-grid').__mfm.data.cell") == [int(end["x"]), int(end["y"])]
    page.mouse.click(*at(int(c["x"]), int(c["y"]), 0.38, 0.38))
    page.wait_for_function(f"() => location.search.includes('cell={int(c['x'])}%2C{int(c['y'])}')", timeout=60_000)
    settle(page)
    check(page, "grid_cell_clicked", f"({int(c['x'])}, {int(c['y'])}):", tall=1800)
    page.locator(GRID).wait_for(timeout=60_000)
    page.mouse.move(*at((x0 + x1) / 2, (y0 + y1) / 2))
    page.mouse.wheel(0, -400)
    page.wait_for_function("() => document.querySelector('.mfm-grid').__mfm.zoom.z > 1.5", timeout=10_000)
    page.mouse.dblclick(plot["left"] - 20, plot["top"] + 10)
    page.wait_for_function("() => document.querySelector('.mfm-grid').__mfm.zoom.z === 1", timeout=10_000)


def test_frames_page_and_deep_link(server, page) -> None:
    base, root = server
    ins = inspections(open_run(root / CRAFTER).turns(), open_run(root / CRAFTER).episodes()).iloc[0]
    page.goto(url(base, "frames", runs=CRAFTER))
    check(page, "frames_empty", "No frame chosen yet", tall=1000)
    page.get_by_role("tab", name="From an inspection").click()
    page.get_by_role("button", name="Compare the retrieved frame with the frame the agent had").click()
    check(page, "frames_inspection", "left is the retrieved frame", "Magnified region", tall=2400)
    assert query(page)["frames"] == f"{CRAFTER}:{int(ins['target_step'])},{CRAFTER}:{int(ins['step'])}"
    page.get_by_text("Tile grid").click()
    settle(page)
    page.wait_for_function("() => location.search.includes('tiles=1')")
    deep = page.url
    other = page.context.browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    other.goto(deep)
    check(other, "frames_deeplink", "left is the retrieved frame", "A/B wipe", tall=2400)
    assert other.locator('[data-testid="stCheckbox"] input').first.is_checked()
    assert query(other)["frames"] == query(page)["frames"]
    assert other.locator(".vega-embed .mark-image image").count() >= 2
    other.context.close()


def test_grid_page_links_to_frames(server, page) -> None:
    base, root = server
    s = open_run(root / CRAFTER).steps().iloc[30]
    page.goto(url(base, "grid", runs=CRAFTER, cell=f"{int(s['x'])},{int(s['y'])}"))
    check(page, "grid", "Spatial grid", "walked:", f"({int(s['x'])}, {int(s['y'])})", tall=1900)
    page.get_by_text("in Frames", exact=False).first.click()
    settle(page)
    page.wait_for_url("**/frames?**")
    check(page, "frames_from_grid", "Frames", "Magnified region")
    assert query(page)["runs"] == CRAFTER and query(page)["frames"].startswith(f"{CRAFTER}:")


def test_sidebar_navigation_keeps_the_open_runs(server, page) -> None:
    base, _ = server
    page.goto(url(base, "", runs=NESTED))
    settle(page)
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Spatial grid").click()
    settle(page)
    page.wait_for_url("**/grid**")
    check(page, "grid_via_sidebar", "Spatial grid", "walked:", tall=1200)
    assert query(page).get("runs") == NESTED


def test_escape_attempt_is_refused_in_the_browser(server, page) -> None:
    base, _ = server
    page.goto(url(base, "timeline", runs="../../etc", run="../../etc"))
    check(page, "refused", "Refused run path", "No run is open", tall=900)


ANALYSIS_PAGES = [("retargeting", "Retargeting", "Per method, pooled over seeds"),
                  ("steps_per_turn", "Steps per turn", "Pooled over seeds"),
                  ("memory", "Memory", "mine/GUIDE.md"),
                  ("provenance", "Provenance", "node(s)"),
                  ("progress", "Progress", "Reach: age of retrieved episodes"),
                  ("echo", "Echo", "attempt at a goal"),
                  ("sql", "SQL", "Tables and columns")]


@pytest.mark.parametrize("path,title,text", ANALYSIS_PAGES)
def test_analysis_pages_render(server, page, path: str, title: str, text: str) -> None:
    base, _ = server
    page.goto(url(base, path, runs=f"{SYNTHETIC},{NESTED}", run=SYNTHETIC))
    check(page, path, title, text)


def test_provenance_click_picks_a_node(server, page) -> None:
    base, _ = server
    page.goto(url(base, "provenance", runs=SYNTHETIC))
    settle(page)
    assert "node" not in query(page)
    nodes = page.locator(".vega-embed .mark-symbol path")
    label = nodes.nth(5).get_attribute("aria-label")
    click_point(page, ".vega-embed .mark-symbol path", 5)
    page.wait_for_function("() => location.search.includes('node=')", timeout=60_000)
    node = query(page)["node"]
    assert f"id: {node};" in label
    check(page, "provenance_clicked", "Provenance", "in Timeline", tall=2400)
    other = page.context.browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    other.goto(page.url)
    check(other, "provenance_deeplink", "in Timeline")
    assert query(other)["node"] == node
    other.context.close()


def downloaded_manifest(pg) -> dict:
    """Open the page's "Export figure" popover, click its Manifest JSON button and read the
    file the browser saves."""
    import json

    pg.get_by_role("button", name="Export figure").click()
    with pg.expect_download(timeout=60_000) as dl:
        pg.get_by_role("button", name="Manifest JSON").click()
    return json.loads(Path(dl.value.path()).read_text())


def test_figure_manifests_record_the_page_filters(server, page) -> None:
    base, _ = server
    page.goto(url(base, "provenance", runs=SYNTHETIC, run=SYNTHETIC, range="20-60"))
    settle(page)
    m = downloaded_manifest(page)
    assert m["filters"]["range"] == [20, 60] and m["steps"] == [20, 60]
    assert m["view"]["range"] == "20-60" and "range=20-60" in m["deep_link"]
    page.goto(url(base, "steps_per_turn", runs=f"{SYNTHETIC},{NESTED}", window="10"))
    settle(page)
    m = downloaded_manifest(page)
    assert m["filters"] == {"window": 10} and m["view"]["window"] == "10"
    assert {r["key"] for r in m["runs"]} == {SYNTHETIC, NESTED}
