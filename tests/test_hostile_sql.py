"""SQL typed by a hostile user (the SQL page; a query can come from a link): only read statements
run, each on a private DuckDB in a worker process, under a time limit and a row limit (issue 19,
findings 2 and 3), and nothing shows the server's folders (issue 47, finding 8). The memory a
query may take is tested in ``test_sql_memory.py``."""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from conftest import REPO, open_app, use_root
from loaders import Run, open_run
from loaders.run import TABLE_NAMES
from loaders.usersql import DENIED_FUNCTIONS, ROW_CHARS, private_dir, run_user_query, worker_pids

SAMPLE = "diamond_mfm_s2"
COUNT = "SELECT count(*) AS n FROM episodes"
LONG = "SELECT count(*) FROM range(1000000000000) a"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs root holding a copy of a sample run, so nothing in the repository can change."""
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(REPO / "sample_runs" / SAMPLE, root / SAMPLE)
    return root


@pytest.fixture
def run(runs_root: Path) -> Run:
    return open_run(runs_root / SAMPLE)


@pytest.fixture
def cwd_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a ``.tmp`` folder, the folder DuckDB used to leave writable."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    return tmp_path / ".tmp"


def episodes_unchanged(run: Run) -> None:
    """A later query sees the run's real views, all of them, and nothing else."""
    res = run_user_query(run, COUNT)
    assert res.message is None and res.df["n"].tolist() == [len(run.episodes())]
    names = run_user_query(run, "SHOW TABLES").df["name"].tolist()
    assert sorted(names) == sorted(TABLE_NAMES.values())
    assert "pwned" not in run_user_query(run, "SELECT id FROM episodes").df["id"].tolist()


@pytest.mark.parametrize(("query", "kind"), [
    ("DROP VIEW episodes", "DROP"),
    ("CREATE VIEW episodes AS SELECT 'pwned' AS id", "CREATE"),
    ("CREATE OR REPLACE VIEW episodes AS SELECT 'pwned' AS id", "CREATE"),
    ("CREATE TABLE t AS SELECT 1 AS a", "CREATE"),
    ("CREATE TEMP TABLE t AS SELECT 1 AS a", "CREATE"),
    ("CREATE MACRO episodes_n() AS 1", "CREATE"),
    ("ATTACH ':memory:' AS m", "ATTACH"),
    ("ATTACH '.tmp/evil.db' AS evil", "ATTACH"),
    ("DETACH memory", "DETACH"),
    ("COPY episodes TO '.tmp/x.csv'", "COPY"),
    ("EXPORT DATABASE '.tmp/db'", "EXPORT"),
    ("INSERT INTO episodes SELECT * FROM episodes", "INSERT"),
    ("DELETE FROM episodes", "DELETE"),
    ("SET threads = 8", "SET"),
    ("SET enable_external_access = true", "SET"),
    ("PRAGMA table_info('episodes')", "PRAGMA"),
    ("INSTALL httpfs", "LOAD"),
    ("LOAD httpfs", "LOAD"),
    ("CALL pragma_version()", "CALL"),
    ("EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", "EXPLAIN"),
])
def test_write_and_ddl_statements_are_refused(run: Run, cwd_tmp: Path, query: str, kind: str) -> None:
    res = run_user_query(run, query)
    assert res.df is None and res.message.startswith(f"Refused: {kind} statement")
    assert list(cwd_tmp.iterdir()) == []
    episodes_unchanged(run)


@pytest.mark.parametrize("query", ["SELECT 1; DROP VIEW episodes", "SELECT 1; CREATE VIEW episodes AS SELECT 1 AS id"])
def test_several_statements_are_refused(run: Run, query: str) -> None:
    res = run_user_query(run, query)
    assert res.df is None and "one statement at a time" in res.message and "2 (SELECT, " in res.message
    episodes_unchanged(run)


def test_each_query_has_its_own_database(run: Run) -> None:
    """Even a write that got past the statement check would stay in its own connection."""
    a, b = run.connect(), run.connect()
    try:
        a.execute("CREATE OR REPLACE TEMP VIEW episodes AS SELECT 'pwned' AS id")
        assert a.sql("SELECT id FROM episodes").fetchall() == [("pwned",)]
        assert b.sql("SELECT count(*) FROM episodes").fetchall() == [(len(run.episodes()),)]
    finally:
        a.close()
        b.close()
    episodes_unchanged(run)


