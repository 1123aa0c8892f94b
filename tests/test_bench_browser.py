"""The browser benchmark (``bench/browser.py``) at smoke size: it serves the dashboard,
drives Chromium and reports a time for every page and for a frame step. Behaviour only:
no wall-clock limit is checked (the figures are in docs/benchmarks.md)."""
from __future__ import annotations

import pytest

from dash_browser import needs_browser

pytestmark = [needs_browser, pytest.mark.browser, pytest.mark.slow]


def test_browser_benchmark_times_every_page_and_a_frame_step(tmp_path) -> None:
    from bench.browser import PAGES, baseline, measure
    from bench.synth import make_run

    make_run(tmp_path / "runs" / "tiny", steps=300, seed=0)
    out = measure(tmp_path / "runs", "tiny", repeats=1, first=1, steps=2, first_pages=("runs",), warmup=False,
                  log_dir=tmp_path)
    assert out["runs_first_s_median"] > 0 and out["runs_first_connect_s_median"] > 0
    for page in PAGES:
        assert out[f"{page}_link_s_median"] > 0, page
        assert out[f"{page}_link_script_s_median"] > 0, page
        if page != "runs":  # the click goes from the Runs page to the page
            assert out[f"{page}_click_s_median"] > 0, page
        assert f"{page}_errors" not in out, out[f"{page}_errors"]
    assert out["frame_step_ms_median"] > 0 and out["frame_step_drawn_ms_median"] >= out["frame_step_ms_min"]
    base = baseline(repeats=1, steps=2)
    assert base["baseline_link_s_median"] > 0 and base["baseline_frame_step_ms_median"] > 0
