"""Steps per turn: rolling median of env steps between model calls, per method, seeds as a band."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import charts, figures, ui
from dashboard.core import parse_int
from loaders import paper_measures
from loaders import analysis_pages as ap
from loaders.run import Run

WINDOWS = (5, 10, 25, 50, 100)
DEFAULT_WINDOW = 25


@ui.cached
def _series(runs: list[tuple[str, Run]], window: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed bands of the rolling median, and the interaction table pooled over seeds."""
    bands = ap.seed_bands([(ap.method_of(r), ap.seed_of(r), ap.steps_per_turn(r, window)) for _, r in runs],
                          "median")
    pooled = paper_measures.interaction_table(ap.measures(runs))
    if len(pooled):
        pooled["calls_by_tool"] = [", ".join(f"{k}: {v}" for k, v in d.items()) for d in pooled["calls_by_tool"]]
    return bands, pooled


runs, _ = ui.sidebar(("window",))
if not runs:
    ui.need_run(None)
st.title("Steps per turn")
st.caption("Env steps executed per policy decision (turn), a rolling median over the last turns, against env step: "
           "one line per method (the mean over its seeds), the band spans its seeds' lowest and highest values. "
           "Higher means more steps between model calls. Shaded: where MFM exceeds both PRO-LONG and VISTA "
           "(paper Figure 9).")
st.select_slider("Rolling window (turns)", WINDOWS,
                 **ui.bound("w_window", "window", DEFAULT_WINDOW,
                            lambda v: w if (w := parse_int(v)) in WINDOWS else None))
window = int(st.session_state["w_window"])
bands, pooled = _series(runs, window)
shade = ap.exceed_intervals(bands)
st.plotly_chart(charts.band_figure(bands, f"env steps per turn (rolling median, {window} turns)", shade,
                                   "MFM above PRO-LONG and VISTA"), width="stretch", key="spt_chart")
methods = list(dict.fromkeys(bands["method"])) if len(bands) else []
if shade:
    covered = sum(hi - lo for lo, hi in shade)
    st.caption(f"MFM exceeds both in {len(shade)} interval(s) covering {covered} env steps.")
elif not {"mfm", "pro-long", "vista"} <= set(methods):
    st.caption("Shading needs runs of mfm, pro-long and vista open.")
ui.figure_downloads(lambda: figures.steps_per_turn_figure(runs, window), "steps_per_turn", "double")
st.subheader("Pooled over seeds")
st.dataframe(pooled, hide_index=True, width="stretch", key="spt_pooled",
             column_config={"steps_per_turn": st.column_config.NumberColumn("env steps per turn", format="%.2f"),
                            "model_calls_per_milestone": st.column_config.NumberColumn(format="%.1f"),
                            "tool_calls_per_milestone": st.column_config.NumberColumn(format="%.1f")})
