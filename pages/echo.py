"""Echo: learner runs (recipes learned from scratch). Unlock curve per configuration, the
analogy graph of the focused run, and a viewer for its Context State Descriptors."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import charts, safe_text, ui
from loaders import echo


@st.cache_data(max_entries=32, show_spinner=False)
def _learners(paths: tuple[str, ...], sigs: tuple) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    runs, problems = echo.learner_runs(Path(p) for p in paths)
    keep = {str(r.path) for r in runs}
    return echo.unlock_bands(runs), pd.DataFrame(
        [{"run": safe_text.relative_paths(str(d), ui.root()), "where": f"{q.file}:{q.line}", "problem": q.message}
         for d, q in problems]), \
        [p for p in paths if p in keep]


@st.cache_data(max_entries=64, show_spinner=False)
def _library(path: str, sig: tuple) -> tuple[dict, pd.DataFrame, pd.DataFrame, list[str]]:
    csds, problems = echo.read_csds(Path(path))
    run, _ = echo.learner_runs([Path(path)])
    attempts = echo.attempts_table(run[0]) if run else pd.DataFrame()
    return csds, echo.analogy_edges(csds), attempts, [f"{q.file}:{q.line}: {q.message}" for q in problems]


runs, focus = ui.sidebar(("csd",))
st.title("Echo")
st.caption("Learner runs: Crafter's recipes are learned from the learner's own attempts (see docs/architecture.md, "
           "Echo). One Echo episode is one attempt at a goal.")
pool = [(k, r) for k, r in runs if echo.has_csd(r.path)]
if not pool:
    base = ui.root()
    pool = [(str(r.path.resolve().relative_to(base.resolve()).as_posix()), r) for r in ui.all_runs()
            if echo.has_csd(r.path)]
    if pool:
        st.info("None of the open runs is a learner run; showing every learner run under the runs root.")
if not pool:
    st.info("No learner run (with csd.jsonl) is open or under the runs root. Make some with `mfm echo run`.")
    st.stop()

bands, problems, _ = _learners(tuple(str(r.path) for _, r in pool), tuple(r.signature for _, r in pool))
st.subheader("Unlock curve per configuration")
st.caption("Distinct achievements unlocked after each Echo episode: the line is the mean over seeds, the band "
           "spans the seeds.")
if len(bands):
    fig = charts.band_figure(bands, "achievements unlocked")
    fig.update_xaxes(title_text="Echo episode")
    st.plotly_chart(fig, width="stretch", key="echo_curve")
else:
    st.info("No Echo episode recorded yet (echo.jsonl is empty).")
if len(problems):
    with st.expander(f"⚠️ {len(problems)} damaged line(s) in echo.jsonl were skipped"):
        st.dataframe(problems, hide_index=True, width="stretch")

keys = [k for k, _ in pool]
want = ui.qp("run")
key = want if want in keys else keys[0]
ui.init_widget("w_echo_run", key)
key = st.selectbox("Learner run", keys, key="w_echo_run",
                   on_change=lambda: ui.set_qp(run=st.session_state["w_echo_run"]))
run = dict(pool)[key]
csds, edges, attempts, csd_problems = _library(str(run.path), run.signature)
for p in csd_problems:
    st.warning(f"{ui.md_code(key)}: {ui.md(p)}")

st.subheader("Analogy graph")
st.caption("Each induced task (right) is linked to the representative task it was generalised from (solid) and to "
           "the exemplar sharing the substituted value (dotted, labelled with its per-axis similarity). Colour: "
           "verified, failed or still a candidate.")
if len(edges):
    st.plotly_chart(echo.analogy_figure(csds, edges), width="stretch", key="echo_graph")
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
pick = ui.qp("csd")
ui.init_widget("w_csd", pick if pick in ids else ids[0])
if st.session_state["w_csd"] not in ids:
    st.session_state["w_csd"] = ids[0]
pick = st.selectbox("Descriptor", ids, key="w_csd", on_change=lambda: ui.set_qp(csd=st.session_state["w_csd"]))
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
                                                query_params=ui.link_params(run=key, episode=ep))
