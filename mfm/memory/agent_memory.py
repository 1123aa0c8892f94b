"""Agent-written memory: files under ``mine/`` with full history and provenance.

``mine/`` holds the current files (GUIDE.md knowledge, working.md plan, procedures/...).
Every write is also appended to ``memory_writes.jsonl`` with who wrote it, why, when
(turn, env step, wall time) and the episode ids that support it. That log is the source
of truth: any file can be rebuilt as of any step, and each line traced to the write that
introduced it (:func:`blame`).
"""
from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, NamedTuple

from mfm.memory.appendlog import AppendLog, Clock, now_iso, write_atomic
from mfm.schema import MINE, MemoryWrite, Problem, read_table

SNAPSHOT_EVERY = 16


class MemoryPathError(ValueError):
    """A path that is not a plain relative file under ``mine/``."""


def check_path(path: str) -> str:
    """Normalise ``path`` to ``mine/...``; refuse anything that could leave ``mine/``."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or "\\" in path or not p.parts:
        raise MemoryPathError(f"memory path must be relative and stay under mine/: {path!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise MemoryPathError(f"memory path holds a control character (NUL, newline, ...): {path!r}")
    if p.parts[0] != MINE:
        p = PurePosixPath(MINE, *p.parts)
    if len(p.parts) < 2:
        raise MemoryPathError(f"memory path names no file: {path!r}")
    return str(p)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_diff(old: str, new: str) -> list[list]:
    """Hunks ``[start, end, new_lines]`` turning ``old`` into ``new`` (line-based)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [[i1, i2, b[j1:j2]] for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]


def apply_diff(old: str, diff: Iterable) -> str:
    """Apply :func:`make_diff` hunks; raise ValueError if they do not fit ``old``."""
    a = old.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for hunk in diff:
        start, end, lines = hunk
        if not (isinstance(start, int) and isinstance(end, int) and pos <= start <= end <= len(a)):
            raise ValueError(f"hunk {hunk[:2]} does not fit a {len(a)}-line file")
        if not all(isinstance(s, str) for s in lines):
            raise ValueError("hunk lines must be strings")
        out.extend(a[pos:start])
        out.extend(lines)
        pos = end
    out.extend(a[pos:])
    return "".join(out)


class Version(NamedTuple):
    """One write of the history replayed: its file's text just before and just after it."""

    write: MemoryWrite
    before: str | None
    after: str | None
    """None once deleted (or, replayed strictly, when the write does not rebuild)."""
    error: str | None
    """Why the write's diff does not fit the text before it (None: it fits)."""
    hash_ok: bool
    """Whether ``after`` matches the write's recorded sha256 (True when ``after`` is None)."""

    def text(self) -> str | None:
        """``after``, raising ValueError if the write does not rebuild to its recorded hash."""
        if self.error is not None:
            raise ValueError(self.error)
        if not self.hash_ok:
            raise ValueError(f"{self.write.path}: write {self.write.seq} does not rebuild to its recorded hash")
        return self.after


def replay(writes: Iterable[MemoryWrite], strict: bool = False) -> Iterator[Version]:
    """Replay a write history in log order, per path: each write's snapshot or diff is applied
    to its file's text and checked against its sha256. A diff that does not fit keeps the old
    text; with ``strict`` a write that does not rebuild leaves its file unknown (None)."""
    current: dict[str, str | None] = {}
    for w in writes:
        before = current.get(w.path)
        error = None
        if w.op == "delete":
            after = None
        elif w.snapshot is not None:
            after = w.snapshot
        else:
            try:
                after = apply_diff(before or "", w.diff or ())
            except ValueError as e:
                after, error = None if strict else before, str(e)
        hash_ok = after is None or sha256(after) == w.sha256
        if strict and not hash_ok:
            after = None
        current[w.path] = after
        yield Version(w, before, after, error, hash_ok)


def _of_path(writes: Iterable[MemoryWrite], path: str, as_of_step: int | None) -> Iterator[MemoryWrite]:
    return (w for w in writes if w.path == path and (as_of_step is None or w.step <= as_of_step))


def rebuild(writes: Iterable[MemoryWrite], path: str, as_of_step: int | None = None) -> str | None:
    """The content of ``path`` after every write up to ``as_of_step`` (None: never written
    or deleted). Raises ValueError if the history is inconsistent."""
    text: str | None = None
    for v in replay(_of_path(writes, path, as_of_step)):
        text = v.text()
    return text


@dataclass(frozen=True, slots=True)
class Blame:
    """One line of a file and the write that introduced it (its provenance)."""

    text: str
    write: MemoryWrite


