"""The registry of sources: which source reads a folder or file, and its format.

Each entry of :data:`READERS` says what it reads (a test on file names, never on content) and
which :class:`~loaders.sources.Source` reads it; the first entry whose test holds wins. The
sources themselves (our folders, exported runs, Crafter recordings, runs mirrored from a
bucket) sit below this module and know nothing of each other."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from loaders.formats.crafter_recorder import RecorderSource
from loaders.formats.mfm_export import ExportSource
from loaders.remote.mirror import RUN_MARK
from loaders.remote.source import RemoteSource
from loaders.sources import DirSource, Source


@dataclass(frozen=True)
class Reader:
    """One kind of run: its format, the test on a path, and the source that reads it."""

    format: str
    reads: Callable[[Path], bool]
    source: Callable[[Path], Source]


def _recording(path: Path) -> bool:
    return path.is_file() and path.suffix == ".npz"


def _ours(path: Path) -> bool:
    return path.is_dir() and ((path / "run.json").is_file() or (path / "index.jsonl").is_file())


def _mirrored(path: Path) -> bool:
    return path.is_dir() and (path / RUN_MARK).is_file()


def _export(path: Path) -> bool:
    return path.is_dir() and (path / "data.json").is_file()


def _recorder_folder(path: Path) -> bool:
    return path.is_dir() and (path / "stats.jsonl").is_file() and any(path.glob("*.npz"))


def _source_of_ours(path: Path) -> Source:
    """Our folder, or a mirror of one in a bucket (which fetches episodes as they are read)."""
    return RemoteSource(path) if _mirrored(path) else DirSource(path)


READERS: tuple[Reader, ...] = (
    Reader("crafter-recorder", _recording, RecorderSource),
    Reader("mfm", _ours, _source_of_ours),
    Reader("mfm-export", _export, ExportSource),
    Reader("crafter-recorder", _recorder_folder, DirSource),
    Reader("mfm", _mirrored, RemoteSource),  # a mirrored run whose manifest was refused (loaders.remote)
)
"""In order of precedence. A folder of Crafter recordings is a runs root, not a run:
``loaders.run.find_runs`` gives one run per recording in it."""


def reader_of(path: Path) -> Reader | None:
    """The first entry of :data:`READERS` that reads ``path``, or None."""
    return next((r for r in READERS if r.reads(path)), None)


def detect(path: Path) -> str | None:
    """``mfm`` (ours or an original MFM run folder), ``mfm-export``, ``crafter-recorder``, or
    None when ``path`` holds no run. Looks only at file names, never at content."""
    r = reader_of(path)
    return r.format if r else None


def source_for(path: Path) -> Source:
    """The source reading the run at ``path`` (our format when nothing else matches)."""
    r = reader_of(path)
    return r.source(path) if r else DirSource(path)
