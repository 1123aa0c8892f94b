"""Opening a mirrored run: its tables, logs and ``mine/`` brought up to date (:func:`sync_run`), a table when asked.

:func:`sync_run` lists the run's folder (or takes the listing :mod:`loaders.remote.listing`
just made) and reads its columnar copy (``loaders.columns``) for every table whose size and
ETag are those it was made from; other tables, ``logs.txt`` and ``mine/`` are fetched, each
file again only when its size or ETag changed; a lazy table (``mfm.run_reader.LAZY_TABLES``)
only when it is asked for (:func:`fetch_lazy`); a table whose columns cannot be used as
JSONL (:func:`fetch_table`). A run's files are looked at again at most every
``loaders.remote.mirror.TTL`` seconds, so a live run in the bucket moves on in the dashboard.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from loaders.remote.downloads import clean_parts, download, note_refused, save_bytes, settle, sync_files
from loaders.remote.listing import entry_listing, recent_entry, recent_listing
from loaders.remote.mirror import RUN_MARK, fresh, read_mark, safe_rel, stamp, write_mark
from mfm.memory.packed import PACK
from mfm.objectstore import COLUMNS, ROOT_MANIFEST, StoreError, filesystem, folder_entries, is_url, oversize
from mfm.run_reader import LAZY_TABLES

if TYPE_CHECKING:
    from loaders.columns import Columns

_lazy_lock = threading.Lock()


def _columns(fs, path: str, local: Path, info: dict | None, mark: dict) -> Columns | None:
    """The run's columnar copy (``loaders.columns``) in the mirror, fetched when the bucket's
    (``info``, its listing entry) differs from the one kept; None when the bucket has none,
    or it cannot be fetched or used."""
    from loaders.columns import load

    if info is None:
        if mark.pop("columns", None) is not None:
            (local / COLUMNS).unlink(missing_ok=True)
        return None
    want = stamp(info)
    if mark.get("columns") != want or not (local / COLUMNS).is_file():
        why = oversize(COLUMNS, int(info.get("size") or 0))
        if why is not None or download(fs, [(f"{path}/{COLUMNS}", COLUMNS)], local):
            mark.pop("columns", None)
            return None
        mark["columns"] = want
    return load(local)


def sync_run(local: Path, force: bool = False, columns: bool = True, deferred: bool = True) -> None:
    """Bring a mirrored run's tables, logs and ``mine/`` up to date (not its episodes), from
    one listing of its folder: a table whose columnar copy (``loaders.columns``) was made
    from the very object the listing shows (size and ETag) is not fetched (its columns are
    read instead), nor the small files the copy holds; every other file is fetched when its
    size or ETag changed. ``columns=False`` fetches every table as JSONL (``mfm validate``).

    A closed run just brought up to date from its folder's manifest (:func:`mirror_root`) is
    left as it is while only its manifest is needed (``deferred``: opening a page of runs);
    its tables are brought when they are read (:meth:`RemoteSource.contents`), with the
    manifest entry's stamps standing for the listing of its folder."""
    if not force and deferred and recent_entry(local) is not None:
        return
    if fresh(f"run:{local}", force):
        return
    mark = read_mark(local / RUN_MARK)
    url = mark.get("url")
    if not isinstance(url, str) or not is_url(url):
        return
    fs, path = filesystem(url)
    clean_parts(local)
    try:
        listed = None if force else (recent_listing(path) or entry_listing(local))
        files, dirs = listed if listed is not None else folder_entries(fs, path)
        files = {n: i for n, i in files.items() if n not in (ROOT_MANIFEST,)}
        cols = _columns(fs, path, local, files.pop(COLUMNS, None), mark) if columns else None
        stamps = {n: stamp(i) for n, i in files.items()}
        served: set[str] = set()
        small = None
        if cols is not None:
            served = {n for n, st in cols.tables().items() if stamps.get(n) == list(st)}
            small = cols.small_files(stamps.get("run.json"))
            if small is not None and any(rel in stamps and stamps[rel] != list(st) for rel, (st, _) in small.items()):
                small = None
        mark["listed"] = stamps
        mark["served"] = sorted(served)
        if "index.jsonl" in served and cols.rows("index.jsonl") is not None:
            mark["episodes"] = cols.rows("index.jsonl")
        have = mark.setdefault("files", {})
        infos = {n: i for n, i in files.items() if n not in served and not (small and n in small)
                 and not (columns and n == PACK)}
        covered = {rel.split("/")[0] for rel in small} if small else set()
        for rel, (st, data) in sorted((small or {}).items()):
            if safe_rel(rel) and (have.get(rel) != list(st) or not (local / rel).is_file()):
                (local / rel).parent.mkdir(parents=True, exist_ok=True)
                save_bytes(local, rel, data)
                have[rel] = list(st)
        for d in dirs:
            if d != "episodes" and d not in covered and not d.startswith(".") and safe_rel(d):
                fs.invalidate_cache(f"{path}/{d}")
                for key, info in fs.find(f"{path}/{d}", detail=True).items():
                    infos[key[len(path) + 1:]] = info
        keep, refused = settle(infos, frozenset(d for d in dirs if safe_rel(d)))
        mark["lazy"] = {rel: stamp(keep.pop(rel)) for rel in LAZY_TABLES if rel in keep}
        refused.update(sync_files(fs, path, local, keep, mark))
        for name in served:
            if have.get(name) != stamps[name] and (have.pop(name, None) is not None or (local / name).exists()):
                (local / name).unlink(missing_ok=True)
    except (OSError, StoreError) as e:
        raise StoreError(f"{url}: {e}") from None
    write_mark(local / RUN_MARK, mark)
    note_refused(local, "run", refused)


def fetch_table(local: Path, name: str) -> None:
    """Fetch a table of a mirrored run as JSONL (one whose columns could not be used), if
    the last listing showed it."""
    mark = read_mark(local / RUN_MARK)
    url = mark.get("url")
    want = mark.get("listed", {}).get(name)
    if want is None or not isinstance(url, str) or not is_url(url):
        return
    fs, path = filesystem(url)
    with _lazy_lock:
        failed = download(fs, [(f"{path}/{name}", name)], local)
        if not failed:
            m = read_mark(local / RUN_MARK)
            m.setdefault("files", {})[name] = want
            m["served"] = [n for n in m.get("served", []) if n != name]
            write_mark(local / RUN_MARK, m)


def fetch_lazy(local: Path, name: str) -> None:
    """Fetch a lazy table of a mirrored run if the bucket held a newer one at the last
    :func:`sync_run` (nothing when the run has none)."""
    with _lazy_lock:
        mark = read_mark(local / RUN_MARK)
        want = mark.get("lazy", {}).get(name)
        url = mark.get("url")
        if want is None or mark.get("files", {}).get(name) == want or not isinstance(url, str) or not is_url(url):
            return
        fs, path = filesystem(url)
        try:
            failed = download(fs, [(f"{path}/{name}", name)], local)
        except (OSError, StoreError) as e:
            raise StoreError(f"{url}: {e}") from None
        note_refused(local, "lazy", failed)
        if not failed:
            mark.setdefault("files", {})[name] = want
            write_mark(local / RUN_MARK, mark)
