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
copy. When the run closes, its columnar copy (``loaders.columns``, made by the function the
command line gives: :attr:`Uploader.make_copy`) goes beside it and its
entry into its folder's manifest (:func:`register_run`; the entry is first put there at the
first sync), so that readers open it and list its folder in few requests. Every request sent
to the store is counted (:func:`counting`). A killed run process loses nothing: its staging copy stays (``mfm import STAGING
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
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
COLUMNS = ".mfm-columns"
"""Beside a closed run's files in a bucket: its columnar copy (``loaders.columns``)."""


class StoreError(Exception):
    """Object storage could not be used: no extra installed, a bad URL, an access error."""


_UNREACHABLE = ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError",
                "ProxyConnectionError", "SSLError", "ClientConnectorError", "ServerDisconnectedError",
                "FSTimeoutError")
"""Names of the botocore, aiohttp and fsspec exceptions that mean the store did not answer."""
_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                   "ProfileNotFound", "UnauthorizedSSOTokenError", "TokenRetrievalError")
"""Names of botocore's exceptions that mean no usable credentials were found."""


def endpoint() -> str:
    """Where S3 requests go, in words: ``AWS_ENDPOINT_URL``, or AWS's own endpoint."""
    return os.environ.get("AWS_ENDPOINT_URL", "").strip() or "AWS S3 (no AWS_ENDPOINT_URL set)"


