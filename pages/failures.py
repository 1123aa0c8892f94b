"""Failures: every failed or interrupted action and every death, filterable; a row opens its
episode's filmstrip and a world-aligned comparison in Frames."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import ui, views
from dashboard.core import clamp_range, format_range
from loaders import failures as fl
from loaders.frame_compare import FAILURE_LEGEND, legend_image, legend_text
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

BACK_MAX = 64  # the most steps a filmstrip reaches back before its episode

_, focus = ui.sidebar(("act", "mat", "outcome", "cause", "range", "ep", "back"))  # life: shared with the time cursor
key, run = ui.need_run(focus)
st.title("Failures")
st.caption("Every failed or interrupted action (collect, place, make, attack, go_to, …) and every death. Filter, "
           "then pick a row: its filmstrip shows the episode's frames, after those of the steps just before it in "
           "the same life, with the target tile outlined, the vitals under each frame, the last frame before the "
           "failure and the frame of the failure itself.")
ui.show_problems(key, run)
table = views.failures(run)
if not len(table):
    st.info("This run has no failed or interrupted action and no death.")
    st.stop()


def _list_param(options: list, cast: Callable[[str], Any] = str, sep: str = ",") -> Callable[[str], list | None]:
    """Parse a ``sep``-separated URL value into the known options it names (None: none)."""
    return lambda v: fl.known_values(v, options, sep, cast)[0] or None


def _fmt(sep: str = ",") -> Callable[[list], str]:
    return lambda vals: sep.join(map(str, vals))


first, last = int(table["step"].min()), int(table["step"].max())
actions, materials, outcomes, causes, lives = (fl.filter_options(table, c) for c in
                                               ("action", "material", "outcome", "cause", "life"))
FILTERS = (("act", "Action", "w_fail_act", actions, str, ","),
           ("mat", "Material", "w_fail_mat", materials, str, ","),
           ("outcome", "Outcome", "w_fail_out", outcomes, str, ","),
           ("cause", "Cause", "w_fail_cause", causes, str, "|"),
           ("life", "Life", "w_fail_life", lives, int, ","))
for param, label, _, options, cast, sep in FILTERS:
    _, dropped = fl.known_values(ui.qp(param), options, sep, cast)
    if dropped:
        st.warning(f"URL parameter {ui.md_code(param)}: {', '.join(ui.md_code(d, 60) for d in dropped)} "
                   f"{'is' if len(dropped) == 1 else 'are'} not among the {label.lower()} values of any failure of "
                   f"{ui.md_code(key)}: dropped.", icon="🚫")
if ui.qp("back") and fl.known_values(ui.qp("back"), list(range(BACK_MAX + 1)), cast=int)[1]:
    st.warning(f"URL parameter `back` = {ui.md_code(ui.qp('back'), 40)} is not a number of steps from 0 to "
               f"{BACK_MAX}: dropped.", icon="🚫")
c = st.columns(5)
for col, (param, label, wkey, options, cast, sep) in zip(c, FILTERS):
    col.multiselect(label, options, **ui.bound(wkey, param, [], _list_param(options, cast, sep), _fmt(sep)),
                    help="Causes hold commas, so the URL separates them with |." if sep == "|" else None)
if last > first:
    if ui.qp("range") and clamp_range(ui.qp("range"), first, last) is None:
        st.warning(f"URL parameter `range` = {ui.md_code(ui.qp('range'), 40)} is not a step range `lo-hi` within "
                   f"{first}–{last}: dropped.", icon="🚫")
    st.slider("Step range", first, last, **ui.bound("w_fail_range", "range", (first, last),
                                                    lambda v: clamp_range(v, first, last), format_range, sync=True))
rng = st.session_state.get("w_fail_range") or (first, last)
shown = fl.filter_failures(table, st.session_state["w_fail_act"], st.session_state["w_fail_mat"],
                           st.session_state["w_fail_out"], st.session_state["w_fail_cause"],
                           st.session_state["w_fail_life"], tuple(rng))
listed = shown.head(fl.LISTED)
st.caption(f"{len(shown)} of {len(table)} failures and deaths match. Pick a row to open its filmstrip."
           + (f" The first {fl.LISTED:,} are listed: narrow the filters or the step range to reach the others."
              if len(shown) > fl.LISTED else ""))
cols = ["step", "life", "episode", "action", "material", "target_x", "target_y", "outcome", "cause", "turn", "summary"]


def _on_row() -> None:
    """Table selection callback: the picked row's episode opens below (only when the selection changes)."""
    sel = st.session_state.get("fail_table")
    rows = sel["selection"]["rows"] if sel and sel.get("selection") else []
    if rows and rows[0] < len(listed) and listed.iloc[rows[0]]["episode"]:
        ui.set_qp(ep=listed.iloc[rows[0]]["episode"])


if len(shown):
    st.dataframe(listed[cols], hide_index=True, width="stretch", height=min(420, 45 + 35 * len(listed)),
                 on_select=_on_row, selection_mode="single-row", key="fail_table",
                 column_config={"summary": st.column_config.TextColumn("summary", width="large"),
                                "target_x": st.column_config.NumberColumn("target x"),
                                "target_y": st.column_config.NumberColumn("target y")})
