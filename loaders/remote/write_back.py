"""The columnar copy of a closed mirrored run written back into the bucket beside it (derived data).

:func:`write_back_later` writes it on a background thread from the files this mirror
fetched, when every table's local copy is the object the last listing showed and this reader
may write (``loaders.remote.mirror.write_back_allowed``: ``MFM_WRITE_BACK`` not off, no
earlier write refused). Anything going wrong leaves the bucket as it was.
"""
from __future__ import annotations

import threading
from pathlib import Path

from loaders.remote.file_checks import ListedFileCheck
from loaders.remote.mirror import RUN_MARK, read_mark, refused_write, write_back_allowed
from loaders.remote.sync import fetch_lazy
from mfm.objectstore import COLUMNS, StoreError, is_url, join, put_object
from mfm.run_reader import LAZY_TABLES
from mfm.schema import TABLES

_lock = threading.Lock()
_writing: set[str] = set()


def write_back_later(local: Path) -> None:
    """Write the columnar copy of a closed mirrored run that has none usable into the bucket
    beside it, on a background thread, from the files this mirror fetched (only when every
    table's local copy is the object the last listing showed) and when this reader may
    (:func:`write_back_allowed`). A refused write is remembered; anything else going wrong
    leaves the bucket as it was (the copy is derived)."""
    from loaders import tablecache

    if not write_back_allowed(local / RUN_MARK):
        return
    with _lock:
        if str(local) in _writing:
            return
        _writing.add(str(local))

    def work() -> None:
        """Write the copy back, then let a later call try again."""
        try:
            write_back(local)
        finally:
            with _lock:
                _writing.discard(str(local))

    t = threading.Thread(target=work, name="mfm-write-back", daemon=False)
    with tablecache._pending_lock:
        tablecache._pending.append(t)
    t.start()


def write_back(local: Path) -> bool:
    """:func:`write_back_later`'s work, done now; True if a copy was written."""
    from loaders.columns import build, load

    mark = read_mark(local / RUN_MARK)
    url, listed, have = mark.get("url"), mark.get("listed", {}), mark.get("files", {})
    if not isinstance(url, str) or not is_url(url) or mark.get("served"):
        return False
    stale = mark.get("columns")
    if stale is not None and load(local) is None:
        return False
    tables = [n for n in TABLES if n in listed]
    for name in LAZY_TABLES:
        if name in tables and have.get(name) != listed[name]:
            fetch_lazy(local, name)
            have = read_mark(local / RUN_MARK).get("files", {})
    if any(have.get(n) != listed[n] for n in tables) or have.get("run.json") != listed.get("run.json"):
        return False
    try:
        data = build(local, {**have, **listed}, files=ListedFileCheck)
        if data is None:
            return False
        put_object(join(url, COLUMNS), data, if_match=stale[1] if stale else None, if_absent=stale is None)
    except StoreError as e:
        refused_write(local / RUN_MARK, e)
        return False
    except Exception:  # noqa: BLE001 - derived data: the bucket stays as it was
        return False
    return True