def store_failure(e: BaseException, url: str | None = None) -> str | None:
    """One line saying what went wrong with object storage when ``e`` (or an exception it was
    raised from) is a failure of the store: unreachable, no credentials, refused, a
    :class:`StoreError`; None for any other exception. ``url`` is named when given."""
    seen: set[int] = set()
    here: BaseException | None = e
    while here is not None and id(here) not in seen:
        seen.add(id(here))
        name = type(here).__name__
        mod = type(here).__module__.split(".")[0]
        at = f"{url}: " if url else ""
        if isinstance(here, StoreError):
            return str(here)
        if name in _UNREACHABLE and mod in ("botocore", "aiobotocore", "aiohttp", "fsspec", "urllib3"):
            where = getattr(here, "kwargs", {}).get("endpoint_url") or endpoint()
            return (f"{at}the object store at {_site(where)} does not answer ({name}); check AWS_ENDPOINT_URL "
                    "and the network")
        if name in _NO_CREDENTIALS and mod in ("botocore", "aiobotocore"):
            return (f"{at}no credentials for object storage ({here}); set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        if name == "ClientError" and mod in ("botocore", "aiobotocore"):
            err = getattr(here, "response", {}).get("Error", {})
            return f"{at}the object store refused: {err.get('Code', '?')}: {err.get('Message', here)}"
        here = here.__cause__ or here.__context__
    return None


def _site(url: str) -> str:
    """``scheme://host:port`` of an endpoint URL (the request's path and query left out)."""
    m = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*", url)
    return m.group(0) if m else url


def check_bucket(url: str) -> None:
    """StoreError, in one line naming ``url``, unless the bucket of an ``s3://`` URL is there
    and answers (a HEAD request); asked before a command does any work. Other stores are
    not checked here."""
    fs, path = filesystem(url)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in ("s3", "s3a"):
        return
    bucket = path.split("/", 1)[0]
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        raise StoreError(f"{url}: no bucket {bucket!r} at {endpoint()}") from None
    except PermissionError:
        raise StoreError(f"{url}: access to bucket {bucket!r} denied at {endpoint()}; check the credentials "
                         "(AWS_ACCESS_KEY_ID, AWS_PROFILE)") from None
    except OSError as e:
        raise StoreError(f"{url}: bucket {bucket!r}: {e}") from None
    except Exception as e:  # noqa: BLE001 - botocore's own exceptions, said in words
        why = store_failure(e, url)
        if why is None:
            raise
        raise StoreError(why) from None


MiB = 1 << 20
OBJECT_LIMITS: dict[str, int] = {
    "manifest": 16 * MiB, "table": 1 << 30, "log": 256 * MiB, "memory": 16 * MiB, "record": 16 * MiB,
    "image": 64 * MiB, "pack": 4 << 30, "export": 256 * MiB, "recording": 2 << 30, "other": 16 * MiB,
    "columns": 1 << 30, "runs": 256 * MiB,
}
"""The largest object of each kind (:func:`object_kind`) a reader fetches; a larger one is
refused before any byte of it is downloaded. Each is far above what a run writes: a
36,000-step run has ~9 MB of tables, a manifest of a few kB, memory files of a few kB, frame
strips of ~100 kB (the decoder refuses images over 16 Mpixels anyway), episode records under
``mfm.boundary.MAX_JSON_FILE_BYTES`` (16 MiB, the readers' own bound); an export's
``data.json`` and a recording have their readers' bounds (256 MiB, 2 GiB)."""
KIND_NAMES = {"manifest": "a run manifest", "table": "a table", "log": "a log", "memory": "an agent-memory file",
              "record": "an episode record", "image": "an image or frame strip", "pack": "a packed run",
              "export": "an MFM export", "recording": "a Crafter recording", "other": "a run file",
              "columns": "a run's columnar copy", "runs": "a runs root's manifest"}


def object_kind(rel: str) -> str:
    """The kind of a run's file by its path in the run (``mine/GUIDE.md``: memory), for
    :data:`OBJECT_LIMITS`; a copy under ``inherited/`` has the kinds of a run's files."""
    parts = rel.strip("/").split("/")
    name = parts[-1]
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if name == "run.json":
        return "manifest"
    if name == COLUMNS:
        return "columns"
    if name == ROOT_MANIFEST:
        return "runs"
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
    count_requests(fs)
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
    downloaded, if it is larger than its kind's bound (:func:`oversize`, by its name). Asked
    afresh: another process may have written it since this one listed its folder."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)
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
    _registered: bool = False
    make_copy: Callable[[Path, dict[str, list]], bytes | None] | None = None
    """Makes a closed run's columnar copy from its folder and the stamps (name -> [size,
    ETag]) of its objects in the bucket (``loaders.columns.build``: the command line passes
    it when the read extra is installed; the core imports no loaders)."""
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
            if not final and not self._registered and (self.local / "run.json").is_file():
                self._registered = True
                try:
                    register_run(self.url, self.local)
                except (StoreError, OSError) as e:
                    self.error = f"{type(e).__name__}: {e}"
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
        self.finish()

    def finish(self) -> None:
        """Once everything is uploaded: the columnar copy of a closed run beside it
        (:attr:`make_copy`'s, when given) and the run's entry in its
        folder's manifest (:func:`register_run`), both from one listing of the run's folder.
        Both are derived: a failure is kept in :attr:`error`, the run stays as uploaded."""
        try:
            listing, folders = list_folder(self.url)
            from mfm.schema import CLOSED_STATUSES

            try:
                status = json.loads((self.local / "run.json").read_bytes()).get("status")
            except (OSError, ValueError, AttributeError):
                status = None
            if status in CLOSED_STATUSES and self.make_copy is not None:
                data = self.make_copy(self.local, {n: stamp_of(i) for n, i in listing.items()})
                if data is not None:
                    put_object(join(self.url, COLUMNS), data)
            register_run(self.url, self.local, (listing, folders))
        except Exception as e:  # noqa: BLE001 - derived data: the run itself is uploaded
            self.error = f"{type(e).__name__}: {e}"


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


def upload_tree(local: Path, url: str, make_copy: Callable[[Path, dict[str, list]], bytes | None] | None = None
                ) -> int:
    """Upload a finished local run folder to ``url`` in commit order (and, with
    ``make_copy``, its columnar copy: :attr:`Uploader.make_copy`); the files uploaded."""
    up = Uploader(Path(local), url, make_copy=make_copy)
    up.close()
    return up.uploads


def done_staging(local: Path) -> None:
    """Remove a staging folder whose run was uploaded whole."""
    shutil.rmtree(local, ignore_errors=True)


# --- Requests: counted, and the few kinds the readers make themselves (issue 48) -------------

REQUEST_KINDS = {"ListObjectsV2": "LIST", "ListObjects": "LIST", "GetObject": "GET", "HeadObject": "HEAD",
                 "PutObject": "PUT", "CreateMultipartUpload": "PUT", "UploadPart": "PUT",
                 "CompleteMultipartUpload": "PUT", "DeleteObject": "DELETE", "DeleteObjects": "DELETE",
                 "CopyObject": "COPY", "HeadBucket": "HEAD"}
"""The kind each S3 operation is counted as; any other is counted under its own name."""
_requests: Counter = Counter()
_counters: list[Requests] = []
_requests_lock = threading.Lock()


class Requests(Counter):
    """Requests counted by kind (:func:`counting`); ``made`` lists each as (kind, method and
    URL), in the order sent."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[str, str]] = []

    @property
    def total(self) -> int:
        """All the requests counted, of every kind."""
        return sum(self.values())


def _count(event_name: str = "", request: Any = None, **_: Any) -> None:
    """Count one HTTP request about to be sent (botocore's ``before-send`` event: once per
    attempt, so a retried request counts each time it is sent)."""
    op = event_name.rsplit(".", 1)[-1]
    kind = REQUEST_KINDS.get(op, op)
    what = f"{getattr(request, 'method', '')} {getattr(request, 'url', '')}"
    with _requests_lock:
        _requests[kind] += 1
        for c in _counters:
            c[kind] += 1
            c.made.append((kind, what))


def count_requests(fs: Any) -> None:
    """Count every request the filesystem's S3 client sends (once per client; filesystems
    other than s3fs are not counted)."""
    if not hasattr(fs, "call_s3") or getattr(fs, "asynchronous", False):
        return
    try:
        client = fs.s3
    except Exception:  # noqa: BLE001 - no client yet (no credentials...): the first request says why
        return
    events = client.meta.events
    if getattr(events, "_mfm_counted", False):
        return
    events.register("before-send.s3", _count)
    events._mfm_counted = True


def request_counts() -> dict[str, int]:
    """Requests sent to object storage by this process so far, by kind (``LIST``, ``GET``,
    ``HEAD``, ``PUT``, ...)."""
    with _requests_lock:
        return dict(_requests)


@contextmanager
def counting() -> Iterator[Requests]:
    """``with counting() as n:`` -- ``n`` counts, by kind, the requests sent by any thread of
    this process while the block runs (``n.total`` for all of them, ``n.made`` each one)."""
    c = Requests()
    with _requests_lock:
        _counters.append(c)
    try:
        yield c
    finally:
        with _requests_lock:
            _counters.remove(c)


class Conflict(StoreError):
    """A conditional write found the object changed (or there) since it was read."""


def _code(e: BaseException) -> str:
    """The S3 error code behind an exception s3fs raised (``PreconditionFailed``...), or ""."""
    for err in (e, e.__cause__, e.__context__):
        resp = getattr(err, "response", None)
        if isinstance(resp, dict):
            return str(resp.get("Error", {}).get("Code", ""))
    return ""


def _split(fs: Any, path: str) -> tuple[str, str]:
    bucket, key, _ = fs.split_path(path)
    return bucket, key


def get_object(url: str, start: int | None = None, end: int | None = None, last: int | None = None
               ) -> tuple[bytes, str, int] | None:
    """One GET of an object, or of its bytes ``start``..``end`` (end excluded), or of its
    ``last`` bytes: (bytes, ETag, the object's whole size); None if there is no such object.
    A whole object is refused, unread, when it is larger than its kind's bound."""
    fs, path = filesystem(url)
    rng = (f"bytes={start}-{end - 1}" if start is not None and end is not None else
           f"bytes={start}-" if start is not None else f"bytes=-{last}" if last is not None else None)
    try:
        if not hasattr(fs, "call_s3"):
            info = fs.info(path)
            size = int(info.get("size") or 0)
            if rng is None:
                data = fs.cat_file(path)
            else:
                a = start if start is not None else max(0, size - int(last or 0))
                data = fs.cat_file(path, start=a, end=end if end is not None else size)
            return data, str(info.get("ETag") or info.get("mtime") or ""), size
        bucket, key = _split(fs, path)
        kw = {"Range": rng} if rng else {}
        resp, data = _get(fs, bucket, key, kw, None if rng else name_of(url))
        size = int(resp.get("ContentLength") or 0)
        total = str(resp.get("ContentRange") or "").rpartition("/")[2]
        if total.isdigit():
            size = int(total)
        if data is None:
            raise StoreError(f"{url}: {oversize(name_of(url), size)}")
        return data, str(resp.get("ETag") or ""), size
    except FileNotFoundError:
        return None
    except StoreError:
        raise
    except OSError as e:
        if _code(e) == "InvalidRange":
            return b"", "", 0
        raise StoreError(f"{url}: {e}") from None


def _get(fs: Any, bucket: str, key: str, kw: dict, bounded: str | None) -> tuple[dict, bytes | None]:
    """One ``get_object`` on s3fs's loop: the response and its body's bytes (None, unread,
    when ``bounded`` names the object and its size is over its kind's bound)."""
    from fsspec.asyn import sync

    async def run() -> tuple[dict, bytes | None]:
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, **kw)
        body = resp["Body"]
        try:
            if bounded is not None and oversize(bounded, int(resp.get("ContentLength") or 0)) is not None:
                return resp, None
            return resp, await body.read()
        finally:
            body.close()

    return sync(fs.loop, run)


