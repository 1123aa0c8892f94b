"""The sandbox for SQL typed by a dashboard user (the SQL page; a query can come from a link).

No Streamlit here. :func:`run_user_query` runs one read statement over a run's tables:

- only a single statement that DuckDB's own parser classifies as SELECT is run (SELECT, WITH,
  FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE); DDL, writes, ATTACH, COPY, SET, PRAGMA, INSTALL,
  LOAD, EXPORT, EXPLAIN and several statements at once are refused before anything runs, and so
  are the functions of :data:`DENIED_FUNCTIONS` (settings and catalogs that show this machine's
  folders, SQL built from a string, scans of memory addresses, logging and profiling switches);
- the query runs in a worker process (:class:`_Pool`: one warm worker kept, more started while it
  is busy, at most :data:`MAX_WORKERS`), never in the caller's: during the query the worker's
  address space may grow by :data:`QUERY_ADDRESS_SPACE` at most (``RLIMIT_AS``), which also holds
  for DuckDB's list and string builders that ignore its own ``memory_limit``; a worker that does
  not answer by the time limit plus :data:`KILL_GRACE_S` is killed and replaced;
- each query gets its own in-memory DuckDB (the run's tables, read by the worker from the run's
  files and kept for the next query) and its own spill folder, closed and removed afterwards:
  nothing a query does is seen by another query, and one session's long query never makes
  another's fail with "connection is busy";
- DuckDB is locked down (:data:`loaders.sqlsafety.SAFE_DUCKDB`: no file system, network, extensions or Python
  variables; configuration locked) and limited (:data:`LIMITS`: one thread, memory, spill size);
- a watchdog interrupts the query after a time limit, which stops it (one thread, no workers);
- at most ``max_rows`` rows, :data:`MAX_COLUMNS` columns, :data:`ROW_CHARS` characters per row
  and about ``max_bytes`` bytes in all are fetched, cut inside DuckDB, so a huge result is
  never materialised in Python, neither in the worker nor in the caller.
"""
from __future__ import annotations

import atexit
import json
import os
import pickle
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from loaders.sqlsafety import private_dir

if TYPE_CHECKING:
    from loaders.run import Run

LIMITS: dict[str, str | int | bool] = {"threads": 1, "memory_limit": "1GB", "max_temp_directory_size": "256MB"}
"""Per user query, for a 2-core machine shared by several users: one core, 1 GB of memory and
256 MB of spill files at most."""

QUERY_ADDRESS_SPACE = 1536 << 20
"""How much a worker's address space may grow during one query (its ``RLIMIT_AS`` is set to
what it uses before the query plus this): DuckDB's 1 GB and room for the result."""
KILL_GRACE_S = 2.0
"""How long after the time limit a worker that did not stop by itself is killed."""
LOAD_TIMEOUT_S = 300.0
"""How long a worker may take to read a run's tables before its query starts."""
MAX_WORKERS = 3
"""Queries run at the same time at most (one worker process each); a further query waits."""
RETIRE_GROWTH = 512 << 20
"""A worker whose resident memory after a query exceeds what it held before the query (its
runs' tables read) by more than this is replaced, so that what a query left behind is freed."""

TIMEOUT_S = 10.0
MAX_ROWS = 10_000
MAX_COLUMNS = 100
ROW_CHARS = 10_000
"""Characters per row shown, shared by the row's text, list, struct and binary values."""
MAX_BYTES = 8 << 20
"""Bytes of a result at most (about: text and list lengths plus a little per value); rows past
this are not fetched, and the page says the result was cut."""

READ_QUERIES = "SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE"

