"""Runs roots in object storage (``s3://bucket/prefix``), read through a local mirror.

Every reader in ``loaders`` works on folders. A runs root in a bucket is therefore read
into a *mirror*: a folder under the user's cache (``$MFM_REMOTE_DIR``, else
``~/.cache/mfm/remote/<hash of the URL>/``) laid out as the bucket is, filled lazily:

- :func:`mirror_root` lists the bucket (one delimiter listing per folder level, as
  :func:`loaders.run.find_runs` walks a disk) and fetches each run's ``run.json`` and
  ``lives.jsonl`` only: what the runs table shows. Never a whole run.
- :func:`sync_run` (when a run is opened) fetches its tables, ``logs.txt`` and ``mine/``:
  each file again only when its size or ETag changed in the bucket; a lazy table
  (``mfm.validate.LAZY_TABLES``) only when it is asked for (:func:`fetch_lazy`).
- :class:`RemoteSource` fetches an episode folder (records, frame strips, observation)
  the first time a page asks for one of its frames or records, and checks the run's files
  against one listing of ``episodes/`` instead of stat'ing them.

A run's files are looked at again at most every :data:`TTL` seconds, so a live run in the
bucket moves on in the dashboard; the root's listing every :data:`ROOT_TTL` seconds. A mirror is derived data: deleting it loses
nothing. Object keys are checked before they become local paths (no ``..``, no absolute
or empty segments): a hostile bucket cannot make the mirror write outside its folder.
"""
from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from loaders.formats import RUN_MARK
from loaders.sources import DirSource
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord
from mfm.objectstore import StoreError, cache_root, filesystem, is_url, url_hash
from mfm.schema import IndexRow, Problem
from mfm.validate import LAZY_TABLES, FileCheck, RunContents, TableRead

ROOT_MARK = ".mfm-remote-root.json"
"""In a mirror's top folder: the URL it mirrors."""
TTL = 5.0
"""Seconds a run's file list is trusted before the bucket is asked again (a live run moves on)."""
ROOT_TTL = 30.0
"""Seconds a runs root's listing is trusted (new runs appear within this)."""
MAX_DEPTH = 6
LISTERS = 16
"""Folders listed at once when a root is walked (each listing is one request)."""
LISTED = ("run.json", "lives.jsonl")
"""Fetched for every run when the root is listed (the runs table reads them)."""
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


def _fresh(key: str, force: bool, ttl: float = TTL) -> bool:
    """Whether ``key`` was looked at less than ``ttl`` seconds ago (and marks it looked at)."""
    now = time.monotonic()
    with _lock:
        if not force and now - _seen.get(key, -ttl) < ttl:
            return True
        _seen[key] = now
        return False


def _stamp(info: dict) -> list:
    """What says an object changed: its size and ETag (or time, where a store has no ETag)."""
    return [int(info.get("size") or 0), str(info.get("ETag") or info.get("LastModified") or info.get("mtime") or "")]


