"""The agent with recording switched off, for measuring what recording costs.

:class:`NullWriter` keeps what the agent reads back while it plays: the episode index (and
its content half) and the spatial grid (in memory), and the files the agent itself reads (its ``mine/`` memory,
the per-step trace ``steps.jsonl`` and the text log ``logs.txt``). It writes nothing else:
no frame strips, observation images or episode records, no index, grid, seen, turn,
milestone or life tables, no manifest updates. Frames the agent inspects are served from memory, so both
modes take the same decisions and play the same steps. :class:`NullRecorder` plugs both into
the :class:`~mfm.agent.runner.Runner` (its ``writer`` and ``frames`` arguments).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from mfm.memory import RunWriter
from mfm.memory.appendlog import Clock
from mfm.memory.episode_store import EpisodeRecording, EpisodeStore
from mfm.memory.index import ContentIndex, EpisodeIndex
from mfm.memory.retrieval import FrameError
from mfm.memory.spatial import SpatialGrid
from mfm.schema import GridRow, IndexRow, TurnRow


class NullWriter(RunWriter):
    """A :class:`RunWriter` that records nothing to disk (see the module docstring); the
    frames of its episodes are kept in ``frames`` (episode path to frames)."""

    def __init__(self, run_dir: Path, manifest: Any, frames: dict[str, list[np.ndarray]], fsync: bool = False,
                 **kw: Any) -> None:
        super().__init__(run_dir, manifest, fsync, **kw)
        self.episodes.close()
        self.index = EpisodeIndex()
        self.grid = SpatialGrid()
        self.content = ContentIndex()
        self.frames = frames

    def _write_manifest(self) -> None:
        """Nothing after the first write (done by RunWriter.__init__)."""
        if not hasattr(self, "episodes"):
            super()._write_manifest()

    def end_episode(self, rec: EpisodeRecording, *, grid: Iterable[GridRow] = (), observation: np.ndarray,
                    state: dict[str, Any], outcome: dict[str, Any], summary: str, tags: list[str], events: list[str],
                    x: float | None, y: float | None, outcome_label: str | None, note: str | None = None,
                    log_lines: Iterable[str] = (), seen: Mapping[str, Iterable[tuple[int, int]]] | None = None
                    ) -> IndexRow:
        """The episode's trace and log section, its index row, grid and seen rows in memory, its
        frames kept."""
        row = EpisodeStore.index_row(rec, observation=observation, summary=summary, tags=tags, events=events, x=x,
                                     y=y, outcome_label=outcome_label, note=note)
        self.frames[row.path] = rec.frames
        self._steps.append(rec.steps)
        self._steps.flush()
        for g in grid:
            self.grid.append(g)
        self.add_seen(rec, seen or {})
        self.index.append(row)
        self._log_section(row, log_lines)
        return row

    def record_turn(self, turn: TurnRow) -> None:
        """Not recorded."""

    def close(self, status: str, end_reason: str | None = None, **changes: Any) -> None:
        """Nothing to flush."""


class NullRecorder:
    """A run's :class:`NullWriter` and the reader of the frames it keeps, for the runner."""

    def __init__(self) -> None:
        self.frames: dict[str, list[np.ndarray]] = {}

    def writer(self, run_dir: Path, manifest: Any, clock: Clock) -> NullWriter:
        """The runner's writer (``Runner(writer=...)``), as ``mfm run`` makes it but recording nothing."""
        return NullWriter(run_dir, manifest, self.frames, clock=clock)

    def frame(self, run_dir: Path, ref: IndexRow, i: int) -> np.ndarray:
        """``retrieval.episode_frame`` for the run (``Runner(frames=...)``): the frame kept in memory."""
        frames = self.frames.get(ref.path, [])
        if not 0 <= i < len(frames):
            raise FrameError(f"{ref.id}: frame {i} out of range (it has {len(frames)})")
        return frames[i]


def _cpu() -> float:
    """CPU seconds of this process (all threads) and of its children that have exited (the
    committer process, once the run is closed)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def play(out: Path, steps: int, seed: int, on: bool) -> tuple[float, float, int, dict]:
    """Run the scripted agent for ``steps`` env steps; (wall seconds, CPU seconds of the
    process and its committer process, steps played, agent summary)."""
    from mfm.agent.config import RunConfig
    from mfm.agent.runner import Runner

    config = RunConfig(task="diamond", seed=seed, steps=steps, out=out, stop_when_done=False)
    if on:
        r = Runner(config)
    else:
        null = NullRecorder()
        r = Runner(config, writer=null.writer, frames=null.frame)
    t, cpu = time.perf_counter(), _cpu()
    r.run()
    dt, dcpu = time.perf_counter() - t, _cpu() - cpu
    summary = r.summary()
    return dt, dcpu, summary["steps"], summary
