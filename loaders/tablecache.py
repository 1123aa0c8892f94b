"""A derived, rebuildable cache of parsed and checked tables, kept outside run folders.

Opening a large run parses and checks its JSONL tables and stats every episode file; the
dashboard does that again in every new process. This module keeps the results of that work
under a per-user cache folder so that reopening an unchanged run costs a file read:

- ``$MFM_CACHE_DIR`` if set (``off``, ``0``, ``no``, ``false`` or ``none`` turn the cache
  off), else ``$XDG_CACHE_HOME/mfm``, else ``~/.cache/mfm``. Nothing is ever written into a
  run folder.
- One entry per table file (and one per run for the file checks), named by a hash of the
  file's absolute path: a file that changes replaces its entry instead of adding one.
- An entry is used only if the key stored in it equals the key computed now: the file's
  absolute path, size, modification and change times (ns), inode and device, the schema
  version, this cache's format version, the versions of pyarrow and DuckDB and a hash of
  the source of the modules whose rules produced it (``rule_sources``: schema, validator,
  fast path, cached reader, this one). Its bytes carry a CRC-32; a missing, stale, foreign
  (other owner), truncated or corrupted entry is ignored and rebuilt, never reported.
- Entries are written to a temporary file and renamed into place (``os.replace``), and
  only when the file's stat did not change while it was read and it was last modified more
  than ``RACY_SECONDS`` ago (a file written in the same clock tick could change without its
  stat changing), unless its writer is done with it: ``loaders.cachedread.fill_closed_run``
  fills the cache when a run is closed, and says why that is sound.
- An entry made while a run is opened is written by a background thread
  (:func:`store_later`), so the open does not wait for the encoding and the write; the
  thread is not a daemon, so a process finishes its writes before it exits, and
  :func:`wait` waits for them (tests).
- The folder is kept under ``$MFM_CACHE_MAX_MB`` (default 1024 MB): after each write the
  least recently used entries beyond it are deleted (a hit refreshes an entry's time).

Entry layout: 8 bytes magic, 4 bytes header length, 4 bytes CRC-32 of everything after
these 16 bytes, the header (JSON: key, payload kind; padded to 8 bytes), the payload: an
Arrow IPC file (``arrow``) or compact JSON (``json``).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.ipc as ipc

from mfm.objectstore import CACHE_OFF, cache_root

CACHE_VERSION = 1
"""Bump when what an entry holds or how it is laid out changes."""
MAGIC = b"MFMTCACH"
RACY_SECONDS = 2.0
"""Files modified more recently than this are read but not cached (except for a closed run:
``loaders.cachedread.fill_closed_run``)."""
OFF = CACHE_OFF
SUFFIX = ".mfmc"
_HEAD = struct.Struct("<8sII")


def cache_dir() -> Path | None:
    """The cache folder (``mfm.objectstore.cache_root``), or None when the cache is turned off."""
    return None if os.environ.get("MFM_CACHE_DIR", "").strip().lower() in OFF else cache_root()


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("MFM_CACHE_MAX_MB", "1024")) * 1024 * 1024)
    except ValueError:
        return 1024 * 1024 * 1024


def stamp(path: str | Path) -> list[int] | None:
    """What changes when a file (or folder) changes: size, modification and change times,
    inode, device. None if it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def racy(st: list[int] | None) -> bool:
    """Modified too recently to be cached safely (or unknown)."""
    return st is None or time.time() - max(st[1], st[2]) / 1e9 < RACY_SECONDS


_CODE: str | None = None


def rule_sources() -> list[Path]:
    """The source files whose rules produce an entry: the schema, the run reader and the
    validator (core), the fast path, the cached reader and this module (loaders)."""
    from mfm import run_reader, schema, validate

    here = Path(__file__).resolve().parent
    return [Path(schema.__file__), Path(run_reader.__file__), Path(validate.__file__),
            *(here / name for name in ("fastread.py", "cachedread.py", "tablecache.py"))]


def code_key() -> str:
    """A hash of what produced an entry: versions and the source of the rule modules."""
    global _CODE
    if _CODE is None:
        import duckdb

        from mfm import schema

        h = hashlib.sha256(f"{CACHE_VERSION}|{schema.SCHEMA_VERSION}|{pa.__version__}|{duckdb.__version__}".encode())
        for path in rule_sources():
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(path.name.encode())
        _CODE = h.hexdigest()[:32]
    return _CODE


