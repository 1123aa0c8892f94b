"""Where a run's records and frames come from: our run directories or a foreign format.

A :class:`Source` turns one run, in whatever format it was written, into our typed records
(``mfm.run_reader.RunContents``) plus on-demand access to episode records and frames. The
:class:`~loaders.run.Run` built on it is the same for every format, so every page works
on every format, and ``mfm import`` writes any source out as our format.
"""
from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from mfm.boundary import MAX_JSON_FILE_BYTES
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError, episode_frame, load_episode, observation
from loaders import cachedread
from mfm.schema import MANIFEST, SCHEMA_VERSION, IndexRow, Problem, RunManifest, read_manifest
from mfm.run_reader import LAZY_TABLES, RunContents, TableRead, read_lazy_table, read_run


class Source(Protocol):
    """One run in some format."""

    format: str
    """``mfm`` (ours), ``mfm-original`` (an original MFM run folder), ``mfm-export``,
    ``crafter-recorder``."""

    def contents(self) -> RunContents:
        """Every valid record and every problem, read tolerantly (a folder source leaves
        ``mfm.run_reader.LAZY_TABLES`` out until :meth:`read_table` reads them; the others
        hold every table)."""

    def read_table(self, path: Path, name: str) -> TableRead:
        """One table file of the run (folder sources: a lazy table when it is asked for)."""

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        """State, action and outcome of an episode (None where not recorded)."""

    def observation(self, ref: IndexRow) -> np.ndarray:
        """The frame when the episode ended; FrameError if there is none."""

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        """The frame of one env step; FrameError if not recorded."""


def inferred_manifest(run_id: str, env: str, index: list[IndexRow], **kw) -> RunManifest:
    """A manifest for a run that came without one, filled from what the run holds."""
    last = max((r.last_step for r in index), default=0)
    base = dict(schema_version=SCHEMA_VERSION, run_id=run_id, env=env, task="unknown", method="unknown", seed=0,
                step_budget=last, milestone_order=(), status="finished", started_at="", last_step=last,
                lives=1 + max((r.life for r in index), default=0))
    base.update(kw)
    return RunManifest(**base)


ManifestRead = tuple[RunManifest | None, list[Problem]]
"""``run.json`` read and checked (``mfm.schema.read_manifest``): the manifest or None, and its problems."""


def _read_manifest(run_dir: Path) -> ManifestRead:
    """``mfm.schema.read_manifest``, after a look at the file's size."""
    try:
        size = os.lstat(run_dir / MANIFEST).st_size
    except OSError:
        size = 0
    if size > MAX_JSON_FILE_BYTES:
        return None, [Problem(MANIFEST, 0, f"larger than {MAX_JSON_FILE_BYTES} bytes ({size}), not read")]
    return read_manifest(run_dir)


