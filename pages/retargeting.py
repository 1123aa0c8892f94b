"""Retargeting: the A.4 inspection statistics over the open runs, and an audit of each retarget turn."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import figures, ui, vega_charts, views
from dashboard.core import copy_key, parse_int
from loaders import analysis_pages as ap
from loaders import chart_data, frame_images, lookups
from loaders import turns as tv
from loaders.frame_compare import (
    FIND_OUTLINE,
    TARGET_OUTLINE,
    TURN_LEGEND,
    legend_text,
    outline_groups,
)
from loaders.paper_measures import RADIUS
from loaders.run import Run
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

FRAMES_MAX = 4  # the Frames page compares at most four frames
RATES = {"inspect_rate": "retarget rate, inspecting turns", "other_rate": "retarget rate, other turns",
         "near_rate": "share of new targets near", "null_rate": "null rate (random earlier episodes)"}


def _rates_text(df: pd.DataFrame) -> pd.DataFrame:
    """The rate columns as text: a percentage, or "n/a" where the rate is undefined (no turns)."""
    return df.assign(**{c: ["n/a" if v is None or pd.isna(v) else f"{v:.1%}" for v in df[c]]
                        for c in RATES if c in df})


def _config() -> dict:
    pct = {c: st.column_config.TextColumn(label) for c, label in RATES.items()}
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
groups = chart_data.tasks(runs)
for i, (task, group) in enumerate(groups):
    tag = "" if len(groups) == 1 else f"_{i}"
    per_run, per_method = views.retarget_tables(group)
    st.subheader("Per method, pooled over seeds" + ("" if len(groups) == 1 else f" · task {ui.md(task)}"))
    st.dataframe(_rates_text(per_method), hide_index=True, width="stretch", column_config=_config(),
                 key=f"rt_methods{tag}")
    each = st.expander(f"Per run ({len(per_run)})", expanded=1 < len(per_run) <= 4, key=f"w_rt_runs{tag}",
                       on_change="rerun")
    if each.open:  # lazy: built once opened (open from the start for two to four runs)
        each.dataframe(_rates_text(per_run), hide_index=True, width="stretch", column_config=_config(),
                       key=f"rt_runs{tag}")
    rates = views.retarget_rates(group, per_method)
    if len(rates):
        st.image(views.rates_svg(group))
    ui.figure_downloads(lambda g=group, r=rates: figures.retargeting_figure(g, rates=r), f"retargeting{tag}",
                        "single")
st.subheader(f"Retarget audit · {ui.md_code(key)}")
ui.show_problems(key, run)
table = views.retarget_turns(run)
if not len(table):
    st.info("This run has no retarget turn (no go_to/look_at target outside its plan).")
    st.stop()
only_insp = st.toggle("Only turns that inspected a frame", value=bool((table["inspected"] != "").any()),
                      key="w_rt_only")
shown = table[table["inspected"] != ""] if only_insp else table
st.dataframe(shown.assign(nearest=["n/a" if v is None or pd.isna(v) else f"{v:g}" for v in shown["nearest"]],
                          near=[v or "n/a" for v in shown["near"]]),
             hide_index=True, width="stretch", height=min(360, 40 + 35 * len(shown)), key="rt_table",
             column_config={"near": st.column_config.TextColumn("near / new", help=f"≤ {RADIUS:g} cells; n/a: "
                                                                "the turn inspected no episode of this run "
                                                                "(inherited episodes are not counted)"),
                            "nearest": st.column_config.TextColumn("nearest (cells)")})
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
labels = {int(r.turn): f"turn {r.turn} · step {r.step} · {r.targets}" + (f" · inspected {r.inspected}"
                                                                           if r.inspected else "")
          for r in table.itertuples()}
st.selectbox("Retarget turn", choices, format_func=lambda t: labels.get(t, str(t)),
             **ui.bound("w_rt_turn", "turn", choices[0], lambda v: t if (t := int(v)) in choices else None,
                        sync=True, keep=True))
turn = int(st.session_state["w_rt_turn"])
audit = views.retarget_audit(run, turn)
if audit is None:
    st.error(f"Turn {turn} is not in {ui.md_code(key)}.")
    st.stop()
t = audit.turn
shots = tv.inspection_shots(views.turn_view(run, turn))
page_of = ui.pages()
st.markdown(f"**Turn {t.turn}** · life {t.life} · {tv.turn_steps(t.first_step, t.last_step)} · "
            f"policy {ui.md_code(t.policy)}")
st.page_link(page_of["turns"], label=f"Open turn {t.turn} in Turns (everything about it on one page)",
             icon=":material/psychology:", query_params=ui.link_params(turn=t.turn))

left, right = st.columns([1, 1])
with left:
    st.markdown("**Searched**")
    if audit.searches:
        st.table(ap.searches_table(audit.searches), hide_index=True)
    else:
        st.caption("No index search in this turn.")
    st.markdown(f"**Inspected** ({len(shots)} episode(s))")
    if shots:
        st.dataframe(tv.shots_table(shots, audit.inspections), hide_index=True, width="stretch",
                     key="rt_inspections",
                     column_config={"frame": st.column_config.NumberColumn("frame shown (step)", format="%d"),
                                    "found": st.column_config.TextColumn("found", width="large"),
                                    "counted": st.column_config.CheckboxColumn(
                                        "counted", help="Counted by the §A.4 statistics (an episode of this run)")})
    else:
        st.caption("No frame inspected in this turn.")
    st.markdown("**New targets**")
    st.dataframe(pd.DataFrame(audit.targets).assign(nearest=lambda d: [
        "n/a" if v is None or pd.isna(v) else f"{v:g}" for v in d["nearest"]]) if audit.targets else pd.DataFrame(),
        hide_index=True, width="stretch", key="rt_targets")
    p1, p2 = st.columns(2)
    p1.markdown("**Plan before**")
    p1.table(ap.plan_table(t.plan_before), hide_index=True)
    p2.markdown("**Plan after**")
    p2.table(ap.plan_table(t.plan_after), hide_index=True)
with right:
    st.image(views.map_svg(run, turn))
    st.caption(f"Agent (black) when the turn began; inspected episodes' recorded positions (numbered diamonds; "
               f"episodes within {vega_charts.LABEL_GAP:g} cells share one) with the {RADIUS:g}-cell circle "
               "(none around an inherited episode: its position is the earlier game's, and §A.4 does not count "
               "it); new targets (×, red when near).")
    groups = vega_charts.inspected_groups(audit.inspections)
    if groups:
        st.table(ap.map_labels_table(groups), hide_index=True)

st.markdown("**Frames: what the agent had, beside what it inspected**")
st.caption("For each inspected episode, the frame that showed the turn's new target; else the decoded frame with "
           "the most finds (the table above says which and why).")
legend = views.outline_legend(TURN_LEGEND)
st.image(legend, width=legend.shape[1], output_format="PNG")
st.caption(legend_text(TURN_LEGEND))
shot_pages = tv.shot_pages(len(shots))
if ui.qp("shots") and ui.qp("shots") not in {str(i) for i in range(1, len(shot_pages) + 1)}:
    st.warning(f"URL parameter `shots` = {ui.md_code(ui.qp('shots'), 40)} is no page of this turn's "
               f"{len(shot_pages)} page(s) of inspected episodes: dropped.", icon="🚫")
if len(shot_pages) > 1:
    st.selectbox("Inspected episodes shown", range(len(shot_pages)),
                 format_func=lambda i: f"{shot_pages[i][0] + 1}–{shot_pages[i][1]} of {len(shots)}",
                 **ui.bound("w_rt_shots", "shots", 0,
                            lambda v: i if 0 <= (i := int(v) - 1) < len(shot_pages) else None,
                            lambda i: i + 1))
lo_i, hi_i = shot_pages[int(st.session_state.get("w_rt_shots") or 0)] if shot_pages else (0, 0)
refs: list[tuple[str, str, Run | None, int | None, str | None, int | None, object]] = [
    (f"had · {sf.label}", key, run, sf.step, sf.episode, None, None)
    for sf in tv.start_frames(run, t.first_step, t.life)]
for s in shots[lo_i:hi_i]:
    caption = f"inspected {s.label} · " + (f"step {s.step}" + (" of that run" if s.origin else "")
                                           if s.step is not None else "end observation") + f" · {s.why}"
    try:
        holder, step, ep, life = lookups.frame_holder(run, s.episode, s.step, None)
        refs.append((caption, copy_key(key) if s.origin else key, holder, step, ep, life, s))
    except FrameError as e:
        refs.append((f"{caption}: {e}", key, None, None, None, None, s))
cols = st.columns(max(1, len(refs)))
for col, (caption, _, holder, step, ep, life, shot) in zip(cols, refs):
    if holder is None:
        col.warning(ui.md(caption))
        continue
    try:
        img = views.frame(holder, step=step, episode=ep, life=life)
        if isinstance(shot, tv.InspectedShot):
            img = outline_groups(img, [([f.tile for f in shot.shown if f.tile and f not in shot.on_target],
                                        FIND_OUTLINE),
                                       ([f.tile for f in shot.on_target if f.tile], TARGET_OUTLINE)],
                                 factor=max(1, 256 // img.shape[1]), width=2)
        else:
            img = frame_images.upscale(img)
        col.image(img, caption=ui.md(caption), output_format="PNG")
    except (FrameError, UnsafePath, KeyError) as e:
        col.warning(f"{ui.md(caption)}: {ui.md(e)}")
frames_q = [f"{k}:{ep if ep else step}" for _, k, holder, step, ep, _, _ in refs if holder is not None]
if frames_q:
    st.page_link(page_of["frames"], label="Compare these frames in Frames"
                 + (f" (the first {FRAMES_MAX})" if len(frames_q) > FRAMES_MAX else ""), icon=":material/compare:",
                 query_params=ui.link_params(frames=",".join(frames_q[:FRAMES_MAX])))
