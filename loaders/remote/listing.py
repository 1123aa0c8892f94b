"""Listing a runs root in object storage into its mirror (:func:`mirror_root`), never a whole run.

:func:`mirror_root` reads each folder's manifest (``mfm.objectstore.ROOT_MANIFEST``: one GET
for the ``run.json`` and ``lives.jsonl`` of every closed run in it), and lists the bucket (one
delimiter listing per folder level, as :func:`loaders.run.find_runs` walks a disk, fetching
each run's ``run.json`` and ``lives.jsonl``) where there is no manifest or its last check
against a listing is too old. What it learns of a run's folder is kept a short while for
:func:`loaders.remote.sync.sync_run` (:func:`recent_listing`, :func:`recent_entry`,
:func:`entry_listing`), so opening the run does not list it again.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loaders.remote.downloads import clean_parts, note_refused, save_bytes, settle, sync_files
from loaders.remote.mirror import (ROOT_MARK, ROOT_TTL, RUN_MARK, TTL, fresh, mirror_dir, read_mark, refused_write,
                                   safe_rel, write_back_allowed, write_mark)
from mfm.objectstore import (ROOT_MANIFEST, StoreError, filesystem, folder_entries, manifest_entry, normal_url,
                             oversize, read_root_manifest, update_root_manifest)
from mfm.schema import CLOSED_STATUSES

MAX_DEPTH = 6
LISTERS = 16
"""Folders listed at once when a root is walked (each listing is one request)."""
LISTED = ("run.json", "lives.jsonl")
"""Fetched for every run when the root is listed (the runs table reads them)."""
MANIFEST_CHECK_SECONDS = 600.0
"""A folder's manifest (``mfm.objectstore.ROOT_MANIFEST``) is checked against a listing of
the folder when its last check is older than this (``MFM_MANIFEST_CHECK_SECONDS``)."""
_lock = threading.Lock()
_listings: dict[str, tuple[float, dict[str, dict], list[str]]] = {}


def _remember(path: str, files: dict[str, dict], dirs: list[str]) -> None:
    """Keep a run folder's listing made while a root was listed, for :func:`sync_run` to use
    within :data:`TTL` instead of listing the folder again."""
    with _lock:
        _listings[path] = (time.monotonic(), files, dirs)


def recent_listing(path: str) -> tuple[dict[str, dict], list[str]] | None:
    """The listing of a run folder a root's listing kept (:func:`_remember`), if made less
    than ``TTL`` seconds ago (taken: asked once)."""
    with _lock:
        hit = _listings.pop(path, None)
    return (hit[1], hit[2]) if hit is not None and time.monotonic() - hit[0] < TTL else None


def _check_seconds() -> float:
    """Seconds a folder's manifest is trusted without a listing (``MFM_MANIFEST_CHECK_SECONDS``)."""
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
    m = read_mark(run_local / RUN_MARK)
    m["url"] = run_url
    have = m.setdefault("files", {})
    for name, key in (("run.json", "manifest"), ("lives.jsonl", "lives")):
        want = stamps.get(name)
        text = entry.get(key)
        if want is None or not isinstance(text, str) or oversize(name, len(text)) is not None:
            continue
        if have.get(name) != want or not (run_local / name).is_file():
            save_bytes(run_local, name, text.encode("utf-8"))
            have[name] = want
    if isinstance(entry.get("episodes"), int):
        m["episodes"] = entry["episodes"]
    write_mark(run_local / RUN_MARK, m)
    if isinstance(entry.get("episodes"), int):
        with _lock:
            _entries[str(run_local)] = (time.monotonic(), entry)
    return True


_entries: dict[str, tuple[float, dict]] = {}


def recent_entry(local: Path, keep: bool = True) -> dict | None:
    """The manifest entry a mirrored run was last brought up to date from by this process,
    if that was less than :data:`ROOT_TTL` seconds ago (``keep=False``: and forget it)."""
    with _lock:
        hit = _entries.get(str(local)) if keep else _entries.pop(str(local), None)
    return hit[1] if hit is not None and time.monotonic() - hit[0] < ROOT_TTL else None


def entry_listing(local: Path) -> tuple[dict[str, dict], list[str]] | None:
    """A recent manifest entry of the run (:func:`recent_entry`) as a listing of its folder."""
    entry = recent_entry(local, keep=False)
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
        write_mark(mark, {"url": url.rstrip("/")})
    if fresh(f"root:{local}", force, ROOT_TTL):
        return local
    top = url.rstrip("/")
    learned: dict[str, dict] = {}
    checked: dict[str, tuple[dict | None, str, set[str]]] = {}
    learn_lock = threading.Lock()

    def at(rel: str) -> tuple[str, str, Path]:
        """The bucket path, URL and mirror folder of ``rel`` (relative to the root)."""
        return (f"{path}/{rel}" if rel else path), (f"{top}/{rel}" if rel else top), (local / rel if rel else local)

    def learn(rel: str, kind: str, value: object) -> None:
        """Note, for the manifest of its parent folder, a closed run (``kind`` ``run``, its
        entry) or a folder of runs found at ``rel``."""
        parent, _, name = rel.rpartition("/")
        with learn_lock:
            got = learned.setdefault(parent, {"runs": {}, "folders": set()})
            if kind == "run":
                got["runs"][name] = value
            else:
                got["folders"].add(name)

    def run_here(rel: str, files: dict[str, dict], dirs: list[str]) -> None:
        """Mirror the run listed at ``rel``: its ``run.json`` and ``lives.jsonl`` fetched, its
        listing kept for :func:`~loaders.remote.sync.sync_run`, a closed one learned."""
        here, run_url, run_local = at(rel)
        run_local.mkdir(parents=True, exist_ok=True)
        clean_parts(run_local)
        m = read_mark(run_local / RUN_MARK)
        m["url"] = run_url
        keep, refused = settle({n: files[n] for n in LISTED if n in files})
        refused.update(sync_files(fs, here, run_local, keep, m))
        write_mark(run_local / RUN_MARK, m)
        note_refused(run_local, "listing", refused)
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
        """Mirror the closed runs a fresh manifest of the folder at ``rel`` holds; what is left
        to look at under it (runs not closed, and its folders of runs)."""
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
    mine = read_mark(mark).get("checked", {}).get(rel or ".", 0)
    last = max(float(doc.get("checked") or 0), float(mine or 0))
    return time.time() - last < _check_seconds()


def _record_check(mark: Path, rel: str, folder_url: str, doc: dict | None, etag: str, subs: set[str],
                  got: dict) -> None:
    """After a folder was listed: its manifest brought in line with the listing (runs and
    folders found; entries of runs gone dropped) and written back when this reader may; the
    time of the check kept in the mirror either way."""
    m = read_mark(mark)
    m.setdefault("checked", {})[rel or "."] = time.time()
    write_mark(mark, m)
    if not write_back_allowed(mark) or (doc is None and not got["runs"]):
        return
    now = time.time()

    def change(d: dict) -> dict | None:
        """The manifest ``d`` brought in line with the listing; None when it already is."""
        runs = {k: v for k, v in d["runs"].items() if k in subs}
        runs.update(got["runs"])
        new = dict(d, runs=runs, folders=sorted(set(got["folders"]) & subs), checked=now)
        return None if new == d else new

    try:
        update_root_manifest(folder_url, change, known=(doc, etag) if doc is not None else None)
    except StoreError as e:
        refused_write(mark, e)