def put_object(url: str, data: bytes, if_match: str | None = None, if_absent: bool = False) -> str:
    """One PUT of a whole object; its ETag. ``if_match``: only if the object's ETag is still
    that; ``if_absent``: only if there is no object there. Conflict when the condition does
    not hold; StoreError naming the URL on any other failure (``NotImplemented``: the store
    takes no conditions)."""
    fs, path = filesystem(url)
    if not hasattr(fs, "call_s3"):
        if if_match or if_absent:
            raise StoreError(f"{url}: NotImplemented: conditional writes need an S3 store")
        fs.pipe_file(path, data)
        return str(fs.info(path).get("ETag") or "")
    bucket, key = _split(fs, path)
    kw: dict[str, str] = {}
    if if_match:
        kw["IfMatch"] = if_match
    if if_absent:
        kw["IfNoneMatch"] = "*"
    try:
        resp = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **kw)
    except (OSError, ValueError) as e:
        code = _code(e)
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or (
                if_absent and isinstance(e, FileExistsError)):
            raise Conflict(f"{url}: changed meanwhile ({code or 'exists'})") from None
        raise StoreError(f"{url}: {code + ': ' if code else ''}{e}") from None
    fs.invalidate_cache(path)
    return str(resp.get("ETag") or "")


def list_folder(url: str) -> tuple[dict[str, dict], list[str]]:
    """One delimiter listing of a folder (a request per 1,000 entries): its objects (name ->
    listing entry, with ``size`` and ``ETag``) and its sub-folders' names; ({}, []) if empty."""
    fs, path = filesystem(url)
    try:
        return folder_entries(fs, path)
    except FileNotFoundError:
        return {}, []
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None