DENIED_FUNCTIONS = frozenset({
    # settings and catalogs that show this machine's folders
    "current_setting", "duckdb_settings", "duckdb_databases", "pragma_database_list", "duckdb_extensions",
    "duckdb_extension_repositories", "duckdb_secrets", "which_secret", "duckdb_temporary_files",
    "pragma_database_size", "pragma_metadata_info", "pragma_storage_info", "duckdb_external_file_cache",
    "duckdb_logs", "duckdb_logs_parsed", "duckdb_log_contexts", "getenv",
    # SQL run from a string, which no check of the query's text could see
    "query", "query_table", "json_execute_serialized_sql",
    # scans of Python objects by memory address
    "arrow_scan", "arrow_scan_dumb", "pandas_scan", "python_arrow_scan", "python_map_function",
    # switches and state of the database
    "enable_logging", "disable_logging", "truncate_duckdb_logs", "enable_profiling", "disable_profiling",
    "checkpoint", "force_checkpoint", "add_grammar_extension", "remove_grammar_extension",
    "register_external_resource", "register_external_resource_type", "create_external_resource",
    "destroy_external_resource", "deregister_external_resource",
})
"""Functions a user query may not call: what would show server folders (settings, databases,
extensions, secrets, temporary files, logs, the environment), run SQL given as a string, read
Python memory by address, or switch logging, profiling or checkpoints."""

FIXED_SIZE = frozenset({
    "boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger",
    "ubigint", "uhugeint", "float", "double", "decimal", "date", "time", "time_ns", "time with time zone",
    "timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone", "interval", "uuid",
    "null",
})
"""DuckDB type ids whose values have a small fixed size (everything else is capped per row)."""
VALUE_BYTES = 48
"""What one value costs beyond its text, in the byte estimate of a result."""

@dataclass(frozen=True)
class QueryResult:
    """What a user query gave: rows (None when refused or failed), a message for the user
    (the refusal or error, or what was cut), whether rows were cut (at ``max_rows`` or at
    ``max_bytes``), seconds taken."""

    df: pd.DataFrame | None
    message: str | None
    truncated: bool
    elapsed_s: float


