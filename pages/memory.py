"""Memory: the agent's ``mine/`` files as of any step, diffs between steps, each line's provenance.

Files are rebuilt from the write history (memory_writes.jsonl). Markdown is rendered without
raw HTML and with images made inert (no remote fetch); procedure and other files are shown as
text, never executed.
"""
from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from dashboard import safe_text, ui, views
from dashboard.core import clamp_range, format_range, parse_int
from loaders import analysis_pages as ap
from loaders import cursor as cur
from loaders import lookups
from loaders import provenance as pv
from loaders import turns as tv
from loaders.inherited import episode_label, is_inherited

_, focus = ui.sidebar(("file", "asof", "diff", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
st.title("Memory")
st.caption(f"{ui.md_code(key)} · the agent's own files (`mine/`), rebuilt from the write log as they stood at any env "
           "step. Markdown is rendered without raw HTML or images; procedures are shown as text and never run.")
ui.show_problems(key, run)
paths = ap.memory_paths(run)
if not paths:
    st.info("This run wrote no memory file (methods without a file memory write none).")
    st.stop()

want = ui.qp("file")
if want and want not in paths:
    st.warning(f"File {ui.md(repr(want), 80)} from the URL was never written in {ui.md_code(key)}; "
               f"showing {ui.md_code(paths[0])}.")
st.selectbox("File", paths, **ui.bound("w_mem_file", "file", paths[0], lambda v: v if v in paths else None,
                                       sync=True, keep=True, also=lambda _: {"asof": None, "diff": None}))
path = st.session_state["w_mem_file"]
written = ap.memory_steps(run, path)
unknown = ap.memory_unknown(run, path)
_, last = lookups.step_bounds(run)
lo_s, hi_s = pv.memory_span(written, unknown, last)
cursor = ui.cursor(run)
asof_url = parse_int(ui.qp("asof"))
if cursor is not None and asof_url is not None and asof_url != cursor.step:
    if cur.follow(ui.named("asof"), ui.named("step"), False) == "target":
        life = lookups.life_at(run, asof_url)
        cursor = cur.Cursor(cursor.life if life is None else life, asof_url)
        ui.set_cursor(cursor)
    else:
        ui.set_qp(asof=cursor.step)
elif cursor is not None:
    ui.set_qp(asof=cursor.step)
elif asof_url is not None and (life := lookups.life_at(run, asof_url)) is not None:
    cursor = cur.Cursor(life, asof_url)
    ui.set_cursor(cursor)
ui.cursor_bar(run, cursor)
def _asof_moved(v: int) -> dict:
    """A new "as of" step moves the time cursor there (and drops the diff's steps)."""
    life = lookups.life_at(run, int(v))
    return {"diff": None, **({"step": int(v), "life": life} if life is not None else {})}


asof_widget = ui.bound("w_mem_asof", "asof", hi_s, lambda v: max(lo_s, min(hi_s, int(v))), sync=True,
                       also=_asof_moved)
if hi_s > lo_s:
    st.slider("As of env step", lo_s, hi_s, **asof_widget,
              help=f"{len(written)} step(s) at which a new version of this file begins to hold: "
                   f"{', '.join(map(str, written[:12]))}" + (" …" if len(written) > 12 else "")
                   + ". A plan update holds from the first step of the turn that decided it.")
asof = int(st.session_state["w_mem_asof"])
text = ap.memory_text(run, path, asof)
versions = ap.memory_versions(run, path)
version = ap.memory_version_at(run, path, asof)
unknown_now = unknown is not None and unknown[0] <= asof < unknown[1]
if unknown_now:
    st.caption(f"{ui.md_code(path)} as of step {asof}: **unknown**. The run's history of this file cannot be "
               f"replayed (it records changes from step {unknown[0]} without their lines); only the version "
               f"from step {unknown[1]} on is known.")
else:
    st.caption(f"{ui.md_code(path)} as of step {asof}: version {version} of {len(versions)}"
               + ("" if text is not None else " — deleted or not yet written at this step"))

tab_view, tab_prov, tab_diff = st.tabs(["Content", "Provenance", "Diff"])
with tab_view:
    if unknown_now:
        st.info("Content unknown at this step (the history of this file is not replayable).")
    elif text is None:
        st.info("No content at this step.")
    elif path.endswith(".md") and "/procedures/" not in path:
        raw = st.toggle("Show source", value=False, key="w_mem_raw")
        if raw:
            st.code(text, language="markdown")
        else:
            with st.container(border=True):
                st.markdown(safe_text.md_document(text), unsafe_allow_html=False)
    else:
        st.code(text, language="json" if path.endswith(".json") else None)

with tab_prov:
    prov = views.memory_provenance(run, path, asof)
    removed = int(prov["removed_at"].notna().sum()) if len(prov) else 0
    contra = int(prov["contradicted_at"].notna().sum()) if len(prov) else 0
    st.caption(f"{len(prov)} line(s); {removed} of them removed or rewritten by a later write (column "
               f"*removed at*), {contra} contradicted later: a fact whose key later says something else or is "
               "retracted, a procedure later disabled, a plan target dropped before it was reached (columns "
               "*contradicted at* … *by*). Each line is attributed to the write that last set it.")
    for c in ("removed_at", "contradicted_at"):
        prov[c] = [("" if pd.isna(v) else str(int(v))) for v in prov[c]]
    prov["turn"] = ["" if pd.isna(v) else str(int(v)) for v in prov["turn"]]
    for c in ("contradiction", "now", "contradicted_by", "contradicting_sources"):
        prov[c] = prov[c].astype(object).where(prov[c].notna(), "")
    firsts = pv.first_sources(prov["cites"], prov["sources"])
    links = {e: ui.episode_link(key, run, e) for e in dict.fromkeys(firsts) if e}
    links = {e: {"runs": ui.qp("runs") or key, "run": key, **p} for e, p in links.items() if p is not None}
    prov["episode"] = [f"timeline?{urlencode(links[e])}#{e}" if e in links else None for e in firsts]
    st.dataframe(prov, hide_index=True, width="stretch", key="mem_prov",
                 column_config={"text": st.column_config.TextColumn("line", width="large"),
                                "removed_at": st.column_config.TextColumn("removed at (step)"),
                                "contradicted_at": st.column_config.TextColumn("contradicted at (step)"),
                                "now": st.column_config.TextColumn("now says"),
                                "contradicted_by": st.column_config.TextColumn("contradicted by (write)"),
                                "contradicting_sources": st.column_config.TextColumn("its episodes"),
                                "cites": st.column_config.TextColumn("cites", help="The episodes the line names "
                                                                     "itself (sources: all of its write's)"),
                                "episode": st.column_config.LinkColumn("first source", display_text=r"#(.+)$")})
    srcs = pv.all_sources(prov["cites"], prov["sources"])
    if srcs:
        pick = st.selectbox("Source episode", srcs, key="w_mem_src", format_func=lambda e: episode_label(run, e))
        there = ui.episode_link(key, run, pick)
        if there is None:
            st.caption(f"{ui.md(episode_label(run, pick))} is in no index this run can read.")
        else:
            st.page_link(ui.pages()["timeline"], label=f"Open {ui.md(pick)} in Timeline"
                         + (" (in the copy of the run it came from)" if is_inherited(pick) else ""),
                         icon=":material/view_timeline:", query_params=there)
    mine = versions[versions["step"] <= asof].astype({"turn": object})
    mine["turn"] = ["" if pd.isna(t) else str(t) for t in mine["turn"]]
    if len(mine):
        st.markdown("**Writes to this file up to this step**")
        st.dataframe(mine, hide_index=True, width="stretch", key="mem_writes",
                     column_config={"step": st.column_config.NumberColumn("holds from step"),
                                    "written_step": st.column_config.NumberColumn("stamped step"),
                                    "reason": st.column_config.TextColumn("reason", width="large")})

with tab_diff:
    if len(versions) < 2 and hi_s == lo_s:
        st.info("Only one version of this file.")
    else:
        lo_d = lo_s - 1
        st.slider("Compare steps", lo_d, max(hi_s, lo_s),
                  **ui.bound("w_mem_diff", "diff", (max(lo_d, ap.previous_version_step(run, path, asof)), asof),
                             lambda v: clamp_range(v, lo_d, hi_s), format_range, sync=True),
                  help="By default the version shown (as of the step above) against the one before it. At step "
                       f"{lo_d} the file does not exist yet.")
        a, b = st.session_state["w_mem_diff"]
        rows = tv.line_diff(ap.memory_text(run, path, int(a)) or "", ap.memory_text(run, path, int(b)) or "")
        if len(rows):
            counts = rows["change"].value_counts()
            st.caption(f"{ui.md_code(path)} as of step {a} → as of step {b}: {int(counts.get('added', 0))} line(s) "
                       f"added, {int(counts.get('removed', 0))} removed; unchanged lines around them for context.")
            st.dataframe(tv.styled_diff(rows), hide_index=True, width="stretch", key="mem_diff",
                         column_config=tv.DIFF_CONFIG)
        else:
            st.caption(f"No change between steps {a} and {b}.")