def blame(writes: Iterable[MemoryWrite], path: str, as_of_step: int | None = None) -> list[Blame]:
    """Each line of ``path`` (as of ``as_of_step``) with the write that last set it. Raises
    ValueError if a diff does not fit."""
    lines: list[Blame] = []
    for w, old, new, error, _ in replay(_of_path(writes, path, as_of_step)):
        if error is not None:
            raise ValueError(error)
        if new is None:
            lines = []
            continue
        a = (old or "").splitlines(keepends=True)
        b = new.splitlines(keepends=True)
        sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        nxt: list[Blame] = []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                nxt.extend(lines[i1:i2])
            else:
                nxt.extend(Blame(t, w) for t in b[j1:j2])
        lines = nxt
    return lines


class AgentMemory:
    """Read and write ``mine/`` files; each write is logged with its provenance."""

    def __init__(self, run_dir: Path, writes: Iterable[MemoryWrite] = (), writable: bool = True,
                 clock: Clock = now_iso) -> None:
        self.root = run_dir
        self.clock = clock
        self.writes: list[MemoryWrite] = list(writes)
        self._log = AppendLog(run_dir / "memory_writes.jsonl") if writable else None
        self._count: dict[str, int] = {}
        last: dict[str, str | None] = {}
        for v in replay(self.writes):
            self._count[v.write.path] = self._count.get(v.write.path, 0) + 1
            last[v.write.path] = v.text()
        self._current: dict[str, str] = {p: text for p, text in last.items() if text is not None}

    @classmethod
    def open(cls, run_dir: Path, writable: bool = False) -> tuple["AgentMemory", list[Problem]]:
        rows, problems = read_table(run_dir / "memory_writes.jsonl", MemoryWrite)
        return cls(run_dir, (r for _, r in rows), writable), problems

    def files(self, as_of_step: int | None = None) -> list[str]:
        """Paths that exist (as of a step)."""
        if as_of_step is None:
            return sorted(self._current)
        return sorted(p for p in {w.path for w in self.writes} if self.read(p, as_of_step) is not None)

    def read(self, path: str, as_of_step: int | None = None) -> str | None:
        """A file's content now, or as it stood at env step ``as_of_step``."""
        path = check_path(path)
        if as_of_step is None:
            return self._current.get(path)
        return rebuild(self.writes, path, as_of_step)

    def history(self, path: str) -> list[MemoryWrite]:
        path = check_path(path)
        return [w for w in self.writes if w.path == path]

    def blame(self, path: str, as_of_step: int | None = None) -> list[Blame]:
        return blame(self.writes, check_path(path), as_of_step)

    def write(self, path: str, content: str, *, author: str, reason: str, sources: Iterable[str] = (),
              step: int, life: int = 0, turn: int | None = None, op: str | None = None) -> MemoryWrite | None:
        """Set a file's content. Returns the logged write, or None if nothing changed."""
        path = check_path(path)
        old = self._current.get(path)
        if old == content:
            return None
        n = self._count.get(path, 0)
        first = old is None
        snap = first or n % SNAPSHOT_EVERY == 0
        w = MemoryWrite(
            seq=len(self.writes), turn=turn, step=step, life=life, path=path,
            op=op or ("create" if first else "edit"), author=author, reason=reason,
            sources=tuple(dict.fromkeys(sources)), time=self.clock(),
            sha256=sha256(content), diff=None if snap else tuple(make_diff(old or "", content)),
            snapshot=content if snap else None,
        )
        w.check()
        self._commit(w, content)
        return w

    def append(self, path: str, lines: Iterable[str], **kw) -> MemoryWrite | None:
        """Add lines at the end of a file (creating it)."""
        old = self._current.get(check_path(path), "")
        if old and not old.endswith("\n"):
            old += "\n"
        added = "".join(f"{ln}\n" for ln in lines)
        return self.write(path, old + added, op="append" if old else None, **kw)

    def delete(self, path: str, *, author: str, reason: str, step: int, life: int = 0,
               turn: int | None = None, sources: Iterable[str] = ()) -> MemoryWrite | None:
        path = check_path(path)
        if path not in self._current:
            return None
        w = MemoryWrite(seq=len(self.writes), turn=turn, step=step, life=life, path=path, op="delete",
                        author=author, reason=reason, sources=tuple(sources),
                        time=self.clock(), sha256=sha256(""))
        self._commit(w, None)
        return w

    def _commit(self, w: MemoryWrite, content: str | None) -> None:
        self.writes.append(w)
        self._count[w.path] = self._count.get(w.path, 0) + 1
        target = self.root / w.path
        if content is None:
            self._current.pop(w.path, None)
            target.unlink(missing_ok=True)
        else:
            self._current[w.path] = content
            write_atomic(target, content.encode("utf-8"))
        if self._log:
            self._log.append(w)
            self._log.flush()
