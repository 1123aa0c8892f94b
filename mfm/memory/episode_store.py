"""Episodic memory: each interaction interval with its lossless frames, states, action, outcome.

An episode is recorded in memory while it runs and written once, whole, when it is
finalized; a finished episode is never rewritten. Its files are written on a background
thread (the encoder) while the caller goes on; the run writer has that thread append the
episode's index row (the commit marker) once they are on disk, and
:meth:`EpisodeStore.wait` returns when all of it is done. Its files (MFM layout):
``episodes/ep_NNNNNN/{observation/image.png, state/state.json, action.json, outcome.json}``
plus our per-step frames, ``frames/NNNNN.webp``: lossless vertical strips of up to
``FRAMES_PER_CHUNK`` frames, so one step's frame is read by decoding one small image. Since
format 1.1 ``observation/image.png`` is written only when the end observation is not the
episode's last per-step frame (an episode with no steps, or a frame the caller changed);
otherwise the index row's ``image`` is null and readers take that frame.
"""
from __future__ import annotations

import io
import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from mfm.memory.appendlog import write_file, writing
from mfm.memory.retrieval import forget_pending, frame_hash, remember_pending, remember_written
from mfm.schema import FRAMES_PER_CHUNK, IndexRow, StepRow, episode_id, frame_chunk

Image.MAX_IMAGE_PIXELS = 64_000_000


def encode_png(arr: np.ndarray) -> bytes:
    """Lossless PNG bytes of an HxWx3 uint8 array."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8)).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


STRIP_WEBP = {"lossless": True, "quality": 50, "method": 1}
"""Encoder settings of the frame strips. Lossless: ``quality`` and ``method`` set the
encoder's effort, not fidelity. Method 1 at quality 50 stores Crafter frames in ~15% fewer
bytes than method 0 for ~3x its encoding time (~0.7 ms a frame), which the encoder thread
spends off the agent's path (docs/benchmarks.md, figures 5 and 6)."""


def encode_strip(arr: np.ndarray) -> bytes:
    """Lossless WebP bytes of a strip of frames."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8)).save(buf, format="WEBP", **STRIP_WEBP)
    return buf.getvalue()


ENCODER_NICE = 0
"""A nice increment for the encoder thread (Linux only; 0 leaves its priority alone). It was
10 while the agent's frame decoder used numpy's BLAS, whose worker threads the encoder then
took a core from; the decoder has not used BLAS since issue 23. On a busy machine a niced
encoder is starved and the agent waits for it: on 3,000 steps under load, 10 kept the agent
waiting 4.7-5.1 s for the previous commit and its commits took 14-16 s in all, 0 1.2-1.7 s
and 7.7-8.8 s, for the same CPU (docs/benchmarks.md, figure 5)."""


def _lower_priority() -> None:
    """Initializer of the encoder thread: lower its scheduling priority by ``ENCODER_NICE``
    where the OS allows."""
    if not ENCODER_NICE:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + ENCODER_NICE)
    except (AttributeError, OSError):
        pass


def write_strips(root: Path, episode_path: str, frames: list[np.ndarray]) -> None:
    """Write an episode's per-step frames as lossless WebP strips of up to FRAMES_PER_CHUNK frames."""
    _write_strips(_strips(root, episode_path, frames))


def _strips(root: Path, episode_path: str, frames: list[np.ndarray]) -> list[tuple[Path, np.ndarray]]:
    """(file, pixels) of each strip of an episode."""
    return [(root / frame_chunk(episode_path, start)[0], np.concatenate(frames[start:start + FRAMES_PER_CHUNK], axis=0))
            for start in range(0, len(frames), FRAMES_PER_CHUNK)]


def _write_strips(strips: list[tuple[Path, np.ndarray]]) -> None:
    for path, strip in strips:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_strip(strip))
        remember_written(path, strip)