def test_duckdb_never_uses_the_working_directory_tmp(run: Run, cwd_tmp: Path) -> None:
    """The notebook path (``Run.sql``, any statement) cannot write ``<cwd>/.tmp`` either: DuckDB's
    temporary folder is a private folder of the process, and the setting is locked."""
    for query in ("COPY episodes TO '.tmp/x.csv'", "ATTACH '.tmp/evil.db' AS evil",
                  "SET temp_directory = '.tmp'"):
        with pytest.raises(duckdb.Error):
            run.sql(query).fetchall()
    assert list(cwd_tmp.iterdir()) == []
    [(temp,)] = run.sql("SELECT current_setting('temp_directory')").fetchall()
    assert Path(temp) == Path(private_dir()) and Path(private_dir()).stat().st_mode & 0o077 == 0
    res = run_user_query(run, "SELECT current_setting('temp_directory') AS t")
    assert res.df is None and res.message.startswith("Refused: current_setting")


@pytest.mark.parametrize("query", [
    "SELECT current_setting('temp_directory')",
    "SELECT \"current_setting\"('home_directory')",
    "SELECT upper(CURRENT_SETTING('secret_directory'))",
    "SELECT list_transform([1], lambda x: current_setting('extension_directory'))",
    "FROM duckdb_settings()",
    "SELECT value FROM duckdb_settings() WHERE name = 'temp_directory'",
    "SELECT * FROM pragma_database_list()",
    "FROM duckdb_databases()",
    "SELECT install_path FROM duckdb_extensions()",
    "FROM duckdb_temporary_files()",
    "FROM duckdb_secrets()",
    "DESCRIBE SELECT current_setting('temp_directory')",
    "SUMMARIZE FROM duckdb_settings()",
    "WITH s AS (FROM duckdb_settings()) SELECT * FROM s",
    "PIVOT (SELECT current_setting ('temp_directory') AS t) ON t",
    "PIVOT (SELECT current_setting/* a comment */('temp_directory') AS t) ON t",
    "FROM query('SELECT current_setting(''temp_directory'')')",
    "FROM query_table('episodes')",
    "FROM enable_logging()",
])
def test_settings_and_catalogs_that_show_paths_are_refused(run: Run, query: str) -> None:
    res = run_user_query(run, query)
    assert res.df is None and res.message.startswith("Refused: ")
    assert query.startswith("PIVOT") or any(name in res.message for name in DENIED_FUNCTIONS)


def test_allowed_catalog_functions_show_no_server_folder(run: Run) -> None:
    """Every DuckDB table function without arguments that a query may call shows none of this
    machine's folders (the private folder, the working directory, home, Python's prefix)."""
    con = duckdb.connect()
    names = sorted({n for (n,) in con.sql("SELECT function_name FROM duckdb_functions() "
                                           "WHERE function_type = 'table' AND parameters = []").fetchall()})
    con.close()
    allowed = [n for n in names if n not in DENIED_FUNCTIONS and n != "seq_scan"]
    assert len(allowed) > 20 and "duckdb_functions" in allowed
    folders = [private_dir(), os.getcwd(), str(Path.home()), sys.prefix, str(REPO)]
    for name in allowed:
        res = run_user_query(run, f"FROM {name}()")
        assert res.df is not None, (name, res.message)
        text = res.df.astype(str).to_csv()
        assert not [f for f in folders if f in text], name


def test_file_functions_stay_blocked(run: Run, tmp_path: Path) -> None:
    for query in ("SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_text('/etc/hostname')",
                  "SELECT * FROM glob('/etc/*')", "SELECT * FROM query('DROP VIEW episodes')"):
        res = run_user_query(run, query)
        assert res.df is None and res.message
    episodes_unchanged(run)


def test_messages_hold_no_server_paths(run: Run, cwd_tmp: Path) -> None:
    res = run_user_query(run, f"SELECT * FROM read_csv('{private_dir()}/nope.csv')")
    assert res.df is None and "<duckdb-temp>/nope.csv" in res.message and private_dir() not in res.message
    res = run_user_query(run, f"SELECT * FROM read_csv('{cwd_tmp}/nope.csv')")
    assert res.df is None and "./.tmp/nope.csv" in res.message and str(cwd_tmp.parent) not in res.message


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_time_limit_stops_the_query(run: Run) -> None:
    """The query's own work: the worker process that ran it (nothing else runs there) is the
    same one afterwards (the interrupt stopped the query: no kill was needed) and spends no CPU
    once the answer is in."""
    assert run_user_query(run, COUNT).message is None
    [pid] = worker_pids()
    res = run_user_query(run, LONG, timeout_s=1)
    assert res.df is None and res.message.startswith("Interrupted after 1 s (time limit)")
    assert worker_pids() == [pid]
    cpu = cpu_seconds(pid)
    time.sleep(2)
    assert cpu_seconds(pid) - cpu < 0.5, "the interrupted query is still running"
    assert run_user_query(run, COUNT).df["n"].tolist() == [len(run.episodes())]


