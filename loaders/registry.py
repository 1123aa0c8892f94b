"""The one registry of open runs: each run folder's current version, kept while memory allows.

What is cached, where and why (this is the one list; each layer's own module says how):

1. **Streamlit's caches** (the dashboard only: ``dashboard.caching.cached`` and ``kept``, every
   cached view declared once in ``dashboard.views``): what a page computes from runs (a
   chart's table, a built chart), keyed by the runs' signatures, so that a rerun of a page
   over unchanged runs draws without computing again. Bounded by entries (``max_entries``);
   ``st.cache_data.clear()`` and ``st.cache_resource.clear()``.
2. **This registry** (:class:`RunRegistry`; one per process, ``loaders.run.REGISTRY``, behind
   :func:`loaders.run.open_run`, :func:`loaders.run.open_runs` and the dashboard's runs):
   a run folder's path to the :class:`~loaders.run.Run` of its current version, so that every
   page and notebook cell that asks for a run shares one parse of it. A version is the run's
   signature (``loaders.run.signature``: size and modification time of ``run.json`` and each
   table file); when it changes the run is read again, and a run being written reuses the
   tables whose files did not change (``Run.reuse_frames``). Bounded by an estimate of the
   bytes the runs hold (``Run.nbytes``): ``$MFM_RUN_CACHE_MB``, default
   :data:`DEFAULT_MB`; the least recently used runs are dropped first.
3. **A Run's own memo**, for its version only (a new version is a new Run, so none of it goes
   stale): ``run.json`` read once (``loaders.sources.DirSource.manifest_read``), the records
   read (``mfm.run_reader.RunContents``), the DataFrames built from them (``Run.table``), values
   computed from the run by the layers above (``Run.derived``: an inherited run's copy, the
   provenance's writes, a figure's content hash), the episode index and the SQL connection.
   A run being written also keeps each table's parse in its source
   (``loaders.sources.LiveSource``), handed from version to version.
4. **The derived table cache on disk** (``loaders.tablecache``): the parsed tables and file
   checks of unchanged files, across processes; ``$MFM_CACHE_DIR`` (``off`` turns it off),
   ``$MFM_CACHE_MAX_MB`` (default 1024). A run's files are the truth; every layer is rebuilt
   from them.

No Streamlit here.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from loaders.records import TABLE_NAMES

DEFAULT_MB = 512
"""The registry's bound when ``$MFM_RUN_CACHE_MB`` is not set, in MiB."""


def max_bytes() -> int:
    """The bound in bytes: ``$MFM_RUN_CACHE_MB`` (MiB, a number) or :data:`DEFAULT_MB`."""
    try:
        return int(float(os.environ.get("MFM_RUN_CACHE_MB", str(DEFAULT_MB))) * 1024 * 1024)
    except ValueError:
        return DEFAULT_MB * 1024 * 1024


class Held(Protocol):
    """What the registry keeps (a :class:`~loaders.run.Run`)."""

    path: Path
    signature: tuple
    grew: Callable[[Held], None] | None

    @property
    def status(self) -> str: ...

    def nbytes(self) -> int: ...


H = TypeVar("H", bound=Held)


@dataclass(frozen=True)
class Change:
    """What one new version of a run changed: the files and how the status moved."""

    files: tuple[str, ...]
    status_before: str
    status_after: str

    @property
    def tables(self) -> list[str]:
        """The changed tables by view name (episodes, steps, ...)."""
        return [TABLE_NAMES[f] for f in self.files if f in TABLE_NAMES]


def changed(before: tuple, after: tuple) -> tuple[str, ...]:
    """The files whose (size, modification time) differ between two signatures
    (``(name, size, mtime_ns)`` each)."""
    old = {name: rest for name, *rest in before}
    return tuple(name for name, *rest in after if old.get(name) != rest)


class RunRegistry(Generic[H]):
    """Path to the run of its current version, least recently used first, under a bound in bytes.

    ``build(path, signature, previous)`` makes the run of a new version (``previous``: the
    version held until now, or None). The bound is kept each time a run is added and each time
    a held run reads more (it calls ``grew``); the run just asked for or just grown is never
    the one dropped, so one run larger than the bound is held alone. A dropped run stays
    usable by whoever holds it; the next ask reads it again. ``changes[path]`` is the
    :class:`Change` of the last new version of a held run. Thread safe: runs are built (and
    their status read, which may read a run) outside the registry's lock, and a run's
    :meth:`~loaders.run.Run.nbytes` takes no lock, so a run that grows while its own lock is
    held can report to the registry."""

    def __init__(self, build: Callable[[Path, tuple, H | None], H], limit: int | None = None) -> None:
        self._build = build
        self.limit = limit
        """The bound in bytes; None: :func:`max_bytes` (read from the environment each time)."""
        self._held: OrderedDict[str, H] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.changes: dict[str, Change] = {}
        self._lock = threading.Lock()

    def bound(self) -> int:
        """The bound in bytes now."""
        return max_bytes() if self.limit is None else self.limit

    def get(self, path: Path, sig: tuple) -> H:
        """The run at ``path`` (resolved) whose files have signature ``sig``: the one held if
        it is of that version, else a new one (which replaces it)."""
        key = str(path)
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.signature == sig:
                self._held.move_to_end(key)
                return held
        run = self._build(Path(path), sig, held)
        change = None if held is None else Change(changed(held.signature, sig), held.status, run.status)
        with self._lock:
            now = self._held.get(key)
            if now is not None and now.signature == sig:
                self._held.move_to_end(key)
                return now
            if change is not None:
                self.changes[key] = change
            if now is not None:
                now.grew = None
            self._held[key] = run
            self._held.move_to_end(key)
            self._sizes[key] = run.nbytes()
            run.grew = self._grew
            self._trim(key)
        return run

    def _grew(self, run: H) -> None:
        """A held run read more: count it again and keep the bound."""
        key = str(run.path)
        with self._lock:
            if self._held.get(key) is not run:
                return
            self._sizes[key] = run.nbytes()
            self._held.move_to_end(key)
            self._trim(key)

    def _trim(self, keep: str) -> None:
        """Drop the least recently used runs other than ``keep`` until the bytes are under the bound."""
        limit = self.bound()
        total = sum(self._sizes.values())
        for key in list(self._held):
            if total <= limit:
                return
            if key == keep:
                continue
            self._held.pop(key).grew = None
            total -= self._sizes.pop(key, 0)
            self.changes.pop(key, None)

    def nbytes(self) -> int:
        """The estimated bytes the held runs hold (as last counted)."""
        with self._lock:
            return sum(self._sizes.values())

    def paths(self) -> list[str]:
        """The held runs' paths, least recently used first."""
        with self._lock:
            return list(self._held)

    def held(self, path: str | Path) -> H | None:
        """The run held for ``path`` (resolved), whatever its version, or None."""
        with self._lock:
            return self._held.get(str(path))

    def clear(self) -> None:
        """Drop every run (tests; a process never needs it: versions are checked on each ask)."""
        with self._lock:
            for run in self._held.values():
                run.grew = None
            self._held.clear()
            self._sizes.clear()
            self.changes.clear()
