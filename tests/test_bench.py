"""Helpers of the benchmark scripts that decide a reported figure."""
from __future__ import annotations

from bench.apptimes import chart_rows


def test_chart_rows_counts_every_dataset_a_chart_sends() -> None:
    """A real Streamlit chart of two layers (1,234 and 3 rows): the rows the page sends."""
    from streamlit.testing.v1 import AppTest

    def page() -> None:
        import altair as alt
        import numpy as np
        import pandas as pd
        import streamlit as st

        line = alt.Chart(pd.DataFrame({"x": np.arange(1234), "y": np.arange(1234) * 2})).mark_line()
        bars = alt.Chart(pd.DataFrame({"x": [1, 2, 3], "y": [1, 2, 3]})).mark_bar()
        st.altair_chart(alt.layer(line.encode(x="x:Q", y="y:Q"), bars.encode(x="x:Q", y="y:Q")))

    at = AppTest.from_function(page).run()
    assert [chart_rows(c.proto) for c in at.get("vega_lite_chart")] == [1234 + 3]


def test_the_recording_baseline_plays_the_same_game_recording_nothing(tmp_path) -> None:
    """``bench.nullrec``: the agent with recording off (the overhead's baseline) plays the same
    steps and takes the same decisions as with it on, and writes no frames, index or seen rows."""
    from bench.nullrec import play

    on = play(tmp_path / "on", 150, 0, on=True)
    off = play(tmp_path / "off", 150, 0, on=False)
    assert on[2] == off[2] == 150 and on[3] == off[3]
    assert (tmp_path / "on" / "seen.jsonl").stat().st_size > 0
    assert not any((tmp_path / "off" / name).exists() for name in ("index.jsonl", "seen.jsonl", "grid.jsonl"))
    assert not list((tmp_path / "off").glob("episodes/*/frames/*"))
