"""Append-only JSONL files: whole lines, one write call per batch, flushed on demand."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from mfm.schema import Record


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

    def flush(self) -> None:
        """Write every queued line in one call and flush it to the OS (and disk if fsync)."""
        if not self._pending:
            return
        data = ("\n".join(self._pending) + "\n").encode("utf-8")
        self._pending.clear()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
    os.replace(tmp, path)


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
