"""Provenance: the agent's own memory as a graph of versions linked to the episodes behind them.

Knowledge lines (GUIDE.md), procedure versions (disabled ones marked), plan versions and other
``mine/`` files, each linked to the episodes it cites, to its previous version, and — for a
disabled procedure — to the episodes that disabled it. Long histories are aggregated so the
browser never gets more than ~1,500 nodes.
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import figures, ui, vega_charts, views
from dashboard.core import clamp_range, format_range
from loaders import frame_images, lookups
from loaders import provenance as pv
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

STRIPS = 4  # linked episodes shown with a frame strip under a picked node (the others are listed)


_, focus = ui.sidebar(("node", "range", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
st.title("Provenance")
st.caption(f"{ui.md_code(key)} · what the agent wrote into its own memory (`mine/`), version by version, linked to "
           "the "
           "episodes it cites (grey), to the version it revises (dotted), to the episodes that disabled a "
           "procedure (red) and to the episodes a procedure ran in (green). Time runs downwards; click a node.")
ui.show_problems(key, run)
full = views.provenance_graph(run)
if not full.nodes:
    st.info("This run wrote no memory file (methods without a file memory write none).")
    st.stop()
if full.problems:
    with st.expander(f"⚠️ {len(full.problems)} memory write(s) could not be replayed exactly"):
        st.warning("\n".join(f"- {ui.md(p)}" for p in full.problems[:50]))

cursor = ui.cursor_bar(run, ui.cursor(run))
first, last = pv.step_span(full, lookups.step_bounds(run)[1])
range_widget = ui.bound("w_prov_range", "range", (first, last), lambda v: clamp_range(v, first, last),
                        format_range, sync=True)
if last > first:
    st.slider("Step range (memory written in)", min_value=first, max_value=last, **range_widget)
lo, hi = st.session_state["w_prov_range"]
if cursor is not None and st.toggle(f"Up to the time cursor (step {cursor.step})", value=True, key="w_prov_upto",
                                    help="Show the memory written up to the cursor's step only."):
    hi = max(int(lo), min(int(hi), cursor.step))
g = views.provenance_view(run, int(lo), int(hi))
kinds = g.nodes_frame()["kind"].value_counts() if g.nodes else pd.Series(dtype=int)
st.caption(f"Steps {lo}–{hi}: {g.total} node(s); drawn: {len(g.nodes)} "
           f"({', '.join(f'{v} {k}' for k, v in kinds.items())}) and {len(g.edges)} edge(s).")
for note in g.aggregated:
    st.info(f"Aggregated to keep the page responsive: {ui.md(note)}. Narrow the step range to see single nodes.",
            icon=":material/compress:")

node_id = ui.qp("node")
if node_id and full.node(node_id) is None and g.node(node_id) is None:
    st.warning(f"Node {ui.md(repr(node_id), 80)} from the URL is not in the provenance graph of {ui.md_code(key)}.")
    node_id = None


def _on_pick() -> None:
    """Chart selection: the clicked node goes into the URL."""
    sel = st.session_state.get("prov_chart")
    for p in (sel["selection"].get(vega_charts.PROV_PICK) or [] if sel and sel.get("selection") else []):
        nid = p.get("id")
        if isinstance(nid, str) and (g.node(nid) or full.node(nid)):
            ui.set_qp(node=nid)
            st.session_state.pop("w_prov_node", None)
            break


shown = g.where(node_id) if node_id else None
graph = vega_charts.provenance_graph(g.nodes_frame(), g.edges_frame(), shown.id if shown else None)
st.vega_lite_chart(spec=vega_charts.spec(graph), width="stretch", key="prov_chart",
                **({"on_select": _on_pick, "selection_mode": [vega_charts.PROV_PICK]} if g.nodes else {}))
ui.figure_downloads(lambda: figures.provenance_figure(key, run, lo=int(lo), hi=int(hi)),
                    f"provenance_{figures.file_stem(key)}", "double")

labels = {n.id: f"{n.kind} · step {n.step} · {n.label[:100]}" for n in g.nodes}
options = [n.id for n in pv.in_order(g.nodes)]
if node_id and node_id not in labels:
    node = full.node(node_id)
    labels[node_id] = f"{node.kind} · step {node.step} · {node.label[:100]}"
    options = [node_id, *options]


st.selectbox("Node", options, format_func=lambda i: labels.get(i, i),
             placeholder="Pick a node (or click one in the graph)",
             **ui.bound("w_prov_node", "node", None, lambda v: v if v == node_id and v in options else None,
                        sync=True))
if not node_id:
    st.stop()

picked = g.node(node_id) or full.node(node_id)
if picked.aggregate:
    st.subheader(ui.md(picked.label))
    st.caption(f"{picked.count} node(s) merged, steps {picked.lo}–{picked.hi}. Open one of them:")
    members = [m for m in picked.members if full.node(m)][:2000]
    mlabels = {m: f"step {full.node(m).step} · {full.node(m).label[:100]}" for m in members}
    st.selectbox("Merged node", members, index=None, format_func=lambda m: mlabels.get(m, m),
                 **ui.goes_to("w_prov_member", "node"))
    st.stop()

d = views.provenance_detail(run, node_id)
n = d.node
flag = " · **disabled**" if n.disabled else ""
ended = f" · removed at step {n.ended}" if n.ended is not None else ""
st.subheader(ui.md(f"{n.kind}: {n.label[:160]}"))


def _frames(eps: pd.DataFrame) -> None:
    """Frame strips of the first linked episodes, and links to Timeline and Frames (an inherited
    episode's from the copy of the run it came from)."""
    for r in eps.head(STRIPS).itertuples():
        shown = f"{r.id} (from run {r.from_run})" if r.from_run else r.id
        st.markdown(f"**{ui.md(r.relation.replace('_', ' '))} {ui.md(shown)}** · "
                    f"steps {r.first_step}–{r.last_step}{' of that run' if r.from_run else ''} · {ui.md(r.summary)}")
        if r.frames:
            try:
                strip = lookups.frame_strip(run, r.id, max_frames=8)
                thumbs = [frame_images.upscale(f, 96) for _, f in strip]
                st.image(thumbs, width=thumbs[0].shape[1], caption=[f"step {s}" for s, _ in strip], output_format="PNG")
            except (FrameError, UnsafePath) as e:
                st.error(f"Frames of {ui.md(r.id)} cannot be shown: {ui.md(e)}")
        elif r.image:
            st.caption("No per-step frames; the end observation is in Timeline.")
        timeline, frames = ui.episode_link(key, run, r.id), ui.episode_frames_ref(key, run, r.id)
        if timeline is None or frames is None:
            st.caption(f"{ui.md(shown)} is in no index this run can read: no link to it.")
            continue
        c1, c2 = st.columns(2)
        c1.page_link(ui.pages()["timeline"], label=f"{ui.md(r.id)} in Timeline", icon=":material/view_timeline:",
                     query_params=timeline)
        c2.page_link(ui.pages()["frames"], label=f"{ui.md(r.id)} in Frames", icon=":material/compare:",
                     query_params=ui.link_params(frames=frames))
    if len(eps) > STRIPS:
        st.caption(f"Frame strips of the first {STRIPS} of {len(eps)} linked episodes; the table lists all.")


ep_ref = run.episode(n.id) if n.kind == "episode" else None
turn_of = ep_ref.turn if ep_ref is not None else (d.write.turn if d.write is not None else None)
if turn_of is not None:
    st.page_link(ui.pages()["turns"], label=f"Open turn {turn_of} in Turns", icon=":material/psychology:",
                 query_params=ui.link_params(turn=turn_of))
if n.kind == "episode":
    st.markdown(f"Linked from {len(d.cited_by)} memory version(s) (cited, used in, or disabled because of it).")
    if d.cited_by:
        st.selectbox("Open a version linked to it", d.cited_by, index=None,
                     format_func=lambda i: labels.get(i) or (full.node(i).label[:100] if full.node(i) else i),
                     **ui.goes_to("w_prov_citer", "node"))
    _frames(d.episodes)
    st.stop()

w = d.write
st.markdown(f"Revision {n.version} of {len(d.revisions)} · step {n.step} · write {n.seq} · {ui.md_code(n.path)} · "
            f"{ui.md(w.op if w else '?')} by **{ui.md(n.author)}** — {ui.md(n.reason)}{flag}{ended}")
if len(d.revisions) > 1:
    st.selectbox("Other versions", d.revisions, index=d.revisions.index(n.id),
                 format_func=lambda i: f"v{full.node(i).version} · step {full.node(i).step} · "
                                       f"{full.node(i).label[:90]}",
                 **ui.goes_to("w_prov_rev", "node"))
tab_file, tab_diff, tab_eps = st.tabs(["File as it stood", "Diff to previous version", f"Episodes ({len(d.episodes)})"])
with tab_file:
    if d.text is None:
        st.info("The file did not exist after this write (deleted).")
    else:
        st.code(d.text, language="json" if (n.path or "").endswith(".json") else "markdown")
with tab_diff:
    if d.diff:
        st.code(d.diff, language="diff")
    else:
        st.caption("No textual change (or no earlier version).")
with tab_eps:
    if len(d.episodes):
        st.dataframe(d.episodes.drop(columns=["image"]), hide_index=True, width="stretch", key="prov_eps")
        _frames(d.episodes)
    else:
        st.caption("This version cites no episode.")