def _mkdir(path: Path) -> None:
    """Make the folder ``path`` (its parent exists); one that is already there is kept."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass


@dataclass
class _Commit:
    """What is left to write of a finalized episode: its records, images and, last, whatever
    the caller adds (the run writer's index row). Runs once, on the encoder thread or, if
    that has not started it, on the thread that waits for it."""

    root: Path
    episode_path: str
    records: list[tuple[str, Any]]
    strips: list[tuple[Path, np.ndarray]]
    observation: np.ndarray | None
    row: IndexRow
    then: Callable[[IndexRow], None] | None = None

    def __post_init__(self) -> None:
        for path, strip in self.strips:
            remember_pending(path, strip)

    def run(self) -> None:
        """Write the records, then the images, then call ``then``. Each system call releases
        the GIL, which the encoder thread then has to take back from the agent's thread, so
        folders are made with one ``mkdir`` each and files written with three calls."""
        ep_dir = self.root / self.episode_path
        try:
            with writing(ep_dir):
                _mkdir(ep_dir)
                _mkdir(ep_dir / "state")
                for rel, obj in self.records:
                    write_file(ep_dir / rel, dump_json(obj))
                if self.strips:
                    _mkdir(ep_dir / "frames")
                for path, strip in self.strips:
                    write_file(path, encode_strip(strip))
                    remember_written(path, strip)
                if self.observation is not None:
                    _mkdir(ep_dir / "observation")
                    write_file(ep_dir / "observation" / "image.png", encode_png(self.observation))
        except BaseException:
            for path, _ in self.strips:
                forget_pending(path)
            raise
        if self.then is not None:
            self.then(self.row)


def dump_json(obj: Any) -> bytes:
    """The bytes of a JSON record file (indented, UTF-8, newline at the end)."""
    return (json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


@dataclass
class EpisodeRecording:
    """An episode in flight: what it did so far. Nothing of it is on disk yet."""

    number: int
    kind: str
    life: int
    turn: int | None
    action_kind: str | None
    first_step: int
    action: dict
    frames: list[np.ndarray] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)

    @property
    def id(self) -> str:
        return episode_id(self.number)

    @property
    def path(self) -> str:
        return f"episodes/{self.id}"

    def add_step(self, frame: np.ndarray | None, row: StepRow) -> None:
        """Record one env step: its frame (the observation after the action) and trace row."""
        if frame is not None:
            self.frames.append(np.asarray(frame, dtype=np.uint8))
        self.steps.append(row)

    @property
    def last_step(self) -> int:
        return self.steps[-1].step if self.steps else self.first_step


class EpisodeStore:
    """Writes finished episodes under ``run_dir/episodes``. Append-only: one id, one write."""

    def __init__(self, run_dir: Path) -> None:
        self.root = run_dir
        (run_dir / "episodes").mkdir(parents=True, exist_ok=True)
        existing = [p.name for p in (run_dir / "episodes").iterdir() if p.name.startswith("ep_")]
        self._next = max((int(n[3:]) for n in existing if n[3:].isdigit()), default=-1) + 1
        self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mfm-frames",
                                           initializer=_lower_priority)
        self._pending: list[tuple[Future, _Commit]] = []

    def begin(self, *, kind: str, life: int, turn: int | None, action_kind: str | None,
              first_step: int, action: dict) -> EpisodeRecording:
        """Open a new episode; it gets the next id."""
        rec = EpisodeRecording(self._next, kind, life, turn, action_kind, first_step, dict(action))
        self._next += 1
        return rec

    def finalize(self, rec: EpisodeRecording, *, observation: np.ndarray, state: dict, outcome: dict,
                 summary: str, tags: list[str], events: list[str], x: float | None, y: float | None,
                 outcome_label: str | None, note: str | None = None,
                 then: Callable[[IndexRow], None] | None = None) -> IndexRow:
        """Queue the episode's files and return its index row. The files are written on the
        encoder thread, then ``then`` is called there (the run writer appends the index row,
        the commit marker, so it is written only once the files are on disk); :meth:`wait`
        returns once that is done. Until then the frame strips are served to this process's
        readers from memory (``retrieval.remember_pending``)."""
        if (self.root / rec.path / "outcome.json").exists():
            raise FileExistsError(f"{rec.path} is already finalized; finished episodes are never rewritten")
        row = self.index_row(rec, observation=observation, summary=summary, tags=tags, events=events, x=x, y=y,
                             outcome_label=outcome_label, note=note)
        records = [("state/state.json", state),
                   ("action.json", {"turn": rec.turn, "first_step": rec.first_step, **rec.action}),
                   ("outcome.json", {"last_step": rec.last_step, "tags": tags, "events": events, **outcome})]
        commit = _Commit(self.root, rec.path, records, _strips(self.root, rec.path, rec.frames),
                         None if row.image is None else np.array(observation, dtype=np.uint8), row, then)
        self._pending.append((self._encoder.submit(commit.run), commit))
        return row

    def wait(self) -> None:
        """Return once every finalized episode is on disk (re-raises a write error).

        Commits the encoder thread has not started yet (it may not have had a core on a busy
        machine) are run here, in order, by the caller's thread."""
        pending, self._pending = self._pending, []
        error: BaseException | None = None
        for f, commit in pending:
            try:
                if f.cancel():
                    commit.run()
                else:
                    f.result()
            except BaseException as e:
                error = error or e
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the episodes in flight and stop the encoder thread."""
        try:
            self.wait()
        finally:
            self._encoder.shutdown(wait=True)

    @staticmethod
    def index_row(rec: EpisodeRecording, *, observation: np.ndarray, summary: str, tags: list[str],
                  events: list[str], x: float | None, y: float | None, outcome_label: str | None,
                  note: str | None = None) -> IndexRow:
        """The index row of a finished episode. ``image`` is null when the end observation is
        the last per-step frame (readers take it from the strip; no second copy is stored)."""
        in_strip = bool(rec.frames) and np.array_equal(rec.frames[-1], observation)
        return IndexRow(
            id=rec.id, kind=rec.kind, action_kind=rec.action_kind, first_step=rec.first_step,
            last_step=rec.last_step, summary=summary, tags=tuple(tags), x=x, y=y, path=rec.path,
            image=None if in_strip else f"{rec.path}/observation/image.png", life=rec.life, turn=rec.turn,
            events=tuple(events), outcome=outcome_label, note=note,
            observation_hash=frame_hash(observation), frames=len(rec.frames),
        )
