"""The memory and time a user query may take from the dashboard (issue 47, finding 8).

DuckDB's list and string builders (``range`` and ``list_resize`` as values, ``repeat``,
``string_agg``, ``array_agg``, list comprehensions) ignore its own ``memory_limit`` and,
while they build, its interrupt: run in the server they took it to many GB (one to the OOM
killer) and well past the time limit, and a wide result took 1.2 GB per browser tab. The SQL
page's query path (``loaders.usersql.run_user_query``, the function the page calls) now runs
each query in a worker process with a limited address space, killed at the time limit, and
fetches a bounded number of bytes. These tests run that path in a fresh Python process (peak
memory, ``VmHWM``, only ever grows) and check that its peak hardly moves while each query ends
with a clear message.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from loaders import Run, open_run
from loaders.usersql import run_user_query, worker_pids

SAMPLE = "diamond_mfm_s2"
SAFETY_NET = 8 << 30
"""Address space of the process under test (its workers inherit it as their ceiling): should
the sandbox ever fail, the test fails instead of the shared machine running out of memory."""
PEAK_GROWTH = 150 << 20
"""How much the server's peak resident memory may grow over all the hostile queries (it grew
by 3 to 21 GB before)."""

MEMORY, DEADLINE, CUT, ANSWERED = "memory limit", "deadline", "result cut", "answered"
HOSTILE = {
    "SELECT len(range(0, 100000000))": {ANSWERED, MEMORY, DEADLINE},
    "SELECT list_resize([1], 150000000)": {MEMORY, DEADLINE},
    "SELECT length(repeat('x', 1500000000))": {MEMORY, DEADLINE},
    "SELECT range(0, 2000000000)": {MEMORY, DEADLINE},
    "SELECT generate_series(0, 2000000000)": {MEMORY, DEADLINE},
    "SELECT length(string_agg(repeat('x', 1000), '')) FROM range(3000000)": {MEMORY, DEADLINE},
    "SELECT len(array_agg(range)) FROM range(400000000)": {MEMORY, DEADLINE},
    "SELECT len([x * 2 FOR x IN range(0, 300000000)])": {MEMORY, DEADLINE},
    "SELECT len(list_transform(range(0, 300000000), lambda x: x + 1))": {MEMORY, DEADLINE},
    "SELECT count(*) FROM (SELECT unnest(range(0, 1000000000)))": {MEMORY, DEADLINE},
    "SELECT unnest(range(0, 50000000)) AS v": {CUT, MEMORY, DEADLINE},
    "SELECT repeat('x', 10000) FROM range(10001)": {CUT},
    "SELECT repeat('x', 10000) AS a, repeat('y', 10000) AS b, range(0, 1000) AS c FROM range(100000)": {CUT},
}
"""Each list or string building query of the finding and its variants, with the outcomes that
are right for it: stopped at the memory limit or the deadline, its result cut to the byte
budget, or (``len(range(0, 100000000))``, 0.8 GB) answered within the limits."""

SCRIPT = """
import json, sys
from loaders import open_run
from loaders.usersql import run_user_query, worker_pids

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

run = open_run(sys.argv[1])
assert run_user_query(run, "SELECT 1 AS one").message is None
base, results = peak(), []
for query in json.loads(sys.argv[2]):
    res = run_user_query(run, query, timeout_s=float(sys.argv[3]))
    results.append({"query": query, "message": res.message, "rows": None if res.df is None else len(res.df),
                    "bytes": None if res.df is None else int(res.df.memory_usage(deep=True).sum()),
                    "truncated": res.truncated})
after = run_user_query(run, "SELECT count(*) AS n FROM episodes")
print(json.dumps({"base": base, "peak": peak(), "results": results, "after": after.df["n"].tolist(),
                  "episodes": len(run.episodes()), "workers": len(worker_pids())}))
"""


def outcome(r: dict[str, Any]) -> str:
    """Which clear ending a query had, or its message when it had none of them."""
    message = r["message"] or ""
    if r["rows"] is None:
        if "out of memory" in message:
            return MEMORY
        if message.startswith("Interrupted after") and "(time limit)" in message:
            return DEADLINE
        return message
    if r["truncated"] and "rows are shown" in message:
        return CUT
    return ANSWERED if not message else message


def _net() -> None:
    """In the child before it starts: its address space capped at :data:`SAFETY_NET`."""
    resource.setrlimit(resource.RLIMIT_AS, (SAFETY_NET, SAFETY_NET))


def run_page_path(run_dir: Path, queries: list[str], timeout_s: float) -> dict[str, Any]:
    """Run ``queries`` through ``run_user_query`` in a fresh process; its peak memory before and after."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(run_dir), json.dumps(queries), str(timeout_s)],
                         cwd=REPO, capture_output=True, text=True, timeout=900, preexec_fn=_net)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(REPO / "sample_runs" / SAMPLE, root / SAMPLE)
    return root / SAMPLE


