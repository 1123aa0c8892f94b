"""The server's start-up visits (``dashboard.warmup``): which run they open, and that they
leave in the server's caches what a browser's first visit then uses."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import APP, REPO, write_run
from dash_browser import free_port, needs_browser, settle, stop_group, url

from dashboard.warmup import PAGES, newest_run, plan, prepare
from loaders import cursor
from loaders.run import open_run
from mfm.schema import MANIFEST


def _touch(run: Path, ns: int) -> None:
    os.utime(run / MANIFEST, ns=(ns, ns))


@pytest.mark.parametrize("newest", ["b", "nested/c", "a"])
def test_the_visits_open_the_run_written_last(tmp_path: Path, newest: str) -> None:
    keys = ["a", "b", "nested/c"]
    for i, key in enumerate(keys):
        write_run(tmp_path / key, episodes=2, seed=i)
    base = time.time_ns()
    for i, key in enumerate(keys):
        _touch(tmp_path / key, base - (0 if key == newest else (i + 1) * 10**9))
    assert newest_run(tmp_path) == tmp_path / newest
    assert plan(tmp_path, newest_run(tmp_path)) == [("", ""), *[(page, urlencode({"runs": newest})) for page in PAGES]]


def test_with_no_run_only_the_runs_page_is_visited(tmp_path: Path) -> None:
    (tmp_path / "not_a_run").mkdir()
    assert newest_run(tmp_path) is None
    assert plan(tmp_path, None) == [("", "")]


def test_the_run_opened_at_start_is_the_one_the_pages_then_get(tmp_path: Path) -> None:
    """What the server reads at its start (``prepare``) is held where a page's ``open_run``
    finds it: the same run object, its tables read and its turns sorted per life."""
    run_dir = tmp_path / "r"
    shutil.copytree(REPO / "sample_runs" / "diamond_mfm_s2", run_dir)
    run = prepare(run_dir)
    assert open_run(run_dir) is run and run.loaded
    raw = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines() if line.strip()]
    lives = sorted({t["life"] for t in raw})
    assert len(lives) > 1
    for life in lives:
        assert [t.turn for t in cursor.turns_of(run, life)] == [
            t["turn"] for t in sorted(raw, key=lambda t: (t["first_step"], t["turn"])) if t["life"] == life]


VISITS = re.compile(r"mfm dashboard: start-up visits \((?P<run>[^)]*)\): (?P<made>.*) \([0-9.]+ s after")


def _visits_line(log: Path, proc: subprocess.Popen) -> re.Match:
    """The server's line about its start-up visits, once printed."""
    deadline = time.time() + 300  # a guard against a hang, generous for a loaded machine
    while time.time() < deadline and proc.poll() is None:
        for line in log.read_text(errors="replace").splitlines():
            if m := VISITS.search(line):
                return m
        time.sleep(0.2)
    pytest.fail(f"no start-up visits reported:\n{log.read_text(errors='replace')}")


METRIC = re.compile(r'^cache_memory_bytes\{cache_type="(?P<kind>[^"]*)",cache="(?P<name>[^"]*)"\} (?P<value>\d+)$', re.M)


def _entries(base: str) -> dict[str, int]:
    """Entries per ``st.cache_data`` / ``st.cache_resource`` function, from the server's metrics:
    a line per ``st.cache_data`` entry, one line per ``st.cache_resource`` function whose value
    is its number of entries (Streamlit recomputes the family at most every 5 s)."""
    with urllib.request.urlopen(base + "/_stcore/metrics?families=cache_memory_bytes", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, int] = {}
    for m in METRIC.finditer(text):
        n = int(m["value"]) if m["kind"] == "st_cache_resource" else 1
        out[m["name"]] = out.get(m["name"], 0) + n
    return out


def _of(entries: dict[str, int], name: str) -> int:
    return sum(n for cache, n in entries.items() if name in cache)


@needs_browser
@pytest.mark.browser
@pytest.mark.slow
def test_a_first_visit_finds_what_the_start_up_visits_built(tmp_path: Path, page) -> None:
    """A server started on a root of two runs visits its pages with the newer run open before
    any browser; the caches then hold the Timeline's views of that run (nobody else could have
    made them), and a browser opening the Timeline of that run adds no entry to them."""
    root = tmp_path / "root"
    for name in ("diamond_direct_s2_2500steps", "reach-1000_mfm_s0"):
        shutil.copytree(REPO / "sample_runs" / name, root / name)
    _touch(root / "diamond_direct_s2_2500steps", time.time_ns())
    port = free_port()
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "dashboard.serve", APP, "--server.port", str(port), "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", "--", "--root", str(root)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO,
                                env=dict(os.environ, MFM_CACHE_DIR=str(tmp_path / "cache")))
    base = f"http://127.0.0.1:{port}"
    try:
        m = _visits_line(log, proc)
        assert m.group("run") == "diamond_direct_s2_2500steps"
        made = dict(re.findall(r"(\w+) ([0-9.]+) s", m.group("made")))
        assert list(made) == ["runs", *PAGES], m.group(0)
        assert "(" not in m.group("made"), f"a page showed an exception: {m.group(0)}"
        before = _entries(base)
        for name in ("chart_data.timeline", "views._timeline_lanes", "lookups.lives_of", "views._grid_map",
                     "build_graph"):
            assert _of(before, name) >= 1, (name, sorted(before))
        page.goto(url(base, "timeline", runs="diamond_direct_s2_2500steps"), wait_until="domcontentloaded")
        settle(page)
        page.locator(".mfm-lanes canvas[aria-label]").first.wait_for(timeout=60_000)
        time.sleep(5.5)  # past the 5 s for which Streamlit reuses its last count
        after = _entries(base)
        for name in ("chart_data.timeline", "views._timeline_lanes"):
            assert _of(after, name) == _of(before, name), (name, before, after)
    finally:
        stop_group(proc, 10)
