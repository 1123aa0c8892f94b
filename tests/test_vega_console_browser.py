"""No Vega warning in the browser console: every page of the dashboard opened on the sample
runs (`mfm dashboard sample_runs`, headless Chromium through Playwright), each with the
first agent run alone and with every sample run chosen, and the Echo page on the Echo runs;
the Frames page also with two frames compared. Vega and Vega-Lite log a warning as ``console.warn("WARN", ...)``: a message of the console
that starts with ``WARN``. A page counts once it is drawn as the browser benchmark defines it
(``bench.browser``: the script idle, every shown chart, table and image painted)."""
from __future__ import annotations

import json
from typing import Iterator

import pytest

from conftest import REPO
from dash_browser import dashboard, needs_browser, no_exception, url
from dashboard.ui import PAGE_SPECS
from raw import sample_runs

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]

ROOT = REPO / "sample_runs"
AGENT_RUNS = [p.name for p in sample_runs(ROOT)]
ECHO_RUNS = sorted(f"echo/{p.name}" for p in (ROOT / "echo").iterdir() if (p / "run.json").is_file())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard(ROOT, tmp_path_factory.mktemp("log")) as base:
        yield base


def vega_warnings(browser, link: str) -> list[str]:
    """The console messages starting with ``WARN`` while ``link`` opens in a new tab and is
    drawn (``bench.browser``'s definition)."""
    from bench.browser import VIEWPORT, WATCH, open_by_url

    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.add_init_script(WATCH)
    pg = ctx.new_page()
    seen: list[str] = []
    pg.on("console", lambda msg: seen.append(msg.text))
    try:
        got = open_by_url(pg, link)
        no_exception(pg)
        assert got["errors"] == [], got["errors"]
        return [text for text in seen if text.startswith("WARN")]
    finally:
        ctx.close()


def two_frames(key: str) -> str:
    """Two steps of run ``key`` to compare on the Frames page (a quarter and half-way through
    its steps.jsonl, read here), as ``frames=`` takes them."""
    steps = [json.loads(line)["step"] for line in (ROOT / key / "steps.jsonl").read_text().splitlines() if line]
    return f"{key}:{steps[len(steps) // 4]},{key}:{steps[len(steps) // 2]}"


def choices(page: str) -> list[dict[str, str]]:
    """The URL parameters: the first agent run alone, then every sample run chosen (the Echo
    page: the Echo runs); the Frames page also with two frames compared."""
    if page == "echo":
        return [{"runs": ECHO_RUNS[0]}, {"runs": ",".join(ECHO_RUNS)}]
    out = [{"runs": AGENT_RUNS[0]}, {"runs": ",".join(AGENT_RUNS + ECHO_RUNS)}]
    if page == "frames":
        out.append({"runs": AGENT_RUNS[0], "frames": two_frames(AGENT_RUNS[0])})
    return out


@pytest.mark.parametrize("page", list(PAGE_SPECS))
def test_no_vega_warning_in_the_console(server, browser, page: str) -> None:
    path = "" if page == "runs" else page
    found = {}
    for params in choices(page):
        warnings = vega_warnings(browser, url(server, path, **params))
        if warnings:
            found[str(params)] = sorted(set(warnings))
    assert not found, f"Vega warnings on the {PAGE_SPECS[page][1]} page: {found}"


def test_the_sample_runs_are_there() -> None:
    """The runs the pages are opened on exist (a renamed sample would make the test above
    open empty pages and see nothing)."""
    assert "diamond_mfm_s2" in AGENT_RUNS and len(AGENT_RUNS) >= 2, AGENT_RUNS
    assert ECHO_RUNS and all((ROOT / r / "echo.jsonl").is_file() for r in ECHO_RUNS), ECHO_RUNS


WARNING_APP = """
import altair as alt
import pandas as pd
import streamlit as st

data = pd.DataFrame({"x": [1, 2, 3], "y": [3, 1, 2], "kind": ["b", "a", "c"]})
st.altair_chart(alt.Chart(data).mark_point().encode(x="x:Q", y="y:Q", size=alt.Size("kind:N", sort=None)))
"""
"""A chart Vega-Lite warns about (a size channel on an unsorted discrete field)."""


def test_a_vega_warning_is_seen(browser, tmp_path) -> None:
    """The check above can fail: a Streamlit app whose chart Vega-Lite warns about shows
    its warning in what :func:`vega_warnings` collects."""
    from bench.browser import serve

    app = tmp_path / "warns.py"
    app.write_text(WARNING_APP, encoding="utf-8")
    with serve(tmp_path, tmp_path / "server.log", app=app) as base:
        warnings = vega_warnings(browser, base + "/")
    assert any("size" in w and "unsorted discrete" in w for w in warnings), warnings
