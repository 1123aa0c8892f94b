"""The sandbox for SQL typed by a dashboard user (the SQL page; a query can come from a link).

No Streamlit here. :func:`run_user_query` runs one read statement over a run's tables:

- only a single statement that DuckDB's own parser classifies as SELECT is run (SELECT, WITH,
  FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE); DDL, writes, ATTACH, COPY, SET, PRAGMA, INSTALL,
  LOAD, EXPORT, EXPLAIN and several statements at once are refused before anything runs;
- each query gets its own in-memory DuckDB (the run's DataFrames registered, zero-copy) and its
  own spill folder, closed and removed afterwards: nothing a query does is seen by another query,
  and one session's long query never makes another's fail with "connection is busy";
- DuckDB is locked down (:data:`SAFE_DUCKDB`: no file system, network, extensions or Python
  variables; configuration locked) and limited (:data:`LIMITS`: one thread, memory, spill size);
- a watchdog interrupts the query after a time limit, which stops it (one thread, no workers);
- at most ``max_rows`` rows, :data:`MAX_COLUMNS` columns and :data:`ROW_CHARS` characters per
  row are fetched, so a huge result is never materialised in Python.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pandas as pd

if TYPE_CHECKING:
    from loaders.run import Run

SAFE_DUCKDB: dict[str, str | int | bool] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "python_enable_replacements": False,
    "lock_configuration": True,
}
"""No file system or network access (COPY TO, ATTACH, read_csv of paths), no extensions, no scans
of Python variables, and the configuration cannot be changed back."""

LIMITS: dict[str, str | int | bool] = {"threads": 1, "memory_limit": "1GB", "max_temp_directory_size": "256MB"}
"""Per user query, for a 2-core machine shared by several users: one core, 1 GB of memory and
256 MB of spill files at most."""

TIMEOUT_S = 10.0
MAX_ROWS = 10_000
MAX_COLUMNS = 100
ROW_CHARS = 10_000
"""Characters per row shown, shared by the row's text, list, struct and binary values."""

READ_QUERIES = "SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE"

FIXED_SIZE = frozenset({
    "boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger",
    "ubigint", "uhugeint", "float", "double", "decimal", "date", "time", "time_ns", "time with time zone",
    "timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone", "interval", "uuid",
    "null",
})
"""DuckDB type ids whose values have a small fixed size (everything else is capped per row)."""


_PRIVATE: list[str] = []
_PRIVATE_LOCK = threading.Lock()


def private_dir() -> str:
    """A folder of this process for DuckDB's own files (mode 0700, removed at exit), so that
    DuckDB never uses or opens up ``<cwd>/.tmp``; a new one if a /tmp cleaner removed it."""
    with _PRIVATE_LOCK:
        if not _PRIVATE or not os.path.isdir(_PRIVATE[-1]):
            _PRIVATE.append(tempfile.mkdtemp(prefix="mfm-duckdb-"))
            atexit.register(shutil.rmtree, _PRIVATE[-1], ignore_errors=True)
        return _PRIVATE[-1]


def duckdb_config(folder: str | None = None, **settings: str | int | bool) -> dict[str, str | int | bool]:
    """:data:`SAFE_DUCKDB` with DuckDB's spill and secrets folders in ``folder`` (default
    :func:`private_dir`), plus ``settings``."""
    folder = folder or private_dir()
    return {**SAFE_DUCKDB, "temp_directory": folder, "secret_directory": folder, **settings}


@dataclass(frozen=True)
class QueryResult:
    """What a user query gave: rows (None when refused or failed), a message for the user
    (the refusal or error, or what was cut), whether rows were cut at ``max_rows``, seconds taken."""

    df: pd.DataFrame | None
    message: str | None
    truncated: bool
    elapsed_s: float


