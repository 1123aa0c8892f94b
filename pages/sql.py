"""SQL: read-only queries over the focused run's tables (DuckDB, locked down: no file system,
network or extension access)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import ui
from loaders.run import TABLE_NAMES, Run

MAX_ROWS = 10_000
DEFAULT = "SELECT action_kind, count(*) AS episodes FROM episodes GROUP BY 1 ORDER BY episodes DESC"


def run_query(run: Run, query: str) -> tuple[pd.DataFrame | None, str | None]:
    """The first :data:`MAX_ROWS` rows of a query's result, or the error it raised."""
    try:
        rel = run.sql(query)
        if rel is None:
            return None, "The statement returned no rows; only queries (SELECT, WITH, DESCRIBE, ...) show results."
        return rel.limit(MAX_ROWS).df(), None
    except Exception as e:  # noqa: BLE001 - any DuckDB error is shown to the user
        return None, f"{type(e).__name__}: {e}"


_, focus = ui.sidebar(("q",))
key, run = ui.need_run(focus)
st.title("SQL")
st.caption(f"`{key}` · DuckDB over this run's tables, rebuilt from its files. Read-only: the database is in "
           "memory, and file, network and extension access are switched off.")
with st.expander("Tables and columns"):
    st.dataframe(pd.DataFrame([{"table": t, "rows": len(run.table(t)),
                                "columns": ", ".join(map(str, run.table(t).columns))} for t in TABLE_NAMES.values()]),
                 hide_index=True, width="stretch", key="sql_tables")
ui.init_widget("w_sql", ui.qp("q") or DEFAULT)
st.text_area("Query", key="w_sql", height=140, on_change=lambda: ui.set_qp(q=st.session_state["w_sql"].strip()))
query = st.session_state["w_sql"].strip()
if query:
    df, err = run_query(run, query)
    if err:
        st.error(err)
    else:
        st.caption(f"{len(df)} row(s)" + (f" (the first {MAX_ROWS})" if len(df) == MAX_ROWS else ""))
        st.dataframe(df, hide_index=True, width="stretch", key="sql_result")
        st.download_button("Result CSV", data=df.to_csv(index=False), file_name="query.csv", mime="text/csv",
                           on_click="ignore", icon=":material/download:")
