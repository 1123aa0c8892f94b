"""Progress of a long command, one line that fits the terminal.

In a terminal the line is a tqdm bar redrawn in place, trimmed to the terminal's width (so an
80-column terminal shows one line updating, never a wrapped one). Anywhere else (a CI log, a
file, a pipe) a plain line is written when the count changes, at most every ``every`` seconds,
and once at the end, so a log holds a short readable history instead of carriage returns.

Units are words (``runs``, ``steps``, ``frame strips``); the detail after the count says what
is in flight in words too (``3,000 steps, 6 milestones``), never an abbreviation that reads as
a unit of time.
"""
from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO


class Progress:
    """A count towards ``total`` (None when unknown) of ``unit``, shown on ``stream``.

    Use as a context manager; :meth:`update` adds to the count and sets the detail text."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: TextIO | None = None,
                 every: float = 30.0, enabled: bool = True) -> None:
        self.desc, self.total, self.unit, self.every = desc, total, unit, every
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.count = 0
        self.detail = ""
        self._started = time.monotonic()
        self._last_line = float("-inf")
        self._bar = None
        if enabled and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", file=self.stream, dynamic_ncols=True,
                             leave=True, bar_format=_BAR if total else _COUNTER)

    def update(self, n: int = 0, detail: str | None = None) -> None:
        """Add ``n`` to the count and, when given, replace the detail text."""
        self.count += n
        changed = bool(n) or (detail is not None and detail != self.detail)
        if detail is not None:
            self.detail = detail
        if not self.enabled:
            return
        if self._bar is not None:
            if detail is not None:
                self._bar.set_postfix_str(detail, refresh=False)
            self._bar.update(n)
            if not n:
                self._bar.refresh()
            return
        now = time.monotonic()
        if changed and now - self._last_line >= self.every:
            self._write_line(now)

    def close(self) -> None:
        """The final line (always written, in a terminal and out of one)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        else:
            self._write_line(time.monotonic())

    def _write_line(self, now: float) -> None:
        self._last_line = now
        of = f"/{self.total:,}" if self.total is not None else ""
        tail = f": {self.detail}" if self.detail else ""
        self.stream.write(f"{self.desc}: {self.count:,}{of} {self.unit} after {now - self._started:.0f} s{tail}\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


_BAR = "{desc}: {n_fmt}/{total_fmt}{unit} |{bar}| {elapsed}, {rate_fmt}{postfix}"
_COUNTER = "{desc}: {n_fmt}{unit} {elapsed}{postfix}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
