"""The run directory writer: one object that owns every append-only file of a run.

Each episode is committed whole by :meth:`RunWriter.end_episode`: its trace, grid, seen,
milestone and life rows first (flushed), then its folder (records, frame strips,
observation image), then, once those are on disk, its index row (the commit marker); the
log section and the manifest (at most once a second, ``MANIFEST_EVERY_S``) are written
meanwhile. With ``background_commit=False`` ``end_episode`` writes the folder and the row
itself; with ``True`` the episode store's committer process writes them while the next
episodes play (``mfm.memory.committer``; at most ``episode_store.IN_FLIGHT`` behind). A
process killed at any moment loses at most the episode in flight (the committer writes
every episode it was handed, then exits): an episode is in the index only if its files are
on disk (``tests/test_crash.py``). A write that fails (disk full, read-only file system, I/O error,
no permission) raises :class:`~mfm.memory.appendlog.WriteError`, and :meth:`RunWriter.close`
still marks the run ``crashed`` in ``run.json`` when it can (``tests/test_disk_full.py``).
"""
from __future__ import annotations

import dataclasses
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from mfm.memory.agent_memory import AgentMemory
from mfm.memory.appendlog import (AppendLog, Clock, WriteError, append_bytes, now_iso, write_atomic,
                                  write_in_place, writing)
from mfm.memory.episode_store import EpisodeRecording, EpisodeStore
from mfm.memory.index import ContentIndex, EpisodeIndex
from mfm.memory.spatial import SpatialGrid
from mfm.schema import (LOGS, MANIFEST, GridRow, IndexRow, LifeEvent, MilestoneRow, RunManifest, SeenRow,
                         TurnRow)

LOG_RULE = "=" * 80
MANIFEST_EVERY_S = 1.0
"""How often, at most, an episode's end rewrites ``run.json`` (its ``last_step``) while the
run goes on; milestones, lives and the run's end are written at once. Rewriting it after
every episode cost ~1 ms each (docs/benchmarks.md, figure 5); readers of a running run take
its steps from ``steps.jsonl``, not from the manifest."""
MANIFEST_ROOM = 512
"""Spaces ``run.json`` ends with while the run is running (JSON allows trailing whitespace):
room for the run's end (status, ``end_reason``, ``ended_at``, the agent's summary) to be
written over the file in place when the disk is full and the file cannot be replaced
(:meth:`RunWriter.close`, :func:`~mfm.memory.appendlog.write_in_place`). A closed run's
``run.json`` has no such padding unless it was closed that way."""


def manifest_bytes(m: RunManifest) -> bytes:
    """The bytes of ``run.json`` holding ``m`` (padded by ``MANIFEST_ROOM`` while running)."""
    pad = " " * MANIFEST_ROOM if m.status == "running" else ""
    return (m.to_json() + pad + "\n").encode("utf-8")