def test_list_and_string_builders_leave_the_server_memory_alone(run_dir: Path) -> None:
    got = run_page_path(run_dir, list(HOSTILE), timeout_s=5)
    ends = {r["query"]: outcome(r) for r in got["results"]}
    wrong = {q: e for q, e in ends.items() if e not in HOSTILE[q]}
    assert not wrong, wrong
    assert got["peak"] - got["base"] < PEAK_GROWTH, (got["peak"] - got["base"]) >> 20
    assert all(r["bytes"] is None or r["bytes"] < 32 << 20 for r in got["results"])
    assert got["after"] == [got["episodes"]] and got["workers"] == 1


PAGE_SCRIPT = """
import json, sys
from streamlit.testing.v1 import AppTest

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

def visit(query):
    at = AppTest.from_file(sys.argv[1], default_timeout=120)
    for k, v in {"runs": sys.argv[2], "run": sys.argv[2], "q": query}.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("../pages/sql.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at

visit("SELECT 1 AS one")
base = peak()
shown = {}
for query in json.loads(sys.argv[3]):
    at = visit(query)
    shown[query] = {"errors": [e.value for e in at.error], "warnings": [w.value for w in at.warning],
                    "rows": [len(d.value) for d in at.dataframe if "table" not in d.value.columns]}
print(json.dumps({"base": base, "peak": peak(), "shown": shown}))
"""


def test_a_deep_link_to_the_sql_page_leaves_the_server_memory_alone(run_dir: Path) -> None:
    """The page itself, opened from links (``sql?...&q=...``) as a browser would: the message is
    shown, and the server's peak memory hardly moves (one such link took it from 363 MB to 3.46 GB)."""
    queries = ["SELECT range(0, 2000000000)", "SELECT length(repeat('x', 1500000000))",
               "SELECT repeat('x', 10000) FROM range(10001)"]
    out = subprocess.run([sys.executable, "-c", PAGE_SCRIPT, str(REPO / "dashboard" / "app.py"), SAMPLE,
                          json.dumps(queries)], cwd=REPO, capture_output=True, text=True, timeout=900,
                         preexec_fn=_net, env={**os.environ, "MFM_RUNS_ROOT": str(run_dir.parent)})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for query in queries[:2]:
        assert [e.startswith("Stopped: out of memory") for e in got["shown"][query]["errors"]] == [True], query
    wide = got["shown"][queries[2]]
    assert wide["errors"] == [] and wide["rows"] == [830]
    assert wide["warnings"] == ["Only the first 830 rows are shown: the result holds more than 8 MB."]
    assert got["peak"] - got["base"] < PEAK_GROWTH, (got["peak"] - got["base"]) >> 20


@pytest.fixture
def run(run_dir: Path) -> Run:
    return open_run(run_dir)


def test_a_worker_that_dies_mid_query_gives_a_message_and_is_replaced(run: Run) -> None:
    """A worker killed under a query (as the kernel's OOM killer would) ends that query with a
    message; the pool starts another, and the next query is answered."""
    assert run_user_query(run, "SELECT 1 AS one").message is None
    [pid] = worker_pids()
    answer: list = []
    query = threading.Thread(target=lambda: answer.append(
        run_user_query(run, "SELECT count(*) FROM range(1000000000000) a", timeout_s=60)))
    query.start()
    while query.is_alive() and not _busy(pid):
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    query.join(120)
    assert answer and answer[0].df is None and "killed by signal 9" in answer[0].message
    res = run_user_query(run, "SELECT count(*) AS n FROM episodes")
    assert res.message is None and res.df["n"].tolist() == [len(run.episodes())]
    assert worker_pids() and pid not in worker_pids() and not Path(f"/proc/{pid}").exists()


def _busy(pid: int) -> bool:
    """Whether process ``pid`` is running (state R) rather than waiting for its next request."""
    return stat_state(pid) == "R"


def test_a_query_deaf_to_the_interrupt_is_killed_at_the_deadline(run: Run) -> None:
    """``len(range(0, 100000000))`` builds its list without looking at DuckDB's interrupt (it took
    45 s in the server): its worker is killed once the time limit and the grace are over, the
    page gets the time-limit message, and a new warm worker serves the next query."""
    assert run_user_query(run, "SELECT 1 AS one").message is None
    [pid] = worker_pids()
    res = run_user_query(run, "SELECT len(range(0, 100000000))", timeout_s=0.2)
    assert res.df is None and res.message.startswith("Interrupted after 0.2 s (time limit)")
    if worker_pids() != [pid]:
        assert stat_state(pid) in (None, "Z"), "the worker that ran the query is still running"
    after = run_user_query(run, "SELECT count(*) AS n FROM episodes")
    assert after.df["n"].tolist() == [len(run.episodes())] and len(worker_pids()) == 1


def stat_state(pid: int) -> str | None:
    """The state letter of process ``pid``, or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