def _read_mark(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return obj if isinstance(obj, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_mark(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _fetch(fs, pairs: list[tuple[str, Path]]) -> None:
    """Download objects to local files, each written beside and renamed into place."""
    if not pairs:
        return
    tmps = [p.with_name(f".{p.name}.{os.getpid()}.part") for _, p in pairs]
    for p in tmps:
        p.parent.mkdir(parents=True, exist_ok=True)
    fs.get([r for r, _ in pairs], [str(t) for t in tmps])
    for t, (_, p) in zip(tmps, pairs):
        os.replace(t, p)


def _sync_files(fs, run_url_path: str, local: Path, infos: dict[str, dict], mark: dict) -> None:
    """Fetch the listed files (relative path -> listing entry) whose stamp changed."""
    have = mark.setdefault("files", {})
    todo = [(rel, info) for rel, info in infos.items() if safe_rel(rel) and have.get(rel) != _stamp(info)]
    _fetch(fs, [(f"{run_url_path}/{rel}", local / rel) for rel, _ in todo])
    for rel, info in todo:
        have[rel] = _stamp(info)


def _list_run(fs, path: str) -> tuple[dict[str, dict], list[str]]:
    """A run folder's files (relative path -> entry) and its sub-folders' names."""
    fs.invalidate_cache(path)
    files, dirs = {}, []
    for e in fs.ls(path, detail=True):
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if e.get("type") == "directory":
            dirs.append(name)
        else:
            files[name] = e
    return files, dirs


def mirror_root(url: str, force: bool = False) -> Path:
    """The mirror of a runs root (or of one run) in object storage, its listing brought up
    to date: a folder per run holding its ``run.json`` and ``lives.jsonl``."""
    fs, path = filesystem(url)
    local = mirror_dir(url)
    local.mkdir(parents=True, exist_ok=True)
    mark = local / ROOT_MARK
    if not mark.is_file():
        _write_mark(mark, {"url": url.rstrip("/")})
    if _fresh(f"root:{local}", force, ROOT_TTL):
        return local
    try:
        fs.invalidate_cache(path)

        def visit(rel: str) -> list[str]:
            """Mirror the run at ``rel``, or return the sub-folders to look in."""
            here = f"{path}/{rel}" if rel else path
            files, dirs = _list_run(fs, here)
            if "run.json" in files or "index.jsonl" in files:
                run_local = local / rel if rel else local
                run_local.mkdir(parents=True, exist_ok=True)
                m = _read_mark(run_local / RUN_MARK)
                m["url"] = f"{url.rstrip('/')}/{rel}" if rel else url.rstrip("/")
                _sync_files(fs, here, run_local, {n: files[n] for n in LISTED if n in files}, m)
                _write_mark(run_local / RUN_MARK, m)
                return []
            return [f"{rel}/{d}" if rel else d for d in sorted(dirs) if not d.startswith(".") and safe_rel(d)]

        level = [""]
        with ThreadPoolExecutor(max_workers=LISTERS) as pool:
            for _ in range(MAX_DEPTH + 1):
                level = [sub for subs in pool.map(visit, level) for sub in subs]
                if not level:
                    break
    except FileNotFoundError:
        raise StoreError(f"{url}: no such bucket or prefix") from None
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None
    return local


def mirrored_url(local: Path) -> str | None:
    """The URL a mirror's top folder stands for, None for any other folder."""
    url = _read_mark(local / ROOT_MARK).get("url")
    return url if isinstance(url, str) and is_url(url) and mirror_dir(url) == local else None


def is_mirrored(local: Path) -> bool:
    """Whether a folder is a run mirrored from object storage."""
    return (local / RUN_MARK).is_file()


def sync_run(local: Path, force: bool = False) -> None:
    """Bring a mirrored run's tables, logs and ``mine/`` up to date (not its episodes)."""
    if _fresh(f"run:{local}", force):
        return
    mark = _read_mark(local / RUN_MARK)
    url = mark.get("url")
    if not isinstance(url, str) or not is_url(url):
        return
    fs, path = filesystem(url)
    try:
        files, dirs = _list_run(fs, path)
        infos = dict(files)
        for d in dirs:
            if d != "episodes" and not d.startswith(".") and safe_rel(d):
                fs.invalidate_cache(f"{path}/{d}")
                for key, info in fs.find(f"{path}/{d}", detail=True).items():
                    infos[key[len(path) + 1:]] = info
        mark["lazy"] = {rel: _stamp(infos.pop(rel)) for rel in LAZY_TABLES if rel in infos}
        _sync_files(fs, path, local, infos, mark)
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None
    _write_mark(local / RUN_MARK, mark)


_lazy_lock = threading.Lock()


def fetch_lazy(local: Path, name: str) -> None:
    """Fetch a lazy table of a mirrored run if the bucket held a newer one at the last
    :func:`sync_run` (nothing when the run has none)."""
    with _lazy_lock:
        mark = _read_mark(local / RUN_MARK)
        want = mark.get("lazy", {}).get(name)
        url = mark.get("url")
        if want is None or mark.get("files", {}).get(name) == want or not isinstance(url, str) or not is_url(url):
            return
        fs, path = filesystem(url)
        try:
            _fetch(fs, [(f"{path}/{name}", local / name)])
        except OSError as e:
            raise StoreError(f"{url}: {e}") from None
        mark.setdefault("files", {})[name] = want
        _write_mark(local / RUN_MARK, mark)


class ListedFileCheck(FileCheck):
    """The file checks of a mirrored run, against one listing of its ``episodes/`` in the
    bucket, made only when needed: the problems found are kept in the mirror with the
    ``index.jsonl`` they were found for (its size and ETag in the bucket), and reused while
    it is the same (an episode's files never change once its row is written; as the local
    file checks' cache, a file deleted from the bucket behind an unchanged index is not seen)."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.mark = _read_mark(run_dir / RUN_MARK)
        self.key = self.mark.get("files", {}).get("index.jsonl")

    def known(self) -> list[Problem] | None:
        kept = self.mark.get("file_check")
        if not isinstance(kept, dict) or self.key is None or kept.get("key") != self.key:
            return None
        try:
            return [Problem(str(f), int(n), str(m), str(s)) for f, n, m, s in kept["problems"]]
        except (KeyError, TypeError, ValueError):
            return None

    def run(self, refs: list) -> list[Problem]:
        fs, path = filesystem(str(self.mark.get("url", "")))
        fs.invalidate_cache(f"{path}/episodes")
        try:
            keys = fs.find(f"{path}/episodes")
        except FileNotFoundError:
            keys = []
        self.listing = frozenset(k[len(path) + 1:] for k in keys)
        out = super().run(refs)
        if self.key is not None:
            mark = _read_mark(self.run_dir / RUN_MARK)
            if mark.get("files", {}).get("index.jsonl") == self.key:
                mark["file_check"] = {"key": self.key, "problems": [[p.file, p.line, p.message, p.severity]
                                                                    for p in out]}
                _write_mark(self.run_dir / RUN_MARK, mark)
        return out


class RemoteSource(DirSource):
    """A run mirrored from object storage: :class:`DirSource` on the mirror, each episode
    folder fetched the first time it is read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.url = str(_read_mark(path / RUN_MARK).get("url", ""))
        self._fetch_lock = threading.Lock()

    def contents(self) -> RunContents:
        from loaders.cachedread import read_one_table_cached
        from mfm.validate import validate

        return validate(self.path, read=read_one_table_cached, files=ListedFileCheck, lazy=True)

    def read_table(self, path: Path, name: str) -> TableRead:
        if name in LAZY_TABLES:
            fetch_lazy(self.path, name)
        return super().read_table(path, name)

    def fetch_episode(self, ref: IndexRow) -> None:
        """Download an episode folder into the mirror unless it is there (folders never change)."""
        rel = ref.path
        dest = self.path / rel
        if dest.is_dir() or not safe_rel(rel):
            return
        fs, path = filesystem(self.url)
        with self._fetch_lock:
            if dest.is_dir():
                return
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
            try:
                keys = fs.find(f"{path}/{rel}")
                subs = [k[len(path) + len(rel) + 2:] for k in keys]
                pairs = [(k, tmp / s) for k, s in zip(keys, subs) if safe_rel(s)]
                for _, p in pairs:
                    p.parent.mkdir(parents=True, exist_ok=True)
                if pairs:
                    fs.get([k for k, _ in pairs], [str(p) for _, p in pairs])
                    os.replace(tmp, dest)
            except OSError:
                return

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        self.fetch_episode(ref)
        return super().episode_record(ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        self.fetch_episode(ref)
        return super().observation(ref)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        ref = index.episode_at(step)
        if ref is not None:
            self.fetch_episode(ref)
        return super().step_frame(index, step)


def fetch_all(local: Path) -> None:
    """Fetch every episode folder of a mirrored run not fetched yet (``--frames`` checks)."""
    url = str(_read_mark(local / RUN_MARK).get("url", ""))
    fs, path = filesystem(url)
    fs.invalidate_cache(f"{path}/episodes")
    try:
        keys = fs.find(f"{path}/episodes")
    except FileNotFoundError:
        return
    rels = [k[len(path) + 1:] for k in keys]
    _fetch(fs, [(k, local / r) for k, r in zip(keys, rels) if safe_rel(r) and not (local / r).is_file()])


def validate_remote(url: str, frames: bool = False) -> RunContents:
    """``mfm validate`` of a run in object storage: its tables read as on disk, its files
    checked against a listing of the bucket, and with ``frames`` every frame fetched and decoded."""
    from loaders.cachedread import read_one_table_fast
    from mfm.validate import validate

    local = mirror_root(url, force=True)
    if not is_mirrored(local):
        raise ValueError(f"{url}: no run there (no run.json or index.jsonl)")
    sync_run(local, force=True)
    for name in LAZY_TABLES:
        fetch_lazy(local, name)
    if frames:
        fetch_all(local)
    return validate(local, frames, read=read_one_table_fast, files=ListedFileCheck)