class DirSource:
    """A run directory in our format, or an original MFM run directory (no ``run.json``).

    One source stands for one version of the folder's files (``loaders.run.RunRegistry`` makes
    a new one when they change): its ``run.json`` is read once (:meth:`manifest_read`), for
    the manifest alone and then for the tables. ``manifest``: that read, when the caller
    already made it for this version."""

    def __init__(self, path: Path, manifest: ManifestRead | None = None) -> None:
        self.path = path
        self.format = "mfm" if (path / MANIFEST).is_file() else "mfm-original"
        self._manifest: ManifestRead | None = manifest
        self._manifest_lock = threading.Lock()

    def manifest_read(self) -> ManifestRead:
        """``run.json`` of this version, read and checked the first time it is asked for; one
        larger than ``mfm.boundary.MAX_JSON_FILE_BYTES`` (the readers' bound for a JSON file)
        is refused by its size before it is opened."""
        with self._manifest_lock:
            if self._manifest is None:
                self._manifest = _read_manifest(self.path)
            return self._manifest[0], list(self._manifest[1])

    def contents(self) -> RunContents:
        manifest = self.manifest_read() if self.format == "mfm" else None
        c = cachedread.validate(self.path, cache=True, lazy=True, manifest=manifest)
        if self.format == "mfm-original" and c.tables:
            refused = [p for p in c.problems if p.file == "run.json" and p.message.startswith("not a regular file")]
            c.problems = [p for p in c.problems if p.file != "run.json"]
            c.problems.insert(0, Problem("run.json", 0, f"{refused[0].message}; the manifest is inferred from "
                                                        "index.jsonl") if refused else
                              Problem("run.json", 0, "missing: read as an original MFM run directory; "
                                                     "the manifest is inferred from index.jsonl", "warning"))
            rows = c.tables["index.jsonl"]
            c.manifest = inferred_manifest(self.path.name, "minecraft" if any(r.z is not None for r in rows)
                                           else "unknown", rows, method="mfm")
        return c

    def read_table(self, path: Path, name: str) -> TableRead:
        return cachedread.read_one_table_cached(path, name)

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        return load_episode(self.path, ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        return observation(self.path, ref)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        ref = index.episode_at(step)
        if ref is None:
            raise FrameError(f"{self.path.name}: no stored frame for step {step}")
        return episode_frame(self.path, ref, step - ref.first_step - 1)


Stat = tuple[int, int]
"""A file's (size in bytes, modification time in ns); (-1, 0) when it does not exist."""


def file_stat(path: Path) -> Stat:
    """Size and modification time of one file, or (-1, 0) when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, 0)
    return (st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class Parsed:
    """One table file as read at one stat."""

    stat: Stat
    table: TableRead


class LiveSource(DirSource):
    """A run folder in our format being written (its manifest says ``running``), read table by table.

    A run being written grows by whole episodes: its writer appends lines to some tables and
    rewrites ``run.json``. Each version of the folder gets its own LiveSource, which starts from
    the parses of the previous version's (``previous``): a table file is parsed again only when
    its stat changed. ``parses`` counts the parses per file since the run was first followed
    (what the refreshes cost). The tables are read (``loaders.cachedread.read_one_table_fast``)
    and cross-checked as ``mfm.run_reader.read_run`` does, but the per-episode file checks of
    ``mfm validate`` wait until the run has stopped (an episode in flight is normal while the
    writer works), and nothing goes into the derived table cache (``loaders.tablecache``):
    the tables change with every episode."""

    def __init__(self, path: Path, previous: LiveSource | None = None, manifest: ManifestRead | None = None) -> None:
        super().__init__(path, manifest)
        self.lock = threading.RLock()
        self._parsed: dict[str, Parsed] = {}
        self.parses: Counter[str] = Counter()
        if previous is not None:
            with previous.lock:
                self._parsed = dict(previous._parsed)
                self.parses = Counter(previous.parses)
        self._used: dict[str, Stat] = {}

    def _read(self, path: Path, name: str) -> TableRead:
        stat = file_stat(path)
        old = self._parsed.get(name)
        if old is None or old.stat != stat:
            self.parses[name] += 1
            old = self._parsed[name] = Parsed(stat, cachedread.read_one_table_fast(path, name))
        self._used[name] = old.stat
        return old.table

    def read_table(self, path: Path, name: str) -> TableRead:
        with self.lock:
            return self._read(path, name)

    def contents(self) -> RunContents:
        """The manifest and every table (as :func:`mfm.run_reader.read_run` reads them);
        unchanged tables come from the last parse. A lazy table is left out until it has
        been asked for once (:meth:`read_table`); from then on it is kept up to date too."""
        with self.lock:
            c = read_run(self.path, read=self._read, lazy=True, manifest=self.manifest_read())
            for name in LAZY_TABLES:
                if name in self._parsed and c.tables:
                    read_lazy_table(c, name, self._read)
            return c

    def stats(self) -> dict[str, Stat]:
        """The stat at which each table file this version read was parsed (this version's
        :meth:`contents` and :meth:`read_table`)."""
        with self.lock:
            return dict(self._used)