def refusal(con: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """Why ``query`` is not run, or None for a single read statement (per DuckDB's parser) that
    calls none of :data:`DENIED_FUNCTIONS`."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as e:
        return f"{type(e).__name__}: {e}"
    kinds = [s.type.name.replace("_", " ") for s in statements]
    if not kinds:
        return "The query is empty."
    if len(kinds) > 1:
        return (f"Refused: one statement at a time, and this text holds {len(kinds)} ({', '.join(kinds)}). "
                f"Only read queries are run here ({READ_QUERIES}).")
    if statements[0].type != duckdb.StatementType.SELECT:
        return f"Refused: {kinds[0]} statement. Only read queries are run here ({READ_QUERIES})."
    denied = sorted(called_functions(con, query) & DENIED_FUNCTIONS)
    if denied:
        return (f"Refused: {', '.join(denied)} is not available here (it shows server settings or folders, "
                f"runs SQL from a string, or changes the database).")
    return None


_CALL = re.compile(r'([A-Za-z_][A-Za-z0-9_$]*)"?(?:\s|/\*.*?\*/|--[^\n]*)*\(', re.S)


def called_functions(con: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    """Lower-case names of the functions ``query`` calls, as DuckDB's parser reads them (so
    quoting or escapes do not hide one); for a statement the parser cannot serialise (PIVOT),
    every word of its text followed by an opening parenthesis."""
    try:
        [(tree,)] = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()
        parsed = json.loads(tree)
    except (duckdb.Error, ValueError):
        parsed = {"error": True}
    if not isinstance(parsed, dict) or parsed.get("error", True):
        return {w.lower() for w in _CALL.findall(query)}
    names: set[str] = set()
    stack: list[Any] = [parsed]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            name = node.get("function_name")
            if isinstance(name, str):
                names.add(name.lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


def run_user_query(run: Run, query: str, timeout_s: float = TIMEOUT_S, max_rows: int = MAX_ROWS,
                   max_bytes: int = MAX_BYTES) -> QueryResult:
    """Run SQL typed by a user over ``run``'s tables in the sandbox described in this module:
    in a worker process, so neither the caller's memory nor its time is at the query's mercy."""
    start = time.perf_counter()
    hide = [(private_dir(), "<duckdb-temp>"), (os.getcwd(), "."), (str(Path.home()), "~")]
    with tempfile.TemporaryDirectory(dir=private_dir()) as folder:
        request = {"path": str(run.path), "signature": run.signature, "query": query, "timeout_s": timeout_s,
                   "max_rows": max_rows, "max_bytes": max_bytes, "folder": folder, "hide": hide}
        df, message, truncated = _POOL.ask(request, timeout_s)
    return QueryResult(df, message, truncated, time.perf_counter() - start)


def memory_text() -> str:
    """The memory a query may use, for messages."""
    return f"{QUERY_ADDRESS_SPACE / 2**30:g} GB"


def time_limit_text(timeout_s: float) -> str:
    """The message of a query stopped at its time limit."""
    return f"Interrupted after {timeout_s:g} s (time limit): the query was stopped."


# ---------------------------------------------------------------- the caller's side


class _Worker:
    """One worker process (``python -c`` :func:`_worker_main`, a fresh interpreter: nothing of the
    caller's memory, threads or main module; this checkout's ``loaders`` first on its path) and
    the caller's end of its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        here = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        code = "import sys; from loaders.usersql import _worker_main; _worker_main(int(sys.argv[1]))"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # DuckDB draws progress bars there
            env={**os.environ, "PYTHONPATH": path})
        theirs.close()
        self.conn = Connection(ours.detach())

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the process and wait for it."""
        self.process.kill()
        self.process.wait()
        self.conn.close()

    def stop(self) -> None:
        """Ask the process to finish (it exits when its socket closes), killing it if it does not."""
        self.conn.close()
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def ask(self, request: dict[str, Any], timeout_s: float) -> tuple[tuple[pd.DataFrame | None, str | None, bool],
                                                                        bool]:
        """Send ``request`` and wait for the answer, killing the worker when it does not come
        in time; the answer and whether the worker can serve again."""
        try:
            self.conn.send(request)
            if not self.conn.poll(LOAD_TIMEOUT_S):
                self.kill()
                return (None, f"Stopped: reading the run's tables took over {LOAD_TIMEOUT_S:g} s.", False), False
            started = self.conn.recv()
            if started != "started":
                return started, True
            if not self.conn.poll(timeout_s + KILL_GRACE_S):
                self.kill()
                return (None, time_limit_text(timeout_s), False), False
            raw = self.conn.recv_bytes(4 * request["max_bytes"] + (4 << 20))
        except (EOFError, OSError):
            try:
                code = self.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            self.kill()
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            return (None, f"Stopped: the query's worker process ended ({how}), most likely out of memory "
                          f"(a query may use {memory_text()}).", False), False
        df, message, truncated, growth = pickle.loads(raw)
        return (df, message, truncated), growth < RETIRE_GROWTH


class _Pool:
    """Worker processes for user queries: one kept warm between queries (replaced in the
    background after it was killed), more started while it is busy, :data:`MAX_WORKERS` at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._slots = threading.BoundedSemaphore(MAX_WORKERS)

    def ask(self, request: dict[str, Any], timeout_s: float) -> tuple[pd.DataFrame | None, str | None, bool]:
        """Run ``request`` on a worker (waiting for a free one as long as a query may last)."""
        if not self._slots.acquire(timeout=timeout_s + KILL_GRACE_S + 1):
            return None, f"The server is running {MAX_WORKERS} queries already; try again in a moment.", False
        try:
            worker = self._take()
            answer, healthy = worker.ask(request, timeout_s)
            self._give(worker, healthy)
            return answer
        finally:
            self._slots.release()

    def warm(self) -> None:
        """Start the warm worker now if there is none."""
        with self._lock:
            if not self._idle:
                self._idle.append(_Worker())

    def pids(self) -> list[int]:
        """Process ids of the idle workers."""
        with self._lock:
            return [w.process.pid for w in self._idle if w.alive()]

    def close(self) -> None:
        """Stop the idle workers."""
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.stop()

    def _take(self) -> _Worker:
        """The warm worker if it is idle and alive, else a new one."""
        with self._lock:
            while self._idle:
                w = self._idle.pop()
                if w.alive():
                    return w
                w.kill()
        return _Worker()

    def _give(self, worker: _Worker, healthy: bool) -> None:
        """Keep ``worker`` warm if it is healthy and none is; else end it (and after a kill or
        a crash start a new warm one in the background)."""
        with self._lock:
            keep = healthy and worker.alive() and not self._idle
            if keep:
                self._idle.append(worker)
        if not keep:
            if healthy:
                worker.stop()
            elif worker.alive():
                worker.kill()
            if not healthy:
                threading.Thread(target=self.warm, name="sql-worker-warm", daemon=True).start()


