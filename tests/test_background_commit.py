"""Episodes committed on the episode store's thread while the next one plays."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from mfm.memory import RunWriter, episode_store
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


@pytest.fixture
def held_encoder(monkeypatch: pytest.MonkeyPatch):
    """Frame strips are not encoded until the returned event is set."""
    go = threading.Event()
    real = episode_store.encode_strip

    def held(arr: np.ndarray) -> bytes:
        assert go.wait(30), "test never released the encoder"
        return real(arr)

    monkeypatch.setattr(episode_store, "encode_strip", held)
    yield go
    go.set()


def test_an_episode_being_committed_is_searchable_and_its_frames_readable(tmp_path: Path, held_encoder) -> None:
    forget_written()
    w = RunWriter(tmp_path / "run", manifest(), background_commit=True)
    row, frames = _episode(w, 0, np.random.default_rng(1))
    strip = tmp_path / "run" / frame_chunk(row.path, 0)[0]
    assert w.index.get(row.id) == row
    assert not strip.exists() and not (tmp_path / "run" / "index.jsonl").exists()
    for i, f in enumerate(frames):
        assert np.array_equal(episode_frame(w.dir, row, i), f)
    held_encoder.set()
    w.wait()
    lines = (tmp_path / "run" / "index.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [row.id]
    forget_written()
    assert np.array_equal(read_png(strip), np.concatenate(frames))
    w.close("finished")


def test_a_failed_commit_is_raised_at_the_next_episode_and_the_run_still_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forget_written()
    calls = {"n": 0}
    real = episode_store.encode_strip

    def failing(arr: np.ndarray) -> bytes:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("No space left on device")
        return real(arr)

    monkeypatch.setattr(episode_store, "encode_strip", failing)
    rng = np.random.default_rng(2)
    w = RunWriter(tmp_path / "run", manifest(), background_commit=True)
    first, _ = _episode(w, 0, rng)
    failed, _ = _episode(w, 1, rng)
    with pytest.raises(OSError, match="No space left"):
        _episode(w, 2, rng)
    w.close("crashed", end_reason="OSError")
    run = tmp_path / "run"
    assert json.loads((run / "run.json").read_text())["status"] == "crashed"
    assert [json.loads(x)["id"] for x in (run / "index.jsonl").read_text().splitlines()] == [first.id]
    with pytest.raises(FrameError):
        episode_frame(run, failed, 0)
    c = validate(run)
    assert not c.errors and any(p.file == f"episodes/{failed.id}" for p in c.problems)


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
