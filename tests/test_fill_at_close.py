"""Filling the table cache when a run closes (``loaders.cachedread.fill_closed_run``): the
first open of the run, in a new process, is then served from the cache; a run still being
written is not filled; nothing is written into the run folder."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from loaders import cachedread, tablecache
from loaders.run import TABLE_NAMES, Run, signature
from loaders.sources import DirSource
from mfm.schema import MANIFEST, TABLES

OPEN = """
import json, sys
from loaders import open_run
r = open_run(sys.argv[1])
print(json.dumps({"rows": {n: len(r.table(n)) for n in sys.argv[2:]}, "problems": [str(p) for p in r.problems]}))
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache folder; every file counts as modified just now (the racy rule
    refuses all of them), as for a run whose writer closed it a moment ago."""
    d = tmp_path / "cache"
    monkeypatch.setenv("MFM_CACHE_DIR", str(d))
    monkeypatch.setattr(tablecache, "RACY_SECONDS", 3600.0)
    return d


def copy_run(tmp_path: Path, status: str | None = None) -> Path:
    run = tmp_path / "runs" / "diamond_mfm_s2"
    shutil.copytree(REPO / "sample_runs" / "diamond_mfm_s2", run)
    if status is not None:
        m = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
        (run / MANIFEST).write_text(json.dumps(dict(m, status=status)) + "\n", encoding="utf-8")
    return run


def entries(cache: Path) -> dict[str, tuple[int, int]]:
    """Each cache entry with its inode and modification time."""
    tablecache.wait()
    if not cache.is_dir():
        return {}
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.glob(f"*{tablecache.SUFFIX}")}


def tree(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}


def test_the_first_open_after_the_fill_is_served_from_the_cache(tmp_path, cache):
    run = copy_run(tmp_path)
    before = tree(run)
    big = [n for n in TABLES if (run / n).is_file() and (run / n).stat().st_size >= cachedread.CACHE_MIN_BYTES]
    assert cachedread.fill_closed_run(run) is True
    filled = entries(cache)
    assert len(filled) == len(big) + 1, "one entry per table worth caching and one for the file checks"
    assert tree(run) == before, "nothing is written into the run folder"
    for name in filled:
        os.utime(cache / name, ns=(10**18, 10**18))
    filled = entries(cache)
    views = list(TABLE_NAMES.values())
    got = json.loads(subprocess.check_output([sys.executable, "-c", OPEN, str(run), *views], text=True, cwd=REPO,
                                             env=dict(os.environ, MFM_CACHE_DIR=str(cache))).splitlines()[-1])
    after = entries(cache)
    assert after.keys() == filled.keys(), "the open wrote no entry of its own"
    assert all(after[n][0] == filled[n][0] for n in after), "no entry was rewritten (a miss rewrites it)"
    assert all(after[n][1] != filled[n][1] for n in after), "every entry was read (a hit refreshes its time)"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("MFM_CACHE_DIR", "off")
        plain = Run(run, DirSource(run), signature(run))
        assert got == {"rows": {n: len(plain.table(n)) for n in views}, "problems": [str(p) for p in plain.problems]}


def test_a_process_that_exits_right_after_an_open_leaves_its_entries(tmp_path, cache):
    """A never-filled run's first open writes its Arrow entries in the background
    (``tablecache.store_later``); a process that prints and exits at once still leaves them
    all, and the next process's open is served from them."""
    run = copy_run(tmp_path)
    big = [n for n in TABLES if (run / n).is_file() and (run / n).stat().st_size >= cachedread.CACHE_MIN_BYTES]
    code = ("import loaders.fastread, loaders.tablecache; loaders.fastread.MIN_BYTES = 0; "
            "loaders.tablecache.RACY_SECONDS = 0.0\n" + OPEN)
    env = dict(os.environ, MFM_CACHE_DIR=str(cache))
    views = list(TABLE_NAMES.values())
    first = subprocess.check_output([sys.executable, "-c", code, str(run), *views], text=True, cwd=REPO, env=env)
    written = entries(cache)
    assert len(written) == len(big) + 1, "one entry per table worth caching and one for the file checks"
    heads = [(cache / n).read_bytes()[:400] for n in written]
    assert sum(b'"payload": "arrow"' in h for h in heads) >= 1, "an Arrow entry, the kind written in the background"
    again = subprocess.check_output([sys.executable, "-c", code, str(run), *views], text=True, cwd=REPO, env=env)
    assert again == first
    after = entries(cache)
    assert all(after[n][0] == written[n][0] for n in after), "no entry was rewritten: every table was a hit"


def test_the_fill_goes_to_the_path_the_loaders_open(tmp_path, cache):
    """A run named through a symlink is filled under its real path, the one ``open_run`` uses."""
    run = copy_run(tmp_path)
    (tmp_path / "link").symlink_to(run.parent)
    assert cachedread.fill_closed_run(tmp_path / "link" / run.name)
    key = tablecache.stamp(run / "steps.jsonl")
    hit = tablecache.load("table", os.path.abspath(run / "steps.jsonl"),
                          [*key, "steps.jsonl", cachedread.fastread.MIN_BYTES])
    assert hit is not None


@pytest.mark.parametrize("status", ["running", "finished", "interrupted", "crashed"])
def test_only_a_closed_run_is_filled(tmp_path, cache, status):
    run = copy_run(tmp_path, status)
    assert cachedread.fill_closed_run(run) is (status != "running")
    assert bool(entries(cache)) is (status != "running"), "a run still running keeps the racy rule"


def test_nothing_is_filled_with_the_cache_off_or_without_a_manifest(tmp_path, cache, monkeypatch):
    run = copy_run(tmp_path)
    monkeypatch.setenv("MFM_CACHE_DIR", "off")
    assert cachedread.fill_closed_run(run) is False
    monkeypatch.setenv("MFM_CACHE_DIR", str(cache))
    (run / MANIFEST).unlink()
    assert cachedread.fill_closed_run(run) is False
    assert cachedread.fill_closed_run(tmp_path / "no such run") is False
    assert not entries(cache)


def test_an_ordinary_open_still_keeps_the_racy_rule(tmp_path, cache):
    run = copy_run(tmp_path)
    Run(run, DirSource(run), signature(run)).problems  # noqa: B018 - read the run
    assert not entries(cache)


def test_a_run_the_agent_just_closed_is_filled(tmp_path, monkeypatch):
    """What ``mfm run`` does at the end: the agent closes its run and the command fills the
    cache at once, while every file is still within ``RACY_SECONDS`` of its last write (a
    minute here, so that a slow machine does not turn the check into a different one)."""
    from mfm.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("MFM_CACHE_DIR", str(cache))
    monkeypatch.setattr(tablecache, "RACY_SECONDS", 60.0)
    run = tmp_path / "run"
    assert main(["run", "--seed", "0", "--steps", "300", "--out", str(run), "--fixed-clock", "--quiet"]) == 0
    assert tablecache.racy(tablecache.stamp(run / "index.jsonl")), "the run was closed a moment ago"
    big = [n for n in TABLES if (run / n).is_file() and (run / n).stat().st_size >= cachedread.CACHE_MIN_BYTES]
    assert "steps.jsonl" in big and len(entries(cache)) == len(big) + 1
