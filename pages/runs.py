"""Runs: every run under the runs root; open one or several (kept in the URL)."""
from __future__ import annotations

import streamlit as st

from dashboard import charts, ui
from dashboard.core import run_key, split_list
from dashboard.theme import STATUS_LABELS
from loaders import run_pages

runs_open, _ = ui.sidebar()
root = ui.root()
st.title("Runs")
st.caption(f"Every run under the runs root {ui.md_code(root.name)} (nested folders included). Read-only: the "
           "dashboard never runs code from a run folder.")

if not root.is_dir():
    st.error(f"The runs root {ui.md_code(root.name)} is not a folder. Start the dashboard with `mfm dashboard ROOT`.")
    st.stop()

runs = ui.all_runs()
if not runs:
    st.info(f"No runs under {ui.md_code(root.name)} yet. A run folder holds `run.json` and `index.jsonl`; "
            "`mfm dashboard ROOT` points the dashboard at another folder.")
    st.stop()

AUTO_CHECK = 12
check = len(runs) <= AUTO_CHECK or st.session_state.get("w_check_all", False)
with st.spinner(f"Reading {len(runs)} run(s)" + (" and checking them for damage…" if check else "…")):
    overview = run_pages.runs_overview(runs, root, check=check)
by_key = {run_key(root, r.path): r for r in runs}
keys = list(overview["key"])

live = any(r.status == "running" for r in runs)
follow = live and st.toggle("Follow running runs (refresh every 10 s)", value=True, key="w_follow",
                            help="A run being written is re-read whenever its files change.")


@st.fragment(run_every=10 if follow else None)
def _table() -> None:
    """The runs table; refreshed on a timer while a run is being written."""
    fresh = ui.all_runs() if follow else runs
    ov = run_pages.runs_overview(fresh, root, check=check)
    table = ov.assign(status=ov["status"].map(lambda s: STATUS_LABELS.get(s, s)),
                      progress=ov["milestones_reached"] / ov["milestones_total"].clip(lower=1),
                      open=ov["key"].isin([k for k, _ in runs_open]))
    st.dataframe(
        table[["open", "key", "task", "method", "ablations", "seed", "steps", "lives", "milestones", "progress",
               "status", "problems", "deaths", "episodes", "budget"]],
        hide_index=True, width="stretch",
        column_config={
            "open": st.column_config.CheckboxColumn("open", help="Opened in the other pages", width="small"),
            "key": st.column_config.TextColumn("run", help="Folder relative to the runs root"),
            "steps": st.column_config.NumberColumn("steps", help="Env steps taken (last step)", format="%d"),
            "budget": st.column_config.NumberColumn("budget", help="Step budget", format="%d"),
            "milestones": st.column_config.TextColumn("milestones", help="Reached of the task's total"),
            "progress": st.column_config.ProgressColumn("reached", min_value=0.0, max_value=1.0, format="percent",
                                                        width="small"),
            "seed": st.column_config.NumberColumn("seed", format="%d", width="small"),
            "lives": st.column_config.NumberColumn("lives", format="%d", width="small"),
            "problems": st.column_config.NumberColumn(
                "problems", help="Damaged lines or files (see below); blank: not checked yet (open the run, or "
                                 "check all runs below)"),
        })
    if follow:
        st.caption(f"Refreshed {ui.stamp()}")


_table()


def _on_pick() -> None:
    picked = st.session_state["w_runs"]
    current = ui.qp("run")
    ui.set_qp(runs=",".join(picked), run=current if current in picked else (picked[0] if picked else None))


valid = [k for k in split_list(ui.qp("runs")) if k in keys]
ui.init_widget("w_runs", valid)


def _label(k: str) -> str:
    row = overview[overview["key"] == k].iloc[0]
    return f"{k} — {row['method']} · {row['task']} · seed {row['seed']} · {row['milestones']}"


st.multiselect("Open runs", keys, key="w_runs", on_change=_on_pick, format_func=_label,
               placeholder="Choose one or several runs to open",
               help="The choice is stored in the URL (runs=...), so the view is a shareable link.")
if runs_open:
    params = ui.link_params()
    cols = st.columns(3)
    p = ui.pages()
    cols[0].page_link(p["timeline"], label="Timeline of the focused run", query_params=params)
    cols[1].page_link(p["frames"], label="Compare frames", query_params=params)
    cols[2].page_link(p["grid"], label="Spatial grid", query_params=params)

if not check:
    st.toggle(f"Check all {len(runs)} runs for damage (reads every run)", key="w_check_all",
              help=f"With more than {AUTO_CHECK} runs only the manifests are read until you ask; opened runs are "
                   "always checked.")
damaged = [(k, by_key[k]) for k in keys if (check or by_key[k].loaded) and by_key[k].problems]
if damaged:
    st.subheader("Damaged runs")
    for k, r in damaged:
        ui.show_problems(k, r)

st.subheader("Milestones")
shown = [r for k, r in runs_open] or runs
tasks = sorted({r.manifest.task for r in shown if r.manifest})
if len(tasks) > 1:
    task = st.radio("Task", tasks, horizontal=True, key="w_ms_task", format_func=ui.md,
                    help="Milestones are compared within one task (each task has its own list).")
    shown = [r for r in shown if r.manifest and r.manifest.task == task]
ov = run_pages.runs_overview(shown, root, check=check or bool(runs_open))
c1, c2 = st.columns([2, 3])
c1.plotly_chart(charts.reached_figure(ov), width="stretch", key="reached")
ms = run_pages.milestone_steps(shown, root)
order = []
for r in shown:
    if r.manifest:
        order += [m for m in r.manifest.milestone_order if m not in order]
order = [m for m in order if m in set(ms["milestone"])] + sorted(set(ms["milestone"]) - set(order))
if len(ms):
    c2.plotly_chart(charts.milestones_figure(ms, order), width="stretch", key="ms_steps")
else:
    c2.info("No milestone reached yet in these runs.")
st.caption(("Open runs" if runs_open else "All runs") + f" · refreshed {ui.stamp()}")
