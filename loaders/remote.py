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

What a listing offers is settled before anything is fetched (:func:`settle`): an object
larger than its kind's bound (``mfm.objectstore.OBJECT_LIMITS``, by the listing's size) is
not downloaded, and a key that is both an object and a folder of objects keeps one side;
each is one problem of the run naming the key (:func:`refused_problems`), and the rest of
the run is read. A download goes to a ``.NAME.PID.part`` file beside its place, removed
whatever happens; those left by a process that died are removed when a process first
brings the run up to date.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from loaders.formats import RUN_MARK
from loaders.sources import DirSource
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError
from mfm.objectstore import StoreError, cache_root, filesystem, is_url, normal_url, oversize, url_hash
from mfm.schema import MANIFEST, IndexRow, Problem, frame_chunk
from mfm.validate import LAZY_TABLES, FileCheck, RunContents, TableRead

ROOT_MARK = ".mfm-remote-root.json"
"""In a mirror's top folder: the URL it mirrors."""
REFUSED_MARK = ".mfm-remote-refused.json"
"""In a mirrored run: the objects not fetched and why, per phase (``listing``, ``run``,
``lazy``, ``episodes``, ``frames``), as ``{phase: {key: reason}}`` (:func:`refused_problems`)."""
NOT_FETCHED = "could not be fetched"
"""How a download that failed (not a refusal) begins its reason: it is tried again later."""
PART = re.compile(r"^\..+\.(\d+)\.part$")
"""A download in progress (a file, or an episode folder being fetched), named for its process."""
STALE_PART_SECONDS = 3600.0
"""A ``.part`` of a live process other than this one is taken as left over after this long
(its process id was reused)."""
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


def _is_file_name(rel: str) -> bool:
    """Whether the last segment of a key names a file in a run's layout (it has an extension:
    ``index.jsonl``, ``GUIDE.md``, ``00000.webp``); folders have none (``mine``, ``episodes``)."""
    name = rel.rsplit("/", 1)[-1]
    return "." in name.lstrip(".")


def settle(infos: dict[str, dict], folders: set[str] | frozenset[str] = frozenset()
           ) -> tuple[dict[str, dict], dict[str, str]]:
    """What may be fetched of listed objects (key relative to the run -> listing entry), and
    what is not, with why (key -> reason), decided from the listing alone.

    Keys that cannot become local paths (:func:`safe_rel`) are dropped unreported, as before.
    A key that is both an object and a folder of objects (``mine`` and ``mine/GUIDE.md``;
    ``folders`` names folders listed but not walked) keeps the side the run's layout expects:
    the object when its name is a file name (``index.jsonl``), else the folder; the other side
    is one reason, at that key. An object larger than its kind's bound is one reason."""
    under = set(folders)
    for rel in infos:
        parts = rel.split("/")
        under.update("/".join(parts[:i]) for i in range(1, len(parts)))
    refused: dict[str, str] = {}
    dropped: set[str] = set()
    for rel in sorted(set(infos) & under):
        if not safe_rel(rel) or any(rel.startswith(d + "/") for d in dropped):
            continue
        if _is_file_name(rel):
            dropped.add(rel)
            refused[rel] = "both an object and a folder of objects in the bucket: the folder is left out"
        else:
            refused[rel] = "both an object and a folder of objects in the bucket: the object is left out"
    keep: dict[str, dict] = {}
    for rel, info in infos.items():
        if not safe_rel(rel) or (rel in refused and not _is_file_name(rel)):
            continue
        if any(rel.startswith(d + "/") for d in dropped):
            continue
        why = oversize(rel, int(info.get("size") or 0))
        if why is not None:
            refused[rel] = why
            continue
        keep[rel] = info
    return keep, refused


def _clear_way(local: Path, rel: str) -> None:
    """Remove what stands in the mirror where ``rel`` and its folders go: a file where a
    folder is needed, a folder where the file goes (the bucket changed shape; a mirror is
    derived data). ``rel`` is a safe key (:func:`safe_rel`)."""
    here = local
    for part in rel.split("/")[:-1]:
        here = here / part
        if here.is_symlink() or here.exists() and not here.is_dir():
            here.unlink()
    target = local / rel
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)


