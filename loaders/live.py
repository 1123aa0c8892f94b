"""Following runs that are being written: per-table change detection and partial reloads.

A run being written grows by whole episodes: its writer appends lines to some tables and
rewrites ``run.json``. :class:`LiveRuns` keeps the last :class:`~loaders.run.Run` of each
folder; when the folder's files change, only the tables whose file changed (size or
modification time) are parsed again, and the DataFrames of the others are handed over to
the new Run unchanged (the same objects).

While a run's manifest says ``running`` it is read through :class:`LiveSource`: the tables
are read (``loaders.cachedread.read_one_table_fast``) and cross-checked as
``mfm.validate.read_run`` does, but the per-episode file checks of ``mfm validate``
(episode folders, frame strips, orphan folders) wait until the run has stopped, since an
episode in flight is normal while the writer works. Once the manifest says anything else
the run is opened the ordinary way, with every check. A running run's tables are not put
in the derived table cache (``loaders.tablecache``): they change with every episode, and
:class:`LiveSource` keeps its own parses in memory.

No Streamlit here; the dashboard keeps one :class:`LiveRuns` per server.
"""
from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from weakref import WeakKeyDictionary

from loaders.cachedread import read_one_table_fast
from loaders.run import FILE_OF, TABLE_NAMES, Run, open_run, signature
from loaders.sources import DirSource
from mfm.schema import MANIFEST, TABLES, read_manifest
from mfm.validate import LAZY_TABLES, RunContents, TableRead, read_lazy_table, read_run

Stat = tuple[int, int]
"""A file's (size in bytes, modification time in ns); (-1, 0) when it does not exist."""


def file_stat(path: Path) -> Stat:
    """Size and modification time of one file, or (-1, 0) when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, 0)
    return (st.st_size, st.st_mtime_ns)


def table_stats(run_dir: Path) -> dict[str, Stat]:
    """The stat of ``run.json`` and of every table file of a run folder."""
    return {name: file_stat(Path(run_dir) / name) for name in (MANIFEST, *TABLES)}


def changed_files(before: dict[str, Stat], after: dict[str, Stat]) -> list[str]:
    """The files (``run.json`` and table files) whose size or modification time differ."""
    return [name for name in after if before.get(name) != after[name]]


@dataclass(frozen=True)
class Parsed:
    """One table file as read at one stat."""

    stat: Stat
    table: TableRead


class LiveSource(DirSource):
    """A run folder in our format being written, read table by table.

    Each table file is parsed again only when its stat changed; ``parses`` counts the
    parses per file (what a refresh cost)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._parsed: dict[str, Parsed] = {}
        self.lock = threading.RLock()
        self.parses: Counter[str] = Counter()

    def _read(self, path: Path, name: str) -> TableRead:
        stat = file_stat(path)
        old = self._parsed.get(name)
        if old is not None and old.stat == stat:
            return old.table
        self.parses[name] += 1
        self._parsed[name] = Parsed(stat, read_one_table_fast(path, name))
        return self._parsed[name].table

    def read_table(self, path: Path, name: str) -> TableRead:
        with self.lock:
            return self._read(path, name)

    def contents(self) -> RunContents:
        """The manifest and every table (as :func:`mfm.validate.read_run` reads them);
        unchanged tables come from the last parse. A lazy table is left out until it has
        been asked for once (:meth:`read_table`); from then on it is kept up to date too."""
        with self.lock:
            c = read_run(self.path, read=self._read, lazy=True)
            for name in LAZY_TABLES:
                if name in self._parsed and c.tables:
                    read_lazy_table(c, name, self._read)
            return c

    def stats(self) -> dict[str, Stat]:
        """The stat each table was last parsed at."""
        return {name: p.stat for name, p in self._parsed.items()}


@dataclass(frozen=True)
class Change:
    """What one refresh of a run found: the files that changed and how the status moved."""

    files: tuple[str, ...]
    status_before: str
    status_after: str

    @property
    def tables(self) -> list[str]:
        """The changed tables by view name (episodes, steps, ...)."""
        return [TABLE_NAMES[f] for f in self.files if f in TABLE_NAMES]


def _stats(sig: tuple) -> dict[str, Stat]:
    """A run signature (``loaders.run.signature``) as ``{file: (size, mtime_ns)}``."""
    return {name: (size, mtime) for name, size, mtime in sig}


_PARSED_AT: WeakKeyDictionary[Run, dict[str, Stat]] = WeakKeyDictionary()
"""The stat of each table file when a live Run's contents were parsed."""


def _is_running(run_dir: Path) -> bool:
    m = read_manifest(run_dir)[0] if (run_dir / MANIFEST).is_file() else None
    return m is not None and m.status == "running"


def reopen(prev: Run | None, path: Path) -> Run:
    """The run at ``path`` now. A run being written (manifest ``running``) reuses what
    ``prev`` had parsed: tables whose file did not change keep their records and their
    DataFrame objects. Any other run is opened afresh with every check."""
    path = Path(path).resolve()
    sig = signature(path)
    if prev is not None and prev.signature == sig:
        return prev
    if not (path.is_dir() and (path / MANIFEST).is_file() and _is_running(path)):
        return open_run(path)
    source = prev.source if prev is not None and isinstance(prev.source, LiveSource) else LiveSource(path)
    run = Run(path, source, sig)
    with source.lock:
        run._c  # noqa: B018 - parse now, so the stats recorded below describe this Run
        now = source.stats()
    _PARSED_AT[run] = now
    before = _PARSED_AT.get(prev) if prev is not None and prev.source is source else None
    if before is not None:
        for name, df in list(prev._frames.items()):
            if before.get(FILE_OF[name]) == now.get(FILE_OF[name]):
                run._frames[name] = df
    return run


class LiveRuns:
    """The latest Run of each folder, refreshed when its files change (thread safe).

    ``changes[path]`` is the :class:`Change` of the last refresh that found one."""

    def __init__(self, max_runs: int = 64) -> None:
        self.max_runs = max_runs
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self.changes: dict[str, Change] = {}
        self._lock = threading.Lock()

    def get(self, path: str | Path) -> Run:
        """The run at ``path`` as it is now on disk."""
        key = str(Path(path).resolve())
        with self._lock:
            prev = self._runs.get(key)
        run = reopen(prev, Path(key))
        if run is not prev:
            if prev is not None:
                files = tuple(changed_files(_stats(prev.signature), _stats(run.signature)))
                self.changes[key] = Change(files, prev.status, run.status)
            with self._lock:
                self._runs[key] = run
                self._runs.move_to_end(key)
                while len(self._runs) > self.max_runs:
                    old, _ = self._runs.popitem(last=False)
                    self.changes.pop(old, None)
        return run


def watch_key(run: Run) -> tuple[tuple, str]:
    """What a page showed of a run: its file signature and its status."""
    return run.signature, run.status


def needs_refresh(shown: dict[str, tuple[tuple, str]], now: dict[str, tuple[tuple, str]]) -> list[str]:
    """The runs (by key) whose files or status differ from what the page shows."""
    return [k for k, v in now.items() if shown.get(k) != v]
