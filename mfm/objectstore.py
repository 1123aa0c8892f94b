"""Runs roots in object storage: ``s3://bucket/prefix`` (any fsspec URL), written and read.

A run is still written to a local folder, its *staging* copy under the user's cache
(:func:`staging_dir`), and an :class:`Uploader` copies it to the bucket: every
``MFM_SYNC_SECONDS`` (60 by default) while the run goes on, and once more when it closes,
after which the staging copy is removed. Object stores have no append, so a sync uploads
what changed since the last one in commit order (docs/scale.md, "Object storage"):

1. the episode folders that index rows read since the last sync name (each is complete on
   disk before its row is appended, and never changes after), in parallel;
2. the other files (``mine/``, ``logs.txt``, ...), whole, if their size or time changed;
3. the tables, whole, cut after their last complete line; ``index.jsonl`` cut at the size
   it had *before* step 1 looked for episodes, so every row in the bucket names a folder
   that is there;
4. ``run.json`` last.

So the bucket always holds a run that opens, at most one sync interval behind the staging
copy. A killed run process loses nothing: its staging copy stays (``mfm import STAGING
s3://...`` uploads it), and the bucket shows the run as it was at the last sync, its
manifest saying ``running``, as a local run killed at that moment would.

The core imports ``fsspec`` only here and only when a URL is used (the ``s3`` extra:
``s3fs``); credentials, profiles and endpoints are fsspec's and botocore's: the usual
``AWS_*`` variables and ``~/.aws`` files, ``AWS_ENDPOINT_URL`` for an S3-compatible store.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYNC_SECONDS = 60.0
"""Default seconds between two uploads of a running run (``MFM_SYNC_SECONDS``)."""
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
TABLE_ORDER = ("steps.jsonl", "turns.jsonl", "grid.jsonl", "seen.jsonl", "milestones.jsonl", "lives.jsonl",
               "memory_writes.jsonl", "index.jsonl")
"""Tables in upload order: the index (the commit marker) last, so an episode's trace, grid
and seen rows reach the bucket no later than its index row."""


class StoreError(Exception):
    """Object storage could not be used: no extra installed, a bad URL, an access error."""


MiB = 1 << 20
OBJECT_LIMITS: dict[str, int] = {
    "manifest": 16 * MiB, "table": 1 << 30, "log": 256 * MiB, "memory": 16 * MiB, "record": 16 * MiB,
    "image": 64 * MiB, "pack": 4 << 30, "export": 256 * MiB, "recording": 2 << 30, "other": 16 * MiB,
}
"""The largest object of each kind (:func:`object_kind`) a reader fetches; a larger one is
refused before any byte of it is downloaded. Each is far above what a run writes: a
36,000-step run has ~9 MB of tables, a manifest of a few kB, memory files of a few kB, frame
strips of ~100 kB (the decoder refuses images over 16 Mpixels anyway), episode records under
``mfm.boundary.MAX_JSON_FILE_BYTES`` (16 MiB, the readers' own bound); an export's
``data.json`` and a recording have their readers' bounds (256 MiB, 2 GiB)."""
KIND_NAMES = {"manifest": "a run manifest", "table": "a table", "log": "a log", "memory": "an agent-memory file",
              "record": "an episode record", "image": "an image or frame strip", "pack": "a packed run",
              "export": "an MFM export", "recording": "a Crafter recording", "other": "a run file"}


def object_kind(rel: str) -> str:
    """The kind of a run's file by its path in the run (``mine/GUIDE.md``: memory), for
    :data:`OBJECT_LIMITS`; a copy under ``inherited/`` has the kinds of a run's files."""
    parts = rel.strip("/").split("/")
    name = parts[-1]
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if name == "run.json":
        return "manifest"
    if suffix == "jsonl":
        return "table"
    if "mine" in parts[:-1]:
        return "memory"
    if name == "logs.txt" or suffix == "log":
        return "log"
    if suffix in ("webp", "png", "jpg", "jpeg"):
        return "image"
    if name == "episodes.zip":
        return "pack"
    if name == "data.json":
        return "export"
    if suffix == "npz":
        return "recording"
    return "record" if suffix == "json" else "other"


def oversize(rel: str, size: int) -> str | None:
    """Why an object of ``size`` bytes at ``rel`` (its path in the run) is not fetched, or
    None when its size is within its kind's bound."""
    kind = object_kind(rel)
    limit = OBJECT_LIMITS[kind]
    if size <= limit:
        return None
    return f"{size:,} bytes in the bucket, over the {limit / MiB:g} MiB bound for {KIND_NAMES[kind]}: not fetched"


def is_url(place: str | Path) -> bool:
    """Whether a runs root or run is a URL of object storage (``file://`` is a local path)."""
    return isinstance(place, str) and bool(_SCHEME.match(place)) and not place.startswith("file://")


def normal_url(url: str) -> str:
    """A URL of object storage with its path written one way, as a folder path: no trailing,
    repeated or ``.`` segments, ``..`` taken back (``s3://b/root/./x/`` and ``s3://b//root/x``
    are ``s3://b/root/x``). Letter case is kept: keys differing in case are different keys."""
    m = _SCHEME.match(url)
    if m is None:
        return url
    return url[:m.end()] + posixpath.normpath("/" + url[m.end():]).lstrip("/")


def join(url: str, *parts: str) -> str:
    """``url/part/part`` with single slashes."""
    return "/".join([url.rstrip("/"), *(p.strip("/") for p in parts if p)])


def name_of(url: str) -> str:
    """The last segment of a URL (a run's folder name)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def parent_of(url: str) -> str:
    """A URL without its last segment (the runs root of a run)."""
    return url.rstrip("/").rsplit("/", 1)[0]


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of a URL; StoreError if it cannot be used."""
    try:
        import fsspec
    except ImportError:
        raise StoreError(f'{url}: object storage needs the s3 extra: pip install "mfm[s3]"') from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:
        raise StoreError(f"{url}: {e}") from None
    return fs, path.rstrip("/")


CACHE_OFF = ("off", "0", "no", "false", "none")
"""Values of ``MFM_CACHE_DIR`` that turn the table cache off (``loaders.tablecache``)."""


def cache_root() -> Path:
    """The user's mfm cache folder (``$MFM_CACHE_DIR``, else ``$XDG_CACHE_HOME/mfm``, else
    ``~/.cache/mfm``): the table cache's (``loaders.tablecache.cache_dir``), and staged runs,
    mirrors and sweep logs in sub-folders of it, these even when the table cache is turned
    off (``MFM_CACHE_DIR=off``)."""
    v = os.environ.get("MFM_CACHE_DIR", "").strip()
    if v and v.lower() not in CACHE_OFF:
        return Path(v).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "mfm"


def url_hash(url: str) -> str:
    """A short name for a URL, for local folders that stand for it."""
    return hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def staging_dir(url: str) -> Path:
    """Where a run bound for ``url`` is written before it is uploaded."""
    base = os.environ.get("MFM_STAGING_DIR", "").strip()
    root = Path(base).expanduser() if base else cache_root() / "staging"
    return root / url_hash(parent_of(url)) / name_of(url)


def read_bytes(url: str) -> bytes | None:
    """An object's bytes, None if there is no such object; StoreError, before it is
    downloaded, if it is larger than its kind's bound (:func:`oversize`, by its name)."""
    fs, path = filesystem(url)
    try:
        why = oversize(name_of(url), int(fs.size(path) or 0))
        if why is not None:
            raise StoreError(f"{url}: {why}")
        return fs.cat_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None


def exists(url: str) -> bool:
    """Whether an object is there (asked afresh, not from a listing cache)."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
    try:
        return bool(fs.exists(path))
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None


def write_bytes(url: str, data: bytes) -> None:
    """Put an object (a whole object replaces the old one at once)."""
    fs, path = filesystem(url)
    try:
        fs.pipe_file(path, data)
    except OSError as e:
        raise StoreError(f"{url}: cannot write: {e}") from None


def is_empty(url: str) -> bool:
    """Whether no object lies under ``url/``."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
    try:
        return not fs.ls(path, detail=False)
    except FileNotFoundError:
        return True


def move_tree(src: str, dest: str) -> None:
    """Move every object under ``src/`` to ``dest/`` (copy, then delete)."""
    fs, spath = filesystem(src)
    _, dpath = filesystem(dest)
    fs.invalidate_cache(spath)
    keys = fs.find(spath)
    if keys:
        fs.copy(keys, [dpath + k[len(spath):] for k in keys])
        fs.rm(keys)
    fs.invalidate_cache(spath)


def _complete(data: bytes) -> bytes:
    """Bytes up to and including the last newline (a line being written is left for later)."""
    end = data.rfind(b"\n")
    return data[:end + 1] if end >= 0 else b""


@dataclass
class Uploader:
    """Copies a local run folder to ``url`` in commit order (module docstring), each time
    :meth:`sync` is called or every ``every`` seconds once :meth:`start` ed."""

    local: Path
    url: str
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Relative path -> (size, mtime_ns) of what was uploaded."""
    index_read: int = 0
    """Bytes of ``index.jsonl`` whose episodes were uploaded."""
    uploads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: str | None = None
    """The last periodic upload that failed (it is tried again at the next one)."""

    def __post_init__(self) -> None:
        self.fs, self.path = filesystem(self.url)

    def _changed(self, rel: str) -> tuple[int, int] | None:
        try:
            st = os.stat(self.local / rel)
        except OSError:
            return None
        key = (st.st_size, st.st_mtime_ns)
        return None if self.sent.get(rel) == key else key

    def _episodes(self, index_bytes: bytes, final: bool) -> list[str]:
        """Episode folders to upload: those named by index rows not read before, and at the
        end every folder left (one in flight when the run stopped)."""
        folders = []
        for line in index_bytes[self.index_read:].splitlines():
            try:
                path = json.loads(line).get("path")
            except (ValueError, AttributeError):
                continue
            if isinstance(path, str) and path.startswith("episodes/") and ".." not in path.split("/"):
                folders.append(path)
        if final and (self.local / "episodes").is_dir():
            done = {"/".join(k.split("/")[:2]) for k in self.sent if k.startswith("episodes/")}
            folders += [f"episodes/{d.name}" for d in sorted((self.local / "episodes").iterdir())
                        if d.is_dir() and f"episodes/{d.name}" not in done]
        return list(dict.fromkeys(folders))

    def sync(self, final: bool = False) -> int:
        """Upload what changed since the last sync; the number of files uploaded."""
        with self._lock:
            before = self.uploads
            try:
                index_bytes = _complete((self.local / "index.jsonl").read_bytes())
            except OSError:
                index_bytes = b""
            files: list[str] = []
            for folder in self._episodes(index_bytes, final):
                base = self.local / folder
                files += [p.relative_to(self.local).as_posix() for p in sorted(base.rglob("*")) if p.is_file()]
            files = [f for f in files if f not in self.sent]
            if files:
                self.fs.put([str(self.local / f) for f in files], [f"{self.path}/{f}" for f in files])
                for f in files:
                    st = os.stat(self.local / f)
                    self.sent[f] = (st.st_size, st.st_mtime_ns)
                self.uploads += len(files)
            self.index_read = len(index_bytes)
            skip = {"run.json", *TABLE_ORDER}
            others = []
            for top in sorted(self.local.iterdir()):
                if top.name in skip or top.name == "episodes":
                    continue
                found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
                others += [p.relative_to(self.local).as_posix() for p in found]
            for rel in [*others, *TABLE_ORDER, "run.json"]:
                key = self._changed(rel)
                if key is None:
                    continue
                data = (self.local / rel).read_bytes()
                if rel == "index.jsonl":
                    data = index_bytes
                elif rel.endswith(".jsonl"):
                    data = _complete(data)
                self.fs.pipe_file(f"{self.path}/{rel}", data)
                self.uploads += 1
                if len(data) == key[0]:
                    self.sent[rel] = key
            return self.uploads - before

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - a failed periodic upload is retried at the next one
                self.error = f"{type(e).__name__}: {e}"

    def start(self, every: float | None = None) -> None:
        """Sync every ``every`` seconds (``MFM_SYNC_SECONDS``, default :data:`SYNC_SECONDS`) on a thread."""
        if every is None:
            every = float(os.environ.get("MFM_SYNC_SECONDS", "") or SYNC_SECONDS)
        self._thread = threading.Thread(target=self._loop, args=(every,), name="mfm-upload", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, upload everything left (raises StoreError if that fails)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.sync(final=True)
        except OSError as e:
            raise StoreError(f"{self.url}: upload failed: {e}") from None


def fresh_staging(url: str) -> Path:
    """An empty staging folder for a run bound for ``url``; a folder left there by an earlier
    attempt is kept beside it (``NAME.old.K``), never deleted."""
    local = staging_dir(url)
    if local.exists() and any(local.iterdir()):
        k = 1
        while local.with_name(f"{local.name}.old.{k}").exists():
            k += 1
        local.rename(local.with_name(f"{local.name}.old.{k}"))
    local.mkdir(parents=True, exist_ok=True)
    return local


def upload_tree(local: Path, url: str) -> int:
    """Upload a finished local run folder to ``url`` in commit order; the files uploaded."""
    up = Uploader(Path(local), url)
    up.close()
    return up.uploads


def done_staging(local: Path) -> None:
    """Remove a staging folder whose run was uploaded whole."""
    shutil.rmtree(local, ignore_errors=True)