_POOL = _Pool()
atexit.register(_POOL.close)


def warm() -> None:
    """Start the warm worker now (its interpreter and imports), unless there is one, so that the
    first query does not wait for them."""
    _POOL.warm()


def worker_pids() -> list[int]:
    """Process ids of the workers waiting for a query (the warm one)."""
    return _POOL.pids()


# ---------------------------------------------------------------- the worker's side

_RUNS: dict[str, Run] = {}
"""The runs a worker has read, newest last (two at most)."""


def _worker_main(fd: int) -> None:
    """A worker process: serve the caller on the socket ``fd`` until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(fd))


def _serve(conn: Connection) -> None:
    """A worker's loop: answer requests until the connection closes."""
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            run = _run(request["path"], request["signature"])
        except Exception as e:  # noqa: BLE001 - an unreadable run is the user's answer, not the worker's end
            conn.send((None, _scrub(f"Could not read the run: {type(e).__name__}: {e}", request["hide"]), False))
            continue
        conn.send("started")
        before = _status("VmRSS")
        try:
            df, message, truncated = _limited(run, request)
        except Exception as e:  # noqa: BLE001 - a failure of ours is the user's answer, not the worker's end
            df, message, truncated = None, _scrub(f"{type(e).__name__}: {e}", request["hide"]), False
        growth = _status("VmRSS") - before
        conn.send_bytes(pickle.dumps((df, message, truncated, growth), protocol=pickle.HIGHEST_PROTOCOL))


def _run(path: str, signature: tuple) -> Run:
    """The run at ``path`` as the caller saw it (its files' ``signature``), read once per worker."""
    from loaders.formats import source_for
    from loaders.run import TABLE_NAMES, Run

    run = _RUNS.pop(path, None)
    if run is None or run.signature != signature:
        run = Run(Path(path), source_for(Path(path)), signature)
        for name in TABLE_NAMES.values():
            run.table(name)
    _RUNS[path] = run
    while len(_RUNS) > 2:
        _RUNS.pop(next(iter(_RUNS)))
    return run


