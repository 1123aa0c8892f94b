"""Episodic memory: each interaction interval with its lossless frames, states, action, outcome.

An episode is recorded in memory while it runs and written once, whole, when it is
finalized; a finished episode is never rewritten. A running agent's episodes are written
by a committer process (:mod:`mfm.memory.committer`) while the agent goes on, the
episode's index row (the commit marker) appended after its files, by whoever wrote them;
:meth:`EpisodeStore.wait` returns once all of it is on disk. Its files (MFM layout):
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
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mfm.memory.appendlog import AppendLog, append_bytes, write_file, writing
from mfm.memory.committer import Committer
from mfm.memory.retrieval import forget_pending, frame_hash, remember_pending, remember_written
from mfm.schema import FRAMES_PER_CHUNK, IndexRow, StepRow, episode_id, frame_chunk

Image.MAX_IMAGE_PIXELS = 64_000_000


IN_FLIGHT = 8
"""Episodes handed to the committer process and not answered yet, at most. A process killed
loses none of them (the committer writes them all, then exits); a committer killed loses
them all, and the run is closed as crashed."""


def encode_png(arr: np.ndarray) -> bytes:
    """Lossless PNG bytes of an HxWx3 uint8 array."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8)).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


STRIP_WEBP = {"lossless": True, "quality": 50, "method": 1}
"""Encoder settings of the frame strips. Lossless: ``quality`` and ``method`` set the
encoder's effort, not fidelity. Method 1 at quality 50 stores Crafter frames in ~15% fewer
bytes than method 0 for ~3x its encoding time (~0.7 ms a frame), which the committer process
spends off the agent's path (docs/benchmarks.md, figures 5 and 6)."""


def encode_strip(arr: np.ndarray) -> bytes:
    """Lossless WebP bytes of a strip of frames."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8)).save(buf, format="WEBP", **STRIP_WEBP)
    return buf.getvalue()


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
        write_file(path, encode_strip(strip))
        remember_written(path, strip)


def _mkdir(path: Path) -> None:
    """Make the folder ``path`` (its parent exists); one that is already there is kept."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass


def write_episode_files(ep_dir: str, records: list[tuple[str, Any]], strips: list[tuple[str, np.ndarray]],
                        observation: np.ndarray | None, line: tuple[str, bytes, bool] | None) -> None:
    """Write a finalized episode's files: its records, its frame strips, its end observation
    (when not in the strips), then ``line`` (the index file, the row's bytes, fsync), the
    commit marker. An OSError is raised as WriteError naming the folder or the file."""
    folder = Path(ep_dir)
    with writing(folder):
        _mkdir(folder)
        _mkdir(folder / "state")
        for rel, obj in records:
            write_file(folder / rel, dump_json(obj))
        if strips:
            _mkdir(folder / "frames")
        for path, strip in strips:
            write_file(Path(path), encode_strip(strip))
        if observation is not None:
            _mkdir(folder / "observation")
            write_file(folder / "observation" / "image.png", encode_png(observation))
    if line is not None:
        append_bytes(Path(line[0]), line[1], line[2])


@dataclass
class _Commit:
    """A finalized episode on its way to disk: its files and index line
    (:func:`write_episode_files`), written by the committer process or at once."""

    root: Path
    episode_path: str
    records: list[tuple[str, Any]]
    strips: list[tuple[Path, np.ndarray]]
    observation: np.ndarray | None
    line: tuple[str, bytes, bool] | None

    def __post_init__(self) -> None:
        for path, strip in self.strips:
            remember_pending(path, strip)

    def job(self) -> tuple:
        """The arguments of :func:`write_episode_files` for this episode."""
        return (str(self.root / self.episode_path), self.records, [(str(p), s) for p, s in self.strips],
                self.observation, self.line)

    def run(self) -> None:
        """Write the files here and now, then :meth:`done`."""
        try:
            write_episode_files(*self.job())
        except BaseException:
            self.failed()
            raise
        self.done()

    def done(self) -> None:
        """The files are on disk: serve the strips from memory while they are unchanged
        (``retrieval.remember_written``)."""
        for path, strip in self.strips:
            remember_written(path, strip)

    def failed(self) -> None:
        """The files could not be written: stop serving the strips from memory."""
        for path, _ in self.strips:
            forget_pending(path)


