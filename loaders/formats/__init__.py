"""Recognise a run's format and pick the source that reads it."""
from __future__ import annotations

from pathlib import Path

from loaders.sources import DirSource, Source

RUN_MARK = ".mfm-remote.json"
"""A run mirrored from object storage (``loaders.remote``) holds this file."""


def detect(path: Path) -> str | None:
    """``mfm`` (ours or an original MFM run folder), ``mfm-export``, ``crafter-recorder``, or
    None when ``path`` holds no run. Looks only at file names, never at content."""
    if path.is_file():
        return "crafter-recorder" if path.suffix == ".npz" else None
    if not path.is_dir():
        return None
    if (path / "run.json").is_file() or (path / "index.jsonl").is_file():
        return "mfm"
    if (path / "data.json").is_file():
        return "mfm-export"
    if (path / "stats.jsonl").is_file() and any(path.glob("*.npz")):
        return "crafter-recorder"
    if (path / RUN_MARK).is_file():
        return "mfm"  # a run mirrored from a bucket whose manifest was refused (``loaders.remote``)
    return None


def source_for(path: Path) -> Source:
    """The source reading the run at ``path`` (our format when nothing else matches)."""
    fmt = detect(path)
    if fmt == "mfm-export":
        from loaders.formats.mfm_export import ExportSource

        return ExportSource(path)
    if fmt == "crafter-recorder" and path.is_file():
        from loaders.formats.crafter_recorder import RecorderSource

        return RecorderSource(path)
    if (path / RUN_MARK).is_file():
        from loaders.remote import RemoteSource

        return RemoteSource(path)
    return DirSource(path)