else:
    st.info("No failure or death matches these filters.")
options = list(dict.fromkeys(e for e in listed["episode"] if e))
want = ui.qp("ep")
if want and want not in options and (shown["episode"] == want).any():
    options.insert(0, want)
labels: dict[str, str] = {}
for r in shown[shown["episode"].isin(options)].itertuples():
    if r.episode and r.episode not in labels:  # an episode's first row labels it
        labels[r.episode] = f"{r.episode} · step {r.step} · {r.action} {r.material} · {r.outcome}: {r.cause}"
if want and want not in options:
    why = "matches none of the filters above" if want in set(table["episode"]) else "is no failure or death of " \
        + ui.md_code(key)
    st.warning(f"URL parameter `ep` = {ui.md_code(want, 40)} {why}: its filmstrip is not shown.", icon="🚫")
st.selectbox("Open the filmstrip of", options, index=None,
             placeholder="Pick a failure (or a row above)" if options else "No failure matches the filters",
             format_func=lambda e: labels.get(e, e),
             **ui.bound("w_fail_ep", "ep", None, lambda v: v if v in options else None, sync=True))
ep = st.session_state["w_fail_ep"]
if not ep:
    st.stop()

row = shown[shown["episode"] == ep].iloc[0]
target = fl.target_of(row)
st.subheader(ui.md(f"{ep} · {row['action'] or '?'} {row['material']} · {row['outcome']}"))
st.markdown(ui.md(f"{row['cause']} at step {row['step']} in life {row['life']} · steps "
                    f"{row['first_step']}–{row['last_step']} · target {target if target else 'none'}"))
st.caption(ui.md(row["summary"]))
st.number_input("Steps before the episode", 0, BACK_MAX, step=1,
                help="The filmstrip also shows the frames of this many steps before the episode, within the same "
                     "life: what led to the failure can lie in the episode before.",
                **ui.bound("w_fail_back", "back", fl.BACK_STEPS,
                           lambda v: b if 0 <= (b := int(v)) <= BACK_MAX else None))
back = int(st.session_state["w_fail_back"])
try:
    strip = views.filmstrip(run, ep, target, int(row["step"]), back)
except KeyError as e:
    st.error(ui.md(e))
    st.stop()
if target is not None:
    legend = legend_image(FAILURE_LEGEND)
    st.image(legend, width=legend.shape[1], output_format="PNG")
    st.caption(legend_text(FAILURE_LEGEND))
imgs, caps = [], []
for sf in strip:
    try:
        img = fl.strip_image(views.frame(run, step=sf.step, life=sf.life), sf)
    except (FrameError, UnsafePath) as e:
        st.caption(f"step {sf.step}: {ui.md(e)}")
        continue
    imgs.append(img)
    role = {"before": " · LAST BEFORE", "after": " · FAILURE STEP"}.get(sf.role, "")
    where = f"({sf.position[0]}, {sf.position[1]})" if sf.position else "?"
    caps.append(f"step {sf.step}{role} · at {where}" + (f" · {sf.episode}" if sf.episode != ep else "")
                + (f" · {sf.vitals_text}" if sf.vitals else " · vitals not recorded")
                + (f" · hurt: {sf.damage}" if sf.damage else "")
                + (f" · target tile {sf.target_tile}" if sf.target_tile else ""))
if imgs:
    st.image(imgs, width=imgs[0].shape[1], caption=caps, output_format="PNG")
else:
    st.info("No frame of this episode, or of the steps before it in its life, is stored.")
earlier = fl.reached_back(strip, ep, int(row["first_step"]))
if earlier:
    st.caption(f"Steps {earlier[0].step}–{earlier[-1].step} are of the episode(s) before in life {row['life']} "
               f"({', '.join(dict.fromkeys(str(sf.episode) for sf in earlier))}).")
before, after = fl.around(strip)
pg = ui.pages()
if before is not None and after is not None:
    st.page_link(pg["frames"], label=f"Compare step {before} with step {after} in Frames (world-aligned)",
                 icon=":material/compare:",
                 query_params=ui.link_params(frames=f"{key}:{before},{key}:{after}", diff="1", align="1"))
else:
    st.caption("No before/after pair to compare: " + ("the failure step has no stored frame in this life."
                                                      if after is None else "the life begins at the failure step."))
cell = fl.failure_cell(run, row)
if cell is not None:
    st.page_link(pg["grid"], label=f"Open cell ({cell[0]}, {cell[1]}) in the Spatial grid"
                 + (f", the target ({target[0]}, {target[1]}) marked" if target else ""), icon=":material/grid_on:",
                 query_params=ui.link_params(cell=f"{cell[0]},{cell[1]}", life=int(row["life"]), step=int(row["step"]),
                                             mark=f"{target[0]},{target[1]}" if target else None))
if not pd.isna(row["turn"]):
    st.page_link(pg["turns"], label=f"Open turn {int(row['turn'])} in Turns", icon=":material/psychology:",
                 query_params=ui.link_params(turn=int(row["turn"])))
st.page_link(pg["timeline"], label=f"{ui.md(ep)} in Timeline", icon=":material/view_timeline:",
             query_params=ui.link_params(ep=ep))
