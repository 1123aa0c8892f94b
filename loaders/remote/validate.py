"""``mfm validate`` of a run in object storage (:func:`validate_remote`): the run mirrored whole, then validated.

Its tables are read as on disk, its files checked against a listing of the bucket
(:mod:`loaders.remote.file_checks`), and with ``frames`` every episode file fetched
(:func:`fetch_all`; a packed run's zip whole) and decoded.
"""
from __future__ import annotations

from pathlib import Path

from loaders.remote.downloads import download, note_refused, settle, with_refusals
from loaders.remote.file_checks import ListedFileCheck
from loaders.remote.listing import mirror_root
from loaders.remote.mirror import RUN_MARK, is_mirrored, read_mark
from loaders.remote.sync import fetch_lazy, sync_run
from mfm.objectstore import filesystem
from mfm.run_reader import LAZY_TABLES, RunContents


def fetch_all(local: Path) -> None:
    """Fetch every episode file of a mirrored run not fetched yet (``--frames`` checks); the
    objects not fetched are recorded (:func:`settle`)."""
    url = str(read_mark(local / RUN_MARK).get("url", ""))
    fs, path = filesystem(url)
    fs.invalidate_cache(f"{path}/episodes")
    try:
        found = fs.find(f"{path}/episodes", detail=True)
    except FileNotFoundError:
        return
    keep, refused = settle({k[len(path) + 1:]: info for k, info in found.items()})
    refused.update(download(fs, [(f"{path}/{r}", r) for r in keep if not (local / r).is_file()], local))
    note_refused(local, "frames", refused)


def validate_remote(url: str, frames: bool = False) -> RunContents:
    """``mfm validate`` of a run in object storage: its tables read as on disk, its files
    checked against a listing of the bucket, and with ``frames`` every frame fetched and decoded."""
    from loaders.cachedread import read_one_table_fast
    from mfm.validate import validate

    local = mirror_root(url, force=True)
    if not is_mirrored(local):
        raise ValueError(f"{url}: no run there (no run.json or index.jsonl)")
    sync_run(local, force=True, columns=False)
    for name in LAZY_TABLES:
        fetch_lazy(local, name)
    if frames:
        fetch_all(local)
    return with_refusals(validate(local, frames, read=read_one_table_fast, files=ListedFileCheck), local)
