"""Runs being written: per-table change detection, and pages that follow a growing run
(issue 7). The run grows through the real writer (``mfm.memory.RunWriter``)."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import streamlit as st

from conftest import manifest, open_app as app, texts, use_root, write_run
from dash_browser import SHOTS, dashboard, needs_browser, settle, url
from loaders.live import LiveSource, changed_files, needs_refresh, table_stats, watch_key
from loaders.run import REGISTRY, STALE_SECONDS, TABLE_NAMES, open_run
from mfm.memory import RunWriter, run_writer
from mfm.schema import GridRow, MilestoneRow, StepRow, TurnRow


HANG = 90_000
"""Milliseconds a browser wait may take before the test calls it a hang (the page checks a
run being written every ``dashboard.ui.LIVE_EVERY`` seconds; a loaded machine is slower)."""


class GrowingRun:
    """A run kept open by the real writer; :meth:`add` commits episodes as a runner does."""

    def __init__(self, run_dir: Path, seed: int = 0) -> None:
        self.dir = run_dir
        self.rng = np.random.default_rng(seed)
        self.w = RunWriter(run_dir, manifest(run_id=run_dir.name))
        self.step, self.x, self.turn = 0, 32, 0
        rec = self.w.begin_episode(kind="initial", life=0, turn=None, action_kind=None, first_step=0, action={})
        self.w.end_episode(rec, observation=self._frame(), state={"step": 0}, outcome={}, summary="initial state",
                           tags=["initial"], events=[], x=self.x, y=32, outcome_label=None)

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)

    def add(self, n: int = 1, milestone: str | None = None) -> None:
        """Commit ``n`` episodes of three steps each (the last one reaching ``milestone``)."""
        for k in range(n):
            rec = self.w.begin_episode(kind="episode", life=0, turn=self.turn, action_kind="explore",
                                       first_step=self.step, action={"atom": "explore"})
            grid = []
            for _ in range(3):
                self.step += 1
                self.x += 1
                rec.add_step(self._frame(), StepRow(step=self.step, life=0, episode=rec.id, action="move_right",
                                                    x=self.x, y=32, facing=(1, 0), health=9, food=9, drink=9,
                                                    energy=9, inventory={}, reward=0.0))
                grid.append(GridRow(cell=(self.x, 32), kind="walked", step=self.step, life=0))
            if milestone and k == n - 1:
                self.w.record_milestone(MilestoneRow(name=milestone, step=self.step, life=0, episode=rec.id,
                                                     turn=self.turn))
            row = self.w.end_episode(rec, grid=grid, observation=self._frame(), state={"step": self.step},
                                     outcome={}, summary=f"explore turn {self.turn}", tags=[], events=[],
                                     x=self.x, y=32, outcome_label="done")
            self.w.record_turn(TurnRow(turn=self.turn, life=0, first_step=row.first_step, last_step=row.last_step,
                                       policy="test", calls=({"tool": "atom", "args": {"atom": "explore"},
                                                              "result": {}},), targets=(), plan_before=(),
                                       plan_after=(), episodes=(row.id,)))
            self.turn += 1

    def close(self, status: str = "finished") -> None:
        self.w.close(status, "budget" if status == "finished" else None)


def load_all(run) -> dict:
    """Every table of a run as a DataFrame (what the pages read)."""
    return {name: run.table(name) for name in TABLE_NAMES.values()}


def test_only_changed_tables_are_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_writer, "MANIFEST_EVERY_S", 0.0)
    g = GrowingRun(tmp_path / "run")
    g.add(3)
    first = open_run(g.dir)
    assert isinstance(first.source, LiveSource) and first.status == "running"
    before = load_all(first)
    parses = dict(first.source.parses)
    assert set(parses) == set(TABLE_NAMES) and set(parses.values()) == {1}
    stats = table_stats(g.dir)

    g.add(2)
    assert open_run(g.dir) is not first
    second = open_run(g.dir)
    grown = {"run.json", "index.jsonl", "steps.jsonl", "grid.jsonl", "turns.jsonl"}
    assert set(changed_files(stats, table_stats(g.dir))) == grown
    change = REGISTRY.changes[str(g.dir.resolve())]
    assert set(change.files) == grown
    assert set(change.tables) == {"episodes", "steps", "grid", "turns"}
    parsed_now = {f: n - parses[f] for f, n in second.source.parses.items() if n != parses[f]}
    assert parsed_now == {"index.jsonl": 1, "steps.jsonl": 1, "grid.jsonl": 1, "turns.jsonl": 1}
    after = load_all(second)
    for name in ("milestones", "lives", "memory_writes"):
        assert after[name] is before[name], f"{name} did not change and must not be rebuilt"
    assert len(after["episodes"]) == len(before["episodes"]) + 2
    assert len(after["steps"]) == len(before["steps"]) + 6
    assert list(after["steps"]["step"]) == list(range(1, 16))

    g.add(1, milestone="collect_wood")
    third = open_run(g.dir)
    assert "milestones.jsonl" in REGISTRY.changes[str(g.dir.resolve())].files
    assert list(third.milestones()["name"]) == ["collect_wood"]
    assert third.table("lives") is before["lives"]


def test_a_half_written_line_is_skipped_until_it_is_complete(tmp_path: Path) -> None:
    g = GrowingRun(tmp_path / "run")
    g.add(2)
    steps = len(open_run(g.dir).steps())
    line = (g.dir / "steps.jsonl").read_text().splitlines()[-1].replace('"step":6,', '"step":7,')
    with open(g.dir / "steps.jsonl", "a") as f:
        f.write(line[:25])
    run = open_run(g.dir)
    assert len(run.steps()) == steps
    assert any(p.file == "steps.jsonl" and "truncated last line" in p.message for p in run.problems)
    with open(g.dir / "steps.jsonl", "a") as f:
        f.write(line[25:] + "\n")
    run = open_run(g.dir)
    assert len(run.steps()) == steps + 1 and not run.problems


def test_a_run_that_stops_is_read_in_full_and_its_status_changes(tmp_path: Path) -> None:
    g = GrowingRun(tmp_path / "run")
    g.add(2)
    running = open_run(g.dir)
    shown = {"run": watch_key(running)}
    assert needs_refresh(shown, {"run": watch_key(open_run(g.dir))}) == []
    g.close("interrupted")
    stopped = open_run(g.dir)
    assert not isinstance(stopped.source, LiveSource), "a stopped run gets every check again"
    assert stopped.status == "interrupted"
    change = REGISTRY.changes[str(g.dir.resolve())]
    assert (change.status_before, change.status_after) == ("running", "interrupted")
    assert needs_refresh(shown, {"run": watch_key(stopped)}) == ["run"]


@pytest.fixture
def live_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, GrowingRun]]:
    root = tmp_path / "runs"
    write_run(root / "done", episodes=4)
    g = GrowingRun(root / "growing")
    g.add(4)
    use_root(monkeypatch, root)
    yield root, g
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.mark.parametrize("page_name", ["timeline", "frames", "grid"])
def test_pages_show_live_only_for_a_running_run(live_root: tuple[Path, GrowingRun], page_name: str) -> None:
    at = app(page_name, runs="growing")
    live = [c.value for c in at.caption if c.value.startswith("● live")]
    assert len(live) == 1 and re.search(r"updated \d\d:\d\d:\d\d · \+0 episodes · checked", live[0]), live
    if page_name == "timeline":
        assert "● running · 5 episodes" in texts(at)
    at = app(page_name, runs="done")
    assert not [c.value for c in at.caption if "● live" in c.value]
    assert not [i.value for i in at.info if "stopped being written" in i.value]


def test_timeline_follows_growth_then_shows_the_status_change(live_root: tuple[Path, GrowingRun]) -> None:
    _, g = live_root
    at = app("timeline", runs="growing")
    assert at.slider(key="w_range").value == (0, 12)
    g.add(3)
    at.run()
    assert not at.exception
    assert "● running · 8 episodes" in texts(at)
    assert any(c.value.startswith("● live · updated") and "+3 episodes" in c.value for c in at.caption)
    assert at.slider(key="w_range").value == (0, 21), "an unzoomed view widens as the run grows"
    g.close("finished")
    at.run()
    assert "✓ finished · 8 episodes" in texts(at)
    assert not [c.value for c in at.caption if "● live" in c.value]
    assert any("stopped being written: ● running → ✓ finished" in i.value for i in at.info)


def test_a_running_run_gone_quiet_is_shown_crashed(live_root: tuple[Path, GrowingRun]) -> None:
    _, g = live_root
    at = app("grid", runs="growing")
    assert any(c.value.startswith("● live") for c in at.caption)
    old = time.time() - STALE_SECONDS - 60
    for f in g.dir.iterdir():
        os.utime(f, (old, old))
    at.run()
    assert not [c.value for c in at.caption if "● live" in c.value]
    assert any("stopped being written: ● running → ✗ crashed" in i.value for i in at.info)
    assert open_run(g.dir).status == "crashed"


@needs_browser
@pytest.mark.browser
@pytest.mark.slow
def test_live_timeline_in_a_browser(tmp_path: Path, page) -> None:
    root = tmp_path / "runs"
    g = GrowingRun(root / "growing")
    g.add(4)
    (tmp_path / "log").mkdir()
    with dashboard(root, tmp_path / "log") as base:
        page.goto(url(base, "timeline", runs="growing"))
        settle(page)
        page.get_by_text("● running · 5 episodes", exact=False).first.wait_for(timeout=HANG)
        page.get_by_text("● live · updated", exact=False).first.wait_for(timeout=HANG)
        loads = page.evaluate("performance.getEntriesByType('navigation').length")
        page.evaluate("window.__mfm_marker = 1")
        g.add(6)
        start = time.time()
        page.get_by_text("● running · 11 episodes", exact=False).first.wait_for(timeout=HANG)
        took = time.time() - start
        page.get_by_text("+6 episodes", exact=False).first.wait_for(timeout=HANG)
        assert page.evaluate("window.__mfm_marker") == 1, "the page was not reloaded"
        assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
        print(f"new episodes shown {took:.1f} s after they were written")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "timeline_live.png"))
        g.close("finished")
        page.get_by_text("✓ finished · 11 episodes", exact=False).first.wait_for(timeout=HANG)
        page.get_by_text("stopped being written", exact=False).first.wait_for(timeout=HANG)
        assert page.get_by_text("● live · updated", exact=False).count() == 0
        page.screenshot(path=str(SHOTS / "timeline_live_finished.png"))
        assert page.locator('[data-testid="stException"]').count() == 0
