"""Spatial grid: the traversed-cell map, each life's path, episode positions and deaths."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import figures, grid_canvas, ui, views
from dashboard.core import clamp_range, format_range, parse_cell, split_list
from dashboard.theme import CELL_KIND_COLORS
from loaders import chart_data, lookups, spatial_data
from loaders import cursor as cur
from mfm.schema import GRID_KINDS

_, focus = ui.sidebar(("cell", "range", "kinds", "mark", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
st.title("Spatial grid")
st.caption(f"{ui.md_code(key)} · the cells the agent interacted with (append-only grid.jsonl), its paths and deaths; "
           "the second axis grows downwards, as in the game.")
ui.follow_live([(key, run)])
ui.show_problems(key, run)

band = None
if run.is_3d:
    heights = chart_data.heights(run)
    lo_h, hi_h = heights[0], max(heights[-1], heights[0] + 1)
    band = st.slider("Height y (blocks)", lo_h, hi_h, (lo_h, hi_h),
                     help="This run is 3-D: the map shows the horizontal plane (x, z); keep cells and episodes "
                          "whose height y lies in this band.")
cursor = ui.cursor_bar(run, ui.cursor(run))
first, last = lookups.step_bounds(run)
range_widget = ui.bound("w_grid_range", "range", (first, last), lambda v: clamp_range(v, first, last),
                        format_range, sync=True)
all_lives = views.lives(run)
if ui.qp("life") and ui.qp("life") not in {str(v) for v in all_lives}:
    st.warning(f"URL parameter `life` = {ui.md_code(ui.qp('life'), 40)} is no life of {ui.md_code(key)}: dropped.",
               icon="🚫")
bad_kinds = [k for k in split_list(ui.qp("kinds")) if k not in GRID_KINDS]
if bad_kinds:
    st.warning(f"URL parameter `kinds`: {', '.join(ui.md_code(k, 40) for k in bad_kinds)} "
               f"{'is' if len(bad_kinds) == 1 else 'are'} no cell kind: dropped.", icon="🚫")


def _life_moved(life: int | None) -> dict:
    """Another life moves the time cursor to that life's last step; all lives clears it."""
    if cursor is None:
        return {}
    if life is None:
        return {"step": None}
    return {"step": (cur.life_bounds(run, life) or (None, None))[1]}


c1, c2, c4, c3 = st.columns([3, 3, 1.4, 1.6])
c4.selectbox("Life", all_lives, placeholder="all lives",
             **ui.bound("w_life", "life", None, lambda v: life if (life := int(v)) in all_lives else None,
                        sync=cursor is not None, also=_life_moved),
             format_func=lambda v: f"life {v}", help="Show one life only (empty: all lives).")
if last > first:
    c1.slider("Step range", min_value=first, max_value=last, **range_widget)
c2.multiselect("Cell kinds", list(GRID_KINDS), format_func=lambda k: f"{k}",
               **ui.bound("w_kinds", "kinds", list(GRID_KINDS),
                          lambda v: [k for k in split_list(v) if k in GRID_KINDS] or None, ",".join))
show_paths = c3.toggle("Paths", value=True, key="w_paths")
show_eps = c3.toggle("Episode positions", value=True, key="w_eps")
lo, hi = st.session_state["w_grid_range"] if last > first else (first, last)
kinds = st.session_state["w_kinds"]
upto = cursor is not None and c3.toggle("Up to the cursor", value=True, key="w_grid_upto",
                                        help="Draw the path and the cells only up to the time cursor's step.")
if upto:
    hi = max(lo, min(hi, cursor.step))
here_now = cur.position(run, cursor) if cursor is not None and not run.is_3d else None
if cursor is not None:
    st.caption(f"Time cursor: {ui.md(cur.describe(run, cursor))}"
               + (f". Paths and cells up to step {hi}; the black ring is where the agent stood." if upto else "."))

cell = parse_cell(ui.qp("cell"))
mark = parse_cell(ui.qp("mark"))
for name, value in (("cell", cell), ("mark", mark)):
    if ui.qp(name) and value is None:
        st.warning(f"URL parameter {ui.md_code(name)} = {ui.md_code(ui.qp(name), 40)} is not a cell `x,y`: ignored.")
