"""Progress: milestones against env step per method (seeds as a band), milestones mean ± std over
seeds, and how far back retrieval reaches."""
from __future__ import annotations

import streamlit as st

from dashboard import figures, ui, vega_charts, views
from loaders import chart_data, runs_summary

runs, _ = ui.sidebar(())
if not runs:
    ui.need_run(None)
st.title("Progress")
st.caption("Milestones reached against env step: one line per method (the mean over its seeds, with the 95% "
           "interval of that mean where it has several), one chart per task. A finished run keeps its final count.")
groups = chart_data.tasks(runs)
for i, (task, group) in enumerate(groups):
    tag = "" if len(groups) == 1 else f"_{i}"
    if len(groups) > 1:
        st.subheader(f"Task: {ui.md(task)}")
    bands, table, reach, firsts = views.progress(group, ui.root())
    st.vega_lite_chart(spec=vega_charts.spec(vega_charts.band_chart(bands, screen=True)),
                       width="stretch", key=f"progress_chart{tag}")
    ui.figure_downloads(lambda g=group, b=bands: figures.progress_figure(g, series=b), f"progress{tag}", "double")
    st.markdown("**Milestones per method** (mean ± std over seeds)")
    st.dataframe(table, hide_index=True, width="stretch", key=f"progress_table{tag}")
    if len(firsts):
        with st.expander("When each run first reached each milestone"):
            st.dataframe(runs_summary.first_reached(firsts), width="stretch", key=f"progress_firsts{tag}")
    st.markdown("**Reach: age of retrieved episodes**")
    st.caption("For every episode a search returned or an inspection opened: the turn's first step minus the "
               "episode's last step, pooled over seeds. *over_1000*: the share older than 1,000 env steps.")
    if len(reach):
        st.dataframe(reach, hide_index=True, width="stretch", key=f"progress_reach{tag}",
                     column_config={"over_1000": st.column_config.NumberColumn("older than 1,000 steps",
                                                                               format="percent")})
    else:
        st.info("No open run of this task retrieved an episode (no search or inspection calls).")
