"""``dashboard.views``: the cached views declared once, at import time, in one module. A page
run again, or opened by another session, reads nothing again; ``st.cache_data.clear()`` and
``st.cache_resource.clear()`` empty them; no page wraps a view of its own."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import streamlit as st
from conftest import REPO, open_app, use_root

from dashboard import timeline_canvas, views
from loaders import timeline_data

RUN = "diamond_mfm_s2"
@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the Timeline's bars (a ``st.cache_data`` view) and its chart (a
    ``st.cache_resource`` one) were built: their builders counted where the views call them."""
    calls = {"bars": 0, "chart": 0}
    bars, chart = timeline_data.timeline_bars, timeline_canvas.lanes_data

    def count_bars(*a, **k):
        calls["bars"] += 1
        return bars(*a, **k)

    def count_chart(*a, **k):
        calls["chart"] += 1
        return chart(*a, **k)

    monkeypatch.setattr(timeline_data, "timeline_bars", count_bars)
    monkeypatch.setattr(timeline_canvas, "lanes_data", count_chart)
    use_root(monkeypatch, REPO / "sample_runs")
    return calls


def test_a_page_run_again_reads_its_views_from_the_cache(counted: dict[str, int]) -> None:
    """The Timeline run twice, and opened again by a new session, builds its data and its chart
    once; clearing the data cache builds the data again (the chart is kept), clearing the
    resource cache builds the chart again."""
    at = open_app("timeline", runs=RUN)
    assert counted == {"bars": 1, "chart": 1}
    at.run()
    assert not at.exception
    open_app("timeline", runs=RUN)
    assert counted == {"bars": 1, "chart": 1}, "a rerun or another session missed the cache"
    st.cache_data.clear()
    at.run()
    assert counted == {"bars": 2, "chart": 1}
    st.cache_resource.clear()
    at.run()
    assert not at.exception
    assert counted["chart"] == 2


def test_the_views_module_is_built_once() -> None:
    """Importing the views again gives the same cached functions (Streamlit's caches are named
    after them), and each view says what it holds."""
    again = importlib.import_module("dashboard.views")
    assert again.timeline is views.timeline and again.frame is views.frame
    tree = ast.parse(Path(views.__file__).read_text(encoding="utf-8"))
    body = tree.body
    declared = [n.targets[0].id for n in body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and getattr(n.value.func, "id", None) in ("cached", "kept")]
    assert len(declared) >= 15
    for i, n in enumerate(body):
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in declared:
            doc = body[i + 1]
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and doc.value.value.strip(), \
                f"{n.targets[0].id} has no docstring"


@pytest.mark.parametrize("page", sorted(p.name for p in (REPO / "pages").glob("*.py")))
def test_pages_wrap_no_view_of_their_own(page: str) -> None:
    """No page calls ``cached``, ``kept`` or Streamlit's cache decorators: they call the views."""
    tree = ast.parse((REPO / "pages" / page).read_text(encoding="utf-8"))
    names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
             if isinstance(n, (ast.Attribute, ast.Name))}
    assert not names & {"cached", "kept", "cache_data", "cache_resource"}, page
