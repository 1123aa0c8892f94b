"""The floor under every browser figure: a bare Streamlit app of two pages, each drawing one
Altair chart and one image, as the dashboard's pages draw theirs.

    python -m dashboard.serve --no-warm bench/bare_app.py    # as bench.browser starts it
    streamlit run bench/bare_app.py                          # or bare

Each page has a step slider (the frame-step baseline), a 320-pixel frame image (random
pixels, PNG, seeded by the step) in a column and, beside it, a line chart of 2,000 points
with a rule at the step (Altair, Vega-Lite). ``bench.browser`` opens it by URL (a first
visit after the server starts, a new tab on a warm server) and moves between its two
pages by their sidebar links, in the same sitting as the dashboard's pages: what Streamlit
itself costs on this machine for a page with a chart and an image.
"""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

POINTS = 2_000
"""Points of the line chart (the dashboard's charts send a few hundred to a few thousand)."""


def draw(title: str) -> None:
    """One page: a title, the step slider, the frame image and the chart."""
    st.title(title)
    step = st.slider("Step", 0, 10_000, 0)
    rng = np.random.default_rng(step)
    frame = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    big = frame.repeat(5, axis=0).repeat(5, axis=1)
    data = pd.DataFrame({"step": np.arange(POINTS) * 5,
                         "value": np.cumsum(np.random.default_rng(0).normal(size=POINTS))})
    line = alt.Chart(data).mark_line().encode(x="step:Q", y="value:Q")
    rule = alt.Chart(pd.DataFrame({"step": [step]})).mark_rule(color="red").encode(x="step:Q")
    a, b = st.columns([2, 3])
    a.image(big, width=320, caption=f"step {step}", output_format="PNG")
    b.altair_chart(line + rule, width="stretch")


def one() -> None:
    """The first page (the app's default, served at ``/``)."""
    draw("One")


def two() -> None:
    """The second page (``/two``)."""
    draw("Two")


st.set_page_config(layout="wide")
st.navigation([st.Page(one, title="One", default=True), st.Page(two, title="Two", url_path="two")]).run()
