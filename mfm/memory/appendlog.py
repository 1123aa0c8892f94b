"""Append-only JSONL files: whole lines, one write call per batch, flushed on demand.

Every write to a run's files goes through :func:`append_bytes`, :func:`write_atomic`,
:func:`write_in_place` or :func:`writing`: a failed write (disk full, read-only file system,
I/O error, no permission) raises :class:`WriteError` naming the file and leaves nothing
half-written behind (docs/reliability.md, "Crashes and live runs").
"""
from __future__ import annotations

import errno
import os
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from mfm.boundary import atomic_writer
from mfm.schema import Record


class WriteError(OSError):
    """A run's file could not be written; ``filename`` is that file (or episode folder)."""

    @property
    def condition(self) -> str:
        """What went wrong, e.g. ``disk full (ENOSPC)`` or ``read-only file system (EROFS)``."""
        text = self.strerror or "write failed"
        what = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded"}.get(self.errno or 0,
                                                                                    text[:1].lower() + text[1:])
        code = errno.errorcode.get(self.errno or 0)
        return f"{what} ({code})" if code else what

    def describe(self, root: Path | None = None) -> str:
        """``disk full (ENOSPC) while writing FILE``, FILE relative to ``root`` when inside it."""
        name = Path(self.filename or "?")
        if root is not None and name.is_relative_to(root):
            name = name.relative_to(root)
        return f"{self.condition} while writing {name}"


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Raise an OSError of the block as :class:`WriteError` naming ``path``."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(e.errno, e.strerror or str(e), str(path)) from e


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the descriptor's position (``os.write`` may write less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_file(path: Path, data: bytes) -> None:
    """Create or replace the file ``path`` with ``data``: what ``Path.write_bytes`` does, in
    three system calls (no buffering layer, no terminal check), never through a symbolic link
    planted at ``path`` (ELOOP). The caller names the file in a :class:`WriteError` (:func:`writing`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def append_bytes(path: Path, data: bytes, fsync: bool = False) -> None:
    """Append ``data`` to ``path`` (made if missing). If the write fails part-way (the disk
    filled up), the file is cut back to its old length, so it never ends with part of ``data``.
    Its folder is made only when the file cannot be opened for want of it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
    with writing(path):
        try:
            fd = os.open(path, flags, 0o666)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                _write_all(fd, data)
                if fsync:
                    os.fsync(fd)
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


class AppendLog:
    """An append-only JSONL file. Lines are buffered and written whole by :meth:`flush`.

    A process killed at any moment leaves at most one partial last line, which readers
    report and skip (``mfm.schema.iter_jsonl``).
    """

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self._pending: list[str] = []
        self._repair_tail()

    def _repair_tail(self) -> None:
        """If the file ends mid-line (an earlier crash), start our lines on a fresh one."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() == 0:
                    return
                f.seek(-1, os.SEEK_END)
                if f.read(1) == b"\n":
                    return
        except FileNotFoundError:
            return
        self._pending.append("")

    def append(self, records: Iterable[Record] | Record) -> None:
        """Queue one record or several; nothing reaches the disk before :meth:`flush`."""
        if isinstance(records, Record):
            records = (records,)
        self._pending.extend(r.to_json() for r in records)

    def take(self) -> bytes:
        """The bytes :meth:`flush` would append now, taken out of the queue (for a writer that
        appends them later, elsewhere)."""
        if not self._pending:
            return b""
        data = ("\n".join(self._pending) + "\n").encode("utf-8")
        self._pending.clear()
        return data

    def flush(self) -> None:
        """Write every queued line in one call and flush it to the OS (and disk if fsync)."""
        data = self.take()
        if data:
            append_bytes(self.path, data, self.fsync)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never half.

    The data goes to a new temporary file beside ``path`` (:func:`mfm.boundary.atomic_writer`:
    made with O_EXCL|O_NOFOLLOW under a fresh name, so nothing planted is written through; a
    symlink at ``path`` is replaced, not followed), which is removed if anything fails."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(path.parent, path.name, make_folders=False) as f:
            f.write(data)


def write_in_place(path: Path, data: bytes) -> None:
    """Overwrite the existing file ``path`` with ``data``, for when :func:`write_atomic` has
    no room for its temporary copy (a full disk): overwriting a file's own blocks needs no new
    space on ordinary (not copy-on-write) file systems.

    The file keeps its length: ``data`` is padded with spaces (before its final newline; for
    JSON, whose trailing whitespace is allowed) and written from the start in one call, so the
    file is never cut short and never holds a mix of two versions, except to a reader racing
    that one call. Raises :class:`WriteError` (ENOSPC) if ``data`` is longer than the file."""
    with writing(path):
        fd = os.open(path, os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            if len(data) > size:
                raise OSError(errno.ENOSPC, f"{len(data)} bytes do not fit over the file's {size} in place")
            body, end = (data[:-1], b"\n") if data.endswith(b"\n") else (data, b"")
            _write_all(fd, body + b" " * (size - len(data)) + end)
        finally:
            os.close(fd)


Clock = Callable[[], str]
"""Returns the wall time to record, as an ISO 8601 string. Injectable so that a run
recorded with a fixed clock is byte-identical when regenerated."""


def now_iso() -> str:
    """The current UTC time, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class LoggedRows:
    """Rows kept in memory and, when a log is given, appended to their file on :meth:`flush`.

    Subclasses drop their derived columns in :meth:`_changed`."""

    def __init__(self, rows: Iterable[Record] = (), log: AppendLog | None = None) -> None:
        self.rows: list = list(rows)
        self._log = log

    def _changed(self) -> None:
        """Called after every append."""

    def append(self, row: Record) -> None:
        self.rows.append(row)
        self._changed()
        if self._log:
            self._log.append(row)

    def flush(self) -> None:
        if self._log:
            self._log.flush()

    def __len__(self) -> int:
        return len(self.rows)
