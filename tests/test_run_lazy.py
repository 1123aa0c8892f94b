"""Opening a run reads only what is asked for: the runs table needs the manifest, not the tables."""
from __future__ import annotations

from loaders import open_run
from loaders.run import REGISTRY

from conftest import WrittenRun


def test_summary_of_an_unopened_run_reads_no_table(written_run: WrittenRun):
    REGISTRY.clear()
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


def test_runs_page_reads_only_manifests_of_a_large_root(tmp_path, monkeypatch):
    from conftest import open_app, use_root, write_run

    for i in range(13):
        write_run(tmp_path / f"run_{i:02d}", episodes=2, seed=i)
    (tmp_path / "run_05" / "steps.jsonl").open("a").write("garbage\n")
    use_root(monkeypatch, tmp_path)
    at = open_app()
    assert at.dataframe[0].value["problems"].eq("not checked").all(), "nothing is read before it is asked for"
    at.toggle(key="w_check_all").set_value(True).run()
    problems = at.dataframe[0].value.set_index("key")["problems"].astype(int)
    assert problems["run_05"] == 1 and problems.drop("run_05").eq(0).all()
    assert any("run_05" in e.label for e in at.expander)
