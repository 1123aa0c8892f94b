"""Runs: every run under the runs root; open one or several (kept in the URL)."""
from __future__ import annotations

import streamlit as st

from dashboard import ui, vega_charts
from dashboard.core import run_key, split_list
from dashboard.theme import STATUS_LABELS
from loaders import runs_summary

runs_open, _ = ui.sidebar()
root = ui.root()
st.title("Runs")
st.caption(f"Every run under the runs root {ui.md_code(ui.root_label())} (nested folders included). Read-only: the "
           "dashboard never runs code from a run folder.")

if not root.is_dir():
    st.error(f"The runs root {ui.md_code(ui.root_label())} is not a folder. Start the dashboard with `mfm dashboard ROOT`.")
    st.stop()

runs = ui.all_runs()
if not runs:
    st.info(f"No runs under {ui.md_code(ui.root_label())} yet. A run folder holds `run.json` and `index.jsonl`; "
            "`mfm dashboard ROOT` points the dashboard at another folder.")
    st.stop()

AUTO_CHECK = 12
check = len(runs) <= AUTO_CHECK or st.session_state.get("w_check_all", False)
with st.spinner(f"Reading {len(runs)} run(s)" + (" and checking them for damage…" if check else "…")):
    overview = runs_summary.runs_overview(runs, root, check=check)
by_key = {run_key(root, r.path): r for r in runs}
keys = list(overview["key"])

live = any(r.status == "running" for r in runs)
follow = live and st.toggle("Follow running runs (refresh every 10 s)", value=True, key="w_follow",
                            help="A run being written is re-read whenever its files change.")


def _blank(v: object, missing: str) -> str:
    """A table cell's text: ``missing`` for an unknown value, never "None"."""
    return missing if v is None or (isinstance(v, float) and v != v) else f"{int(v)}"


def _steps(steps: object, budget: object) -> str:
    """``steps / budget`` with thousands separators (``?`` for an unknown count)."""
    def fmt(v: object) -> str:
        return "?" if v is None or (isinstance(v, float) and v != v) else f"{int(v):,}"
    return f"{fmt(steps)} / {fmt(budget)}"


@st.fragment(run_every=10 if follow else None)
def _table() -> None:
    """The runs table; refreshed on a timer while a run is being written."""
    ov = runs_summary.runs_overview(ui.all_runs(), root, check=check) if follow else overview
    table = ov.assign(status=ov["status"].map(lambda s: STATUS_LABELS.get(s, s)),
                      progress=ov["milestones_reached"] / ov["milestones_total"].clip(lower=1),
                      seed=[_blank(v, "unknown") for v in ov["seed"]],
                      problems=[_blank(v, "not checked") for v in ov["problems"]],
                      steps=[_steps(s, b) for s, b in zip(ov["steps"], ov["budget"])])
    cols = ["key", "task", "method", "ablations", "seed", "steps", "lives", "deaths", "milestones", "progress",
            "status", "problems", "episodes"]
    st.dataframe(
        table[cols[:4] + ["inherited"] + cols[4:] if (table["inherited"] != "").any() else cols],
        hide_index=True, width="stretch",
        column_config={
            "key": st.column_config.TextColumn("run", help="Folder relative to the runs root", width="medium"),
            "task": st.column_config.TextColumn("task", width="small"),
            "method": st.column_config.TextColumn("method", width="small"),
            "ablations": st.column_config.TextColumn("ablations", width="small"),
            "inherited": st.column_config.TextColumn("inherited memory of", width="small",
                                                     help="The run whose memory this run started with (mfm run "
                                                          "--inherit); its copy is the run's inherited/ folder"),
            "steps": st.column_config.TextColumn("steps / budget", help="Env steps taken (last step) of the step "
                                                 "budget", width="small"),
            "milestones": st.column_config.TextColumn("milestones", help="Reached of the task's total", width="small"),
            "progress": st.column_config.ProgressColumn("reached", min_value=0.0, max_value=1.0, format="percent",
                                                        width="small"),
            "seed": st.column_config.TextColumn("seed", help="World seed (unknown: the run records none)",
                                                width="small"),
            "lives": st.column_config.NumberColumn("lives", format="%d", width="small"),
            "deaths": st.column_config.NumberColumn("deaths", format="%d", width="small"),
            "episodes": st.column_config.NumberColumn("episodes", format="%d", width="small"),
            "status": st.column_config.TextColumn("status", width="small"),
            "problems": st.column_config.TextColumn(
                "problems", width="small", help="Damaged lines or files (see below); not checked: open the run, "
                                                "or check all runs below"),
        })
    if follow:
        st.caption(f"Refreshed {ui.stamp()}")


_table()


def _focus(picked: list[str]) -> dict[str, str | None]:
    """The focused run stays if still open, else the first run opened."""
    current = ui.qp("run")
    return {"run": current if current in picked else (picked[0] if picked else None)}


LABELS = {row.key: f"{row.key} — {row.method} · {row.task} · seed {_blank(row.seed, '?')} · {row.milestones}"
          + (f" · inherited memory of {row.inherited}" if row.inherited else "")
          for row in overview[["key", "method", "task", "seed", "milestones", "inherited"]].itertuples(index=False)}


st.multiselect("Open runs", keys, format_func=LABELS.__getitem__,
               **ui.bound("w_runs", "runs", [], lambda v: [k for k in split_list(v) if k in keys], ",".join,
                          also=_focus),
               placeholder="Choose one or several runs to open",
               help="The choice is stored in the URL (runs=...), so the view is a shareable link.")
if runs_open:
    params = ui.link_params()
    cols = st.columns(3)
    p = ui.pages()
    cols[0].page_link(p["timeline"], label="Timeline of the focused run", query_params=params)
    cols[1].page_link(p["frames"], label="Compare frames", query_params=params)
    cols[2].page_link(p["grid"], label="Spatial grid", query_params=params)
    with st.form("runs_search", border=False):
        f1, f2 = st.columns([4, 1], vertical_alignment="bottom")
        words = f1.text_input("Search the open runs", placeholder="what the agent searched, found, noted, planned; "
                              "episode summaries and events", key="w_runs_find")
        if f2.form_submit_button("Search", icon=":material/search:") and words.strip():
            st.switch_page(p["search"], query_params={**params, "find": words.strip()})

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
ov = overview if shown is runs else runs_summary.runs_overview(shown, root, check=check or bool(runs_open))
c1, c2 = st.columns([2, 3])
c1.vega_lite_chart(spec=vega_charts.spec(vega_charts.reached_chart(ov)), width="stretch",
                  key="reached")
ms = runs_summary.milestone_steps(shown, root)
order = runs_summary.milestone_order(shown, ms)
if len(ms):
    c2.vega_lite_chart(spec=vega_charts.spec(vega_charts.milestones_chart(ms, order)),
                       width="stretch", key="ms_steps")
else:
    c2.info("No milestone reached yet in these runs.")
st.caption(("Open runs" if runs_open else "All runs") + f" · refreshed {ui.stamp()}")