if mark is not None:
    st.caption(f"Red diamond: the failed action's target cell ({mark[0]}, {mark[1]}).")

view, drawn = views.grid_map(run, lo, hi, tuple(kinds), st.session_state["w_life"], band, show_paths, show_eps,
                             cell, mark)
if here_now is not None:
    drawn = grid_canvas.with_here(drawn, here_now[0], here_now[1], cursor.step, cursor.life)


def _on_pick() -> None:
    """The map's click: the clicked cell (or the cell of the clicked mark) goes into the URL."""
    picked = parse_cell((st.session_state.get("grid_map") or {}).get("cell"))
    if picked is not None:
        ui.set_qp(cell=f"{picked[0]},{picked[1]}")


grid_canvas.draw(drawn, "grid_map", _on_pick)
ui.figure_downloads(lambda: figures.grid_figure(key, run, view=view),
                    f"spatial_grid_{figures.file_stem(key)}", "single")
counts = view.cells["kind"].value_counts() if len(view.cells) else pd.Series(dtype=int)
st.caption(" · ".join(f"{k}: {int(counts.get(k, 0))} cells" for k in GRID_KINDS) +
           f" · {len(view.paths)} path points drawn (of {len(run.steps())} steps)"
           + (f" · {view.merged} episode end positions in {len(view.positions)} cells (one marker per cell, "
              "the latest episode's; its hover counts them)" if view.merged else "")
           + " · click a mark or a cell to pick it")

st.subheader("Cell")
gx, gy = ui.bound_group(("w_gx", "w_gy"), "cell", None, parse_cell, lambda c: f"{c[0]},{c[1]}",
                        sync=cell is not None)  # without a cell, keep a half-typed one (x before y)
a, b = st.columns(2)
a.number_input("x", step=1, **gx)
b.number_input(view.plane, step=1, **gy)
if cell is None:
    st.info("Pick a cell: click one on the map or type x and y.")
    st.stop()

x, y = cell
rows = spatial_data.grid_at_cell(run, x, y, view.plane, view.life)
here = spatial_data.episodes_at_cell(run, x, y, view.plane)
frames_here = spatial_data.frames_at_cell_of(run, x, y, view.plane, view.life)
st.markdown(f"**({x}, {y})**: {len(rows)} grid record(s), {len(here)} episode(s), {len(frames_here)} frame(s) "
            "taken standing here.")
if len(rows):
    st.dataframe(rows, hide_index=True, width="stretch",
                 column_config={"kind": st.column_config.TextColumn("kind", help=", ".join(
                     f"{k}: {c}" for k, c in CELL_KIND_COLORS.items()))})
if len(here):
    st.dataframe(here, hide_index=True, width="stretch", height=min(400, 40 + 35 * len(here)))
    pick = st.selectbox("Episode", list(here["episode"]), key="w_grid_ep",
                        format_func=lambda e: f"{e} — " + here.loc[here["episode"] == e, "summary"].iloc[0][:90])
    r = here[here["episode"] == pick].iloc[0]
    s = int(r["step"])
    pg = ui.pages()
    l1, l2, l3 = st.columns(3)
    l1.page_link(pg["timeline"], label=f"Open {ui.md(pick)} in Timeline", icon=":material/view_timeline:",
                 query_params=ui.link_params(ep=pick, step=s))
    at, end = spatial_data.visit_frame(run, s, int(r["life"]), pick)
    fr = f"{key}:{at}" if at is not None else f"{key}:{end}"
    l2.page_link(pg["frames"], label=f"Open its frame (step {s}) in Frames", icon=":material/compare:",
                 query_params=ui.link_params(frames=fr, cell=f"{x},{y}"))
    spread = spatial_data.one_per_life(frames_here, 4)
    if len(spread) >= 2:
        l3.page_link(pg["frames"], label="Compare this place across lives", icon=":material/compare:",
                     query_params=ui.link_params(frames=",".join(f"{key}:{v}" for v in spread["step"]),
                                                 cell=f"{x},{y}"))