def dump_json(obj: Any) -> bytes:
    """The bytes of a JSON record file (indented, UTF-8, newline at the end)."""
    return (json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


@dataclass
class EpisodeRecording:
    """An episode in flight: what it did so far. Nothing of it is on disk yet.

    ``material`` and ``target``: what its call named (set when it is opened,
    :meth:`mfm.memory.episode_recorder.EpisodeRecorder.begin`); ``reason``: why it ended (set
    when it ends); all three go into its index row (format 1.3)."""

    number: int
    kind: str
    life: int
    turn: int | None
    action_kind: str | None
    first_step: int
    action: dict
    frames: list[np.ndarray] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    material: str | None = None
    target: tuple[int, int] | None = None
    reason: str | None = None

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
    """Writes finished episodes under ``run_dir/episodes``. Append-only: one id, one write.

    ``background``: the files are written by a committer process (:mod:`mfm.memory.committer`)
    while the caller goes on, at most :data:`IN_FLIGHT` episodes behind; else at once, by
    the caller. ``index_log``: each episode's row is appended to it once the episode's files
    are on disk (by whoever wrote them)."""

    def __init__(self, run_dir: Path, background: bool = False, index_log: AppendLog | None = None) -> None:
        self.root = run_dir
        (run_dir / "episodes").mkdir(parents=True, exist_ok=True)
        existing = [p.name for p in (run_dir / "episodes").iterdir() if p.name.startswith("ep_")]
        self._next = max((int(n[3:]) for n in existing if n[3:].isdigit()), default=-1) + 1
        self.committer = Committer(run_dir) if background and os.name == "posix" else None
        self.index_log = index_log
        self._pending: deque[_Commit] = deque()

    def begin(self, *, kind: str, life: int, turn: int | None, action_kind: str | None,
              first_step: int, action: dict) -> EpisodeRecording:
        """Open a new episode; it gets the next id."""
        rec = EpisodeRecording(self._next, kind, life, turn, action_kind, first_step, dict(action))
        self._next += 1
        return rec

    def finalize(self, rec: EpisodeRecording, *, observation: np.ndarray, state: dict, outcome: dict,
                 summary: str, tags: list[str], events: list[str], x: float | None, y: float | None,
                 outcome_label: str | None, note: str | None = None) -> IndexRow:
        """Write the episode's files and index line, or hand them to the committer process
        (first taking the answers it has given, and waiting for the oldest while more than
        :data:`IN_FLIGHT` are out), and return its index row. Until the files are written the
        frame strips are served to this process's readers from memory
        (``retrieval.remember_pending``); :meth:`wait` returns once every episode is."""
        if (self.root / rec.path / "outcome.json").exists():
            raise FileExistsError(f"{rec.path} is already finalized; finished episodes are never rewritten")
        row = self.index_row(rec, observation=observation, summary=summary, tags=tags, events=events, x=x, y=y,
                             outcome_label=outcome_label, note=note)
        records = [("state/state.json", state),
                   ("action.json", {"turn": rec.turn, "first_step": rec.first_step, **rec.action}),
                   ("outcome.json", {"last_step": rec.last_step, "tags": tags, "events": events, **outcome})]
        line = None
        if self.index_log is not None:
            self.index_log.append(row)
            line = (str(self.index_log.path), self.index_log.take(), self.index_log.fsync)
        commit = _Commit(self.root, rec.path, records, _strips(self.root, rec.path, rec.frames),
                         None if row.image is None else np.array(observation, dtype=np.uint8), line)
        if self.committer is None:
            commit.run()
            return row
        try:
            self._collect(IN_FLIGHT - 1)
            self.committer.send(commit.job())
        except BaseException:
            commit.failed()
            raise
        self._pending.append(commit)
        return row

    def _collect(self, keep: int) -> None:
        """Take the committer's answers: those already given, and more, oldest first, until at
        most ``keep`` episodes are out. Raises the first error (after taking them all)."""
        error: BaseException | None = None
        while self._pending and (len(self._pending) > keep or self.committer.ready()):
            commit = self._pending.popleft()
            try:
                self.committer.result()
            except BaseException as e:
                commit.failed()
                error = error or e
                continue
            commit.done()
        if error is not None:
            raise error

    def wait(self) -> None:
        """Return once every finalized episode is on disk with its index line, in order
        (re-raises the first write error)."""
        if self.committer is not None:
            self._collect(0)

    def close(self) -> None:
        """Wait for the episodes in flight and stop the committer process."""
        try:
            self.wait()
        finally:
            if self.committer is not None:
                self.committer.close()

    @staticmethod
    def index_row(rec: EpisodeRecording, *, observation: np.ndarray, summary: str, tags: list[str],
                  events: list[str], x: float | None, y: float | None, outcome_label: str | None,
                  note: str | None = None) -> IndexRow:
        """The index row of a finished episode. ``image`` is null when the end observation is
        the last per-step frame (readers take it from the strip; no second copy is stored);
        ``material``, ``target`` and ``reason`` are the recording's."""
        in_strip = bool(rec.frames) and np.array_equal(rec.frames[-1], observation)
        return IndexRow(
            id=rec.id, kind=rec.kind, action_kind=rec.action_kind, first_step=rec.first_step,
            last_step=rec.last_step, summary=summary, tags=tuple(tags), x=x, y=y, path=rec.path,
            image=None if in_strip else f"{rec.path}/observation/image.png", life=rec.life, turn=rec.turn,
            events=tuple(events), outcome=outcome_label, note=note,
            observation_hash=frame_hash(observation), frames=len(rec.frames), material=rec.material,
            target=rec.target, reason=rec.reason,
        )
