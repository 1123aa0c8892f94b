"""Runs roots in object storage (``s3://bucket/prefix``), read through a local mirror.

Every reader in ``loaders`` works on folders. A runs root in a bucket is therefore read
into a *mirror*: a folder under the user's cache (``$MFM_REMOTE_DIR``, else
``~/.cache/mfm/remote/<hash of the URL>/``) laid out as the bucket is, filled lazily:

- :func:`mirror_root` reads each folder's manifest (``mfm.objectstore.ROOT_MANIFEST``: one
  GET for the ``run.json`` and ``lives.jsonl`` of every closed run in it), and lists the
  bucket (one delimiter listing per folder level, as :func:`loaders.run.find_runs` walks a
  disk, fetching each run's ``run.json`` and ``lives.jsonl``) where there is no manifest or
  its last check against a listing is too old. Never a whole run.
- :func:`sync_run` (when a run is read) lists its folder and reads its columnar copy
  (``loaders.columns``) for every table whose size and ETag are those it was made from;
  other tables, ``logs.txt`` and ``mine/`` are fetched, each file again only when its size
  or ETag changed; a lazy table (``mfm.validate.LAZY_TABLES``) only when it is asked for
  (:func:`fetch_lazy`).
- :class:`RemoteSource` fetches an episode folder (records, frame strips, observation)
  the first time a page asks for one of its frames or records, or of a packed run the
  members asked for, by range (:func:`remote_pack`); and checks the run's files against one
  listing of ``episodes/`` instead of stat'ing them.

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

import contextlib
import functools
import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from loaders.sources import DirSource
from mfm.memory import packed
from mfm.memory.index import EpisodeIndex
from mfm.memory.packed import PACK
from mfm.memory.retrieval import EpisodeRecord, FrameError
from mfm.objectstore import (COLUMNS, ROOT_MANIFEST, StoreError, cache_root, filesystem, folder_entries, get_object,
                             is_url, join, manifest_entry, normal_url, oversize, put_object, read_root_manifest,
                             update_root_manifest, url_hash)
from mfm.schema import CLOSED_STATUSES, FRAMES_PER_CHUNK, MANIFEST, TABLES, IndexRow, Problem, frame_chunk
from mfm.validate import LAZY_TABLES, FileCheck, RunContents, TableRead

if TYPE_CHECKING:
    from loaders.columns import Columns

RUN_MARK = ".mfm-remote.json"
"""A run mirrored from object storage holds this file (its URL and what was fetched)."""

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
MANIFEST_CHECK_SECONDS = 600.0
"""A folder's manifest (``mfm.objectstore.ROOT_MANIFEST``) is checked against a listing of
the folder when its last check is older than this (``MFM_MANIFEST_CHECK_SECONDS``)."""
WRITE_BACK_OFF = ("0", "off", "no", "false", "none")
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
_lazy_lock = threading.Lock()


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


_listings: dict[str, tuple[float, dict[str, dict], list[str]]] = {}


def _remember(path: str, files: dict[str, dict], dirs: list[str]) -> None:
    """Keep a run folder's listing made while a root was listed, for :func:`sync_run` to use
    within :data:`TTL` instead of listing the folder again."""
    with _lock:
        _listings[path] = (time.monotonic(), files, dirs)


def _recent(path: str) -> tuple[dict[str, dict], list[str]] | None:
    with _lock:
        hit = _listings.pop(path, None)
    return (hit[1], hit[2]) if hit is not None and time.monotonic() - hit[0] < TTL else None


def write_back_allowed(mark_file: Path) -> bool:
    """Whether this reader may write derived objects (a columnar copy, a manifest) into the
    bucket: ``MFM_WRITE_BACK`` is not ``0``/``off``, and no earlier write there was refused
    (remembered in the mirror's ``mark_file``)."""
    if os.environ.get("MFM_WRITE_BACK", "").strip().lower() in WRITE_BACK_OFF:
        return False
    return _read_mark(mark_file).get("write_back") != "denied"


def _refused_write(mark_file: Path, e: Exception) -> None:
    """Remember that the bucket refused a write (no permission): not tried again."""
    if any(code in str(e) for code in ("AccessDenied", "Forbidden", "Permission", "NotImplemented")):
        m = _read_mark(mark_file)
        m["write_back"] = "denied"
        _write_mark(mark_file, m)


def _check_seconds() -> float:
    try:
        return float(os.environ.get("MFM_MANIFEST_CHECK_SECONDS", "") or MANIFEST_CHECK_SECONDS)
    except ValueError:
        return MANIFEST_CHECK_SECONDS


def _from_entry(run_local: Path, run_url: str, entry: object) -> bool:
    """Mirror a closed run from its folder's manifest entry (its ``run.json`` and
    ``lives.jsonl`` as they were in the bucket, with their stamps), with no request. False,
    doing nothing, for an entry of a run not closed (read from the bucket instead: it moves
    on) or one that is not well formed."""
    if not isinstance(entry, dict) or entry.get("status") not in CLOSED_STATUSES:
        return False
    stamps = entry.get("stamps")
    if not isinstance(stamps, dict) or not isinstance(entry.get("manifest"), str) or "run.json" not in stamps:
        return False
    run_local.mkdir(parents=True, exist_ok=True)
    m = _read_mark(run_local / RUN_MARK)
    m["url"] = run_url
    have = m.setdefault("files", {})
    for name, key in (("run.json", "manifest"), ("lives.jsonl", "lives")):
        want = stamps.get(name)
        text = entry.get(key)
        if want is None or not isinstance(text, str) or oversize(name, len(text)) is not None:
            continue
        if have.get(name) != want or not (run_local / name).is_file():
            _save_bytes(run_local, name, text.encode("utf-8"))
            have[name] = want
    if isinstance(entry.get("episodes"), int):
        m["episodes"] = entry["episodes"]
    _write_mark(run_local / RUN_MARK, m)
    if isinstance(entry.get("episodes"), int):
        with _lock:
            _entries[str(run_local)] = (time.monotonic(), entry)
    return True


_entries: dict[str, tuple[float, dict]] = {}


def _entry(local: Path, keep: bool = True) -> dict | None:
    """The manifest entry a mirrored run was last brought up to date from by this process,
    if that was less than :data:`ROOT_TTL` seconds ago (``keep=False``: and forget it)."""
    with _lock:
        hit = _entries.get(str(local)) if keep else _entries.pop(str(local), None)
    return hit[1] if hit is not None and time.monotonic() - hit[0] < ROOT_TTL else None


def _entry_listing(local: Path) -> tuple[dict[str, dict], list[str]] | None:
    """A recent manifest entry of the run (:func:`_entry`) as a listing of its folder."""
    entry = _entry(local, keep=False)
    if entry is None or not isinstance(entry.get("folders"), list):
        return None
    try:
        files = {str(n): {"size": int(st[0]), "ETag": str(st[1])} for n, st in entry["stamps"].items()}
    except (TypeError, ValueError, IndexError, AttributeError):
        return None
    return files, [str(d) for d in entry["folders"]]


def mirror_root(url: str, force: bool = False) -> Path:
    """The mirror of a runs root (or of one run) in object storage, its listing brought up
    to date: a folder per run holding its ``run.json`` and ``lives.jsonl``. Spellings of one
    URL (``normal_url``: ``s3://b/root/``, ``s3://b/./root``) share one mirror.

    A folder of runs with a manifest (``mfm.objectstore.ROOT_MANIFEST``) is read from it: one
    GET gives every closed run's ``run.json`` and ``lives.jsonl``; runs still running are
    read from the bucket. The folder is listed only when the manifest's last check against a
    listing is older than ``MFM_MANIFEST_CHECK_SECONDS`` (:data:`MANIFEST_CHECK_SECONDS`),
    or there is no manifest: then runs found in the listing but not in the manifest are
    read from the bucket, entries of runs gone are dropped, and the manifest is written back
    (when this reader may write: :func:`write_back_allowed`) with the time of the check.
    ``force`` lists everything, as without a manifest."""
    url = normal_url(url)
    fs, path = filesystem(url)
    local = mirror_dir(url)
    local.mkdir(parents=True, exist_ok=True)
    mark = local / ROOT_MARK
    if not mark.is_file():
        _write_mark(mark, {"url": url.rstrip("/")})
    if _fresh(f"root:{local}", force, ROOT_TTL):
        return local
    top = url.rstrip("/")
    learned: dict[str, dict] = {}
    checked: dict[str, tuple[dict | None, str, set[str]]] = {}
    learn_lock = threading.Lock()

    def at(rel: str) -> tuple[str, str, Path]:
        return (f"{path}/{rel}" if rel else path), (f"{top}/{rel}" if rel else top), (local / rel if rel else local)

    def learn(rel: str, kind: str, value: object) -> None:
        parent, _, name = rel.rpartition("/")
        with learn_lock:
            got = learned.setdefault(parent, {"runs": {}, "folders": set()})
            if kind == "run":
                got["runs"][name] = value
            else:
                got["folders"].add(name)

    def run_here(rel: str, files: dict[str, dict], dirs: list[str]) -> None:
        here, run_url, run_local = at(rel)
        run_local.mkdir(parents=True, exist_ok=True)
        clean_parts(run_local)
        m = _read_mark(run_local / RUN_MARK)
        m["url"] = run_url
        keep, refused = settle({n: files[n] for n in LISTED if n in files})
        refused.update(_sync_files(fs, here, run_local, keep, m))
        _write_mark(run_local / RUN_MARK, m)
        _note_refused(run_local, "listing", refused)
        _remember(here, files, dirs)
        if rel and not refused and "run.json" in files:
            try:
                entry = manifest_entry((run_local / "run.json").read_bytes(),
                                       (run_local / "lives.jsonl").read_bytes() if "lives.jsonl" in files else b"",
                                       files, dirs)
            except OSError:
                return
            if entry["status"] in CLOSED_STATUSES:
                learn(rel, "run", entry)

    def visit(item: tuple[str, bool]) -> list[tuple[str, bool]]:
        """Mirror the run at ``rel``, or return what to look at under the folder there
        (``ask``: try the folder's manifest before listing it)."""
        rel, ask = item
        here, folder_url, _ = at(rel)
        doc, etag = (None, "")
        if ask and not force:
            doc, etag = read_root_manifest(folder_url)
            if doc is not None and _manifest_fresh(mark, rel, doc):
                return _use_manifest(rel, doc)
        files, dirs = folder_entries(fs, here)
        if "run.json" in files or "index.jsonl" in files:
            run_here(rel, files, dirs)
            return []
        if rel:
            learn(rel, "folder", None)
        if doc is None and ROOT_MANIFEST in files and not force:
            doc, etag = read_root_manifest(folder_url)
        subs = [d for d in sorted(dirs) if not d.startswith(".") and safe_rel(d)]
        with learn_lock:
            checked[rel] = (doc, etag, set(subs))
        entries = doc["runs"] if doc is not None else {}
        out = []
        for d in subs:
            r = f"{rel}/{d}" if rel else d
            if d in entries and _from_entry(at(r)[2], at(r)[1], entries[d]):
                learn(r, "run", entries[d])
            else:
                out.append((r, d in (doc or {}).get("folders", [])))
        return out

    def _use_manifest(rel: str, doc: dict) -> list[tuple[str, bool]]:
        out = []
        for name, entry in sorted(doc["runs"].items()):
            if not isinstance(name, str) or "/" in name or name.startswith(".") or not safe_rel(name):
                continue
            r = f"{rel}/{name}" if rel else name
            if not _from_entry(at(r)[2], at(r)[1], entry):
                out.append((r, False))
        for name in doc.get("folders") or []:
            if isinstance(name, str) and "/" not in name and not name.startswith(".") and safe_rel(name):
                out.append((f"{rel}/{name}" if rel else name, True))
        return out

    try:
        fs.invalidate_cache(path)
        level = [("", True)]
        with ThreadPoolExecutor(max_workers=LISTERS) as pool:
            for _ in range(MAX_DEPTH + 1):
                level = [sub for subs in pool.map(visit, level) for sub in subs]
                if not level:
                    break
    except FileNotFoundError:
        raise StoreError(f"{url}: no such bucket or prefix") from None
    except OSError as e:
        raise StoreError(f"{url}: {e}") from None
    for rel, (doc, etag, subs) in checked.items():
        _record_check(mark, rel, at(rel)[1], doc, etag, subs, learned.get(rel, {"runs": {}, "folders": set()}))
    return local


def _manifest_fresh(mark: Path, rel: str, doc: dict) -> bool:
    """Whether a folder's manifest was checked against a listing of the folder (by anyone,
    or by this mirror) less than :func:`_check_seconds` ago."""
    mine = _read_mark(mark).get("checked", {}).get(rel or ".", 0)
    last = max(float(doc.get("checked") or 0), float(mine or 0))
    return time.time() - last < _check_seconds()


def _record_check(mark: Path, rel: str, folder_url: str, doc: dict | None, etag: str, subs: set[str],
                  got: dict) -> None:
    """After a folder was listed: its manifest brought in line with the listing (runs and
    folders found; entries of runs gone dropped) and written back when this reader may; the
    time of the check kept in the mirror either way."""
    m = _read_mark(mark)
    m.setdefault("checked", {})[rel or "."] = time.time()
    _write_mark(mark, m)
    if not write_back_allowed(mark) or (doc is None and not got["runs"]):
        return
    now = time.time()

    def change(d: dict) -> dict | None:
        runs = {k: v for k, v in d["runs"].items() if k in subs}
        runs.update(got["runs"])
        new = dict(d, runs=runs, folders=sorted(set(got["folders"]) & subs), checked=now)
        return None if new == d else new

    try:
        update_root_manifest(folder_url, change, known=(doc, etag) if doc is not None else None)
    except StoreError as e:
        _refused_write(mark, e)


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


def _columns(fs, path: str, local: Path, info: dict | None, mark: dict) -> Columns | None:
    """The run's columnar copy (``loaders.columns``) in the mirror, fetched when the bucket's
    (``info``, its listing entry) differs from the one kept; None when the bucket has none,
    or it cannot be fetched or used."""
    from loaders.columns import load

    if info is None:
        if mark.pop("columns", None) is not None:
            (local / COLUMNS).unlink(missing_ok=True)
        return None
    want = _stamp(info)
    if mark.get("columns") != want or not (local / COLUMNS).is_file():
        why = oversize(COLUMNS, int(info.get("size") or 0))
        if why is not None or _fetch(fs, [(f"{path}/{COLUMNS}", COLUMNS)], local):
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
    if not force and deferred and _entry(local) is not None:
        return
    if _fresh(f"run:{local}", force):
        return
    mark = _read_mark(local / RUN_MARK)
    url = mark.get("url")
    if not isinstance(url, str) or not is_url(url):
        return
    fs, path = filesystem(url)
    clean_parts(local)
    try:
        listed = None if force else (_recent(path) or _entry_listing(local))
        files, dirs = listed if listed is not None else folder_entries(fs, path)
        files = {n: i for n, i in files.items() if n not in (ROOT_MANIFEST,)}
        cols = _columns(fs, path, local, files.pop(COLUMNS, None), mark) if columns else None
        stamps = {n: _stamp(i) for n, i in files.items()}
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
                _save_bytes(local, rel, data)
                have[rel] = list(st)
        for d in dirs:
            if d != "episodes" and d not in covered and not d.startswith(".") and safe_rel(d):
                fs.invalidate_cache(f"{path}/{d}")
                for key, info in fs.find(f"{path}/{d}", detail=True).items():
                    infos[key[len(path) + 1:]] = info
        keep, refused = settle(infos, frozenset(d for d in dirs if safe_rel(d)))
        mark["lazy"] = {rel: _stamp(keep.pop(rel)) for rel in LAZY_TABLES if rel in keep}
        refused.update(_sync_files(fs, path, local, keep, mark))
        for name in served:
            if have.get(name) != stamps[name] and (have.pop(name, None) is not None or (local / name).exists()):
                (local / name).unlink(missing_ok=True)
    except (OSError, StoreError) as e:
        raise StoreError(f"{url}: {e}") from None
    _write_mark(local / RUN_MARK, mark)
    _note_refused(local, "run", refused)


def _save_bytes(local: Path, rel: str, data: bytes) -> None:
    """Write a file of a mirrored run (atomically, through a ``.part`` file)."""
    _clear_way(local, rel)
    target = local / rel
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def fetch_table(local: Path, name: str) -> None:
    """Fetch a table of a mirrored run as JSONL (one whose columns could not be used), if
    the last listing showed it."""
    mark = _read_mark(local / RUN_MARK)
    url = mark.get("url")
    want = mark.get("listed", {}).get(name)
    if want is None or not isinstance(url, str) or not is_url(url):
        return
    fs, path = filesystem(url)
    with _lazy_lock:
        failed = _fetch(fs, [(f"{path}/{name}", name)], local)
        if not failed:
            m = _read_mark(local / RUN_MARK)
            m.setdefault("files", {})[name] = want
            m["served"] = [n for n in m.get("served", []) if n != name]
            _write_mark(local / RUN_MARK, m)


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


def _index_key(mark: dict) -> list | None:
    """The stamp of the bucket's ``index.jsonl`` the mirror last saw (listed, or fetched)."""
    return mark.get("listed", {}).get("index.jsonl") or mark.get("files", {}).get("index.jsonl")


class ListedFileCheck(FileCheck):
    """The file checks of a mirrored run, against one listing of its ``episodes/`` in the
    bucket, made only when needed: the problems found are kept in the mirror with the
    ``index.jsonl`` they were found for (its size and ETag in the bucket), and reused while
    it is the same (an episode's files never change once its row is written; as the local
    file checks' cache, a file deleted from the bucket behind an unchanged index is not seen)."""

    def __init__(self, run_dir: Path, cols: Columns | None = None) -> None:
        super().__init__(run_dir)
        self.mark = _read_mark(run_dir / RUN_MARK)
        self.key = _index_key(self.mark)
        self.cols = cols

    def known(self) -> list[Problem] | None:
        if self.cols is not None:
            got = self.cols.file_problems(self.key)
            if got is not None:
                return got
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
        pack = remote_pack(self.run_dir)
        if pack is not None:
            self.listing |= frozenset(pack[1].members)
        out = super().run(refs) + [Problem(rel, 0, why) for rel, why in sorted(refused.items())]
        if self.key is not None:
            mark = _read_mark(self.run_dir / RUN_MARK)
            if _index_key(mark) == self.key:
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

    def episode_count(self) -> int:
        """The rows of the run's index without reading the run: the lines of its
        ``index.jsonl`` in the mirror, else the count its columnar copy or its folder's
        manifest gave (0 when neither is known)."""
        try:
            with open(self.path / "index.jsonl", "rb") as f:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            got = _read_mark(self.path / RUN_MARK).get("episodes")
            return got if isinstance(got, int) else 0

    def _served(self) -> tuple[Columns | None, set[str]]:
        """The columnar copy in the mirror and the tables to read from it (their columns
        were made from the objects the last listing showed)."""
        from loaders.columns import load

        served = set(_read_mark(self.path / RUN_MARK).get("served", []))
        cols = load(self.path) if served else None
        return cols, served if cols is not None else set()

    def _read(self, cols: Columns | None, served: set[str], path: Path, name: str) -> TableRead:
        """One table: from the columnar copy when it serves it, else the JSONL in the mirror
        (fetched now if the copy's part cannot be read)."""
        from loaders.cachedread import read_one_table_cached

        if cols is not None and name in served:
            try:
                return cols.table(name)
            except Exception:  # noqa: BLE001 - a damaged part: the table is read from its file
                fetch_table(self.path, name)
        elif name in LAZY_TABLES:
            fetch_lazy(self.path, name)
        return read_one_table_cached(path, name)

    def contents(self) -> RunContents:
        from mfm.validate import validate

        sync_run(self.path, deferred=False)
        cols, served = self._served()
        c = validate(self.path, read=functools.partial(self._read, cols, served),
                     files=functools.partial(ListedFileCheck, cols=cols), lazy=True)
        if cols is None and c.manifest is not None and c.manifest.status in CLOSED_STATUSES:
            write_back_later(self.path)
        return with_refusals(c, self.path)

    def read_table(self, path: Path, name: str) -> TableRead:
        cols, served = self._served()
        return self._read(cols, served, path, name)

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

    def _from_pack(self, rels: list[str]) -> bool:
        """Bring members of the run's pack in the bucket into the mirror's episode folders,
        read by one range covering them all (:func:`fetch_members`); False when the run's
        pack is not read by ranges (it has none, or it is in the mirror whole)."""
        pack = remote_pack(self.path)
        if pack is None:
            return False
        with self._fetch_lock:
            fetch_members(self.path, pack, rels)
        return True

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        if not self._from_pack([f"{ref.path}/{n}" for n in ("action.json", "outcome.json", "state/state.json")]):
            self.fetch_episode(ref)
        return super().episode_record(ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        if not self._from_pack([ref.image] if ref.image else []):
            self.fetch_episode(ref)
        try:
            return super().observation(ref)
        except FrameError:
            why = self._refused(ref.image) if ref.image else None
            if why is None:
                raise
            raise FrameError(f"{ref.image}: {why}") from None

    def _strip(self, ref: IndexRow, frame: int) -> None:
        """Bring the strip holding frame ``frame`` of an episode (by range from a pack, else
        its episode folder) into the mirror."""
        if not self._from_pack([frame_chunk(ref.path, frame)[0]]):
            self.fetch_episode(ref)

    def prefetch(self, index: EpisodeIndex, ref: IndexRow) -> None:
        """Bring, in the background, the strips a step to either side of an episode shows
        (the previous episode's last strip, the next one's first): what the Timeline's next
        click asks for. Done for packed runs read by ranges (a strip is one request; an
        episode folder would be a listing and a GET per file). Bounded: :data:`PREFETCH_WORKERS` threads, at most
        :data:`PREFETCH_QUEUE` waiting (more are dropped), each strip asked for once per
        process; a failure is left for the click itself to meet."""
        before = index.episode_at(ref.first_step) if ref.first_step > 0 else None
        after = index.episode_at(ref.last_step + 1)
        for near, frame in ((before, -1), (after, 0)):
            if near is None or not near.frames:
                continue
            frame = near.frames - 1 if frame < 0 else 0
            key = (str(self.path), near.path, frame // FRAMES_PER_CHUNK)
            with _prefetch_lock:
                if key in _prefetched or _prefetch_waiting[0] >= PREFETCH_QUEUE:
                    continue
                _prefetched.add(key)
                _prefetch_waiting[0] += 1
            future = _prefetch_pool().submit(self._prefetch_one, near, frame)
            with _prefetch_lock:
                _futures.append(future)

    def _prefetch_one(self, ref: IndexRow, frame: int) -> None:
        try:
            with contextlib.suppress(Exception):  # a prefetch that fails is met again by the click
                self._strip(ref, frame)
        finally:
            with _prefetch_lock:
                _prefetch_waiting[0] -= 1

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        ref = index.episode_at(step)
        if ref is not None:
            self._strip(ref, step - ref.first_step - 1)
            if prefetching() and remote_pack(self.path) is not None:
                self.prefetch(index, ref)
        try:
            return super().step_frame(index, step)
        except FrameError:
            rel = frame_chunk(ref.path, step - ref.first_step - 1)[0] if ref is not None else ""
            why = self._refused(rel)
            if why is None:
                raise
            raise FrameError(f"{rel}: {why}") from None


PREFETCH_WORKERS = 2
"""Threads that bring neighbouring strips in the background (:meth:`RemoteSource.prefetch`)."""
PREFETCH_QUEUE = 4
"""Strips waiting to be prefetched at most; more asks are dropped."""
_prefetch_lock = threading.Lock()
_prefetched: set[tuple[str, str, int]] = set()
_prefetch_waiting = [0]
_futures: list = []
_pool: list[ThreadPoolExecutor] = []


def prefetching() -> bool:
    """Whether neighbouring strips are prefetched (``MFM_PREFETCH`` is not ``0``/``off``)."""
    return os.environ.get("MFM_PREFETCH", "").strip().lower() not in WRITE_BACK_OFF


def _prefetch_pool() -> ThreadPoolExecutor:
    with _prefetch_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=PREFETCH_WORKERS, thread_name_prefix="mfm-prefetch"))
        return _pool[0]


def prefetch_wait() -> None:
    """Return once the prefetches asked for so far are done (tests, benchmarks)."""
    with _prefetch_lock:
        waiting = list(_futures)
        _futures.clear()
    for f in waiting:
        f.result()


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
    sync_run(local, force=True, columns=False)
    for name in LAZY_TABLES:
        fetch_lazy(local, name)
    if frames:
        fetch_all(local)
    return with_refusals(validate(local, frames, read=read_one_table_fast, files=ListedFileCheck), local)


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

    mark = _read_mark(local / RUN_MARK)
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
            have = _read_mark(local / RUN_MARK).get("files", {})
    if any(have.get(n) != listed[n] for n in tables) or have.get("run.json") != listed.get("run.json"):
        return False
    try:
        data = build(local, {**have, **listed}, files=ListedFileCheck)
        if data is None:
            return False
        put_object(join(url, COLUMNS), data, if_match=stale[1] if stale else None, if_absent=stale is None)
    except StoreError as e:
        _refused_write(local / RUN_MARK, e)
        return False
    except Exception:  # noqa: BLE001 - derived data: the bucket stays as it was
        return False
    return True


PACK_DIR_MARK = ".mfm-remote-pack.json"
"""In a mirrored packed run: the directory of its ``episodes.zip`` in the bucket (member ->
offset, sizes, method, CRC) and the stamp of the zip it was read from, so a new process
reads a member with one request."""
MAX_SPAN_BYTES = 64 << 20
"""Members brought together are read by one range only when it spans at most this."""
_packs: dict[str, tuple[list, packed.Directory]] = {}


def remote_pack(local: Path) -> tuple[str, packed.Directory] | None:
    """(URL, directory) of a mirrored run's ``episodes.zip`` read by ranges: its directory
    read once per version of the zip (the last listing's stamp) with one or two ranged GETs
    (:func:`mfm.memory.packed.directory_by_ranges`) and kept in the mirror. None when the
    bucket holds no pack for the run, the mirror holds the whole zip (``mfm validate``), or
    it cannot be read (its episodes are then missing, as for a damaged pack on disk)."""
    mark = _read_mark(local / RUN_MARK)
    want = mark.get("listed", {}).get(PACK)
    url = mark.get("url")
    if want is None or not isinstance(url, str) or not is_url(url) or (local / PACK).exists():
        return None
    pack_url = join(url, PACK)
    with _lock:
        hit = _packs.get(str(local))
    if hit is not None and hit[0] == want:
        return pack_url, hit[1]
    kept = _read_mark(local / PACK_DIR_MARK)
    found = None
    if kept.get("stamp") == want:
        try:
            found = packed.Directory(pack_url, (0, 0, 0, int(want[0])), {
                str(n): packed.Member(*(int(v) for v in m)) for n, m in kept["members"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            found = None
    if found is None:
        try:
            found = packed.directory_by_ranges(_range_file(pack_url, int(want[0])), pack_url)
        except (packed.PackError, StoreError):
            return None
        _write_mark(local / PACK_DIR_MARK, {"stamp": want, "members": {
            n: [m.offset, m.size, m.length, m.method, m.crc] for n, m in found.members.items()}})
    with _lock:
        _packs[str(local)] = (want, found)
    return pack_url, found


def _range_file(url: str, size: int) -> packed.RangeFile:
    def get(start: int, end: int) -> bytes:
        got = get_object(url, start=start, end=end)
        if got is None:
            raise StoreError(f"{url}: gone from the bucket")
        return got[0]

    return packed.RangeFile(get, size)


def fetch_members(local: Path, pack: tuple[str, packed.Directory], rels: list[str]) -> int:
    """Write members of a pack in the bucket to their places in the mirror (files never
    change once written, so one there is not read again), reading them with one ranged GET
    spanning them when that spans at most :data:`MAX_SPAN_BYTES`, else one each; each is
    checked against the zip's size and CRC. Members missing from the pack, or whose names
    cannot be local paths, are left out (the reader then says the file is missing). The
    number written."""
    url, found = pack
    todo = [(rel, found.members[rel]) for rel in dict.fromkeys(rels)
            if rel and rel in found.members and safe_rel(rel) and rel.startswith("episodes/")
            and not (local / rel).is_file()]
    if not todo:
        return 0
    f = _range_file(url, found.identity[3])
    start = min(m.offset for _, m in todo)
    end = max(m.offset + 30 + len(rel.encode()) + 256 + m.size for rel, m in todo)
    written = 0
    try:
        if end - start <= MAX_SPAN_BYTES:
            f.prime(start, end)
        for rel, m in todo:
            try:
                data = packed.member_by_ranges(f, rel, m)
            except packed.PackError:
                continue
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            _save_bytes(local, rel, data)
            written += 1
    except (StoreError, OSError):
        pass
    return written
