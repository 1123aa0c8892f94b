"""The run directory writer: one object that owns every append-only file of a run.

Each episode is committed whole by :meth:`RunWriter.end_episode`: its folder first (the
images encoded on a background thread meanwhile), then its trace, grid, milestone and life
rows, then, once the images are on disk, its index row (the commit marker), then the log
section and the manifest. Everything is flushed there, at the episode boundary,
so a process killed at any moment loses at most the episode in flight.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mfm.memory.agent_memory import AgentMemory
from mfm.memory.appendlog import AppendLog, Clock, now_iso, write_atomic
from mfm.memory.episode_store import EpisodeRecording, EpisodeStore
from mfm.memory.index import EpisodeIndex
from mfm.memory.spatial import SpatialGrid
from mfm.schema import (LOGS, MANIFEST, GridRow, IndexRow, LifeEvent, MilestoneRow, RunManifest, TurnRow)

LOG_RULE = "=" * 80


class RunWriter:
    """Create a run directory and record into it through the memory core."""

    def __init__(self, run_dir: Path, manifest: RunManifest, fsync: bool = False, clock: Clock = now_iso) -> None:
        run_dir = Path(run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FileExistsError(f"{run_dir} is not empty; a run is never written over another")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.dir = run_dir
        self.manifest = manifest
        self._write_manifest()
        self.episodes = EpisodeStore(run_dir)
        self.index = EpisodeIndex(log=AppendLog(run_dir / "index.jsonl", fsync))
        self.grid = SpatialGrid(log=AppendLog(run_dir / "grid.jsonl", fsync))
        self.clock = clock
        self.memory = AgentMemory(run_dir, clock=clock)
        self._steps = AppendLog(run_dir / "steps.jsonl", fsync)
        self._turns = AppendLog(run_dir / "turns.jsonl", fsync)
        self._milestones = AppendLog(run_dir / "milestones.jsonl", fsync)
        self._lives = AppendLog(run_dir / "lives.jsonl", fsync)
        self._actions = 0

    def _write_manifest(self) -> None:
        write_atomic(self.dir / MANIFEST, (self.manifest.to_json() + "\n").encode("utf-8"))

    def update_manifest(self, **changes: Any) -> None:
        """Replace fields of ``run.json`` (written atomically)."""
        self.manifest = dataclasses.replace(self.manifest, **changes)
        self._write_manifest()

    def begin_episode(self, **kw: Any) -> EpisodeRecording:
        """Open an episode (see :meth:`EpisodeStore.begin`)."""
        return self.episodes.begin(**kw)

    def end_episode(self, rec: EpisodeRecording, *, grid: Iterable[GridRow] = (), observation: np.ndarray,
                    log_lines: Iterable[str] = (), **finalize: Any) -> IndexRow:
        """Commit a finished episode and everything that happened in it; flush all files."""
        row = self.episodes.finalize(rec, observation=observation, **finalize)
        self._steps.append(rec.steps)
        self._steps.flush()
        for g in grid:
            self.grid.append(g)
        self.grid.flush()
        self._milestones.flush()
        self._lives.flush()
        self.episodes.wait()
        self.index.append(row)
        self.index.flush()
        self._log_section(row, log_lines)
        self.update_manifest(last_step=max(self.manifest.last_step, row.last_step))
        return row

    def _log_section(self, row: IndexRow, lines: Iterable[str]) -> None:
        head = f"Action {self._actions} | Step {row.last_step} | Life {row.life} | Turn {row.turn} | {row.id}"
        if row.kind == "initial":
            head = f"Action {self._actions} | Step {row.last_step} | Life {row.life} | INITIAL STATE | {row.id}"
        self._actions += 1
        body = [f"[ACTION] {row.summary}"] + list(lines)
        body += [f"[EVENT] {e}" for e in row.events]
        if row.note:
            body.append(f"[NOTE] {row.note}")
        text = "\n".join([LOG_RULE, head, "", *body, ""]) + "\n"
        with open(self.dir / LOGS, "a", encoding="utf-8") as f:
            f.write(text)

    def record_turn(self, turn: TurnRow) -> None:
        self._turns.append(turn)
        self._turns.flush()

    def record_milestone(self, m: MilestoneRow) -> None:
        """Queue a milestone (written with the episode it happened in) and note it in run.json."""
        self._milestones.append(m)
        ms = dict(self.manifest.milestones)
        ms.setdefault(m.name, m.step)
        self.manifest = dataclasses.replace(self.manifest, milestones=ms)

    def record_life_event(self, e: LifeEvent) -> None:
        self._lives.append(e)
        if e.event == "respawn":
            self.manifest = dataclasses.replace(self.manifest, lives=max(self.manifest.lives, e.life + 1))

    def close(self, status: str, end_reason: str | None = None) -> None:
        """Flush whatever is queued and mark the run finished, interrupted or crashed."""
        for log in (self._steps, self._turns, self._milestones, self._lives):
            log.flush()
        self.grid.flush()
        self.episodes.close()
        self.index.flush()
        self.update_manifest(status=status, end_reason=end_reason, ended_at=self.clock())
