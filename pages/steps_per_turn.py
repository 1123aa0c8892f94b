"""Steps per turn: rolling median of env steps between model calls, per method, seeds as a band."""
from __future__ import annotations

import streamlit as st

from dashboard import figures, ui, vega_charts, views
from dashboard.core import parse_int
from loaders import chart_data

WINDOWS = (5, 10, 25, 50, 100)
DEFAULT_WINDOW = 25


runs, _ = ui.sidebar(("window",))
if not runs:
    ui.need_run(None)
st.title("Steps per turn")
st.caption("Env steps executed per policy decision (turn), a rolling median over the last turns, against env step: "
           "one line per method (the mean over its seeds, with the 95% interval of that mean where it has several), "
           "one chart per task. Higher means more steps between model calls. Shaded: where MFM exceeds both "
           "PRO-LONG and VISTA (paper Figure 9).")
st.select_slider("Rolling window (turns)", WINDOWS,
                 **ui.bound("w_window", "window", DEFAULT_WINDOW,
                            lambda v: w if (w := parse_int(v)) in WINDOWS else None))
window = int(st.session_state["w_window"])
groups = chart_data.tasks(runs)
for i, (task, group) in enumerate(groups):
    tag = "" if len(groups) == 1 else f"_{i}"
    if len(groups) > 1:
        st.subheader(f"Task: {ui.md(task)}")
    series, pooled = views.steps_per_turn(group, window)
    shade = series.shade
    if not len(series.bands):
        st.info("No open run of this task records turns.")
        continue
    st.vega_lite_chart(spec=vega_charts.spec(vega_charts.band_chart(series, screen=True)),
                       width="stretch", key=f"spt_chart{tag}")
    if shade:
        covered = sum(hi - lo for lo, hi in shade)
        st.caption(f"MFM exceeds both in {len(shade)} interval(s) covering {covered} env steps.")
    elif not {"mfm", "pro-long", "vista"} <= set(series.methods):
        st.caption("Shading needs runs of mfm, pro-long and vista open.")
    ui.figure_downloads(lambda g=group, s=series: figures.steps_per_turn_figure(g, window, series=s),
                        f"steps_per_turn{tag}", "double")
    st.markdown("**Pooled over seeds**")
    st.dataframe(pooled, hide_index=True, width="stretch", key=f"spt_pooled{tag}",
                 column_config={"steps_per_turn": st.column_config.NumberColumn("env steps per turn", format="%.2f"),
                                "model_calls_per_milestone": st.column_config.NumberColumn(format="%.1f"),
                                "tool_calls_per_milestone": st.column_config.NumberColumn(format="%.1f")})
