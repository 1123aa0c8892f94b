"""The loaders' source of a run mirrored from object storage (:class:`RemoteSource`).

:class:`RemoteSource` reads the run as ``loaders.sources.DirSource`` reads a folder, its
tables brought up to date first (:mod:`loaders.remote.sync`); it fetches an episode folder
(records, frame strips, observation) the first time a page asks for one of its frames or
records, or of a packed run the members asked for, by range (:mod:`loaders.remote.packs`);
and checks the run's files against one listing of ``episodes/``
(:mod:`loaders.remote.file_checks`) instead of stat'ing them.
"""
from __future__ import annotations

import functools
import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from loaders.remote import prefetch
from loaders.remote.downloads import NOT_FETCHED, download, note_refused, refused_problems, settle, with_refusals
from loaders.remote.file_checks import ListedFileCheck
from loaders.remote.mirror import RUN_MARK, read_mark, safe_rel
from loaders.remote.packs import fetch_members, remote_pack
from loaders.remote.sync import fetch_lazy, fetch_table, sync_run
from loaders.remote.write_back import write_back_later
from loaders.sources import DirSource
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError
from mfm.objectstore import StoreError, filesystem
from mfm.run_reader import LAZY_TABLES, RunContents, TableRead
from mfm.schema import CLOSED_STATUSES, FRAMES_PER_CHUNK, MANIFEST, IndexRow, frame_chunk

if TYPE_CHECKING:
    from loaders.columns import Columns


