"""Retargeting: the A.4 inspection statistics over the open runs, and an audit of each retarget turn."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import charts, figures, ui
from dashboard.core import parse_int
from loaders import analysis_pages as ap
from loaders import run_pages
from loaders.paper_measures import RADIUS
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

RATES = {"inspect_rate": "retarget rate, inspecting turns", "other_rate": "retarget rate, other turns",
         "near_rate": "share of new targets near", "null_rate": "null rate (random earlier episodes)"}


def _config() -> dict:
    pct = {c: st.column_config.NumberColumn(label, format="percent") for c, label in RATES.items()}
    return {**pct, "inspect_turns": st.column_config.NumberColumn("inspecting turns"),
            "inspect_retargets": st.column_config.NumberColumn("of which retarget"),
            "other_turns": st.column_config.NumberColumn("other turns"),
            "other_retargets": st.column_config.NumberColumn("of which retarget "),
            "new_targets": st.column_config.NumberColumn("new targets (inspecting)"),
            "near": st.column_config.NumberColumn(f"near (≤ {RADIUS:g} cells)")}


runs, focus = ui.sidebar(("turn",))
key, run = ui.need_run(focus)
st.title("Retargeting")
st.caption(f"Paper §A.4 over the open runs. A turn *retargets* when it names a go_to/look_at target absent from "
           f"its running plan; a new target of an inspecting turn is *near* when it lies within {RADIUS:g} cells of "
           "the recorded position of an episode whose frames the turn inspected. The *null rate* is the chance of "
           "that with the inspected episodes replaced by as many random earlier episodes (exact).")
per_run, per_method = ui.cached(ap.retarget_tables)(runs)
st.subheader("Per method, pooled over seeds")
st.dataframe(per_method, hide_index=True, width="stretch", column_config=_config(), key="rt_methods")
with st.expander(f"Per run ({len(per_run)})", expanded=len(per_run) <= 4):
    st.dataframe(per_run, hide_index=True, width="stretch", column_config=_config(), key="rt_runs")

ui.figure_downloads(lambda: figures.retargeting_figure(runs), "retargeting", "single")
st.subheader(f"Retarget audit · {ui.md_code(key)}")
ui.show_problems(key, run)
table = ui.cached(ap.retarget_turns)(run)
if not len(table):
    st.info("This run has no retarget turn (no go_to/look_at target outside its plan).")
    st.stop()
only_insp = st.toggle("Only turns that inspected a frame", value=bool((table["inspected"] != "").any()),
                      key="w_rt_only")
shown = table[table["inspected"] != ""] if only_insp else table
st.dataframe(shown, hide_index=True, width="stretch", height=min(360, 40 + 35 * len(shown)), key="rt_table",
             column_config={"near": st.column_config.TextColumn("near / new", help=f"≤ {RADIUS:g} cells"),
                            "nearest": st.column_config.NumberColumn("nearest (cells)")})
choices = [int(t) for t in shown["turn"]]
if not choices:
    st.info("No retarget turn matches; switch the filter off.")
    st.stop()
want = parse_int(ui.qp("turn"))
if want is not None and want not in choices:
    if want in [int(t) for t in table["turn"]]:
        choices = sorted({*choices, want})
    else:
        st.warning(f"Turn {want} from the URL is not a retarget turn of {ui.md_code(key)}; showing turn {choices[0]}.")
        want = None
st.session_state["w_rt_turn"] = want if want is not None else choices[0]
labels = {int(r.turn): f"turn {r.turn} · step {r.step} · {r.targets}" + (f" · inspected {r.inspected}"
                                                                           if r.inspected else "")
          for r in table.itertuples()}
st.selectbox("Retarget turn", choices, key="w_rt_turn", format_func=lambda t: labels.get(t, str(t)),
             on_change=lambda: ui.set_qp(turn=st.session_state["w_rt_turn"]))
turn = int(st.session_state["w_rt_turn"])
if ui.qp("turn") != str(turn):
    ui.set_qp(turn=turn)
audit = ap.retarget_audit(run, turn)
if audit is None:
    st.error(f"Turn {turn} is not in {ui.md_code(key)}.")
    st.stop()
t = audit.turn
st.markdown(f"**Turn {t.turn}** · life {t.life} · steps {t.first_step}–{t.last_step} · "
            f"policy {ui.md_code(t.policy)}")

left, right = st.columns([1, 1])
with left:
    st.markdown("**Searched**")
    if audit.searches:
        st.dataframe(pd.DataFrame([{"query": str(s["query"]), "returned": len(s["returned"]),
                                    "ids": ", ".join(s["returned"])} for s in audit.searches]),
                     hide_index=True, width="stretch", key="rt_searches")
    else:
        st.caption("No index search in this turn.")
    st.markdown("**Inspected**")
    if audit.inspections:
        st.dataframe(pd.DataFrame([{**i, "found": "; ".join(i["found"])} for i in audit.inspections]),
                     hide_index=True, width="stretch", key="rt_inspections")
    else:
        st.caption("No frame inspected in this turn.")
    st.markdown("**New targets**")
    st.dataframe(pd.DataFrame(audit.targets), hide_index=True, width="stretch", key="rt_targets")
    p1, p2 = st.columns(2)
    p1.markdown("**Plan before**")
    p1.dataframe(pd.DataFrame(list(t.plan_before), columns=["label", "x", "y"]), hide_index=True,
                 width="stretch", key="rt_plan_before")
    p2.markdown("**Plan after**")
    p2.dataframe(pd.DataFrame(list(t.plan_after), columns=["label", "x", "y"]), hide_index=True,
                 width="stretch", key="rt_plan_after")
with right:
    st.plotly_chart(charts.retarget_map(audit.position, audit.inspections, audit.targets, audit.radius),
                    width="stretch", key="rt_map")
    st.caption(f"Agent (black) when the turn began; inspected episodes' recorded positions (diamonds) with the "
               f"{RADIUS:g}-cell circle; new targets (×, red when near).")

st.markdown("**Frames: what the agent had, beside what it inspected**")
insp = ui.inspections(run)
insp = insp[insp["turn"] == turn] if len(insp) else insp
refs: list[tuple[str, int | None, str | None]] = [(f"had · step {t.first_step}", t.first_step, None)]
for r in insp.head(3).itertuples():
    target = None if pd.isna(r.target_step) else int(r.target_step)
    refs.append((f"inspected {r.episode}" + (f" · step {target}" if target is not None else " · end"),
                 target, None if target is not None else r.episode))
cols = st.columns(len(refs))
for col, (caption, step, ep) in zip(cols, refs):
    try:
        img = ui.frame(run, step=step, episode=ep)
        col.image(run_pages.upscale(img), caption=ui.md(caption))
    except (FrameError, UnsafePath, KeyError) as e:
        col.warning(f"{ui.md(caption)}: {ui.md(e)}")
frames_q = ",".join(f"{key}:{ep if ep else step}" for _, step, ep in refs)
st.page_link(ui.pages()["frames"], label="Compare these frames in Frames", icon=":material/compare:",
             query_params=ui.link_params(frames=frames_q))
