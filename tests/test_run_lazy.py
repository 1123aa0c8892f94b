"""Opening a run reads only what is asked for: the runs table needs the manifest, not the tables."""
from __future__ import annotations

from loaders import open_run
from loaders.run import _CACHE

from conftest import WrittenRun


def test_summary_of_an_unopened_run_reads_no_table(written_run: WrittenRun):
    _CACHE.clear()
    run = open_run(written_run.dir)
    s = run.summary()
    assert not run.loaded
    assert s["problems"] is None
    assert s["episodes"] == len(written_run.episodes) and s["deaths"] == 1 and s["lives"] == 2
    assert s["milestones"] == 1 and s["status"] == "finished"
    run.episodes()
    assert run.loaded
    full = run.summary()
    assert full["problems"] == 0
    assert {k: v for k, v in full.items() if k != "problems"} == {k: v for k, v in s.items() if k != "problems"}