def refusal(con: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """Why ``query`` is not run, or None for a single read statement (per DuckDB's parser)."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as e:
        return _scrub(f"{type(e).__name__}: {e}")
    kinds = [s.type.name.replace("_", " ") for s in statements]
    if not kinds:
        return "The query is empty."
    if len(kinds) > 1:
        return (f"Refused: one statement at a time, and this text holds {len(kinds)} ({', '.join(kinds)}). "
                f"Only read queries are run here ({READ_QUERIES}).")
    if statements[0].type != duckdb.StatementType.SELECT:
        return f"Refused: {kinds[0]} statement. Only read queries are run here ({READ_QUERIES})."
    return None


def run_user_query(run: Run, query: str, timeout_s: float = TIMEOUT_S, max_rows: int = MAX_ROWS) -> QueryResult:
    """Run SQL typed by a user over ``run``'s tables in the sandbox described in this module."""
    start = time.perf_counter()

    def result(df: pd.DataFrame | None, message: str | None, truncated: bool = False) -> QueryResult:
        return QueryResult(df, message, truncated, time.perf_counter() - start)

    with tempfile.TemporaryDirectory(dir=private_dir()) as folder:
        con = run.connect(folder, **LIMITS)
        try:
            refused = refusal(con, query)
            if refused:
                return result(None, refused)
            with _deadline(con, timeout_s) as expired:
                try:
                    df, notes = _fetch(con.sql(query), max_rows)
                except Exception as e:  # noqa: BLE001 - any failure of the query is shown to the user
                    if expired.is_set() or isinstance(e, duckdb.InterruptException):
                        return result(None, f"Interrupted after {timeout_s:g} s (time limit): the query was stopped.")
                    return result(None, _scrub(f"{type(e).__name__}: {e}"))
        finally:
            con.close()
    truncated = len(df) > max_rows
    if truncated:
        notes.insert(0, f"Only the first {max_rows:,} rows are shown; the result has more.")
    return result(df.head(max_rows), " ".join(notes) or None, truncated)


@contextmanager
def _deadline(con: duckdb.DuckDBPyConnection, timeout_s: float) -> Iterator[threading.Event]:
    """Interrupt ``con`` after ``timeout_s``, and again every 0.1 s until the block ends (an
    interrupt that comes before the query starts is lost); the event says whether time ran out."""
    done, expired = threading.Event(), threading.Event()

    def watch() -> None:
        wait = timeout_s
        while not done.wait(wait):
            expired.set()
            con.interrupt()
            wait = 0.1

    watchdog = threading.Thread(target=watch, name="sql-deadline", daemon=True)
    watchdog.start()
    try:
        yield expired
    finally:
        done.set()
        watchdog.join()


def _fetch(rel: duckdb.DuckDBPyRelation, max_rows: int) -> tuple[pd.DataFrame, list[str]]:
    """At most ``max_rows + 1`` rows of ``rel`` and :data:`MAX_COLUMNS` columns, with text cut and
    larger lists, structs and blobs left empty beyond the row's share of :data:`ROW_CHARS`
    (cut inside DuckDB, before a value repeated on many rows is copied to each); and notes on what was cut."""
    columns = list(zip(rel.columns, rel.types))[:MAX_COLUMNS]
    sized = sum(t.id not in FIXED_SIZE for _, t in columns)
    cap = ROW_CHARS // max(1, sized)
    exprs, over = [], []
    for i, (name, typ) in enumerate(columns, 1):
        value = f"#{i}"
        if typ.id not in FIXED_SIZE:
            text = value if typ.id == "varchar" else f"CAST({value} AS VARCHAR)"
            over.append(f"length({text}) > {cap}")
            value = (f"left({value}, {cap})" if typ.id == "varchar"
                     else f"CASE WHEN length({text}) <= {cap} THEN {value} END")
        exprs.append(f'{value} AS "{name.replace(chr(34), chr(34) * 2)}"')
    exprs.append(f"coalesce({' OR '.join(over) or 'false'}, false)")
    df = rel.limit(max_rows + 1).project(", ".join(exprs)).df()
    cut = bool(df.iloc[:, -1].any())
    wide = len(rel.columns) > MAX_COLUMNS
    notes = [f"Only the first {MAX_COLUMNS} of {len(rel.columns)} columns are shown."] if wide else []
    if cut:
        notes.append(f"Values longer than {cap:,} characters are cut (text) or left empty (lists, structs, binary).")
    return df.iloc[:, :-1], notes


def _scrub(text: str) -> str:
    """A message without this machine's folders: DuckDB's private folder, the working directory, home."""
    for path, label in ((private_dir(), "<duckdb-temp>"), (os.getcwd(), "."), (str(Path.home()), "~")):
        if len(path) > 1:
            text = text.replace(path, label)
    return text
