"""The browser benchmark (``bench/browser.py``) at smoke size: it serves the dashboard and
the bare Streamlit app (``bench/bare_app.py``), drives Chromium and reports a time for every
page, the bare app's beside it and a frame step. Behaviour only: no wall-clock limit is
checked (the figures are in docs/benchmarks.md)."""
from __future__ import annotations

import json

import pytest

from dash_browser import needs_browser

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]


def test_browser_benchmark_times_every_page_with_its_tables_beside_the_bare_app(tmp_path) -> None:
    from bench.browser import BARE, PAGES, measure, table
    from bench.synth import make_run

    make_run(tmp_path / "runs" / "tiny", steps=300, seed=0)
    out = measure(tmp_path / "runs", "tiny", repeats=1, first=1, steps=2, first_pages=("runs",), warmup=False,
                  log_dir=tmp_path)
    assert out["runs_first_s_median"] > 0 and out["runs_first_connect_s_median"] > 0
    for kind in ("first", "link", "click"):
        assert out[f"{BARE}_{kind}_s_median"] > 0, kind
        assert out[f"runs_{kind}_x_bare"] == pytest.approx(out[f"runs_{kind}_s_median"]
                                                           / out[f"{BARE}_{kind}_s_median"]), kind
        assert out[f"{BARE}_{kind}_load_min"] >= 0, kind
    assert out[f"{BARE}_charts"] == 1 and out[f"{BARE}_images"] == 1 and out[f"{BARE}_tables"] == 0
    for page in PAGES:
        assert out[f"{page}_link_s_median"] > 0, page
        assert out[f"{page}_link_script_s_median"] > 0, page
        assert out[f"{page}_link_x_bare"] > 0, page
        if page != "runs":  # the click goes from the Runs page to the page
            assert out[f"{page}_click_s_median"] > 0, page
        assert f"{page}_errors" not in out, out[f"{page}_errors"]
    assert out["runs_tables"] >= 1  # the runs table
    measures = [json.loads(line) for line in (tmp_path / "measures.jsonl").read_text().splitlines()]
    assert {m["page"] for m in measures} == {*PAGES, BARE}
    for m in measures:  # drawn: never before the last table, chart or image of the page changed
        for what in ("tables", "charts", "images"):
            if m[f"{what}_ms"] is not None:
                assert m["ms"] >= m[f"{what}_ms"], m
        if m["grids"] and m["kind"] != "click":  # a new tab draws its grids after the navigation
            assert m["tables_ms"] is not None, m
    assert out["frame_step_ms_median"] > 0 and out["frame_step_drawn_ms_median"] >= out["frame_step_ms_min"]
    assert out["bare_frame_step_ms_median"] > 0 and out["frame_step_x_bare"] > 0
    text = table(out)
    for page in (*PAGES, "bare Streamlit app"):
        assert f"| {page} |" in text, page


CANVAS_APP = """
import altair as alt
import pandas as pd
import streamlit as st

st.title("Canvas")
data = pd.DataFrame({"x": range(500), "y": [i % 17 for i in range(500)]})
chart = alt.Chart(data).mark_point().encode(x="x:Q", y="y:Q").properties(
    usermeta={"embedOptions": {"renderer": "canvas"}})
st.vega_lite_chart(spec=chart.to_dict(), width="stretch")
late = st.components.v2.component("late_canvas", isolate_styles=False,
                                 html='<canvas class="late" width="40" height="20"></canvas>', js='''
export default function ({ parentElement }) {
  const c = parentElement.querySelector('canvas.late');
  setTimeout(() => { c.getContext('2d').fillRect(0, 0, 40, 20); window.__lateDrawn = performance.now(); }, 700);
}''')
late(key="late")
buffer = st.components.v2.component("buffer_canvas", isolate_styles=False, html='<span>buffer</span>', js='''
export default function () {
  const off = document.createElement('canvas'), g = off.getContext('2d'), start = performance.now();
  const tick = setInterval(() => {
    g.fillRect(0, 0, 4, 4);
    if (performance.now() - start > 4000) { clearInterval(tick); window.__bufferStopped = performance.now(); }
  }, 50);
}''')
buffer(key="buffer")
"""


def test_a_canvas_is_waited_for_until_something_draws_into_it(tmp_path) -> None:
    """Vega makes a chart's canvas, at its size, before it draws on it (and Streamlit itself
    picks the canvas renderer for a layer of over 2,000 rows), and a component may draw on its
    own canvas late: the page is drawn only once a draw call on each canvas is seen. Draws on
    a canvas that is not in the page (a buffer, as Glide's grids draw into) are no repaint:
    one drawn every 50 ms for 4 s does not hold the page."""
    from playwright.sync_api import sync_playwright

    from bench.browser import ARGS, CHROMIUM, VIEWPORT, WATCH, open_by_url, serve

    app = tmp_path / "canvas_app.py"
    app.write_text(CANVAS_APP)
    with serve(tmp_path, app=app) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            ctx = browser.new_context(viewport=VIEWPORT)
            ctx.add_init_script(WATCH)
            pg = ctx.new_page()
            m = open_by_url(pg, base)
            assert pg.locator('[data-testid="stVegaLiteChart"] canvas.marks').count() == 1
            assert pg.locator('[data-testid="stVegaLiteChart"] svg.marks').count() == 0
            assert m["charts"] == 1 and not m["errors"], m
            assert m["charts_ms"] is not None, "no draw call on the chart's canvas was seen"
            assert m["ms"] >= m["charts_ms"] > 0, m
            late = pg.evaluate("() => window.__lateDrawn")
            assert late is not None and m["ms"] >= late, (m["ms"], late)
            pg.wait_for_function("() => window.__bufferStopped !== undefined", timeout=30_000)
            stopped = pg.evaluate("() => window.__bufferStopped")
            assert m["ms"] < stopped, ("draws on a canvas off the page held the page", m["ms"], stopped)
        finally:
            browser.close()


def test_the_ab_script_times_each_checkout_beside_the_bare_app(tmp_path) -> None:
    """``bench.ab``: two arms of this checkout (one with a variable set) and the bare app,
    alternated; each click timed to drawn, and a traced click's main-thread busy time."""
    from bench.ab import run
    from bench.browser import BARE, REPO
    from bench.synth import make_run

    make_run(tmp_path / "runs" / "tiny", steps=300, seed=0)
    lines: list[str] = []
    out = run(tmp_path / "runs", "tiny", "timeline", [("a", REPO, {}), ("b", REPO, {"AB_ARM_MARK": "1"})],
              rounds=2, clicks=1, busy=1, log=lines.append)
    assert set(out) == {"a", "b", BARE} and len(lines) == 2
    for name, r in out.items():
        assert r["n"] == 2 and 0 < r["q1_s"] <= r["click_s"] <= r["q3_s"], (name, r)
        assert 0 < r["script_s"] and r["busy_ms"] > 0, (name, r)
        assert r["x_bare"] == pytest.approx(r["click_s"] / out[BARE]["click_s"])
