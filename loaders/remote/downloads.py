"""Downloads into the mirror: what a listing offers, settled before anything is fetched, and what was refused.

What a listing offers is settled before anything is fetched (:func:`settle`): an object
larger than its kind's bound (``mfm.objectstore.OBJECT_LIMITS``, by the listing's size) is
not downloaded, and a key that is both an object and a folder of objects keeps one side;
each is one problem of the run naming the key (:func:`refused_problems`), and the rest of
the run is read. A download (:func:`download`) goes to a ``.NAME.PID.part`` file beside its
place, removed whatever happens; those left by a process that died are removed when a
process first brings the run up to date (:func:`clean_parts`).
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time
from pathlib import Path

from loaders.remote.mirror import read_mark, safe_rel, stamp, write_mark
from mfm.objectstore import oversize
from mfm.run_reader import RunContents
from mfm.schema import MANIFEST, Problem

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
_lock = threading.Lock()


def is_file_name(rel: str) -> bool:
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
        if is_file_name(rel):
            dropped.add(rel)
            refused[rel] = "both an object and a folder of objects in the bucket: the folder is left out"
        else:
            refused[rel] = "both an object and a folder of objects in the bucket: the object is left out"
    keep: dict[str, dict] = {}
    for rel, info in infos.items():
        if not safe_rel(rel) or (rel in refused and not is_file_name(rel)):
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


def download(fs, pairs: list[tuple[str, str]], local: Path) -> dict[str, str]:
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


def save_bytes(local: Path, rel: str, data: bytes) -> None:
    """Write a file of a mirrored run (atomically, through a ``.part`` file)."""
    _clear_way(local, rel)
    target = local / rel
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


_refused_lock = threading.Lock()


def note_refused(local: Path, phase: str, refused: dict[str, str], replace: bool = True) -> None:
    """Record the objects of a mirrored run not fetched in one phase (``replace``: these
    are all of that phase's; otherwise they join those recorded)."""
    with _refused_lock:
        kept = read_mark(local / REFUSED_MARK)
        now = dict(refused) if replace else {**kept.get(phase, {}), **refused}
        if kept.get(phase, {}) == now:
            return
        kept[phase] = now
        write_mark(local / REFUSED_MARK, kept)


def refused_problems(local: Path) -> list[Problem]:
    """The objects of a mirrored run that were not fetched, one problem each, naming the key
    (relative to the run) and why."""
    out: dict[tuple[str, str], Problem] = {}
    for phase in read_mark(local / REFUSED_MARK).values():
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


def sync_files(fs, run_url_path: str, local: Path, infos: dict[str, dict], mark: dict) -> dict[str, str]:
    """Fetch the listed files (relative path -> listing entry, settled) whose stamp changed;
    the ones that could not be fetched, with why."""
    have = mark.setdefault("files", {})
    todo = [(rel, info) for rel, info in infos.items() if safe_rel(rel) and have.get(rel) != stamp(info)]
    failed = download(fs, [(f"{run_url_path}/{rel}", rel) for rel, _ in todo], local)
    for rel, info in todo:
        if rel not in failed:
            have[rel] = stamp(info)
    return failed
