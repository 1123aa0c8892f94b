"""Following runs that are being written: what changed, and when a page must draw again.

A run being written grows by whole episodes: its writer appends lines to some tables and
rewrites ``run.json``. Every run, being written or not, is held by the one registry of runs
(``loaders.run.REGISTRY``, :mod:`loaders.registry`): when a folder's files change it builds the
run's new version, and while the manifest says ``running`` it reads it through
:class:`~loaders.sources.LiveSource`, so that only the tables whose file changed (size or
modification time) are parsed again and the DataFrames of the others are handed over to the
new version unchanged (the same objects, ``Run.reuse_frames``); the per-episode file checks of
``mfm validate`` wait until the run has stopped. Once the manifest says anything else the run
is read the ordinary way, with every check.

A page that follows runs asks :func:`loaders.run.open_run` for the run at a path as it is now;
``REGISTRY.changes`` says what the last new version of each run changed. No Streamlit here.
"""
from __future__ import annotations

from pathlib import Path

from loaders.registry import Change
from loaders.run import Run
from loaders.sources import LiveSource, Stat, file_stat
from mfm.schema import MANIFEST, TABLES

__all__ = ["Change", "LiveSource", "Stat", "changed_files", "file_stat", "needs_refresh", "table_stats",
           "watch_key"]


def table_stats(run_dir: Path) -> dict[str, Stat]:
    """The stat of ``run.json`` and of every table file of a run folder."""
    return {name: file_stat(Path(run_dir) / name) for name in (MANIFEST, *TABLES)}


def changed_files(before: dict[str, Stat], after: dict[str, Stat]) -> list[str]:
    """The files (``run.json`` and table files) whose size or modification time differ."""
    return [name for name in after if before.get(name) != after[name]]


def watch_key(run: Run) -> tuple[tuple, str]:
    """What a page showed of a run: its file signature and its status."""
    return run.signature, run.status


def needs_refresh(shown: dict[str, tuple[tuple, str]], now: dict[str, tuple[tuple, str]]) -> list[str]:
    """The runs (by key) whose files or status differ from what the page shows."""
    return [k for k, v in now.items() if shown.get(k) != v]