def _entry(d: Path, kind: str, name: str) -> Path:
    digest = hashlib.sha256(f"{kind}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return d / f"{digest}{SUFFIX}"


def load(kind: str, name: str, key: list[Any]) -> tuple[str, memoryview] | None:
    """The payload (its kind and bytes) of the entry for ``name`` if its key is ``key``."""
    d = cache_dir()
    if d is None:
        return None
    path = _entry(d, kind, name)
    full = [code_key(), kind, name, *key]
    try:
        with open(path, "rb") as f:
            if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            data = f.read()
        magic, hlen, crc = _HEAD.unpack_from(data)
        if magic != MAGIC or zlib.crc32(memoryview(data)[_HEAD.size:]) != crc:
            return None
        head = json.loads(data[_HEAD.size:_HEAD.size + hlen])
        if head.get("key") != full:
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        return head["payload"], memoryview(data)[_HEAD.size + hlen:]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return None


def store(kind: str, name: str, key: list[Any], payload_kind: str, payload: bytes | pa.Buffer,
          d: Path | None = None) -> None:
    """Write the entry for ``name`` atomically into ``d`` (default: :func:`cache_dir`); any
    failure leaves the cache as it was."""
    d = cache_dir() if d is None else d
    if d is None:
        return
    head = json.dumps({"key": [code_key(), kind, name, *key], "payload": payload_kind}).encode()
    head += b" " * (-(_HEAD.size + len(head)) % 8)
    crc = zlib.crc32(payload, zlib.crc32(head))
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_HEAD.pack(MAGIC, len(head), crc))
            f.write(head)
            f.write(payload)
        os.replace(tmp, _entry(d, kind, name))
        tmp = None
        _evict(d, max_bytes())
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()


def store_later(kind: str, name: str, key: list[Any], payload_kind: str,
                payload: Callable[[], bytes | pa.Buffer]) -> None:
    """:func:`store` in a background thread, ``payload()`` made there too; the cache folder
    is the one in effect now. A payload that cannot be made is not stored."""
    d = cache_dir()
    if d is None:
        return

    def work() -> None:
        try:
            data = payload()
        except (TypeError, ValueError, pa.ArrowException):
            return
        store(kind, name, key, payload_kind, data, d)

    t = threading.Thread(target=work, name=f"mfm-cache-{kind}", daemon=False)
    with _pending_lock:
        _pending[:] = [p for p in _pending if p.is_alive()]
        _pending.append(t)
    t.start()


def wait() -> None:
    """Return once every entry :func:`store_later` was asked for is written (or given up)."""
    with _pending_lock:
        threads = list(_pending)
        _pending.clear()
    for t in threads:
        t.join()


def _evict(d: Path, limit: int) -> None:
    """Delete the least recently used entries until the folder holds at most ``limit``
    bytes, and temporary files left by a crashed writer (older than an hour)."""
    entries = []
    total = 0
    now = time.time()
    for e in os.scandir(d):
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if e.name.startswith(".tmp-"):
            if now - st.st_mtime > 3600:
                _unlink(e.path)
            continue
        if e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False):
            entries.append((st.st_mtime_ns, st.st_size, e.path))
            total += st.st_size
    if total <= limit:
        return
    for _, size, path in sorted(entries):
        _unlink(path)
        total -= size
        if total <= limit:
            return


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def arrow_bytes(t: pa.Table) -> pa.Buffer:
    """An Arrow IPC file of ``t``."""
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def arrow_table(payload: memoryview) -> pa.Table:
    """The table of an Arrow IPC file held in memory (raises on a malformed one)."""
    t = ipc.open_file(pa.py_buffer(payload)).read_all()
    t.validate(full=True)
    return t


def clear() -> int:
    """Delete every entry; return how many were deleted (``mfm`` never needs this: entries
    rebuild themselves; it is for tests and for people who want the space back)."""
    d = cache_dir()
    n = 0
    if d is None or not d.is_dir():
        return 0
    for e in os.scandir(d):
        if e.name.endswith(SUFFIX) or e.name.startswith(".tmp-"):
            _unlink(e.path)
            n += 1
    return n