class RemoteSource(DirSource):
    """A run mirrored from object storage: :class:`DirSource` on the mirror, each episode
    folder fetched the first time it is read."""

    def __init__(self, path: Path) -> None:
        """The mirrored run at ``path`` (its URL read from the mirror's mark)."""
        super().__init__(path)
        self.url = str(read_mark(path / RUN_MARK).get("url", ""))
        self._fetch_lock = threading.Lock()
        if any(p.file == MANIFEST for p in refused_problems(path)):
            self.format = "mfm"

    def episode_count(self) -> int:
        """The rows of the run's index without reading the run: the lines of its
        ``index.jsonl`` in the mirror, else the count its columnar copy or its folder's
        manifest gave (0 when neither is known)."""
        try:
            with open(self.path / "index.jsonl", "rb") as f:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            got = read_mark(self.path / RUN_MARK).get("episodes")
            return got if isinstance(got, int) else 0

    def _served(self) -> tuple[Columns | None, set[str]]:
        """The columnar copy in the mirror and the tables to read from it (their columns
        were made from the objects the last listing showed)."""
        from loaders.columns import load

        served = set(read_mark(self.path / RUN_MARK).get("served", []))
        cols = load(self.path) if served else None
        return cols, served if cols is not None else set()

    def _read(self, cols: Columns | None, served: set[str], path: Path, name: str) -> TableRead:
        """One table: from the columnar copy when it serves it, else the JSONL in the mirror
        (fetched now if the copy's part cannot be read)."""
        from loaders.cachedread import read_one_table_cached

        if cols is not None and name in served:
            try:
                return cols.table(name)
            except Exception:  # noqa: BLE001 - a damaged part: the table is read from its file
                fetch_table(self.path, name)
        elif name in LAZY_TABLES:
            fetch_lazy(self.path, name)
        return read_one_table_cached(path, name)

    def contents(self) -> RunContents:
        """The run brought up to date (:func:`~loaders.remote.sync.sync_run`) and read as on disk,
        its tables from the columnar copy where it serves them, its files checked against a
        listing; a closed run without a usable copy has one written back; refusals joined."""
        from mfm.validate import validate

        sync_run(self.path, deferred=False)
        cols, served = self._served()
        c = validate(self.path, read=functools.partial(self._read, cols, served),
                     files=functools.partial(ListedFileCheck, cols=cols), lazy=True)
        if cols is None and c.manifest is not None and c.manifest.status in CLOSED_STATUSES:
            write_back_later(self.path)
        return with_refusals(c, self.path)

    def read_table(self, path: Path, name: str) -> TableRead:
        """One table (a lazy one fetched first if the bucket holds a newer one)."""
        cols, served = self._served()
        return self._read(cols, served, path, name)

    def fetch_episode(self, ref: IndexRow) -> None:
        """Download an episode folder into the mirror unless it is there (folders never
        change): its objects settled (:func:`settle`), fetched into a ``.part`` folder (removed
        whatever happens) renamed into place; the objects not fetched are recorded."""
        rel = ref.path
        dest = self.path / rel
        if dest.is_dir() or not safe_rel(rel):
            return
        fs, path = filesystem(self.url)
        with self._fetch_lock:
            if dest.is_dir():
                return
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
            try:
                found = fs.find(f"{path}/{rel}", detail=True)
                keep, refused = settle({k[len(path) + len(rel) + 2:]: info for k, info in found.items()})
                if tmp.exists():
                    shutil.rmtree(tmp)
                failed = download(fs, [(f"{path}/{rel}/{sub}", sub) for sub in keep], tmp)
                refused.update(failed)
                if keep and not any(why.startswith(NOT_FETCHED) for why in failed.values()):
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp, dest)
                note_refused(self.path, "episodes", {f"{rel}/{k}": why for k, why in refused.items()
                                                      if not why.startswith(NOT_FETCHED)}, replace=False)
            except (OSError, StoreError):
                return
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)

    def _refused(self, rel: str) -> str | None:
        """Why the object at ``rel`` was not fetched, if it was refused."""
        return next((p.message for p in refused_problems(self.path) if p.file == rel), None)

    def _from_pack(self, rels: list[str]) -> bool:
        """Bring members of the run's pack in the bucket into the mirror's episode folders,
        read by one range covering them all (:func:`fetch_members`); False when the run's
        pack is not read by ranges (it has none, or it is in the mirror whole)."""
        pack = remote_pack(self.path)
        if pack is None:
            return False
        with self._fetch_lock:
            fetch_members(self.path, pack, rels)
        return True

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        """An episode's record files, brought into the mirror first (by range from a pack, else
        its episode folder)."""
        if not self._from_pack([f"{ref.path}/{n}" for n in ("action.json", "outcome.json", "state/state.json")]):
            self.fetch_episode(ref)
        return super().episode_record(ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        """An episode's observation image, brought into the mirror first; one refused is a
        ``FrameError`` saying why."""
        if not self._from_pack([ref.image] if ref.image else []):
            self.fetch_episode(ref)
        try:
            return super().observation(ref)
        except FrameError:
            why = self._refused(ref.image) if ref.image else None
            if why is None:
                raise
            raise FrameError(f"{ref.image}: {why}") from None

    def _strip(self, ref: IndexRow, frame: int) -> None:
        """Bring the strip holding frame ``frame`` of an episode (by range from a pack, else
        its episode folder) into the mirror."""
        if not self._from_pack([frame_chunk(ref.path, frame)[0]]):
            self.fetch_episode(ref)

    def prefetch(self, index: EpisodeIndex, ref: IndexRow) -> None:
        """Bring, in the background, the strips a step to either side of an episode shows
        (the previous episode's last strip, the next one's first): what the Timeline's next
        click asks for. Done for packed runs read by ranges (a strip is one request; an
        episode folder would be a listing and a GET per file). Bounded
        (:func:`loaders.remote.prefetch.ask`: :data:`~loaders.remote.prefetch.PREFETCH_WORKERS`
        threads, at most :data:`~loaders.remote.prefetch.PREFETCH_QUEUE` waiting, more are
        dropped), each strip asked for once per process; a failure is left for the click
        itself to meet."""
        before = index.episode_at(ref.first_step) if ref.first_step > 0 else None
        after = index.episode_at(ref.last_step + 1)
        for near, frame in ((before, -1), (after, 0)):
            if near is None or not near.frames:
                continue
            frame = near.frames - 1 if frame < 0 else 0
            prefetch.ask((str(self.path), near.path, frame // FRAMES_PER_CHUNK),
                         functools.partial(self._strip, near, frame))

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        """The frame of ``step``, its strip brought into the mirror first (and, for a packed run,
        its neighbours prefetched); one refused is a ``FrameError`` saying why."""
        ref = index.episode_at(step)
        if ref is not None:
            self._strip(ref, step - ref.first_step - 1)
            if prefetch.prefetching() and remote_pack(self.path) is not None:
                self.prefetch(index, ref)
        try:
            return super().step_frame(index, step)
        except FrameError:
            rel = frame_chunk(ref.path, step - ref.first_step - 1)[0] if ref is not None else ""
            why = self._refused(rel)
            if why is None:
                raise
            raise FrameError(f"{rel}: {why}") from None
