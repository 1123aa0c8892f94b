"""Frames: compare 2–4 frames with synchronised zoom, crop/magnify, difference, A/B wipe, tiles."""
from __future__ import annotations

import io

import numpy as np
import streamlit as st
from PIL import Image

from dashboard import ui, views
from dashboard.core import (
    MAX_FRAMES,
    FrameRef,
    copy_key,
    format_frame_refs,
    format_region,
    parse_cell,
    parse_frame_refs,
    parse_region,
    resolve_run_key,
)
from loaders import agent_calls, frame_compare, frame_images, lookups, spatial_data
from loaders import notes as notes_mod
from loaders.turns import frame_position
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError, compare, crop, enlarge

runs, focus = ui.sidebar(("frames", "tiles", "diff", "region", "cell", "thr", "align", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
root = ui.root()
st.title("Frames")
st.caption("Compare up to four frames of the open runs: zoom and pan stay in sync, pixels stay sharp. Pick frames "
           "by step, by episode, from an inspection (what the agent retrieved beside what it saw), or by place.")
open_keys = [k for k, _ in runs]
by_key = dict(runs)
ui.follow_live(runs)

cursor = ui.cursor_bar(run, ui.cursor(run))
if cursor is not None and not ui.named("frames") and ui.qp("frames"):
    ui.set_qp(frames=None)  # frames remembered from before the cursor moved: the cursor's frame is shown instead
following = cursor is not None and not ui.qp("frames")
refs, ref_errors = parse_frame_refs(ui.qp("frames"))
for e in ref_errors:
    st.warning(ui.md(e, 200))
if following:
    refs = [FrameRef(key, step=cursor.step)]
    st.caption(f"Showing the frame at the time cursor (step {cursor.step}); it follows the cursor until you add "
               "or remove a frame.")


def _set(new: list[FrameRef], cell: str | None = None) -> None:
    """Button callback: put a new frame list (and the cell it came from) into the URL."""
    ui.set_qp(frames=format_frame_refs(new) or None)
    if cell:
        ui.set_qp(cell=cell)


def _run_of(ref: FrameRef):
    if ref.run in by_key:
        return by_key[ref.run]
    return ui.get_run(resolve_run_key(root, ref.run))


loaded: list[tuple[FrameRef, np.ndarray, str]] = []
for ref in refs:
    try:
        r = _run_of(ref)
        img = views.frame(r, step=ref.step, episode=ref.episode)
    except UnsafePath as e:
        st.error(f"Refused frame {ui.md(ref, 80)}: {ui.md(e)}", icon="🚫")
        continue
    except FrameError as e:
        st.error(f"Frame {ui.md(ref, 80)} cannot be shown: {ui.md(e)}")
        continue
    title = ref.label if len({x.run for x in refs}) > 1 else (
        f"{ref.episode} (end)" if ref.episode else f"step {ref.step}")
    if ref.step is not None:
        sr = lookups.step_row(r, ref.step)
        if sr:
            sep = "<br>" if len(refs) > 2 or len({x.run for x in refs}) > 1 else " · "
            title += f"{sep}life {sr['life']} · {sr['action']} · ({sr['x']:g}, {sr['y']:g})"
    loaded.append((ref, img, title))

ins = views.inspections(run)
tab_step, tab_ep, tab_insp, tab_place = st.tabs(["By step", "By episode", "From an inspection", "By place"],
                                                key="w_pick", on_change="rerun",
                                                default="By place" if ui.qp("cell") else None)
# Lazy tabs: only the open one is built (the others list every episode, inspection and frame of a cell); a
# link from the Spatial grid (cell=) opens on the frames taken at that cell.
if tab_step.open:
    with tab_step:
        c1, c2, c3 = st.columns([3, 2, 2])
        src = c1.selectbox("Run", open_keys, index=open_keys.index(key), key="w_step_run")
        lo, hi = lookups.step_bounds(by_key[src])
        s = c2.number_input("Env step", min_value=lo, max_value=max(lo, hi), key="w_step_n",
                            value=min(max(lo, hi), max(lo, cursor.step if cursor and src == key else 1)))
        c3.write("")
        c3.button("Add frame", key="add_step", disabled=len(refs) >= MAX_FRAMES, on_click=_set,
                  args=(refs + [FrameRef(src, step=int(s))],))
if tab_ep.open:
    with tab_ep:
        eps = run.episodes()
        if len(eps):
            c1, c2, c3 = st.columns([4, 2, 2])
            ids = eps["id"].tolist()
            if len(ids) <= ui.LISTED:
                labels = dict(zip(ids, eps["summary"].fillna("").str.slice(0, 80).tolist()))
                ep = c1.selectbox("Episode of the focused run", ids, key="w_frames_ep",
                                  format_func=lambda e: f"{e} — {labels[e]}")
            else:
                k = c1.number_input(f"Episode of the focused run (number 0–{len(ids) - 1} of {len(ids):,}, in index "
                                    "order)", 0, len(ids) - 1, key="w_frames_ep_no")
                ep = ids[int(k)]
                c1.caption(ui.md(f"{ep} — {str(eps['summary'].fillna('').iloc[int(k)])[:80]}"))
            ref = run.episode(ep)
            choices = ["end observation"] + ([f"first step ({ref.first_step + 1})", f"last step ({ref.last_step})"]
                                             if ref and ref.frames else [])
            which = c2.selectbox("Which frame", choices, key="w_frames_which")
            c3.write("")
            new = FrameRef(key, episode=ep) if which == "end observation" else FrameRef(
                key, step=ref.first_step + 1 if which.startswith("first") else ref.last_step)
            c3.button("Add frame", key="add_ep", disabled=len(refs) >= MAX_FRAMES, on_click=_set, args=(refs + [new],))
if tab_insp.open:
    with tab_insp:
        if not len(ins):
            st.info("This run has no frame inspections (turn calls with tool 'inspect').")
        else:
            ins_labels = ins["label"].head(ui.LISTED).tolist()
            i = st.selectbox("Inspection event", range(len(ins_labels)), format_func=lambda k: ins_labels[k],
                             key="w_insp")
            if len(ins) > ui.LISTED:
                st.caption(f"The first {ui.LISTED:,} of {len(ins):,} inspections are listed.")
            row = ins.iloc[i]
            got = agent_calls.inspected_frame(row)
            src = copy_key(key) if got.inherited else key
            if got.inherited:
                st.caption(f"{ui.md(row['retrieved'])}: a frame of the run whose memory {ui.md_code(key)} inherited, "
                           f"read from its copy {ui.md_code(src)}.")
            target = FrameRef(src, step=got.step) if got.step is not None else FrameRef(src, episode=got.episode)
            st.button("Compare the retrieved frame with the frame the agent had", key="use_insp", on_click=_set,
                      args=([target, FrameRef(key, step=int(row["step"]))],))
if tab_place.open:
    with tab_place:
        cell = parse_cell(ui.qp("cell"))
        c1, c2 = st.columns(2)
        x = c1.number_input("Cell x", value=cell[0] if cell else 32, step=1, key="w_cell_x")
        y = c2.number_input("Cell y", value=cell[1] if cell else 32, step=1, key="w_cell_y")
        here = spatial_data.frames_at_cell_in(runs, int(x), int(y))
        st.caption(f"{len(here)} frames were taken at ({int(x)}, {int(y)}) over {here['run'].nunique()} open run(s) "
                   f"and {here[['run', 'life']].drop_duplicates().shape[0]} life(s).")
        if len(here):
            sel = st.dataframe(here[["run", "life", "step", "episode"]], hide_index=True, width="stretch", height=220,
                               on_select="rerun", selection_mode="multi-row", key="w_place_table")
            rows = sel.selection.rows if sel and sel.selection else []
            spread = spatial_data.one_per_life(here, MAX_FRAMES, by_run=True)
            b1, b2 = st.columns(2)
            here_cell = f"{int(x)},{int(y)}"
            b1.button(f"Compare the {min(len(rows), MAX_FRAMES)} selected", disabled=not rows, key="place_sel",
                      on_click=_set, args=([FrameRef(here.iloc[j]["run"], step=int(here.iloc[j]["step"]))
                                            for j in rows[:MAX_FRAMES]], here_cell))
            b2.button("Compare one frame per run and life", key="place_spread", on_click=_set,
                      args=([FrameRef(r_, step=int(s_)) for r_, s_ in zip(spread["run"], spread["step"])], here_cell))

if not loaded:
    st.info("No frame chosen yet: add frames above (by step, episode, inspection or place). "
            "The choice is kept in the URL as frames=RUN:STEP,…")
    st.stop()

chips = st.columns(MAX_FRAMES)
for j, (ref, _, title) in enumerate(loaded):
    single = len({x.run for x in refs}) == 1
    short = (f"{ref.episode} (end)" if ref.episode else f"step {ref.step}") if single else str(ref)
    chips[j].button(f"✕ {ui.md(short, 60)}", key=f"rm_{j}", help=f"Remove {ui.md(ref)}", on_click=_set,
                    args=([r for r in refs if r != ref],))

frames = [f for _, f, _ in loaded]
titles = [t for _, _, t in loaded]
if len(loaded) == 2 and loaded[0][0].run == loaded[1][0].run == key:
    a_ref, b_ref = loaded[0][0], loaded[1][0]
    hit = agent_calls.inspection_between(ins, a_ref.step, a_ref.episode, b_ref.step)
    if hit is not None:
        st.info(f"Inspection: left is the retrieved frame, right the frame the agent had when it looked "
                f"({ui.md(hit['label'])}).")
        titles = ["retrieved: " + titles[0], "agent's view: " + titles[1]]
t = frame_images.tile_size(frames[0])
opt = st.columns([1.45, 1.45, 1.65, 2.6, 2.6])

def _flag(key: str, param: str) -> dict:
    """An on/off widget bound to the URL parameter ``param`` (``1`` when on, absent when off)."""
    return ui.bound(key, param, False, lambda v: v == "1", lambda _: "1")


opt[0].toggle("Tile grid", **_flag("w_tiles", "tiles"),
              help=f"Crafter tiles are {t} px here (width // 9); the yellow line closes the 9x7 map.")
opt[1].toggle("Pixel diff", **_flag("w_diff", "diff"),
              help="Second row: pixels differing from the first frame in magenta.")
cols_w, rows_w = ui.bound_group(("w_cols", "w_rows"), "region", ((0, 9), (0, 9)), parse_region,
                                format_region)
opt[2].toggle("Pixel values", **_flag("w_pixels", "px"),
              help="Hovering a pixel shows its position and colour (r, g, b). Off by default: a hover target per "
                   "pixel makes the panels slower to draw.")
opt[3].slider("Region: tile columns", 0, 9, **cols_w,
              help="Zoom every panel to these tiles (the panels stay in sync; drag to zoom further).")
opt[4].slider("Region: tile rows", 0, 9, **rows_w)
tiles = frame_images.tile_region(st.session_state["w_cols"], st.session_state["w_rows"], t)
c0, c1_, r0, r1 = tiles.tiles
region = tiles.pixels

diffs = None
diff_notes: list[tuple[str, np.ndarray]] = []
if st.session_state["w_diff"] and len(frames) > 1:
    d1, d2, _ = st.columns([2, 2, 4])
    d1.number_input("Ignore changes up to (levels)", 0, 255, **ui.bound(
        "w_thr", "thr", frame_compare.DEFAULT_THRESHOLD, lambda v: max(0, min(255, int(v)))),
        help=f"A pixel counts as changed when a channel moves by more than this many levels (0–255). The default "
             f"{frame_compare.DEFAULT_THRESHOLD} hides Crafter's light night noise.")
    d2.toggle("World-aligned", **_flag("w_align", "align"),
              help="Shift each frame by the player's move since frame 1 (positions from steps.jsonl, life-aware) so "
                   "that the same world cells overlap: the diff shows a mined block or a placed table, not the "
                   "camera move. Dark: cells outside frame 1's view.")
    thr, align = int(st.session_state["w_thr"]), bool(st.session_state["w_align"])

    def _pos(ref: FrameRef) -> tuple[int, int] | None:
        try:
            got = frame_position(_run_of(ref), ref.step, ref.episode)
        except UnsafePath:
            return None
        return (int(got[0][0]), int(got[0][1])) if got else None

    p0 = _pos(loaded[0][0]) if align else None
    diffs = []
    for ref, f, _ in loaded[1:]:
        if f.shape != frames[0].shape:
            diffs.append((np.zeros_like(f), "size differs from frame 1"))
            continue
        pb = _pos(ref) if align else None
        if align and (p0 is None or pb is None):
            st.warning(f"No recorded position for {ui.md(ref, 80)}: compared without alignment.")
        fd = frame_compare.diff(frames[0], f, thr, positions=(p0, pb) if p0 and pb else None)
        note = (f"{fd.pixels} px changed by more than {thr} levels ({fd.pixels_any} differ at all) · "
                f"{fd.map_tiles} map tiles, {fd.inventory_tiles} inventory tiles")
        if fd.aligned:
            note += f" · world-aligned, shifted {fd.shift[0]:+d}, {fd.shift[1]:+d} tiles"
        diffs.append((fd.image(), f"{fd.pixels} px > {thr} levels · {fd.map_tiles} + {fd.inventory_tiles} tiles"
                                  + (" · aligned" if fd.aligned else "")))
        diff_notes.append((f"{ref.label} vs frame 1: {note}", fd.image()))
panels = views.frames_panels(frames, titles, tiles=st.session_state["w_tiles"], diffs=diffs,
                             region=None if tiles.full else region, pixels=st.session_state["w_pixels"])
st.vega_lite_chart(spec=dict(panels), width="content", key="frames_chart")
st.caption("Zoom (wheel) or pan (drag) any panel and the others follow; double-click to reset. Pixels are drawn "
           "as blocks (nearest neighbour), never smoothed. "
           + ("Hover shows the pixel position and colour." if st.session_state["w_pixels"]
              else "Turn on *Pixel values* to see a pixel's position and colour on hover."))
for note, img in diff_notes:
    st.markdown(f"**Difference** · {ui.md(note)}")
    big = enlarge(np.concatenate([frames[0], np.full((frames[0].shape[0], 2, 3), 255, np.uint8), img], axis=1), 4)
    st.image(big, width=big.shape[1], caption="frame 1 | the frame as compared, changes in magenta (×4, nearest "
                                              "neighbour)", output_format="PNG")

mine = sorted({ref.step for ref, _, _ in loaded if ref.run == key and ref.step is not None})
if mine:
    ui.show_notes(notes_mod.at_steps(ui.root_notes().notes, key, mine))
    life_1 = lookups.life_at(run, mine[0])
    if life_1 is not None:
        ui.note_form("note_region", key, "region", f"tiles {c0}–{c1_ - 1} × {r0}–{r1 - 1} of the frame of step "
                     f"{mine[0]}", life=life_1, step=mine[0], region=tiles.tiles)

st.subheader("Magnified region")
crops = [crop(f, region) for f in frames]
joined = compare(crops, gap=1)
fits, default = frame_images.magnifications(joined.shape[1])
factor = st.select_slider("Magnification", options=fits, value=default, key=f"w_factor_{joined.shape[1]}",
                          help="Nearest neighbour: each frame pixel becomes a factor x factor block.")
mag = enlarge(joined, factor)
st.image(mag, width=mag.shape[1], caption=f"tiles {c0}–{c1_ - 1} × {r0}–{r1 - 1} "
         f"(pixels {region[0]}–{region[2] - 1} × "
         f"{region[1]}–{region[3] - 1}), ×{factor} nearest neighbour, left to right as above", output_format="PNG")
buf = io.BytesIO()
Image.fromarray(mag).save(buf, format="PNG")
st.download_button("Download PNG", buf.getvalue(), file_name="frames.png", mime="image/png")

if len(frames) >= 2:
    st.subheader("A/B wipe")
    c1, c2, c3 = st.columns([2, 2, 4])
    plain = [t.replace("<br>", " · ") for t in titles]
    ia = c1.selectbox("A (left)", range(len(loaded)), format_func=lambda k: plain[k], key="w_a")
    ib = c2.selectbox("B (right)", range(len(loaded)), index=1, format_func=lambda k: plain[k], key="w_b")
    pos = c3.slider("Divider position (% of width from the left)", 0, 100, 50, key="w_wipe")
    if frames[ia].shape != frames[ib].shape:
        st.warning("A and B differ in size; the wipe needs frames of the same size.")
    else:
        w = frame_images.wipe(crop(frames[ia], region), crop(frames[ib], region), pos / 100)
        big = enlarge(w, max(1, min(factor * len(frames), 1100 // w.shape[1])))
        st.image(big, width=big.shape[1],
                 caption=f"A = {ui.md(plain[ia])} | B = {ui.md(plain[ib])}; yellow line at {pos}%", output_format="PNG")
