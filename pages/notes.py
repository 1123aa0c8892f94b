"""Notes: the researcher's bookmarks and comments on runs, turns, steps and frame regions, kept
in ``<runs root>/.mfm/notes/notes.jsonl`` apart from the runs; each opens where it points."""
from __future__ import annotations

from urllib.parse import parse_qsl

import streamlit as st

from dashboard import ui
from loaders import notes as notes_mod

runs, focus = ui.sidebar(("note",))
st.title("Notes")
st.caption("Bookmarks and comments by the researcher, kept in `.mfm/notes/notes.jsonl` under the runs root (never in "
           "a run folder; one JSON line per note, with its time and author). Add one here on a run, or on a turn, a "
           "step or a frame region from the Turns, Timeline and Frames pages.")
got = ui.root_notes()
keys = [k for k, _ in runs]
pages = ui.pages()


def _open(n: notes_mod.Note) -> None:
    """A link to where the note points (the run opened and focused)."""
    opened = ",".join(dict.fromkeys([*keys, n.run])) if n.run in keys else n.run
    st.page_link(pages[n.page()], label=f"Open {ui.md(ui.note_where(n))} of {ui.md(n.run, 80)}",
                 icon=":material/open_in_new:",
                 query_params={"runs": opened, "run": n.run, **dict(parse_qsl(n.query()))})


want = ui.qp("note")
if want:
    hit = next((n for n in got.notes if n.id == want), None)
    if hit is None:
        st.warning(f"Note {ui.md_code(want, 80)} from the URL is not among the notes (retracted, or of another runs "
                   "root).", icon="🚫")
    else:
        ui.show_notes([hit])
        _open(hit)

scope = st.radio("Show", ["notes on the open runs", "every note"], horizontal=True, key="w_notes_scope",
                 index=0 if keys else 1)
shown = [n for n in got.notes if scope == "every note" or n.run in keys]
st.caption(f"{len(shown)} note(s) shown of {len(got.notes)}" + (f"; {got.retracted} retracted" if got.retracted
                                                                  else "") + ".")
if shown:
    st.dataframe(notes_mod.table(ui.root(), notes=shown).drop(columns=["page", "query"]), hide_index=True,
                 width="stretch", key="notes_table",
                 column_config={"text": st.column_config.TextColumn("note", width="large")})
    for n in reversed(shown[-50:]):
        with st.container(border=True):
            st.markdown(f"**{'Bookmark' if n.kind == 'bookmark' else 'Note'} · {ui.md(n.run, 80)} · {ui.md(ui.note_where(n))}** · "
                        f"{ui.md(n.author, 60)} · {ui.md(n.time)} · {ui.md_code(n.id)}"
                        + (f"\n\n{ui.md(n.text, 2000)}" if n.text else ""))
            _open(n)
    if len(shown) > 50:
        st.caption(f"The newest 50 of {len(shown)} notes are listed with links; the table holds all.")
    with st.expander("Retract a note (a line saying so is appended; the note stays in the file)"):
        pick = st.selectbox("Note", [n.id for n in shown], key="w_notes_retract",
                            format_func=lambda i: next(f"{i} · {n.run} · {ui.note_where(n)} · {n.text[:60]}"
                                                       for n in shown if n.id == i))
        if st.button("Retract", key="notes_retract"):
            try:
                notes_mod.retract(ui.root(), pick, by=st.session_state.get("_mfm_author"))
            except (notes_mod.NotesError, OSError, ValueError) as e:
                st.error(f"Not retracted: {ui.md(e, 300)}", icon="🚫")
            else:
                st.rerun()
if focus:
    ui.note_form("note_run", focus[0], "run", f"the run {ui.md(focus[0], 80)}")
