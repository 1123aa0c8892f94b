"""Echo: learner runs (recipes learned from scratch). Unlock curve per configuration, the
analogy graph of the focused run, and a viewer for its Context State Descriptors."""
from __future__ import annotations

import json

import streamlit as st

from dashboard import figures, safe_text, ui, vega_charts, views
from dashboard.core import run_key
from loaders import echo

runs, focus = ui.sidebar(("csd",))
st.title("Echo")
st.caption("Learner runs: Crafter's recipes are learned from the learner's own attempts (see docs/architecture.md, "
           "Echo). One Echo episode is one attempt at a goal.")
pool = [(k, r) for k, r in runs if echo.has_csd(r.path)]
if not pool:
    base = ui.root()
    pool = [(run_key(base, r.path), r) for r in ui.all_runs() if echo.has_csd(r.path)]
    if pool:
        st.info("None of the open runs is a learner run; showing every learner run under the runs root.")
if not pool:
    st.info("No learner run (with csd.jsonl) is open or under the runs root. Make some with `mfm echo run`.")
    st.stop()

bands, problems = views.learners(pool)
st.subheader("Unlock curve per configuration")
st.caption("Distinct achievements unlocked after each Echo episode, per configuration.")
if len(bands.bands):
    st.vega_lite_chart(spec=vega_charts.spec(vega_charts.band_chart(bands, screen=True)),
                       width="stretch", key="echo_curve")
    ui.figure_downloads(lambda: figures.echo_figure(pool, series=bands), "echo_unlock", "double")
else:
    st.info("No Echo episode recorded yet (echo.jsonl is empty).")
if len(problems):
    with st.expander(f"⚠️ {len(problems)} damaged line(s) in echo.jsonl were skipped"):
        st.dataframe(problems.assign(run=[safe_text.relative_paths(p, ui.root()) for p in problems["run"]]),
                     hide_index=True, width="stretch")

keys = [k for k, _ in pool]
key = st.selectbox("Learner run", keys, **ui.bound("w_echo_run", "run", keys[0], lambda v: v if v in keys else None))
run = dict(pool)[key]
csds, edges, attempts, csd_problems = views.learner_library(run)
for p in csd_problems:
    st.warning(f"{ui.md_code(key)}: {ui.md(p)}")

st.subheader("Analogy graph")
st.caption("Each induced task (right) is linked to the representative task it was generalised from (solid) and to "
           "the exemplar sharing the substituted value (dotted, labelled with its per-axis similarity). Colour: "
           "verified, failed or still a candidate.")
if len(edges):
    st.vega_lite_chart(spec=vega_charts.spec(vega_charts.analogy_graph(echo.analogy_layout(csds, edges), edges)),
                       width="stretch", key="echo_graph")
    st.dataframe(edges, hide_index=True, width="stretch", key="echo_edges")
else:
    st.info("This run induced no task (passive retrieval, or nothing verified yet).")

if len(attempts):
    with st.expander("Echo episodes of this run"):
        st.dataframe(attempts, hide_index=True, width="stretch", key="echo_attempts")

st.subheader("Context State Descriptors")
table = echo.csd_table(csds)
if not len(table):
    st.info("This run's CSD library is empty.")
    st.stop()
ids = list(table["id"])
csd_widget = ui.bound("w_csd", "csd", ids[0], lambda v: v if v in ids else None)
if st.session_state["w_csd"] not in ids:
    st.session_state["w_csd"] = ids[0]
pick = st.selectbox("Descriptor", ids, **csd_widget)
st.dataframe(table, hide_index=True, width="stretch", key="echo_csds")
c = csds[pick]
st.markdown(f"**{ui.md(c.task)}** · {ui.md(c.status)} · {c.successes} success(es), {c.failures} failure(s)")
content = echo.csd_axes(c)
cols = st.columns(3)
for i, (name, value) in enumerate(content.items()):
    with cols[i % 3]:
        st.caption(ui.md(name))
        st.code(json.dumps(value, indent=1, ensure_ascii=False), language="json")
if c.episodes:
    st.caption("Episodes this descriptor came from")
    link_cols = st.columns(min(4, len(c.episodes)))
    for i, ep in enumerate(c.episodes[-8:]):
        link_cols[i % len(link_cols)].page_link(ui.pages()["timeline"], label=f"{ui.md(ep)} in Timeline",
                                                icon=":material/view_timeline:",
                                                query_params=ui.link_params(run=key, ep=ep))
