"""The agent with recording switched off, for measuring what recording costs.

:class:`NullWriter` keeps what the agent reads back while it plays: the episode index and
the spatial grid (in memory), and the files the agent itself reads (its ``mine/`` memory,
the per-step trace ``steps.jsonl`` and the text log ``logs.txt``). It writes nothing else:
no frame strips, observation images or episode records, no index, grid, turn, milestone or
life tables, no manifest updates. Frames the agent inspects are served from memory, so both
modes take the same decisions and play the same steps.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from mfm.memory import RunWriter
from mfm.memory.episode_store import EpisodeRecording, EpisodeStore
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import FrameError
from mfm.memory.spatial import SpatialGrid
from mfm.schema import GridRow, IndexRow, TurnRow


class NullWriter(RunWriter):
    """A :class:`RunWriter` that records nothing to disk (see the module docstring)."""

    frames: dict[str, list[np.ndarray]] = {}

    def __init__(self, run_dir: Path, manifest: Any, fsync: bool = False, **kw: Any) -> None:
        super().__init__(run_dir, manifest, fsync, **kw)
        self.episodes.close()
        self.index = EpisodeIndex()
        self.grid = SpatialGrid()
        NullWriter.frames = {}

    def _write_manifest(self) -> None:
        """Nothing after the first write (done by RunWriter.__init__)."""
        if not hasattr(self, "episodes"):
            super()._write_manifest()

    def end_episode(self, rec: EpisodeRecording, *, grid: Iterable[GridRow] = (), observation: np.ndarray,
                    log_lines: Iterable[str] = (), **finalize: Any) -> IndexRow:
        row = EpisodeStore.index_row(rec, observation=observation, **{k: v for k, v in finalize.items()
                                                                      if k not in ("state", "outcome")})
        NullWriter.frames[row.path] = rec.frames
        self._steps.append(rec.steps)
        self._steps.flush()
        for g in grid:
            self.grid.append(g)
        self.index.append(row)
        self._log_section(row, log_lines)
        return row

    def record_turn(self, turn: TurnRow) -> None:
        """Not recorded."""

    def close(self, status: str, end_reason: str | None = None) -> None:
        """Nothing to flush."""


def memory_frame(run_dir: Path, ref: IndexRow, i: int, size: int | None = None) -> np.ndarray:
    """``retrieval.episode_frame`` for a :class:`NullWriter` run: the frame kept in memory."""
    frames = NullWriter.frames.get(ref.path, [])
    if not 0 <= i < len(frames):
        raise FrameError(f"{ref.id}: frame {i} out of range (it has {len(frames)})")
    return frames[i]


@contextlib.contextmanager
def recording(on: bool) -> Iterator[None]:
    """Within the block, ``mfm run`` records normally (``on``) or through :class:`NullWriter`."""
    import mfm.agent.llm as llm
    import mfm.agent.runner as runner
    import mfm.agent.tools as tools

    saved = runner.RunWriter, tools.episode_frame, llm.episode_frame
    if not on:
        runner.RunWriter, tools.episode_frame, llm.episode_frame = NullWriter, memory_frame, memory_frame
    try:
        yield
    finally:
        runner.RunWriter, tools.episode_frame, llm.episode_frame = saved


def play(out: Path, steps: int, seed: int, on: bool) -> tuple[float, float, int, dict]:
    """Run the scripted agent for ``steps`` env steps; (wall seconds, CPU seconds of the
    process, all threads, steps played, agent summary)."""
    from mfm.agent.config import RunConfig
    from mfm.agent.runner import Runner

    with recording(on):
        r = Runner(RunConfig(task="diamond", seed=seed, steps=steps, out=out, stop_when_done=False))
        t, cpu = time.perf_counter(), time.process_time()
        r.run()
        dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
    summary = r.summary()
    return dt, dcpu, summary["steps"], summary
