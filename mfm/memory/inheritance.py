"""Inherited memory: a new game in a known world that starts with an earlier run's memory.

The earlier run (finished or interrupted, never one still running) is copied into the new
run's ``inherited/`` folder, with hard links where the filesystem allows (a run that ended
no longer changes), so that the new run stays one self-contained directory. The new run
names that run's episodes ``inherited:ep_000018``.

The earlier run is checked whole before the new run is created (:func:`check_source`): its
manifest, every entry of its tree (regular files only: a symlink, FIFO, socket or device is
refused, never followed nor opened; at most :data:`MAX_COPY_FILES` files and
:data:`MAX_COPY_BYTES` bytes) and the tables the new run reads (a line that is not a valid
record, or a memory write that does not rebuild to its hash, refuses it). The copy takes
only the regular files that check listed.

The new game's agent-written memory starts as the earlier run's last GUIDE.md and
procedures, their sources re-pointed at the copy, written once at the start by the author
``inherited``; the plan (``working.md``) is not inherited, it served the other game's task.
The earlier run's episodic memory (index, what its frames showed, per-step trace, frames) is
read from the copy and never written. Env steps of the two games are separate counts: an
inherited episode's steps are the earlier game's.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from mfm.boundary import (MAX_JSON_FILE_BYTES, FileEntry, TooLarge, UnsafePath, copy_walked_file, is_temporary,
                          regular_files)
from mfm.memory.agent_memory import AgentMemory, replay
from mfm.memory.consolidation import FACT_LINE, GUIDE, WORKING
from mfm.memory.index import ContentHit, ContentIndex, EpisodeIndex
from mfm.memory.retrieval import read_trace
from mfm.schema import (EPISODE_ID, INHERITED, MANIFEST, TABLES, IndexRow, JSONError, NotRegularFile, Problem,
                        RunManifest, open_file, parse_json, parse_manifest, read_table)

PREFIX = f"{INHERITED}:"
AUTHOR = "inherited"
"""The author of the memory writes that start a run from an inherited one."""
ENDED = ("finished", "interrupted")
"""Run statuses whose memory may be inherited."""


MAX_COPY_FILES = 1_000_000
"""A run to inherit holding more files and folders than this is refused before anything is copied."""
MAX_COPY_BYTES = 64 * 1024 ** 3
"""A run to inherit holding more bytes of files than this is refused before anything is copied."""


class InheritError(ValueError):
    """The run cannot inherit this memory (the run or its file at fault, and why). Raised before
    the new run is created, except by :func:`copy_run`, whose caller closes the new run."""


class InheritFailed(InheritError):
    """Inheriting failed after the new run was created; the new run was closed as crashed."""


@dataclass(frozen=True)
class Source:
    """A run checked whole by :func:`check_source`: fit to be inherited."""

    path: Path
    """Its folder, as named by the caller."""
    manifest: RunManifest
    files: tuple[FileEntry, ...]
    """Every file it holds (all regular files), to be copied."""


def qualify(ep: str) -> str:
    """``ep_000018`` -> ``inherited:ep_000018``."""
    return ep if ep.startswith(PREFIX) else PREFIX + ep


def inherited_id(ref: str) -> str | None:
    """The earlier run's own id of an ``inherited:`` reference (None for the run's own episodes)."""
    return ref[len(PREFIX):] if ref.startswith(PREFIX) else None


def read_manifest(run: Path) -> RunManifest:
    """The manifest of a run whose memory is to be inherited; InheritError if it is not one
    that ended (a run still running changes under the copy)."""
    path = run / MANIFEST
    try:
        with open_file(path, MANIFEST) as f:
            raw = f.read(MAX_JSON_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InheritError(f"{run}: not a run directory (no run.json)") from None
    except NotRegularFile as e:
        raise InheritError(f"{path}: {e.reason}; not inherited") from None
    except OSError as e:
        raise InheritError(f"{path}: cannot be read ({e.strerror or e}); not inherited") from None
    if len(raw) > MAX_JSON_FILE_BYTES:
        raise InheritError(f"{path}: larger than {MAX_JSON_FILE_BYTES} bytes, not read; not inherited")
    manifest, problems = parse_manifest(raw)
    if manifest is None:
        raise InheritError(f"{path}: unreadable manifest: {problems[-1].message}")
    if manifest.status not in ENDED:
        raise InheritError(f"{run}: run {manifest.run_id!r} is {manifest.status}; only a run that ended "
                           f"({' or '.join(ENDED)}) can be inherited")
    return manifest


def check_source(src: Path, max_files: int = MAX_COPY_FILES, max_bytes: int = MAX_COPY_BYTES) -> Source:
    """Check the run ``src`` whole before anything is written; InheritError naming the file of
    ``src`` at fault and why: its manifest (a run that ended), its tree (regular files only,
    within the bounds; nothing followed or opened to find out) and the tables the new run
    reads (:func:`first_damage`: every line valid, the memory history rebuilds)."""
    src = Path(src)
    if not os.path.isdir(src):
        raise InheritError(f"{src}: not a run directory (no run.json)")
    manifest = read_manifest(src)
    if os.path.lexists(src / INHERITED):
        raise InheritError(f"{src}: inherited memory itself; inherit from the run it came from instead")
    real = Path(os.path.realpath(src))
    try:
        files = regular_files(real, max_files, max_bytes, ignore=is_temporary)
    except UnsafePath as e:
        raise InheritError(f"{src}/{e}; not inherited") from None
    except TooLarge as e:
        raise InheritError(f"{src}: {str(e).removeprefix(real.name + ': ')}; not inherited") from None
    except OSError as e:
        raise InheritError(f"{src}: cannot be listed ({e.strerror or e}); not inherited") from None
    damage = first_damage(real)
    if damage is not None:
        where = f"{damage.file}:{damage.line}" if damage.line else damage.file
        raise InheritError(f"{src}/{where}: {damage.message}; a damaged run is not inherited (mfm validate "
                           "lists all its problems)")
    return Source(src, manifest, tuple(files))


READ_TABLES = ("memory_writes.jsonl", "steps.jsonl", "index.jsonl", "seen.jsonl")
"""The tables of an inherited run that the new run reads: the memory history it starts from,
the per-step trace, the episode index and what the frames showed."""


def first_damage(run: Path) -> Problem | None:
    """The first error in the tables an inheriting run reads (:data:`READ_TABLES`): a line
    that is not a valid record, or a memory write that does not rebuild to its hash (the
    checks of ``mfm validate``, as they bear on those tables); None when there is none."""
    for name in READ_TABLES:
        rows, problems = read_table(run / name, TABLES[name])
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            return errors[0]
        if name == "memory_writes.jsonl":
            for (n, _), (w, _, _, error, hash_ok) in zip(rows, replay((r for _, r in rows), strict=True)):
                if error is not None or not hash_ok:
                    reason = error if error is not None else "content does not match its sha256"
                    return Problem(name, n, f"{w.path}: version {w.seq} cannot be rebuilt ({reason})")
    return None


def copy_run(src: Source, run_dir: Path) -> Path:
    """Copy the checked run ``src`` to ``run_dir/inherited``; the copy's path. Only the regular
    files :func:`check_source` listed are taken, each hard-linked where the filesystem allows
    (the link made without following a symlink, and checked to be a regular file), else copied
    by descriptor (:func:`mfm.boundary.open_regular`), at most the size it had when checked.
    Raises InheritError (a file changed since it was checked), OSError."""
    dest = run_dir / INHERITED
    if os.path.lexists(dest):
        raise InheritError(f"{dest}: already exists (a run inherits once, when it starts)")
    root = os.path.realpath(src.path)
    dest.mkdir()
    for entry in src.files:
        target = dest / entry.rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(os.path.join(root, entry.rel), target, follow_symlinks=False)
            except OSError:
                _copy_bytes(src, entry, dest)
                continue
            if not stat.S_ISREG(os.lstat(target).st_mode):
                os.unlink(target)
                raise InheritError(f"{src.path}/{entry.rel}: no longer a regular file; not inherited")
        except OSError as e:
            code = errno.errorcode.get(e.errno or 0, "")
            raise InheritError(f"{INHERITED}/{entry.rel}: cannot be copied ({e.strerror or e}"
                               f"{f' ({code})' if code else ''})") from None
    return dest


def _copy_bytes(src: Source, entry: FileEntry, dest: Path) -> None:
    """Copy one checked file by its bytes (no more than it held when checked)."""
    try:
        copy_walked_file(src.path, entry, dest)
    except UnsafePath as e:
        raise InheritError(f"{src.path}/{e}; not inherited") from None


def requalify_guide(text: str) -> tuple[str, tuple[str, ...]]:
    """GUIDE.md text with every fact's sources re-pointed at the inherited copy, and those
    sources in order of first mention."""
    out, sources = [], {}
    for line in text.splitlines():
        m = FACT_LINE.match(line)
        if m and m["src"]:
            src = [qualify(s.strip()) for s in m["src"].split(",")]
            sources.update(dict.fromkeys(src))
            line = line[:m.start("src")] + ", ".join(src) + line[m.end("src"):]
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), tuple(sources)


def _requalify_procedure(text: str) -> tuple[str, tuple[str, ...]]:
    obj = parse_json(text)
    if not isinstance(obj, dict):
        raise JSONError("not a JSON object")
    named = obj.get("sources")
    sources = tuple(qualify(s) for s in (named if isinstance(named, list) else [])
                    if isinstance(s, str) and EPISODE_ID.match(s))
    obj["sources"] = list(sources)
    extra = obj.get("extra")
    for key in ("disabled_sources", "last_episodes", "failed_episodes"):
        for holder in (obj, extra if isinstance(extra, dict) else {}):
            if isinstance(holder.get(key), list):
                holder[key] = [qualify(s) for s in holder[key] if isinstance(s, str)]
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n", sources


def seed_memory(memory: AgentMemory, copy: Path, run_id: str) -> list[str]:
    """Write the inherited run's last agent-written files (all but ``working.md``) into
    ``memory`` as its first writes, sources re-pointed at the copy; the paths written."""
    past, _ = AgentMemory.open(copy)
    written = []
    for path in past.files():
        text = past.read(path)
        if path == WORKING or text is None:
            continue
        if path == GUIDE:
            text, sources = requalify_guide(text)
        elif path.endswith(".json"):
            try:
                text, sources = _requalify_procedure(text)
            except JSONError:
                sources = ()
        else:
            sources = ()
        w = memory.write(path, text, author=AUTHOR, reason=f"inherited from run {run_id} ({INHERITED}/)",
                         sources=sources, step=0, life=0, turn=None)
        if w is not None:
            written.append(path)
    return written


class InheritedMemory:
    """The episodic memory of the run a run inherited, read from its copy (read-only).

    Lookups take and give ``inherited:`` ids; :meth:`bare` turns one back into the row
    the copy's own files are addressed by."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / INHERITED
        self.manifest = read_manifest(self.dir)
        self.index, _ = EpisodeIndex.open(self.dir)
        self.content, _ = ContentIndex.open(self.dir)
        self._trace: dict[int, tuple[int, int]] | None = None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def episode(self, ref: str) -> IndexRow | None:
        """The index row of ``inherited:ep_…`` with that id (None if the copy has no such episode)."""
        own = inherited_id(ref)
        row = self.index.get(own) if own is not None else None
        return None if row is None else replace(row, id=qualify(row.id))

    @staticmethod
    def bare(ref: IndexRow) -> IndexRow:
        """An inherited row as the copy's files name it."""
        own = inherited_id(ref.id)
        return ref if own is None else replace(ref, id=own)

    def find(self, material: str, *, near: tuple[float, float] | None = None, radius: float | None = None,
             limit: int | None = None) -> list[ContentHit]:
        """What the earlier game's frames showed of ``material`` (every episode), as hits on
        ``inherited:`` episodes."""
        return [replace(h, episode=qualify(h.episode))
                for h in self.content.find(material, near=near, radius=radius, limit=limit)]

    def position_at(self, step: int) -> tuple[int, int] | None:
        """The player's position after step ``step`` of the earlier game (its per-step trace)."""
        if self._trace is None:
            self._trace = {}
            read_trace(self.dir / "steps.jsonl", 0, self._trace)
        return self._trace.get(step)
