"""``mfm validate``: check a run directory against the format spec; report each problem with file:line.

:func:`validate` is :func:`mfm.run_reader.read_run` (every table, read tolerantly, with the
checks of the tables against each other) plus the checks of the run's other files: episode
folders, record files and frame strips present and inside the run, folders no index row
names, the manifest's step budget, the log; with ``frames``, every frame strip and
observation image decoded and each episode's ``outcome.json`` checked against its index row.
The loaders plug their fast reader and their cache in through ``read`` and ``files``
(``loaders.cachedread``).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from mfm.boundary import UnsafePath, inside
from mfm.memory import packed
from mfm.memory.retrieval import FrameError, check_end_frame, decode_image, ends_in_strip, load_episode
from mfm.progress import counted
from mfm.run_reader import RunContents, TableRead, column, last_value, read_one_table, read_run
from mfm.schema import (FRAMES_PER_CHUNK, LOGS, STRUCTURED_OUTCOMES, EpisodeOutcome, IndexRow, Problem, RunManifest,
                        SchemaError, frame_chunk, version_at_least)


EpisodeRef = tuple[int, str, str, str | None, int]
"""(line in ``index.jsonl``, episode id, folder, observation image, frames) of an indexed episode."""


class FileCheck:
    """The file checks of one :func:`validate` call (:func:`_file_problems`), made before
    the tables are read. :meth:`known` is asked once the index is read; if it has no answer,
    :meth:`run` checks the files on a second thread. A subclass may keep them elsewhere (the
    loaders' table cache: ``loaders.cachedread.CachedFileCheck``)."""

    listing: frozenset[str] | None = None
    """The files under ``episodes/`` when a subclass listed them elsewhere (object storage)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def known(self) -> list[Problem] | None:
        """The problems, if known without looking at the files."""
        return None

    def run(self, refs: list[EpisodeRef]) -> list[Problem]:
        return _file_problems(self.run_dir, refs, self.listing)


def validate(run_dir: Path, frames: bool = False, read: Callable[[Path, str], TableRead] = read_one_table,
             files: Callable[[Path], FileCheck] = FileCheck, lazy: bool = False,
             manifest: tuple[RunManifest | None, list[Problem]] | None = None) -> RunContents:
    """:func:`read_run` plus file checks: episode folders, frames, orphans, the manifest
    (``manifest``: ``run.json`` already read, as :func:`read_run` takes it).

    The file checks (a few stat calls per episode) run on a second thread while the other
    tables are parsed; their problems follow the tables' problems, as if run after them.

    ``read`` reads one table file (:func:`read_run`); ``files`` makes the file checks. The
    defaults read and stat everything, every time (``mfm validate``); the loaders read large
    files faster and serve unchanged ones from a cache (``loaders.cachedread.validate``), and
    leave the :data:`LAZY_TABLES` for later (``lazy``)."""
    run_dir = Path(run_dir)
    checks: list[Future] = []
    pool = ThreadPoolExecutor(max_workers=1)
    check = files(run_dir)

    def index_read(c: RunContents) -> None:
        known = check.known()
        if known is None:
            checks.append(pool.submit(check.run, _episode_refs(c)))
        else:
            done: Future = Future()
            done.set_result(known)
            checks.append(done)

    try:
        c = read_run(run_dir, after_index=index_read, read=read, lazy=lazy, manifest=manifest)
        if c.manifest is None and not c.tables:
            return c
        index: list[IndexRow] = c.tables["index.jsonl"]
        file_problems = [p for f in checks for p in f.result()]
    finally:
        pool.shutdown(wait=True)
    if frames:
        refused = {p.line for p in file_problems if p.message.endswith(OUTSIDE)}
        outcomes = c.manifest is not None and version_at_least(c.manifest.schema_version, STRUCTURED_OUTCOMES)
        for n, r in counted(list(zip(c.lines["index.jsonl"], index)), "episodes' frames checked"):
            if n not in refused:
                _check_frames(c, run_dir, n, r)
                if outcomes:
                    _check_outcome(c, run_dir, n, r)
    c.problems += file_problems
    if c.manifest is not None:
        steps = c.tables["steps.jsonl"]
        last = int(last_value(c.columns["steps.jsonl"], "step")) if "steps.jsonl" in c.columns else (
            steps[-1].step if steps else 0)
        if last > c.manifest.step_budget:
            c.problems.append(Problem("steps.jsonl", c.lines["steps.jsonl"][-1],
                                      f"step {last} exceeds the budget {c.manifest.step_budget}", "warning"))
    if not (run_dir / LOGS).exists() and index:
        c.problems.append(Problem(LOGS, 0, "missing (the human-readable log)", "warning"))
    return c


AGREEING = (("action", "action_kind"), ("label", "outcome"), ("material", "material"), ("target", "target"),
            ("reason", "reason"))
"""Fields of ``outcome.json`` (:class:`~mfm.schema.EpisodeOutcome`) and of the episode's index
row that hold the same value (format 1.3)."""


def _check_outcome(c: RunContents, run_dir: Path, n: int, r: IndexRow) -> None:
    """An episode's ``outcome.json`` in a run of format 1.3 or later (``--frames``): each field
    of :class:`~mfm.schema.EpisodeOutcome` of its kind, and each it holds of those the index row
    holds too (:data:`AGREEING`) equal to the row's (all are optional: one left out is no
    problem). A file missing or refused is reported by the file checks."""
    try:
        obj = load_episode(run_dir, r).outcome
    except UnsafePath:
        return
    if obj is None:
        return
    name = f"{r.path}/outcome.json"
    try:
        out = EpisodeOutcome.from_dict(obj)
    except (SchemaError, TypeError, ValueError) as e:
        c.problems.append(Problem(name, 0, f"{e} (the episode of index.jsonl:{n})"))
        return
    for mine, theirs in AGREEING:
        a, b = getattr(out, mine), getattr(r, theirs)
        if mine in obj and a != b:
            c.problems.append(Problem(name, 0, f"{mine} is {_shown(a)}, index.jsonl:{n} says {theirs} "
                                               f"{_shown(b)}"))


def _shown(v: Any) -> str:
    """A field's value as a problem names it (a cell as [x, y])."""
    return "null" if v is None else repr(list(v) if isinstance(v, tuple) else v)


