"""Episodes committed by the episode store's committer process while the next one plays."""
from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from mfm.memory import RunWriter
from mfm.memory.appendlog import WriteError
from mfm.memory.retrieval import FrameError, episode_frame, forget_written, read_png
from mfm.schema import StepRow, frame_chunk
from mfm.validate import validate
from conftest import manifest


def _episode(w: RunWriter, n: int, rng: np.random.Generator, steps: int = 3):
    rec = w.begin_episode(kind="episode", life=0, turn=n, action_kind="go_to", first_step=n * steps,
                          action={"atom": "go_to"})
    for k in range(steps):
        s = n * steps + k + 1
        rec.add_step(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8),
                     StepRow(step=s, life=0, episode=rec.id, action="noop", x=n, y=k, facing=(0, 1), health=9,
                             food=9, drink=9, energy=9, inventory={}, reward=0.0))
    frames = list(rec.frames)
    row = w.end_episode(rec, observation=frames[-1], state={"n": n}, outcome={"ok": True}, summary=f"episode {n}",
                        tags=[], events=[], x=n, y=0, outcome_label="done")
    return row, frames


def _write(run_dir: Path, background: bool, episodes: int = 6) -> None:
    rng = np.random.default_rng(0)
    w = RunWriter(run_dir, manifest(), clock=lambda: "2026-12-01T00:00:00+00:00", background_commit=background)
    for n in range(episodes):
        _episode(w, n, rng)
    w.close("finished")


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_background_commit_writes_the_same_bytes(tmp_path: Path) -> None:
    _write(tmp_path / "sync", background=False)
    _write(tmp_path / "bg", background=True)
    sync, bg = _files(tmp_path / "sync"), _files(tmp_path / "bg")
    assert sync.keys() == bg.keys() and len(sync) > 6 * 4
    assert [k for k in sync if sync[k] != bg[k]] == []


@contextmanager
def stopped(w: RunWriter) -> Iterator[None]:
    """The writer's committer process stopped (SIGSTOP) for the block: what is handed to it
    stays in flight."""
    pid = w.episodes.committer.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_an_episode_being_committed_is_searchable_and_its_frames_readable(tmp_path: Path) -> None:
    forget_written()
    w = RunWriter(tmp_path / "run", manifest(), background_commit=True)
    with stopped(w):
        row, frames = _episode(w, 0, np.random.default_rng(1))
        strip = tmp_path / "run" / frame_chunk(row.path, 0)[0]
        assert w.index.get(row.id) == row
        assert not strip.exists() and not (tmp_path / "run" / "index.jsonl").exists()
        for i, f in enumerate(frames):
            assert np.array_equal(episode_frame(w.dir, row, i), f)
    w.wait()
    lines = (tmp_path / "run" / "index.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [row.id]
    forget_written()
    assert np.array_equal(read_png(strip), np.concatenate(frames))
    w.close("finished")


def test_a_failed_commit_is_raised_at_the_next_episode_and_the_run_still_closes(tmp_path: Path) -> None:
    """The second episode's folder cannot be made (a file is in its way): the committer's
    error is raised (by a later episode's end, or here by ``wait``) naming the folder, the
    committer writes nothing after it (at most one episode half-written), and the run
    closes as crashed."""
    forget_written()
    rng = np.random.default_rng(2)
    run = tmp_path / "run"
    w = RunWriter(run, manifest(), background_commit=True)
    first, _ = _episode(w, 0, rng)
    (run / "episodes" / "ep_000001").write_bytes(b"in the way")
    failed, _ = _episode(w, 1, rng)
    _episode(w, 2, rng)
    with pytest.raises(WriteError, match="Not a directory") as info:
        w.wait()
    assert info.value.filename.endswith("episodes/ep_000001")
    w.close("crashed", end_reason="WriteError")
    assert json.loads((run / "run.json").read_text())["status"] == "crashed"
    assert [json.loads(x)["id"] for x in (run / "index.jsonl").read_text().splitlines()] == [first.id]
    assert not (run / "episodes" / "ep_000002").exists()
    with pytest.raises(FrameError):
        episode_frame(run, failed, 0)
    c = validate(run)
    assert not c.errors and [r.id for r in c.tables["index.jsonl"]] == [first.id]


def test_a_committer_that_dies_is_a_write_error_and_the_run_still_closes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    run = tmp_path / "run"
    w = RunWriter(run, manifest(), background_commit=True)
    first, _ = _episode(w, 0, rng)
    w.wait()
    os.kill(w.episodes.committer.pid, signal.SIGKILL)
    with pytest.raises(WriteError, match="the committer process (exited|stopped answering)"):
        _episode(w, 1, rng)
        w.wait()
    w.close("crashed", end_reason="WriteError")
    assert json.loads((run / "run.json").read_text())["status"] == "crashed"
    assert [json.loads(x)["id"] for x in (run / "index.jsonl").read_text().splitlines()] == [first.id]
    assert not validate(run).errors


def test_the_manifest_is_rewritten_at_most_once_a_second_unless_something_new(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from mfm.memory import run_writer
    from mfm.schema import MilestoneRow

    now = [100.0]
    monkeypatch.setattr(run_writer.time, "monotonic", lambda: now[0])
    rng = np.random.default_rng(0)
    w = RunWriter(tmp_path / "r", manifest())

    def on_disk() -> dict:
        return json.loads((tmp_path / "r" / "run.json").read_text())

    _episode(w, 0, rng)
    assert on_disk()["last_step"] == 0 and w.manifest.last_step == 3
    now[0] += 1.0
    _episode(w, 1, rng)
    assert on_disk()["last_step"] == 6
    w.record_milestone(MilestoneRow(name="collect_wood", step=8, life=0, episode="ep_000002", turn=2))
    _episode(w, 2, rng)
    assert on_disk()["last_step"] == 9 and on_disk()["milestones"] == {"collect_wood": 8}
    _episode(w, 3, rng)
    assert on_disk()["last_step"] == 9
    w.close("finished")
    assert on_disk()["last_step"] == 12 and on_disk()["status"] == "finished"