def _limited(run: Run, request: dict[str, Any]) -> tuple[pd.DataFrame | None, str | None, bool]:
    """:func:`_query` with this process's address space allowed to grow by
    :data:`QUERY_ADDRESS_SPACE` at most; an allocation past it fails, and the query with it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _status("VmSize") + QUERY_ADDRESS_SPACE
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        return _query(run, request)
    except MemoryError:
        return None, f"Stopped: out of memory (a query may use {memory_text()}).", False
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _query(run: Run, request: dict[str, Any]) -> tuple[pd.DataFrame | None, str | None, bool]:
    """One user query on its own connection: refused, failed, stopped or its capped rows."""
    query, timeout_s, max_rows, hide = request["query"], request["timeout_s"], request["max_rows"], request["hide"]
    con = run.connect(request["folder"], **LIMITS)
    try:
        refused = refusal(con, query)
        if refused:
            return None, _scrub(refused, hide), False
        with _deadline(con, timeout_s) as expired:
            try:
                df, notes, cut = _fetch(con.sql(query), max_rows, request["max_bytes"])
            except Exception as e:  # noqa: BLE001 - any failure of the query is shown to the user
                if expired.is_set() or isinstance(e, duckdb.InterruptException):
                    return None, time_limit_text(timeout_s), False
                if isinstance(e, (duckdb.OutOfMemoryException, MemoryError)) or "bad allocation" in str(e):
                    return None, f"Stopped: out of memory (a query may use {memory_text()}).", False
                return None, _scrub(f"{type(e).__name__}: {e}", hide), False
    finally:
        con.close()
    truncated = len(df) > max_rows
    if truncated:
        notes.insert(0, f"Only the first {max_rows:,} rows are shown; the result has more.")
    elif cut:
        notes.insert(0, f"Only the first {len(df):,} rows are shown: the result holds more than "
                        f"{request['max_bytes'] / 2**20:g} MB.")
    return df.head(max_rows), " ".join(notes) or None, truncated or cut


def _status(field: str) -> int:
    """A size from ``/proc/self/status`` (VmSize, VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


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


def _fetch(rel: duckdb.DuckDBPyRelation, max_rows: int, max_bytes: int) -> tuple[pd.DataFrame, list[str], bool]:
    """At most ``max_rows + 1`` rows of ``rel`` and :data:`MAX_COLUMNS` columns, with text cut and
    larger lists, structs and blobs left empty beyond the row's share of :data:`ROW_CHARS`
    (cut inside DuckDB, before a value repeated on many rows is copied to each), and no row
    after the estimated bytes pass ``max_bytes``; notes on what was cut, and whether rows were
    left out for their bytes."""
    columns = list(zip(rel.columns, rel.types))[:MAX_COLUMNS]
    sized = sum(t.id not in FIXED_SIZE for _, t in columns)
    cap = ROW_CHARS // max(1, sized)
    exprs, over, sizes = [], [], [str(8 * (len(columns) - sized) + VALUE_BYTES)]
    for i, (name, typ) in enumerate(columns, 1):
        value = f"#{i}"
        if typ.id not in FIXED_SIZE:
            text = value if typ.id == "varchar" else f"CAST({value} AS VARCHAR)"
            over.append(f"length({text}) > {cap}")
            if typ.id == "varchar":
                value = f"left({value}, {cap})"
                sizes.append(f"coalesce(strlen({value}), 0) + {VALUE_BYTES}")
            else:
                sizes.append(f"CASE WHEN length({text}) <= {cap} THEN strlen({text}) ELSE 0 END + {VALUE_BYTES}")
                value = f"CASE WHEN length({text}) <= {cap} THEN {value} END"
        exprs.append(f'{value} AS "{name.replace(chr(34), chr(34) * 2)}"')
    n = len(exprs)
    exprs.append(f"coalesce({' OR '.join(over) or 'false'}, false)")
    exprs.append(f"coalesce({' + '.join(sizes)}, 0)::BIGINT")
    shown = rel.limit(max_rows + 1).project(", ".join(exprs))
    running = shown.project(", ".join(f"#{i}" for i in range(1, n + 3))
                            + f", sum(#{n + 2}) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")
    df = running.filter(f"#{n + 3} - #{n + 2} <= {max_bytes}").df()
    by_bytes = bool(len(df)) and int(df.iloc[-1, -1]) > max_bytes
    if by_bytes:
        df = df.iloc[:-1]
    cut = bool(df.iloc[:, n].any())
    wide = len(rel.columns) > MAX_COLUMNS
    notes = [f"Only the first {MAX_COLUMNS} of {len(rel.columns)} columns are shown."] if wide else []
    if cut:
        notes.append(f"Values longer than {cap:,} characters are cut (text) or left empty (lists, structs, binary).")
    return df.iloc[:, :n], notes, by_bytes


def _scrub(text: str, hide: list[tuple[str, str]]) -> str:
    """A message without this machine's folders: each of ``hide`` (DuckDB's private folder,
    the working directory, home) replaced by its label."""
    for path, label in hide:
        if len(path) > 1:
            text = text.replace(path, label)
    return text
