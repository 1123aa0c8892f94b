"""Search: one box over what the agent searched for, found, decided, noted and planned, and over
the episodes' summaries and events, of the open runs; every hit opens its turn or step."""
from __future__ import annotations

from urllib.parse import parse_qsl

import pandas as pd
import streamlit as st

from dashboard import ui, views
from dashboard.core import split_list
from loaders import search as sr

SHOWN = 60  # hits listed as links (the table below holds every hit)
LABELS = {"search query": "search", "inspection find": "find", "decision": "decision", "note": "note (GUIDE.md)",
          "plan": "plan (working.md)", "memory file": "other memory file", "episode summary": "episode",
          "event": "event"}

runs, focus = ui.sidebar(("find", "among"))
st.title("Search")
st.caption("What the agent searched its memory for, found when it inspected frames, decided, wrote into its notes "
           "(`mine/GUIDE.md`) and plans (`mine/working.md`), and the episodes' summaries and events, over the open "
           "runs. All words must occur (any case); put a phrase in double quotes. Each hit opens its turn, its "
           "memory file as of its step, or its episode, with the time cursor there.")
if not runs:
    ui.need_run(None)
bad = [k for k in split_list(ui.qp("among")) if k not in sr.KINDS]
if bad:
    st.warning(f"URL parameter `among`: {', '.join(ui.md_code(k, 40) for k in bad)} "
               f"{'is' if len(bad) == 1 else 'are'} no kind of record searched: dropped.", icon="🚫")
c1, c2 = st.columns([3, 2])
c1.text_input("Search the open runs", placeholder="e.g. diamond, or \"iron pickaxe\"", **ui.bound("w_find", "find", ""))
c2.multiselect("Only in", sr.KINDS, format_func=lambda k: LABELS.get(k, k), placeholder="everything",
               **ui.bound("w_among", "among", [], lambda v: [k for k in split_list(v) if k in sr.KINDS] or None,
                          ",".join))
text = st.session_state["w_find"]
kinds = st.session_state["w_among"] or None
if not text.strip():
    st.info("Type a word to search the open runs.")
    st.stop()

hits = sr.hits_in(((k, views.search_corpus(r)) for k, r in runs), text, kinds)
counts = hits["kind"].value_counts()
st.caption(f"{len(hits):,} hit(s) of {ui.md_code(text, 80)} in {len(runs)} open run(s)"
           + (": " + ", ".join(f"{int(counts[k])} {LABELS[k]}" for k in sr.KINDS if k in counts) if len(hits) else "."))
if not len(hits):
    st.stop()

pages = ui.pages()
open_runs = ui.qp("runs") or ",".join(k for k, _ in runs)
n_pages = -(-len(hits) // SHOWN)
page_no = 1
if n_pages > 1:
    page_no = int(st.number_input(f"Page of hits ({SHOWN} a page, {n_pages} pages; by kind, then step)", 1, n_pages,
                                  key="w_search_page"))
for r in hits.iloc[(page_no - 1) * SHOWN:page_no * SHOWN].itertuples():
    where = " · ".join(x for x in (
        r.run if len(runs) > 1 else "", f"turn {r.turn}" if not pd.isna(r.turn) else "",
        f"step {r.step}" if not pd.isna(r.step) else "", LABELS.get(r.kind, r.kind)) if x)
    st.page_link(pages[r.page], label=f"{ui.md(where)} — {ui.md(r.text, 160)}",
                 icon=":material/search:", query_params={"runs": open_runs, "run": r.run, **dict(parse_qsl(r.query))})
if len(hits) > SHOWN:
    st.caption(f"Hits {(page_no - 1) * SHOWN + 1}–{min(len(hits), page_no * SHOWN)} of {len(hits):,} are links above; "
               "the table lists all of them.")
table = hits.assign(link=[sr.link(h, h["run"], open_runs) for h in hits.to_dict("records")])
st.dataframe(table[["run", "kind", "turn", "life", "step", "episode", "text", "source", "link"]], hide_index=True,
             width="stretch", key="search_hits",
             column_config={"text": st.column_config.TextColumn("text", width="large"),
                            "link": st.column_config.LinkColumn("open", display_text="open")})