def _fetch(fs, pairs: list[tuple[str, str]], local: Path) -> dict[str, str]:
    """Download objects (key, path relative to ``local``) to files under ``local``, each
    written to a ``.part`` file beside its place, checked against its kind's bound once
    there, and renamed into place; the ``.part`` files are removed whatever happens. A batch
    that fails is fetched one object at a time; returns the objects that could not be
    fetched, with why."""
    if not pairs:
        return {}
    failed: dict[str, str] = {}
    tmps = [(local / rel).with_name(f".{rel.rsplit('/', 1)[-1]}.{os.getpid()}.part") for _, rel in pairs]
    try:
        for (_, rel), t in zip(pairs, tmps):
            _clear_way(local, rel)
            t.parent.mkdir(parents=True, exist_ok=True)
        try:
            fs.get([k for k, _ in pairs], [str(t) for t in tmps])
        except OSError:
            for (key, rel), t in zip(pairs, tmps):
                try:
                    fs.get(key, str(t))
                except OSError as e:
                    failed[rel] = f"{NOT_FETCHED}: {e.strerror or type(e).__name__}"
        for (_, rel), t in zip(pairs, tmps):
            if rel in failed:
                continue
            try:
                why = oversize(rel, t.stat().st_size)
            except OSError as e:
                why = f"{NOT_FETCHED}: {e.strerror or type(e).__name__}"
            if why is not None:
                failed[rel] = why
                continue
            _clear_way(local, rel)
            os.replace(t, local / rel)
    finally:
        for t in tmps:
            t.unlink(missing_ok=True)
    return failed


_refused_lock = threading.Lock()


def _note_refused(local: Path, phase: str, refused: dict[str, str], replace: bool = True) -> None:
    """Record the objects of a mirrored run not fetched in one phase (``replace``: these
    are all of that phase's; otherwise they join those recorded)."""
    with _refused_lock:
        kept = _read_mark(local / REFUSED_MARK)
        now = dict(refused) if replace else {**kept.get(phase, {}), **refused}
        if kept.get(phase, {}) == now:
            return
        kept[phase] = now
        _write_mark(local / REFUSED_MARK, kept)


def refused_problems(local: Path) -> list[Problem]:
    """The objects of a mirrored run that were not fetched, one problem each, naming the key
    (relative to the run) and why."""
    out: dict[tuple[str, str], Problem] = {}
    for phase in _read_mark(local / REFUSED_MARK).values():
        if isinstance(phase, dict):
            for rel, why in sorted(phase.items()):
                out.setdefault((str(rel), str(why)), Problem(str(rel), 0, str(why)))
    return list(out.values())


def with_refusals(c: RunContents, local: Path) -> RunContents:
    """A mirrored run's contents with a problem for each object not fetched (a manifest not
    fetched stands for itself: no second problem saying it is missing)."""
    extra = refused_problems(local)
    if not extra:
        return c
    if any(p.file == MANIFEST for p in extra):
        c.problems = [p for p in c.problems if not (p.file == MANIFEST and p.message.startswith("missing"))]
    have = {(p.file, p.message) for p in c.problems}
    c.problems += [p for p in extra if (p.file, p.message) not in have]
    return c


_cleaned: set[str] = set()


def clean_parts(local: Path) -> int:
    """Remove the ``.part`` files and folders under a mirrored run left by processes that
    died mid-download (once per run and process); the number removed."""
    with _lock:
        if str(local) in _cleaned:
            return 0
        _cleaned.add(str(local))
    removed = 0
    for here, dirs, names in os.walk(local):
        for name in [*names, *dirs]:
            m = PART.match(name)
            if m is None or not _left_over(int(m.group(1)), Path(here) / name):
                continue
            path = Path(here) / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                dirs.remove(name)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def _left_over(pid: int, path: Path) -> bool:
    """Whether a ``.part`` of process ``pid`` is left over: its process is gone, or it is
    another process's and old (:data:`STALE_PART_SECONDS`)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        pass
    try:
        return time.time() - path.lstat().st_mtime > STALE_PART_SECONDS
    except OSError:
        return False


def _sync_files(fs, run_url_path: str, local: Path, infos: dict[str, dict], mark: dict) -> dict[str, str]:
    """Fetch the listed files (relative path -> listing entry, settled) whose stamp changed;
    the ones that could not be fetched, with why."""
    have = mark.setdefault("files", {})
    todo = [(rel, info) for rel, info in infos.items() if safe_rel(rel) and have.get(rel) != _stamp(info)]
    failed = _fetch(fs, [(f"{run_url_path}/{rel}", rel) for rel, _ in todo], local)
    for rel, info in todo:
        if rel not in failed:
            have[rel] = _stamp(info)
    return failed


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
    to date: a folder per run holding its ``run.json`` and ``lives.jsonl``. Spellings of one
    URL (``normal_url``: ``s3://b/root/``, ``s3://b/./root``) share one mirror."""
    url = normal_url(url)
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
                clean_parts(run_local)
                m = _read_mark(run_local / RUN_MARK)
                m["url"] = f"{url.rstrip('/')}/{rel}" if rel else url.rstrip("/")
                keep, refused = settle({n: files[n] for n in LISTED if n in files})
                refused.update(_sync_files(fs, here, run_local, keep, m))
                _write_mark(run_local / RUN_MARK, m)
                _note_refused(run_local, "listing", refused)
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


