"""Failures: every failed or interrupted action and every death, filterable; a row opens its
episode's filmstrip and a world-aligned comparison in Frames."""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd
import streamlit as st

from dashboard import ui
from dashboard.core import clamp_range, format_range, split_list
from loaders import failures as fl
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

_, focus = ui.sidebar(("act", "mat", "outcome", "cause", "life", "range", "ep"))
key, run = ui.need_run(focus)
st.title("Failures")
st.caption("Every failed or interrupted action (collect, place, make, attack, go_to, …) and every death. Filter, "
           "then pick a row: its filmstrip shows every frame of the episode with the target tile outlined, the "
           "last frame before the failure and the frame of the failure itself.")
ui.show_problems(key, run)
table = ui.cached(fl.failures)(run)
if not len(table):
    st.info("This run has no failed or interrupted action and no death.")
    st.stop()


def _choices(col: str) -> list:
    return sorted({v for v in table[col] if v != ""}, key=str)


def _list_param(options: list, cast: Callable[[str], Any] = str, sep: str = ",") -> Callable[[str], list | None]:
    """Parse a ``sep``-separated URL value into the known options it names (None: none)."""
    def parse(v: str) -> list | None:
        vals = []
        for x in (split_list(v) if sep == "," else [p.strip() for p in v.split(sep)]):
            try:
                vals.append(cast(x))
            except ValueError:
                continue
        vals = [x for x in vals if x in options]
        return vals or None
    return parse


def _fmt(sep: str = ",") -> Callable[[list], str]:
    return lambda vals: sep.join(map(str, vals))


first, last = int(table["step"].min()), int(table["step"].max())
c = st.columns(5)
actions, materials, outcomes = _choices("action"), _choices("material"), _choices("outcome")
causes, lives = _choices("cause"), sorted({int(x) for x in table["life"]})
c[0].multiselect("Action", actions, **ui.bound("w_fail_act", "act", [], _list_param(actions), _fmt()))
c[1].multiselect("Material", materials, **ui.bound("w_fail_mat", "mat", [], _list_param(materials), _fmt()))
c[2].multiselect("Outcome", outcomes, **ui.bound("w_fail_out", "outcome", [], _list_param(outcomes), _fmt()))
c[3].multiselect("Cause", causes, **ui.bound("w_fail_cause", "cause", [], _list_param(causes, sep="|"), _fmt("|")),
                 help="Causes hold commas, so the URL separates them with |.")
c[4].multiselect("Life", lives, **ui.bound("w_fail_life", "life", [], _list_param(lives, int), _fmt()))
if last > first:
    st.slider("Step range", first, last, **ui.bound("w_fail_range", "range", (first, last),
                                                    lambda v: clamp_range(v, first, last), format_range, sync=True))
rng = st.session_state.get("w_fail_range") or (first, last)
shown = fl.filter_failures(table, st.session_state["w_fail_act"], st.session_state["w_fail_mat"],
                           st.session_state["w_fail_out"], st.session_state["w_fail_cause"],
                           st.session_state["w_fail_life"], tuple(rng))
st.caption(f"{len(shown)} of {len(table)} failures and deaths match. Pick a row to open its filmstrip.")
cols = ["step", "life", "episode", "action", "material", "target_x", "target_y", "outcome", "cause", "turn", "summary"]


def _on_row() -> None:
    """Table selection callback: the picked row's episode opens below (only when the selection changes)."""
    sel = st.session_state.get("fail_table")
    rows = sel["selection"]["rows"] if sel and sel.get("selection") else []
    if rows and rows[0] < len(shown) and shown.iloc[rows[0]]["episode"]:
        ui.set_qp(ep=shown.iloc[rows[0]]["episode"])


st.dataframe(shown[cols], hide_index=True, width="stretch", height=min(420, 40 + 35 * len(shown)),
             on_select=_on_row, selection_mode="single-row", key="fail_table",
             column_config={"summary": st.column_config.TextColumn("summary", width="large"),
                            "target_x": st.column_config.NumberColumn("target x"),
                            "target_y": st.column_config.NumberColumn("target y")})
options = [e for e in table["episode"] if e]
labels: dict[str, str] = {}
for r in table.itertuples():
    if r.episode and r.episode not in labels:  # an episode's first row labels it
        labels[r.episode] = f"{r.episode} · step {r.step} · {r.action} {r.material} · {r.outcome}: {r.cause}"
st.selectbox("Open the filmstrip of", options, index=None, placeholder="Pick a failure (or a row above)",
             format_func=lambda e: labels[e],
             **ui.bound("w_fail_ep", "ep", None, lambda v: v if v in options else None, sync=True))
ep = st.session_state["w_fail_ep"]
if not ep:
    st.stop()

row = table[table["episode"] == ep].iloc[0]
target = None if pd.isna(row["target_x"]) or pd.isna(row["target_y"]) else (int(row["target_x"]),
                                                                            int(row["target_y"]))
st.subheader(ui.md(f"{ep} · {row['action'] or '?'} {row['material']} · {row['outcome']}"))
st.markdown(ui.md(f"{row['cause']} at step {row['step']} in life {row['life']} · steps "
                    f"{row['first_step']}–{row['last_step']} · target {target if target else 'none'}"))
st.caption(ui.md(row["summary"]))
try:
    strip = ui.cached(fl.filmstrip)(run, ep, target, int(row["step"]))
except KeyError as e:
    st.error(ui.md(e))
    st.stop()
imgs, caps = [], []
for sf in strip:
    try:
        img = fl.strip_image(ui.frame(run, step=sf.step), sf)
    except (FrameError, UnsafePath) as e:
        st.caption(f"step {sf.step}: {ui.md(e)}")
        continue
    imgs.append(img)
    role = {"before": " · LAST BEFORE", "after": " · FAILURE STEP"}.get(sf.role, "")
    where = f"({sf.position[0]}, {sf.position[1]})" if sf.position else "?"
    caps.append(f"step {sf.step}{role} · at {where}" + (f" · target tile {sf.target_tile}" if sf.target_tile else ""))
if imgs:
    st.image(imgs, width=imgs[0].shape[1], caption=caps, output_format="PNG")
else:
    st.info("No frame of this episode is stored.")
before, after = fl.around(strip)
if before is not None and after is not None:
    st.page_link(ui.pages()["frames"], label=f"Compare step {before} with step {after} in Frames (world-aligned)",
                 icon=":material/compare:",
                 query_params=ui.link_params(frames=f"{key}:{before},{key}:{after}", diff="1", align="1"))
if not pd.isna(row["turn"]):
    st.page_link(ui.pages()["turns"], label=f"Open turn {int(row['turn'])} in Turns", icon=":material/psychology:",
                 query_params=ui.link_params(turn=int(row["turn"])))
st.page_link(ui.pages()["timeline"], label=f"{ui.md(ep)} in Timeline", icon=":material/view_timeline:",
             query_params=ui.link_params(ep=ep))