class RunWriter:
    """Create a run directory and record into it through the memory core."""

    def __init__(self, run_dir: Path, manifest: RunManifest, fsync: bool = False, clock: Clock = now_iso,
                 background_commit: bool = False) -> None:
        run_dir = Path(run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FileExistsError(f"{run_dir} is not empty; a run is never written over another")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.dir = run_dir
        self.manifest = manifest
        self._write_manifest()
        self.index = EpisodeIndex()
        self.episodes = EpisodeStore(run_dir, background=background_commit,
                                     index_log=AppendLog(run_dir / "index.jsonl", fsync))
        self.grid = SpatialGrid(log=AppendLog(run_dir / "grid.jsonl", fsync))
        self.content = ContentIndex(log=AppendLog(run_dir / "seen.jsonl", fsync))
        self.clock = clock
        self.memory = AgentMemory(run_dir, clock=clock)
        self._steps = AppendLog(run_dir / "steps.jsonl", fsync)
        self._turns = AppendLog(run_dir / "turns.jsonl", fsync)
        self._milestones = AppendLog(run_dir / "milestones.jsonl", fsync)
        self._lives = AppendLog(run_dir / "lives.jsonl", fsync)
        self._actions = 0

    def _write_manifest(self, in_place: bool = False) -> None:
        """Replace ``run.json``; with ``in_place``, if that fails, overwrite it in place with
        as much of the manifest as fits (:meth:`_fitted`)."""
        written = self.manifest
        try:
            write_atomic(self.dir / MANIFEST, manifest_bytes(written))
        except WriteError:
            if not in_place:
                raise
            with writing(self.dir / MANIFEST):
                written = self._fitted((self.dir / MANIFEST).stat().st_size)
            write_in_place(self.dir / MANIFEST, manifest_bytes(written))
        self._written_manifest, self._manifest_at = written, time.monotonic()

    def _fitted(self, room: int) -> RunManifest:
        """The manifest to write over ``run.json`` in ``room`` bytes: the current one if it
        fits, else the one on disk with the run's end, its ``end_reason`` cut short to fit."""
        m = self.manifest
        if len(manifest_bytes(m)) <= room:
            return m
        m = dataclasses.replace(self._written_manifest, status=m.status, end_reason=m.end_reason, ended_at=m.ended_at)
        while (over := len(manifest_bytes(m)) - room) > 0 and m.end_reason:
            m = dataclasses.replace(m, end_reason=m.end_reason[:-over])
        return m

    @property
    def status_on_disk(self) -> str:
        """The status ``run.json`` holds: the last one written."""
        return self._written_manifest.status

    def _manifest_due(self) -> bool:
        """Whether ``run.json`` should be rewritten now: a field other than ``last_step``
        changed since it was last written, or ``MANIFEST_EVERY_S`` passed."""
        return (time.monotonic() - self._manifest_at >= MANIFEST_EVERY_S
                or dataclasses.replace(self._written_manifest, last_step=self.manifest.last_step) != self.manifest)

    def update_manifest(self, **changes: Any) -> None:
        """Replace fields of ``run.json`` (written atomically)."""
        self.manifest = dataclasses.replace(self.manifest, **changes)
        self._write_manifest()

    def begin_episode(self, *, kind: str, life: int, turn: int | None, action_kind: str | None, first_step: int,
                      action: dict[str, Any]) -> EpisodeRecording:
        """Open an episode; it gets the next id and records steps until :meth:`end_episode`.

        ``kind``: ``initial`` (the start of the run) or ``episode``; ``turn``: the agent's turn
        (None for the initial state); ``action_kind``: the atom or procedure it runs;
        ``first_step``: the env step it starts after; ``action``: the body of ``action.json``."""
        return self.episodes.begin(kind=kind, life=life, turn=turn, action_kind=action_kind, first_step=first_step,
                                   action=action)

    def end_episode(self, rec: EpisodeRecording, *, grid: Iterable[GridRow] = (), observation: np.ndarray,
                    state: dict[str, Any], outcome: dict[str, Any], summary: str, tags: list[str], events: list[str],
                    x: float | None, y: float | None, outcome_label: str | None, note: str | None = None,
                    log_lines: Iterable[str] = (), seen: Mapping[str, Iterable[tuple[int, int]]] | None = None
                    ) -> IndexRow:
        """Commit a finished episode and everything that happened in it (see the module
        docstring for the order); the returned row is in :attr:`index` at once.

        ``grid``: its spatial rows; ``observation``: the frame it ends on; ``state`` and
        ``outcome``: the bodies of ``state/state.json`` and ``outcome.json``; ``summary``,
        ``tags``, ``events``, ``x``, ``y``, ``outcome_label`` and ``note``: its index row
        (:meth:`EpisodeStore.index_row`); ``log_lines``: more lines of its ``logs.txt`` section;
        ``seen``: the cells its frames showed, per material (``seen.jsonl``)."""
        self._steps.append(rec.steps)
        self._steps.flush()
        for g in grid:
            self.grid.append(g)
        self.grid.flush()
        self.add_seen(rec, seen or {})
        self.content.flush()
        self._milestones.flush()
        self._lives.flush()
        row = self.episodes.finalize(rec, observation=observation, state=state, outcome=outcome, summary=summary,
                                     tags=tags, events=events, x=x, y=y, outcome_label=outcome_label, note=note)
        self.index.append(row)
        self._log_section(row, log_lines)
        self.manifest = dataclasses.replace(self.manifest, last_step=max(self.manifest.last_step, row.last_step))
        if self._manifest_due():
            self._write_manifest()
        return row

    def add_seen(self, rec: EpisodeRecording, seen: Mapping[str, Iterable[tuple[int, int]]]) -> None:
        """Queue an episode's ``seen.jsonl`` rows (one per material) in :attr:`content`."""
        for material, cells in seen.items():
            self.content.append(SeenRow(episode=rec.id, life=rec.life, first_step=rec.first_step,
                                        last_step=rec.last_step, material=material,
                                        cells=tuple([x, y] for x, y in cells)))

    def wait(self) -> None:
        """Return once every ended episode is committed (a no-op without ``background_commit``)."""
        self.episodes.wait()

    def _log_section(self, row: IndexRow, lines: Iterable[str]) -> None:
        head = f"Action {self._actions} | Step {row.last_step} | Life {row.life} | Turn {row.turn} | {row.id}"
        if row.kind == "initial":
            head = f"Action {self._actions} | Step {row.last_step} | Life {row.life} | INITIAL STATE | {row.id}"
        self._actions += 1
        body = [f"[ACTION] {row.summary}"] + list(lines)
        body += [f"[EVENT] {e}" for e in row.events]
        if row.note:
            body.append(f"[NOTE] {row.note}")
        append_bytes(self.dir / LOGS, ("\n".join([LOG_RULE, head, "", *body, ""]) + "\n").encode("utf-8"))

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

    def close(self, status: str, end_reason: str | None = None, **changes: Any) -> None:
        """Flush whatever is queued and mark the run finished, interrupted or crashed (with
        ``changes``, more fields of ``run.json``).

        If a write fails, the rest is still written where it can be and the run is marked
        ``crashed`` with that failure as ``end_reason`` (unless the caller already closes it as
        crashed), ``run.json`` rewritten in place if it cannot be replaced; then the first
        :class:`WriteError` is raised. :attr:`status_on_disk` tells whether that status got
        written."""
        error: WriteError | None = None
        for flush in (self._steps.flush, self._turns.flush, self._milestones.flush, self._lives.flush,
                      self.grid.flush, self.content.flush, self.episodes.close):
            try:
                flush()
            except WriteError as e:
                error = error or e
        if error is None:
            try:
                self.update_manifest(status=status, end_reason=end_reason, ended_at=self.clock(), **changes)
                return
            except WriteError as e:
                error = e
        if status != "crashed":
            status, end_reason = "crashed", error.describe(self.dir)
        self.manifest = dataclasses.replace(self.manifest, status=status, end_reason=end_reason,
                                            ended_at=self.clock(), **changes)
        with suppress(WriteError):
            self._write_manifest(in_place=True)
        raise error