def run_identity(path: Path) -> str:
    """What one run is, however it was reached: for a run mirrored from a bucket, its URL
    written one way (``normal_url``; keys differing in case are different runs), so the
    mirrors of a root and of the run itself are one run; else its path with symlinks resolved."""
    path = Path(path)
    url = _read_mark(path / RUN_MARK).get("url") if (path / RUN_MARK).is_file() else None
    if isinstance(url, str) and is_url(url):
        return normal_url(url)
    return str(path.resolve())


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
    clean_parts(local)
    try:
        files, dirs = _list_run(fs, path)
        infos = dict(files)
        for d in dirs:
            if d != "episodes" and not d.startswith(".") and safe_rel(d):
                fs.invalidate_cache(f"{path}/{d}")
                for key, info in fs.find(f"{path}/{d}", detail=True).items():
                    infos[key[len(path) + 1:]] = info
        keep, refused = settle(infos, frozenset(d for d in dirs if safe_rel(d)))
        mark["lazy"] = {rel: _stamp(keep.pop(rel)) for rel in LAZY_TABLES if rel in keep}
        refused.update(_sync_files(fs, path, local, keep, mark))
    except (OSError, StoreError) as e:
        raise StoreError(f"{url}: {e}") from None
    _write_mark(local / RUN_MARK, mark)
    _note_refused(local, "run", refused)


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
            failed = _fetch(fs, [(f"{path}/{name}", name)], local)
        except (OSError, StoreError) as e:
            raise StoreError(f"{url}: {e}") from None
        _note_refused(local, "lazy", failed)
        if not failed:
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
            found = fs.find(f"{path}/episodes", detail=True)
        except FileNotFoundError:
            found = {}
        infos = {k[len(path) + 1:]: info for k, info in found.items()}
        keep, refused = settle(infos)
        self.listing = frozenset(keep) | frozenset(k for k in refused if k in infos and _is_file_name(k))
        out = super().run(refs) + [Problem(rel, 0, why) for rel, why in sorted(refused.items())]
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
        if any(p.file == MANIFEST for p in refused_problems(path)):
            self.format = "mfm"

    def contents(self) -> RunContents:
        from loaders.cachedread import read_one_table_cached
        from mfm.validate import validate

        return with_refusals(validate(self.path, read=read_one_table_cached, files=ListedFileCheck, lazy=True),
                             self.path)

    def read_table(self, path: Path, name: str) -> TableRead:
        if name in LAZY_TABLES:
            fetch_lazy(self.path, name)
        return super().read_table(path, name)

    def fetch_episode(self, ref: IndexRow) -> None:
        """Download an episode folder into the mirror unless it is there (folders never
        change): its objects settled (:func:`settle`), fetched into a ``.part`` folder (removed
        whatever happens) renamed into place; the objects not fetched are recorded."""
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
                found = fs.find(f"{path}/{rel}", detail=True)
                keep, refused = settle({k[len(path) + len(rel) + 2:]: info for k, info in found.items()})
                if tmp.exists():
                    shutil.rmtree(tmp)
                failed = _fetch(fs, [(f"{path}/{rel}/{sub}", sub) for sub in keep], tmp)
                refused.update(failed)
                if keep and not any(why.startswith(NOT_FETCHED) for why in failed.values()):
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp, dest)
                _note_refused(self.path, "episodes", {f"{rel}/{k}": why for k, why in refused.items()
                                                      if not why.startswith(NOT_FETCHED)}, replace=False)
            except (OSError, StoreError):
                return
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)

    def _refused(self, rel: str) -> str | None:
        """Why the object at ``rel`` was not fetched, if it was refused."""
        return next((p.message for p in refused_problems(self.path) if p.file == rel), None)

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        self.fetch_episode(ref)
        return super().episode_record(ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        self.fetch_episode(ref)
        try:
            return super().observation(ref)
        except FrameError:
            why = self._refused(ref.image) if ref.image else None
            if why is None:
                raise
            raise FrameError(f"{ref.image}: {why}") from None

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        ref = index.episode_at(step)
        if ref is not None:
            self.fetch_episode(ref)
        try:
            return super().step_frame(index, step)
        except FrameError:
            rel = frame_chunk(ref.path, step - ref.first_step - 1)[0] if ref is not None else ""
            why = self._refused(rel)
            if why is None:
                raise
            raise FrameError(f"{rel}: {why}") from None


def fetch_all(local: Path) -> None:
    """Fetch every episode file of a mirrored run not fetched yet (``--frames`` checks); the
    objects not fetched are recorded (:func:`settle`)."""
    url = str(_read_mark(local / RUN_MARK).get("url", ""))
    fs, path = filesystem(url)
    fs.invalidate_cache(f"{path}/episodes")
    try:
        found = fs.find(f"{path}/episodes", detail=True)
    except FileNotFoundError:
        return
    keep, refused = settle({k[len(path) + 1:]: info for k, info in found.items()})
    refused.update(_fetch(fs, [(f"{path}/{r}", r) for r in keep if not (local / r).is_file()], local))
    _note_refused(local, "frames", refused)


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
    return with_refusals(validate(local, frames, read=read_one_table_fast, files=ListedFileCheck), local)