def _episode_refs(c: RunContents) -> list[EpisodeRef]:
    """Each indexed episode, from columns when the index was read as columns (no records built)."""
    cols = c.columns.get("index.jsonl")
    if cols is not None:
        images = [v if isinstance(v, str) else None for v in column(cols, "image")]
        return list(zip(c.lines["index.jsonl"], column(cols, "id"), column(cols, "path"), images,
                        column(cols, "frames")))
    return [(n, r.id, r.path, r.image, r.frames) for n, r in zip(c.lines["index.jsonl"], c.tables["index.jsonl"])]


OUTSIDE = "leads outside the run (through a symlink), refused"
NOT_REGULAR = "is not a regular file (a FIFO, socket, device or folder), refused"


def _file_problems(run_dir: Path, refs: list[EpisodeRef], listing: frozenset[str] | None = None) -> list[Problem]:
    """Missing episode folders, record files and frame strips, files that lead outside the
    run through a symlink, and folders no index row names.

    ``listing``: the run's files under ``episodes/`` as relative POSIX paths, when they were
    listed elsewhere (a run in object storage, ``mfm.objectstore``); then nothing is stat'ed
    (but the local copy of a packed run's ``episodes.zip``, fetched whole, is read).

    One directory listing of ``episodes/`` and plain ``os.lstat`` calls on path strings (a
    pathlib object per file costs more than the system call); a file or episode folder that
    is a symlink is resolved (``mfm.boundary.inside``). A symlinked folder inside an episode
    (``state/``, ``frames/``) is not looked for here: every read refuses what it leads to,
    and ``--frames`` reports it. A file not in its folder counts when the run's pack
    (``episodes.zip``, :mod:`mfm.memory.packed`) holds it."""
    out: list[Problem] = []
    root = str(run_dir) + os.sep
    away = False
    if listing is not None:
        entries = {rel.split("/")[1]: False for rel in listing if rel.count("/") >= 2}
    else:
        away = _own_entries(run_dir, out)
        try:
            entries = {} if away else {e.name: e.is_symlink() for e in os.scandir(root + "episodes") if e.is_dir()}
        except OSError:
            entries = {}
    members, pack_folders = _pack_contents(run_dir, out)
    indexed = set()

    def kind(rel: str, linked: bool) -> str:
        """``file``, ``missing``, ``outside`` or ``other`` (not a regular file)."""
        if listing is not None:
            return "file" if rel in listing or rel in members else "missing"
        try:
            mode = os.lstat(root + rel).st_mode
        except (OSError, ValueError):
            return "file" if rel in members else "missing"
        if linked or stat.S_ISLNK(mode):
            try:
                mode = os.stat(inside(run_dir, rel)).st_mode
            except UnsafePath:
                return "outside"
            except OSError:
                return "missing"
        return "file" if stat.S_ISREG(mode) else "other"

    for n, ep, path, image, count in refs:
        indexed.add(path)
        parent, _, name = path.rpartition("/")
        if (parent != "episodes" or name not in entries) and path not in pack_folders and (
                listing is not None or away or not (run_dir / path).is_dir()):
            if not away:
                out.append(Problem("index.jsonl", n, f"{ep}: episode folder {path} is missing"))
            continue
        folder_linked = entries.get(name, True) if parent == "episodes" else True
        for rel in (f"{path}/action.json", f"{path}/outcome.json", f"{path}/state/state.json") + (
                (image,) if image else ()):
            found = kind(rel, folder_linked or not rel.startswith(path + "/"))
            if found == "outside":
                out.append(Problem("index.jsonl", n, f"{ep}: {_rel(run_dir, rel)} {OUTSIDE}"))
            elif found == "other":
                out.append(Problem("index.jsonl", n, f"{ep}: {_rel(run_dir, rel)} {NOT_REGULAR}"))
            elif found != "file":
                out.append(Problem("index.jsonl", n, f"{ep}: {_rel(run_dir, rel)} is missing", "warning"))
        for k in range(-(-count // FRAMES_PER_CHUNK)):
            rel = frame_chunk(path, k * FRAMES_PER_CHUNK)[0]
            found = kind(rel, folder_linked)
            if found == "outside":
                out.append(Problem("index.jsonl", n, f"{ep}: frame strip {_rel(run_dir, rel)} {OUTSIDE}"))
            elif found == "other":
                out.append(Problem("index.jsonl", n, f"{ep}: frame strip {_rel(run_dir, rel)} {NOT_REGULAR}"))
            elif found != "file":
                out.append(Problem("index.jsonl", n, f"{ep}: frame strip {_rel(run_dir, rel)} is missing"))
    for name in sorted(set(entries) | {f.split("/")[1] for f in pack_folders}):
        if name.startswith("ep_") and f"episodes/{name}" not in indexed:
            out.append(Problem(f"episodes/{name}", 0, "episode folder not in index.jsonl (in flight when the run "
                                                       "stopped)", "warning"))
    return out


def _own_entries(run_dir: Path, out: list[Problem]) -> bool:
    """Report ``episodes/`` or ``episodes.zip`` that is a symlink (a run's episodes are its
    own; ``mfm pack`` refuses them), or an ``episodes`` that is not a folder. True when
    ``episodes/`` leads outside the run or is not a folder: then it is not listed, and its
    episode folders are not reported one by one."""
    away = False
    for name, folder in (("episodes", True), (packed.PACK, False)):
        try:
            mode = os.lstat(run_dir / name).st_mode
        except (OSError, ValueError):
            continue
        if stat.S_ISLNK(mode):
            try:
                inside(run_dir, name)
            except UnsafePath:
                if folder:
                    out.append(Problem(name, 0, "a symlink leading outside the run, not followed (no episode "
                                                "folder is read)"))
                    away = True
                continue
            out.append(Problem(name, 0, f"a symlink (a run's {'episodes' if folder else 'pack'} must be its own "
                                        "folder or file; mfm pack refuses it)"))
        elif folder and not stat.S_ISDIR(mode):
            out.append(Problem(name, 0, "not a folder (a file, FIFO, socket or device), refused (no episode "
                                        "folder is read)"))
            away = True
    return away


def _pack_contents(run_dir: Path, out: list[Problem]) -> tuple[dict[str, packed.Member], set[str]]:
    """The members and episode folders of the run's pack (none if it has none; a pack that
    cannot be read is reported and counts as empty)."""
    try:
        found = packed.directory(run_dir)
    except (packed.PackError, UnsafePath) as e:
        out.append(Problem(packed.PACK, 0, str(e).removeprefix(f"{packed.PACK}: ")))
        return {}, set()
    return (found.members, found.folders()) if found is not None else ({}, set())


def _rel(run_dir: Path, rel: str) -> str:
    """A path as the problems name it: relative to the run, normalised (as given if it is not)."""
    try:
        return str((run_dir / rel).relative_to(run_dir))
    except ValueError:
        return rel


def _check_frames(c: RunContents, run_dir: Path, n: int, r: IndexRow) -> None:
    """Decode every frame strip and the observation image an index row names (one at a
    time, not cached: memory stays at one image), reporting each that cannot be read."""
    for k in range(-(-r.frames // FRAMES_PER_CHUNK)):
        rel = frame_chunk(r.path, k * FRAMES_PER_CHUNK)[0]
        strip = _decode(c, run_dir, rel, n)
        if strip is None:
            continue
        count = min(FRAMES_PER_CHUNK, r.frames - k * FRAMES_PER_CHUNK)
        if strip.shape[0] != count * strip.shape[1]:
            c.problems.append(Problem(rel, 0, f"holds {strip.shape[0] / strip.shape[1]:g} frames, index.jsonl:{n} "
                                              f"says {count}"))
        elif ends_in_strip(r) and (k + 1) * FRAMES_PER_CHUNK >= r.frames:
            try:
                check_end_frame(r, strip[-strip.shape[1]:])
            except FrameError as e:
                c.problems.append(Problem(rel, 0, f"{e} (index.jsonl:{n})"))
    if r.image:
        _decode(c, run_dir, r.image, n)


def _decode(c: RunContents, run_dir: Path, rel: str, n: int) -> np.ndarray | None:
    """One image of the run, decoded through the read boundary; None (and a problem, unless
    the file is missing: the file checks report that) when it cannot be."""
    try:
        return decode_image(run_dir, rel)
    except UnsafePath:
        c.problems.append(Problem("index.jsonl", n, f"{rel} {OUTSIDE}"))
    except FrameError as e:
        if not str(e).endswith(": missing"):
            c.problems.append(Problem(rel, 0, str(e).split(": ", 1)[-1]))
    return None