def test_a_long_query_does_not_block_other_queries(run: Run) -> None:
    long: list = []
    worker = threading.Thread(target=lambda: long.append(run_user_query(run, LONG, timeout_s=3)))
    worker.start()
    others = []
    while worker.is_alive():
        others.append(run_user_query(run, COUNT))
    worker.join()
    assert others and all(r.message is None and r.df["n"].tolist() == [len(run.episodes())] for r in others)
    assert long[0].df is None and "time limit" in long[0].message


def test_row_limit_never_materialises_the_result(run: Run) -> None:
    for query in ("SELECT * FROM range(100000000)", "SELECT * FROM range(1000000000000000)"):
        res = run_user_query(run, query, max_rows=1000)
        assert res.truncated and len(res.df) == 1000 and res.df["range"].tolist() == list(range(1000))
        assert "first 1,000 rows" in res.message
    whole = run_user_query(run, "SELECT * FROM range(1000)", max_rows=1000)
    assert not whole.truncated and len(whole.df) == 1000 and whole.message is None


def test_huge_values_are_cut_inside_duckdb(run: Run) -> None:
    """A 10 MB value repeated on every row is cut before it reaches Python."""
    res = run_user_query(run, "SELECT repeat('x', 10000000) AS s FROM range(300)")
    assert len(res.df) == 300 and set(res.df["s"].map(len)) == {ROW_CHARS} and "cut" in res.message
    res = run_user_query(run, "SELECT 1 AS k, range(100000) AS big, [1, 2] AS small")
    assert res.df["big"].isna().all() and list(res.df["small"][0]) == [1, 2] and "left empty" in res.message
    wide = run_user_query(run, "SELECT " + ", ".join(f"{i} AS c{i}" for i in range(150)))
    assert list(wide.df.columns) == [f"c{i}" for i in range(100)] and "first 100 of 150 columns" in wide.message


def test_normal_queries_still_work(run: Run) -> None:
    res = run_user_query(run, "SELECT action_kind, count(*) AS n FROM episodes WHERE action_kind IS NOT NULL "
                              "GROUP BY 1 ORDER BY n DESC, action_kind")
    want = run.episodes()["action_kind"].value_counts()
    assert res.message is None and not res.truncated
    assert dict(zip(res.df["action_kind"], res.df["n"])) == want.to_dict()
    assert res.df["n"].is_monotonic_decreasing
    for query in ("WITH e AS (SELECT * FROM episodes) SELECT count(*) FROM e", "FROM steps LIMIT 3",
                  "DESCRIBE episodes", "SUMMARIZE lives", "VALUES (1), (2)", "SELECT 1;"):
        assert run_user_query(run, query).message is None, query


@pytest.fixture
def app_root(runs_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    use_root(monkeypatch, runs_root)
    return runs_root


def test_sql_page_refuses_a_drop_from_a_link(app_root: Path, run: Run) -> None:
    at = open_app("sql", runs=SAMPLE, run=SAMPLE, q="DROP VIEW episodes")
    assert [e.value for e in at.error] and at.error[0].value.startswith("Refused: DROP statement")
    assert not [d for d in at.dataframe if "n" in d.value.columns]
    at.text_area(key="w_sql").set_value(COUNT).run()
    assert not at.exception and not at.error
    assert next(d.value for d in at.dataframe if "n" in d.value.columns)["n"].tolist() == [len(run.episodes())]
    caption = " ".join(c.value for c in at.caption)
    assert "private" in caption and "stopped after 10 s" in caption and "10,000 rows" in caption


def test_sql_page_shows_the_row_limit(app_root: Path) -> None:
    at = open_app("sql", runs=SAMPLE, run=SAMPLE, q="SELECT * FROM range(100000000)")
    assert [w.value for w in at.warning] == ["Only the first 10,000 rows are shown; the result has more."]
    assert len(next(d.value for d in at.dataframe if "range" in d.value.columns)) == 10_000
    assert any("(the first 10,000)" in c.value for c in at.caption)


def test_a_removed_private_folder_is_made_again(run: Run) -> None:
    """A /tmp cleaner removing DuckDB's private folder of a long-running dashboard breaks nothing."""
    old = private_dir()
    shutil.rmtree(old)
    assert run_user_query(run, COUNT).df["n"].tolist() == [len(run.episodes())]
    assert private_dir() != old and Path(private_dir()).is_dir()