def folder_entries(fs: Any, path: str) -> tuple[dict[str, dict], list[str]]:
    """A fresh listing of ``path`` on the file system ``fs``: its objects (name -> listing
    entry) and its sub-folders' names. Raises what ``fs.ls`` raises."""
    fs.invalidate_cache(path)
    files, dirs = {}, []
    for e in fs.ls(path, detail=True):
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if e.get("type") == "directory":
            dirs.append(name)
        else:
            files[name] = e
    return files, dirs


def stamp_of(info: dict) -> list:
    """What says an object changed: its size and ETag (or time, where a store has no ETag)."""
    etag = info.get("ETag") or info.get("LastModified") or info.get("mtime") or ""
    return [int(info.get("size") or info.get("Size") or 0), str(etag)]


# --- The manifest of a runs root: one object listing its runs (issue 48) --------------------

ROOT_MANIFEST = ".mfm-runs.json.gz"
"""In a folder of runs in object storage: its runs (name -> entry) and sub-folders, gzipped
JSON (:func:`update_root_manifest`)."""
ROOT_MANIFEST_FORMAT = 1
MANIFEST_TRIES = 12
"""Conditional writes tried before a manifest update gives up (each lost race re-reads)."""


def read_root_manifest(folder_url: str) -> tuple[dict | None, str]:
    """The manifest of a folder of runs (one GET) and its ETag; (None, "") when there is none
    or it cannot be read as one (then the folder is listed instead)."""
    import gzip

    got = get_object(join(folder_url, ROOT_MANIFEST))
    if got is None:
        return None, ""
    try:
        doc = json.loads(gzip.decompress(got[0]))
    except (OSError, ValueError, EOFError):
        return None, got[1]
    if not isinstance(doc, dict) or doc.get("format") != ROOT_MANIFEST_FORMAT or not isinstance(doc.get("runs"), dict):
        return None, got[1]
    return doc, got[1]


