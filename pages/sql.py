"""SQL: read-only queries over the focused run's tables, in the sandbox of ``loaders.usersql``
(one read statement, a private locked-down DuckDB per query in a worker process with a memory
limit, a time limit, and row and size limits on the result)."""
from __future__ import annotations

import streamlit as st

from dashboard import ui
from loaders.runs_summary import table_sizes
from loaders.usersql import MAX_BYTES, MAX_ROWS, TIMEOUT_S, memory_text, run_user_query

DEFAULT = "SELECT action_kind, count(*) AS episodes FROM episodes GROUP BY 1 ORDER BY episodes DESC"

_, focus = ui.sidebar(("q",))
key, run = ui.need_run(focus)
st.title("SQL")
st.caption(f"{ui.md_code(key)} · DuckDB over this run's tables, rebuilt from its files. Read-only: one SELECT-like statement "
           f"per query (DDL, writes, ATTACH, COPY, SET and PRAGMA are refused, and so are the settings and "
           f"catalogs that show server folders), run on a private in-memory database that is thrown away "
           f"afterwards, with file, network and extension access off, in a worker process that may use "
           f"{memory_text()}; stopped after {TIMEOUT_S:g} s, and at most {MAX_ROWS:,} rows and "
           f"{MAX_BYTES / 2**20:g} MB are shown.")
with st.expander("Tables and columns"):
    st.dataframe(table_sizes(run), hide_index=True, width="stretch", key="sql_tables")
st.text_area("Query", height=140, **ui.bound("w_sql", "q", DEFAULT, fmt=str.strip))
query = st.session_state["w_sql"].strip()
if query:
    res = run_user_query(run, query)
    if res.df is None:
        st.error(ui.md(res.message))
    else:
        if res.message:
            st.warning(ui.md(res.message))
        st.caption(f"{len(res.df):,} row(s)" + (f" (the first {len(res.df):,})" if res.truncated else "")
                   + f" · {res.elapsed_s:.2f} s")
        st.dataframe(res.df, hide_index=True, width="stretch", key="sql_result")
        st.download_button("Result CSV", data=res.df.to_csv(index=False), file_name="query.csv", mime="text/csv",
                           on_click="ignore", icon=":material/download:")
