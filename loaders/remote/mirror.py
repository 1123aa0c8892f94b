"""The mirror of a bucket's runs on this machine: where it is, the marks it keeps, which run a folder is.

A mirror is a folder under the user's cache (``$MFM_REMOTE_DIR``, else
``~/.cache/mfm/remote/<hash of the URL>/``) laid out as the bucket is. Its top folder holds
:data:`ROOT_MARK` (the URL it mirrors), each run :data:`RUN_MARK` (its URL, the stamp of each
object fetched, the last listing); :func:`read_mark` and :func:`write_mark` read and replace
them. Object keys become local paths only when :func:`safe_rel` allows (a hostile bucket
cannot make the mirror write outside its folder). :func:`fresh` says whether something was
looked at within its time to live (:data:`TTL`, :data:`ROOT_TTL`).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from mfm.objectstore import cache_root, is_url, normal_url, url_hash

RUN_MARK = ".mfm-remote.json"
"""A run mirrored from object storage holds this file (its URL and what was fetched)."""
ROOT_MARK = ".mfm-remote-root.json"
"""In a mirror's top folder: the URL it mirrors."""
TTL = 5.0
"""Seconds a run's file list is trusted before the bucket is asked again (a live run moves on)."""
ROOT_TTL = 30.0
"""Seconds a runs root's listing is trusted (new runs appear within this)."""
WRITE_BACK_OFF = ("0", "off", "no", "false", "none")
"""Values of ``MFM_WRITE_BACK`` (and ``MFM_PREFETCH``) that turn it off."""
_seen: dict[str, float] = {}
_lock = threading.Lock()


def mirror_dir(url: str) -> Path:
    """The local folder that mirrors ``url``."""
    base = os.environ.get("MFM_REMOTE_DIR", "").strip()
    return (Path(base).expanduser() if base else cache_root() / "remote") / url_hash(url)


def safe_rel(rel: str) -> bool:
    """Whether an object key (relative to a run or root) may become a local path."""
    parts = rel.split("/")
    return bool(rel) and len(rel) < 1000 and all(
        p and p not in (".", "..") and "\\" not in p and "\0" not in p and len(p.encode()) <= 255 for p in parts)


def fresh(key: str, force: bool, ttl: float = TTL) -> bool:
    """Whether ``key`` was looked at less than ``ttl`` seconds ago (and marks it looked at)."""
    now = time.monotonic()
    with _lock:
        if not force and now - _seen.get(key, -ttl) < ttl:
            return True
        _seen[key] = now
        return False


def stamp(info: dict) -> list:
    """What says an object changed: its size and ETag (or time, where a store has no ETag)."""
    return [int(info.get("size") or 0), str(info.get("ETag") or info.get("LastModified") or info.get("mtime") or "")]


def read_mark(path: Path) -> dict:
    """A mark file of the mirror (JSON object); empty when it is missing or unreadable."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return obj if isinstance(obj, dict) else {}
    except (OSError, ValueError):
        return {}


def write_mark(path: Path, obj: dict) -> None:
    """Replace a mark file of the mirror at once (through a temporary file beside it)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def write_back_allowed(mark_file: Path) -> bool:
    """Whether this reader may write derived objects (a columnar copy, a manifest) into the
    bucket: ``MFM_WRITE_BACK`` is not ``0``/``off``, and no earlier write there was refused
    (remembered in the mirror's ``mark_file``)."""
    if os.environ.get("MFM_WRITE_BACK", "").strip().lower() in WRITE_BACK_OFF:
        return False
    return read_mark(mark_file).get("write_back") != "denied"


def refused_write(mark_file: Path, e: Exception) -> None:
    """Remember that the bucket refused a write (no permission): not tried again."""
    if any(code in str(e) for code in ("AccessDenied", "Forbidden", "Permission", "NotImplemented")):
        m = read_mark(mark_file)
        m["write_back"] = "denied"
        write_mark(mark_file, m)


def mirrored_url(local: Path) -> str | None:
    """The URL a mirror's top folder stands for, None for any other folder."""
    url = read_mark(local / ROOT_MARK).get("url")
    return url if isinstance(url, str) and is_url(url) and mirror_dir(url) == local else None


def run_identity(path: Path) -> str:
    """What one run is, however it was reached: for a run mirrored from a bucket, its URL
    written one way (``normal_url``; keys differing in case are different runs), so the
    mirrors of a root and of the run itself are one run; else its path with symlinks resolved."""
    path = Path(path)
    url = read_mark(path / RUN_MARK).get("url") if (path / RUN_MARK).is_file() else None
    if isinstance(url, str) and is_url(url):
        return normal_url(url)
    return str(path.resolve())


def is_mirrored(local: Path) -> bool:
    """Whether a folder is a run mirrored from object storage."""
    return (local / RUN_MARK).is_file()