def empty_root_manifest() -> dict:
    """A folder's manifest with no run in it, never checked against a listing."""
    return {"format": ROOT_MANIFEST_FORMAT, "runs": {}, "folders": [], "checked": None, "updated": None}


def update_root_manifest(folder_url: str, change: Callable[[dict], dict | None],
                         known: tuple[dict, str] | None = None) -> bool:
    """Apply ``change`` (the manifest -> the new one, or None for no change) to a folder's
    manifest without losing a concurrent update: read it (or take ``known``: the manifest
    and its ETag, just read), change it, write it back only if it is still the one read (a
    conditional PUT: ``If-Match`` its ETag, ``If-None-Match: *`` when there was none), and on
    a lost race read it again and re-apply ``change``. A store that takes no conditional
    writes (``NotImplemented``) gets a plain PUT, then the manifest is read back and
    ``change`` applied again until it changes nothing (re-read-and-merge: a concurrent
    writer's entry may then be lost between the two, and is found again at the next check
    against a listing). True if the manifest holds the change; False after
    :data:`MANIFEST_TRIES` lost races; StoreError if it cannot be written (no permission)."""
    import gzip
    import random

    conditional = True
    for attempt in range(MANIFEST_TRIES):
        if known is not None and attempt == 0:
            doc, etag = known
        else:
            doc, etag = read_root_manifest(folder_url)
        new = change(json.loads(json.dumps(doc)) if doc is not None else empty_root_manifest())
        if new is None:
            return True
        new["updated"] = time.time()
        data = gzip.compress(json.dumps(new, sort_keys=True, separators=(",", ":")).encode(), 6, mtime=0)
        try:
            put_object(join(folder_url, ROOT_MANIFEST), data, if_match=etag if conditional and etag else None,
                       if_absent=conditional and not etag)
            if conditional:
                return True
        except Conflict:
            time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))
            continue
        except StoreError as e:
            if conditional and "NotImplemented" in str(e):
                conditional = False
                continue
            raise
    return False


def manifest_entry(run_bytes: bytes, lives: bytes, listing: dict[str, dict], folders: list[str] = (),
                   episodes: int | None = None) -> dict:
    """A run's entry in its folder's manifest: its ``run.json`` and ``lives.jsonl`` as they
    are in the bucket (text), its status, the size and ETag of each of its top-level objects
    and its sub-folders' names (``listing``, ``folders``: one delimiter listing of the run's
    folder), and the rows of its ``index.jsonl`` (``episodes``) when known."""
    try:
        status = json.loads(run_bytes).get("status")
    except (ValueError, AttributeError):
        status = None
    return {"manifest": run_bytes.decode("utf-8", "replace"), "lives": lives.decode("utf-8", "replace"),
            "status": status if isinstance(status, str) else None,
            "stamps": {n: stamp_of(i) for n, i in sorted(listing.items())}, "folders": sorted(folders),
            **({"episodes": int(episodes)} if episodes is not None else {})}


def register_run(url: str, local: Path | None = None,
                 listed: tuple[dict[str, dict], list[str]] | None = None) -> bool:
    """Put a run's entry into the manifest of the folder holding it, from one listing of the
    run's folder (``listed``: :func:`list_folder`'s answer, made here if not given) and its
    ``run.json`` and ``lives.jsonl`` (read from ``local``, the copy just uploaded, when
    given, else from the bucket). True if the manifest holds it."""
    listing, folders = listed if listed is not None else list_folder(url)
    if "run.json" not in listing:
        return False

    def read(name: str) -> bytes:
        if local is not None:
            try:
                data = (Path(local) / name).read_bytes()
                return _complete(data) if name.endswith(".jsonl") else data
            except OSError:
                return b""
        got = get_object(join(url, name)) if name in listing else None
        return got[0] if got else b""

    index = read("index.jsonl") if local is not None and "index.jsonl" in listing else None
    entry = manifest_entry(read("run.json"), read("lives.jsonl"), listing, folders,
                           index.count(b"\n") if index is not None and len(index) == listing["index.jsonl"]["size"]
                           else None)
    name = name_of(url)

    def change(doc: dict) -> dict | None:
        if doc["runs"].get(name) == entry:
            return None
        doc["runs"][name] = entry
        return doc

    return update_root_manifest(parent_of(url), change)
